// Experiment `chain`: state error after n chained checkpoints (docs/experiments.md, "chain").
//
// Over T tokens (2048 by default) a sequence is run twice in lockstep from the same start: the
// reference fp32 recurrence, and a copy whose running state goes through a full encode/decode of
// the codec at positions i * T / n, i = 1..n (the last at T): a restored state is extended and
// re-cached again and again. Reported: relerr of the chained state against the reference at
// every checkpoint (drift along time) and at T, for n in {1, 2, 4, ..., 128}.
//
// The protocol runs on a recurrence backend (core/backend/recurrence_backend.h): the fp32
// reference, and with --device cuda also the CUDA pool kernels (fp32 state pool, bf16 q/k/v; the
// round trip is a donate and a copy-on-write through the checkpoint kernels), recorded under
// chain/cuda against the GPU path's own reference.
//
// Why it saturates (docs/numerics.md, "Why an injected error fades"): with ||k|| = 1, beta in (0,
// 1) and g < 0 each step contracts a perturbation, so errors injected by earlier checkpoints fade
// geometrically. The ablation `no_contraction` removes that: g = 0 (no decay) and beta scaled by
// 1e-3 (the delta-rule write almost never contracts); every injected error persists and the error
// grows ~ sqrt(n). Per [layer, head] (group `per_head`): each head's errors, energy share and
// gates, and the first-order contraction model (core/metrics/contraction_model.h) of the saturation
// ratio, which the whole-state ratio is compared against (write_per_head below).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/backend/recurrence_backend.h"
#include "core/codec/codec.h"
#include "core/drive/states_source.h"
#include "core/metrics/contraction_model.h"
#include "core/metrics/error_metrics.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/experiment.h"
#include "experiments/report_table.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/common/device.h"
#include "kernels/host/cuda_backend.h"
#endif

namespace statecheck {

namespace {

constexpr double kAblationBetaFactor = 1e-3;

struct ChainAccumulator {
  // [variant][n index][checkpoint] sums of squared error and squared reference.
  std::vector<std::vector<std::vector<double>>> err, ref;
  // One layer's heads (per_layer only; merge() leaves them): [variant][n index][head] squared
  // error and squared reference of each head at T; [variant][head * d_k + j] squared error of key
  // column j at T after one checkpoint (n = 1); [variant] the contraction rates [HV, d_k] and mean
  // log-decays [HV] of the gates that variant ran.
  std::vector<std::vector<std::vector<double>>> head_err, head_ref;
  std::vector<std::vector<double>> column_err_n1, rate, decay;
  ChainAccumulator(int variants, const std::vector<int>& ns, int heads = 0, int dk = 0) {
    err.resize(variants);
    ref.resize(variants);
    head_err.resize(variants);
    head_ref.resize(variants);
    column_err_n1.assign(variants, std::vector<double>(static_cast<size_t>(heads) * dk, 0.0));
    rate.resize(variants);
    decay.resize(variants);
    for (int v = 0; v < variants; ++v)
      for (int n : ns) {
        err[v].push_back(std::vector<double>(n, 0.0));
        ref[v].push_back(std::vector<double>(n, 0.0));
        head_err[v].push_back(std::vector<double>(heads, 0.0));
        head_ref[v].push_back(std::vector<double>(heads, 0.0));
      }
  }
  // Adds o's per-checkpoint sums (the whole-state error); per-head fields are not merged.
  void merge(const ChainAccumulator& o) {
    for (size_t v = 0; v < err.size(); ++v)
      for (size_t i = 0; i < err[v].size(); ++i)
        for (size_t c = 0; c < err[v][i].size(); ++c) {
          err[v][i][c] += o.err[v][i][c];
          ref[v][i][c] += o.ref[v][i][c];
        }
  }
};

LayerInputs without_contraction(LayerInputs in) {
  for (auto& g : in.g) g = 0.0f;
  for (auto& b : in.beta) b = static_cast<float>(b * kAblationBetaFactor);
  return in;
}

// Per-[layer, head] view of the chain at T: which heads the whole-state ratio is made of, next to
// the first-order contraction model (core/metrics/contraction_model.h). `ns` must be 1, 2, ...,
// 128 (n = 32 and n = 128 at indices 5 and 7). Writes, per [layer, head] unless noted:
//   relerr [n, L, HV]      the head's ||S_chained - S_ref||_F / ||S_ref||_F at T for each n
//   saturation_ratio       relerr(n=128) / relerr(n=32) (NaN where n = 32 gives 0)
//   energy_share           ||S_ref(T)||_F^2 of the head over the whole state's: the weight of the
//                          head's relerr^2 in the whole-state relerr^2
//   mean_log_decay         mean g per token (1/token), as the variant ran it
//   contraction_rate [L, HV, d_k]  the model's energy contraction per token of each key column
//   model_saturation_ratio sqrt(A(T / 128) / A(T / 32)), A(s) = sum over key columns j of the
//                          column's one-checkpoint (n = 1) error energy times
//                          accumulated_checkpoints(rate_j, T, s)
//   whole_state_model_saturation_ratio (scalar)  the same sums over every head of the state
// and the summary keys `<key>saturation_ratio_head_{min,median,max}` over heads with a finite
// ratio,
// `<key>saturation_ratio_model` and `<key>saturation_ratio_over_model` (measured_ratio, the whole
// state's measured ratio, over the model's).
void write_per_head(H5Writer& file, const std::string& group, Summary& summary,
                    const std::string& key, const std::vector<ChainAccumulator>& per_layer, int v,
                    const std::vector<int>& ns, int T, int L, int HV, int dk,
                    double measured_ratio) {
  if (ns.size() != 8 || ns[5] != 32 || ns[7] != 128)
    fail("chain: per-head summary needs n = 1, 2, ..., 128");
  const size_t heads = static_cast<size_t>(L) * HV;
  std::vector<double> relerr(ns.size() * heads), ratio(heads), share(heads), decay(heads),
      rate(heads * dk), model(heads);
  double total_ref = 0, model_n128 = 0, model_n32 = 0;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < HV; ++h) total_ref += per_layer[l].head_ref[v][0][h];
  std::vector<double> finite;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < HV; ++h) {
      const ChainAccumulator& acc = per_layer[l];
      const size_t lh = static_cast<size_t>(l) * HV + h;
      for (size_t i = 0; i < ns.size(); ++i) {
        const double r = acc.head_ref[v][i][h];
        relerr[i * heads + lh] = r > 0 ? std::sqrt(acc.head_err[v][i][h] / r) : 0.0;
      }
      const double n32 = relerr[5 * heads + lh], n128 = relerr[7 * heads + lh];
      ratio[lh] = n32 > 0 ? n128 / n32 : NAN;
      if (std::isfinite(ratio[lh])) finite.push_back(ratio[lh]);
      share[lh] = total_ref > 0 ? acc.head_ref[v][0][h] / total_ref : 0.0;
      decay[lh] = acc.decay[v][h];
      double a128 = 0, a32 = 0;
      for (int j = 0; j < dk; ++j) {
        const size_t hj = static_cast<size_t>(h) * dk + j;
        const double r = acc.rate[v][hj], e1 = acc.column_err_n1[v][hj];
        rate[lh * dk + j] = r;
        a128 += e1 * accumulated_checkpoints(r, T, T / 128);
        a32 += e1 * accumulated_checkpoints(r, T, T / 32);
      }
      model[lh] = a32 > 0 ? std::sqrt(a128 / a32) : NAN;
      model_n128 += a128;
      model_n32 += a32;
    }
  const double model_whole = model_n32 > 0 ? std::sqrt(model_n128 / model_n32) : NAN;
  const size_t Ls = static_cast<size_t>(L), HVs = static_cast<size_t>(HV);
  file.group(group);
  file.write(group + "/relerr", relerr, {ns.size(), Ls, HVs}, "1",
             "||S_chained - S_ref||_F / ||S_ref||_F of one head at T, per [n, layer, head]");
  file.write(
      group + "/saturation_ratio", ratio, {Ls, HVs}, "1",
      "relerr(n=128) / relerr(n=32) of one head, per [layer, head]; NaN where n = 32 gives 0");
  file.write(group + "/energy_share", share, {Ls, HVs}, "1",
             "||S_ref(T)||_F^2 of the head over that of the whole state, per [layer, head]: the "
             "weight of the head's relerr^2 in the whole-state relerr^2");
  file.write(group + "/mean_log_decay", decay, {Ls, HVs}, "1/token",
             "mean of g (natural-log decay per token) over the tokens, and over key channels for "
             "KDA, as this variant ran them, per [layer, head]");
  file.write(group + "/contraction_rate", rate, {Ls, HVs, static_cast<size_t>(dk)}, "1/token",
             "first-order rate at which a perturbation's energy in key column j contracts per "
             "token, -2 mean(g_j) + mean(1 - (1 - beta)^2) / d_k, per [layer, head, j]");
  file.write(group + "/model_saturation_ratio", model, {Ls, HVs}, "1",
             "first-order model of the head's saturation ratio: each key column's one-checkpoint "
             "error energy, accumulated over independent checkpoints contracted at the column's "
             "rate, n = 128 over n = 32, per [layer, head]");
  file.write_scalar(group + "/whole_state_model_saturation_ratio", model_whole, "1",
                    "the model's saturation ratio of the whole state: the same sums over every "
                    "key column of every head");
  if (!finite.empty()) {
    summary.set(key + "saturation_ratio_head_min", *std::min_element(finite.begin(), finite.end()));
    summary.set(key + "saturation_ratio_head_median", median_of(finite));
    summary.set(key + "saturation_ratio_head_max", *std::max_element(finite.begin(), finite.end()));
  }
  summary.set(key + "saturation_ratio_model", model_whole);
  summary.set(key + "saturation_ratio_over_model", measured_ratio / model_whole);
}

// What one backend measured: per layer the accumulators of both variants, their sum, and (with
// keep_final) every layer's states at T: [layer][variant] the reference and [layer][variant][n
// index] the chained states, [HV, d_v, d_k] each.
struct ChainMeasurement {
  std::vector<ChainAccumulator> per_layer;
  ChainAccumulator total{0, {}};
  std::vector<std::vector<std::vector<float>>> ref_at_T;
  std::vector<std::vector<std::vector<std::vector<float>>>> chained_at_T;
  double seconds = 0.0;
};

// The chain protocol on `backend`, layers [0, L) of `source`'s state 0: per layer and variant,
// the reference and one chained copy per n advance together in steps of T / 128 tokens; at each
// checkpoint of n the chained state goes through the codec and its error against the reference
// is accumulated per head.
ChainMeasurement measure_chain(const RecurrenceBackend& backend, const StatesSource& source,
                               const RecurrenceShape& shape, const Codec& codec, int T, int L,
                               const std::vector<int>& ns, int threads, bool keep_final) {
  const int HV = shape.HV, dv = shape.dv, dk = shape.dk;
  const size_t head = static_cast<size_t>(dv) * dk, layer = head * HV;
  const int variants = 2;  // 0: the drive as is; 1: ablation without contraction
  const int step = T / ns.back(), runs = static_cast<int>(ns.size());
  ChainMeasurement r;
  r.per_layer.assign(L, ChainAccumulator(variants, ns, HV, dk));
  if (keep_final) {
    r.ref_at_T.assign(L, std::vector<std::vector<float>>(variants));
    r.chained_at_T.assign(L, std::vector<std::vector<std::vector<float>>>(
                                 variants, std::vector<std::vector<float>>(runs)));
  }
  Progress progress(backend.name() == "cuda" ? "chain layers (cuda)" : "chain layers", L);
  parallel_for(L, std::min(threads, backend.max_threads()), [&](int l) {
    const LayerInputs base = source.layer_inputs(0, l, T);
    const std::vector<float> initial = source.initial_layer_state(0, l);
    ChainAccumulator& acc = r.per_layer[l];
    std::vector<float> S_ref(layer), S(layer);
    for (int v = 0; v < variants; ++v) {
      const LayerInputs in = v == 0 ? base : without_contraction(base);
      acc.rate[v] = contraction_rates(shape, in);
      acc.decay[v] = mean_log_decay(shape, in);
      // States: 0 the reference, 1 + i the copy chained n_i times.
      const std::unique_ptr<LayerRun> run = backend.bind(shape, in, 1 + runs);
      for (int s = 0; s <= runs; ++s) run->write(s, initial.data());
      for (int t0 = 0; t0 < T; t0 += step) {
        const int t1 = t0 + step;
        for (int s = 0; s <= runs; ++s) run->advance(s, t0, t1, nullptr);
        bool ref_read = false;
        for (int i = 0; i < runs; ++i) {
          const int spacing = T / ns[i];
          if (t1 % spacing != 0) continue;
          if (!ref_read) run->read(0, S_ref.data()), ref_read = true;
          run->read(1 + i, S.data());
          for (int h = 0; h < HV; ++h) {
            source.require_finite(S.data() + h * head, head, "chained state", 0, l, h, t1);
            if (i == 0)  // n = 1, its one checkpoint at T: the reference there too
              source.require_finite(S_ref.data() + h * head, head, "reference state", 0, l, h, t1);
          }
          run->roundtrip(1 + i, codec, l);
          run->read(1 + i, S.data());
          const int c = t1 / spacing - 1;
          for (int h = 0; h < HV; ++h) {
            const float* ref_h = S_ref.data() + h * head;
            const float* S_h = S.data() + h * head;
            const ErrorStats e = compare(ref_h, S_h, head);
            acc.err[v][i][c] += e.sum_sq_err;
            acc.ref[v][i][c] += e.sum_sq_ref;
            if (c == ns[i] - 1) {
              acc.head_err[v][i][h] = e.sum_sq_err;
              acc.head_ref[v][i][h] = e.sum_sq_ref;
            }
            if (ns[i] == 1)  // one checkpoint, at T: the error energy of each key column
              for (int row = 0; row < dv; ++row)
                for (int j = 0; j < dk; ++j) {
                  const size_t e_idx = static_cast<size_t>(row) * dk + j;
                  const double d = static_cast<double>(S_h[e_idx]) - ref_h[e_idx];
                  acc.column_err_n1[v][static_cast<size_t>(h) * dk + j] += d * d;
                }
          }
          if (keep_final && t1 == T) r.chained_at_T[l][v][i] = S;
        }
        if (keep_final && t1 == T) r.ref_at_T[l][v] = S_ref;
      }
    }
    progress.tick();
  });
  r.total = ChainAccumulator(variants, ns);
  for (const auto& a : r.per_layer) r.total.merge(a);
  r.seconds = progress.elapsed();
  return r;
}

// The reference backend's results: datasets under chain/ and the summary keys chain.*.
void record_chain(const ChainMeasurement& r, const StatesSource& source, const Codec& codec,
                  const std::vector<int>& ns, int T, int L, int HV, int dk, H5Writer& file,
                  Summary& summary) {
  const int variants = 2;
  const char* variant_names[variants] = {"", "ablation_no_contraction"};
  const ChainAccumulator& total = r.total;
  const std::string g = "chain";
  file.group(g);
  file.attr(g, "drive", source.drive_name());
  file.attr(g, "codec", std::string(codec.kind_name()));
  file.attr(g, "states_in_source", static_cast<int64_t>(source.count()));
  file.attr(g, "state_followed", int64_t(0));
  file.attr(g, "scale_dtype", std::string(dtype_name(codec.scale_dtype)));
  file.attr(g, "tokens", static_cast<int64_t>(T));
  file.attr(g, "layers_measured", static_cast<int64_t>(L));
  file.attr(g, "ablation_beta_factor", kAblationBetaFactor);
  std::vector<int64_t> n_values(ns.begin(), ns.end());
  ReportTable table(
      fmt::format("chain: state relative error at T = {} after n chained {} checkpoints", T,
                  codec.kind_name()),
      {"variant", "n = 1", "n = 32", "n = 128", "ratio 128/32", "model ratio"});
  for (int v = 0; v < variants; ++v) {
    const std::string vg = v == 0 ? g : g + "/" + variant_names[v];
    const std::string key = v == 0 ? "chain." : std::string("chain.") + variant_names[v] + ".";
    std::vector<double> relerr(ns.size());
    std::vector<double> along(ns.size() * 128, std::nan(""));
    std::vector<double> positions(ns.size() * 128, std::nan(""));
    for (size_t i = 0; i < ns.size(); ++i) {
      for (int c = 0; c < ns[i]; ++c) {
        const double ref = total.ref[v][i][c];
        along[i * 128 + c] = ref > 0 ? std::sqrt(total.err[v][i][c] / ref) : 0.0;
        positions[i * 128 + c] = static_cast<double>(c + 1) * (T / ns[i]);
      }
      relerr[i] = along[i * 128 + ns[i] - 1];
      summary.set(key + "relerr_n" + std::to_string(ns[i]), relerr[i]);
    }
    const double n32 = relerr[5], n128 = relerr[7];
    summary.set(key + "saturation_ratio", n32 > 0 ? n128 / n32 : NAN);
    if (!(n32 > 0))  // the ratios below are NaN: say why rather than leave a bare nan
      fmt::print(
          "chain: {}saturation_ratio is undefined (relerr at n = 32 is {}: the codec round trip "
          "left the chained state unchanged)\n",
          key, n32);
    file.write(vg + "/n", n_values, {ns.size()}, "checkpoints", "number of chained checkpoints n");
    file.write(vg + "/relerr", relerr, {ns.size()}, "1",
               "||S_chained - S_ref||_F / ||S_ref||_F at T, after the n-th checkpoint, per n");
    file.write(vg + "/relerr_at_checkpoint", along, {ns.size(), 128}, "1",
               "relative error right after checkpoint c (column) for each n (row); NaN past n");
    file.write(vg + "/checkpoint_position", positions, {ns.size(), 128}, "tokens",
               "token position of checkpoint c for each n; NaN past n");
    file.write_scalar(vg + "/saturation_ratio", n32 > 0 ? n128 / n32 : NAN, "1",
                      "relerr(n=128) / relerr(n=32)");
    write_per_head(file, vg + "/per_head", summary, key, r.per_layer, v, ns, T, L, HV, dk,
                   n32 > 0 ? n128 / n32 : NAN);
    table.add_row({v == 0 ? source.drive_name() : variant_names[v], report_number(relerr[0]),
                   report_number(n32), report_number(n128),
                   report_number(n32 > 0 ? n128 / n32 : NAN),
                   report_number(summary.get(key + "saturation_ratio_model"))});
  }
  table.print();
}

// A second backend's results, against its own reference at T: chain/cuda and the summary keys
// cuda.chain.*. The sums run over every element of every measured layer, in layer order.
[[maybe_unused]] void record_chain_device(const ChainMeasurement& r, const std::vector<int>& ns,
                                          int L, const std::string& device, H5Writer& file,
                                          Summary& summary) {
  std::vector<std::vector<double>> e2(2, std::vector<double>(ns.size(), 0.0)), r2 = e2;
  for (int l = 0; l < L; ++l)
    for (int v = 0; v < 2; ++v)
      for (size_t i = 0; i < ns.size(); ++i) {
        const std::vector<float>& ref = r.ref_at_T[l][v];
        const std::vector<float>& x = r.chained_at_T[l][v][i];
        for (size_t e = 0; e < ref.size(); ++e) {
          const double d = double(x[e]) - ref[e];
          e2[v][i] += d * d;
          r2[v][i] += double(ref[e]) * ref[e];
        }
      }
  const std::string g = "chain/cuda";
  file.group(g);
  file.attr(g, "device", device);
  file.attr(g, "layers_measured", static_cast<int64_t>(L));
  const char* names[2] = {"", "ablation_no_contraction."};
  for (int v = 0; v < 2; ++v) {
    std::vector<double> rel(ns.size());
    for (size_t i = 0; i < ns.size(); ++i) {
      rel[i] = r2[v][i] > 0 ? std::sqrt(e2[v][i] / r2[v][i]) : 0.0;
      summary.set(fmt::format("cuda.chain.{}relerr_n{}", names[v], ns[i]), rel[i]);
    }
    const double ratio = rel[5] > 0 ? rel[7] / rel[5] : std::nan("");
    summary.set(fmt::format("cuda.chain.{}saturation_ratio", names[v]), ratio);
    file.write(g + (v ? "/ablation_no_contraction" : "") + "/relerr", rel, {ns.size()}, "1",
               "GPU path: relative error at T after n chained checkpoints against the GPU "
               "reference, per n");
  }
  fmt::print(
      "chain (cuda): relerr n1 {:.4g}, n32 {:.4g}, n128 {:.4g}, saturation {:.3f}; ablation "
      "{:.3f}\n",
      summary.get("cuda.chain.relerr_n1"), summary.get("cuda.chain.relerr_n32"),
      summary.get("cuda.chain.relerr_n128"), summary.get("cuda.chain.saturation_ratio"),
      summary.get("cuda.chain.ablation_no_contraction.saturation_ratio"));
}

}  // namespace

void run_chain(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const StatesSource source = options_states_source(o, m);
  const RecurrenceShape shape = source.shape();
  const Codec codec = o.codec;
  int T = o.chain_tokens;
  if (const int limit = source.token_limit(); limit > 0 && T > limit) {
    // A file of fewer tokens: the longest multiple of 128 it holds (n goes up to 128).
    if (limit < 128)
      fail("chain: drive {} holds {} tokens per sequence; chain needs at least 128",
           source.drive_name(), limit);
    T = limit / 128 * 128;
    fmt::print(
        "chain: drive {} holds {} tokens per sequence: T = {} (--chain-tokens {} shortened)\n",
        source.drive_name(), limit, T, o.chain_tokens);
  }
  std::vector<int> ns;
  for (int n = 1; n <= 128; n *= 2) ns.push_back(n);
  for (int n : ns)
    if (T % n != 0) fail("chain: T = {} tokens is not divisible by n = {} checkpoints", T, n);
  const int L_all = m.linear_layer_count();
  if (o.chain_layers > L_all)
    fail("--chain-layers {}: model {} has {} linear-attention layers", o.chain_layers, m.name,
         L_all);
  const int L = o.chain_layers > 0 ? o.chain_layers : (o.quick ? std::min(2, L_all) : L_all);
  const bool cuda = o.device == Device::cuda;

  fmt::print(
      "chain: model {} (TP {}), drive {}, codec {} ({} scale), T {}, n in 1..128, layers {}/{}, {} "
      "heads each\n",
      m.name, m.tp, source.drive_name(), codec.kind_name(), dtype_name(codec.scale_dtype), T, L,
      L_all, shape.HV);
  if (source.count() > 1)
    fmt::print("chain: follows state 0 of the {} states of {} (one chained sequence)\n",
               source.count(), source.drive_name());

  const std::unique_ptr<RecurrenceBackend> cpu = cpu_fp32_backend();
  const ChainMeasurement ref =
      measure_chain(*cpu, source, shape, codec, T, L, ns, o.thread_count(), false);
  record_chain(ref, source, codec, ns, T, L, shape.HV, shape.dk, file, summary);
  double seconds = ref.seconds;
  if (cuda) {
#ifdef STATECHECK_HAVE_CUDA
    const std::unique_ptr<RecurrenceBackend> gpu = cuda::cuda_backend();
    const ChainMeasurement dev =
        measure_chain(*gpu, source, shape, codec, T, L, ns, o.thread_count(), true);
    record_chain_device(dev, ns, L, cuda::device_description(), file, summary);
    seconds += dev.seconds;
#else
    fail("--device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#endif
  }
  fmt::print("chain: {:.1f} s\n", seconds);
}

}  // namespace statecheck
