// Experiment `chain`: state error after n chained checkpoints (spec experiments.md).
//
// Over T tokens (2048 by default) a sequence is run twice in lockstep from the same start: the
// reference fp32 recurrence, and a copy whose running state goes through a full encode/decode of
// the codec at positions i * T / n, i = 1..n (the last at T): a restored state is extended and
// re-cached again and again. Reported: relerr of the chained state against the reference at
// every checkpoint (drift along time) and at T, for n in {1, 2, 4, ..., 128}.
//
// Why it saturates (numerics.md section 1): with ||k|| = 1, beta in (0, 1) and g < 0 each step
// contracts a perturbation, so errors injected by earlier checkpoints fade geometrically. The
// ablation `no_contraction` removes that: g = 0 (no decay) and beta scaled by 1e-3 (the delta-rule
// write almost never contracts); every injected error persists and the error grows ~ sqrt(n).
// Per [layer, head] (group `per_head`): each head's errors, energy share and gates, and the
// first-order contraction model (core/metrics/contraction_model.h) of the saturation ratio,
// which the whole-state ratio is compared against (write_per_head below).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/codec/codec.h"
#include "core/drive/states_source.h"
#include "core/metrics/contraction_model.h"
#include "core/metrics/error_metrics.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/chain_cuda.h"
#include "experiments/experiment.h"

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

}  // namespace

void run_chain(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const StatesSource source = options_states_source(o, m);
  const RecurrenceShape shape = recurrence_shape(m);
  const Codec codec = o.codec;
  const int T = o.chain_tokens;
  std::vector<int> ns;
  for (int n = 1; n <= 128; n *= 2) ns.push_back(n);
  for (int n : ns)
    if (T % n != 0) fail("chain: T = {} tokens is not divisible by n = {} checkpoints", T, n);
  const int L_all = m.linear_layer_count();
  if (o.chain_layers > L_all)
    fail("--chain-layers {}: model {} has {} linear-attention layers", o.chain_layers, m.name,
         L_all);
  const int L = o.chain_layers > 0 ? o.chain_layers : (o.quick ? std::min(2, L_all) : L_all);
  const int HV = shape.HV, dv = shape.dv, dk = shape.dk;
  const size_t head = static_cast<size_t>(dv) * dk;
  const int variants = 2;  // 0: the drive as is; 1: ablation without contraction
  const char* variant_names[variants] = {"", "ablation_no_contraction"};

  fmt::print(
      "chain: model {} (TP {}), drive {}, codec {} ({} scale), T {}, n in 1..128, layers {}/{}, {} "
      "heads each\n",
      m.name, m.tp, source.drive_name(), codec.kind_name(), dtype_name(codec.scale_dtype), T, L,
      L_all, HV);
  if (source.count() > 1)
    fmt::print("chain: follows state 0 of the {} states of {} (one chained sequence)\n",
               source.count(), source.drive_name());

  std::vector<ChainAccumulator> per_layer(L, ChainAccumulator(variants, ns, HV, dk));
  Progress progress("chain layers", L);
  parallel_for(L, o.thread_count(), [&](int l) {
    const LayerInputs base = source.layer_inputs(0, l, T);
    const std::vector<float> initial = source.initial_layer_state(0, l);
    ChainAccumulator& acc = per_layer[l];
    std::vector<float> S_ref(head), tmp(head);
    std::vector<std::vector<float>> S_n(ns.size(), std::vector<float>(head));
    for (int v = 0; v < variants; ++v) {
      const LayerInputs in = v == 0 ? base : without_contraction(base);
      acc.rate[v] = contraction_rates(shape, in);
      acc.decay[v] = mean_log_decay(shape, in);
      for (int h = 0; h < HV; ++h) {
        const float* init = initial.data() + h * head;
        std::copy(init, init + head, S_ref.begin());
        for (auto& s : S_n) std::copy(init, init + head, s.begin());
        for (int t = 0; t < T; ++t) {
          gated_delta_head_fp32(shape, in, h, t, t + 1, S_ref.data(), nullptr);
          for (size_t i = 0; i < ns.size(); ++i) {
            gated_delta_head_fp32(shape, in, h, t, t + 1, S_n[i].data(), nullptr);
            const int spacing = T / ns[i];
            if ((t + 1) % spacing != 0) continue;
            source.require_finite(S_n[i].data(), head, "chained state", 0, l, h, t + 1);
            if (i == 0)  // n = 1, its one checkpoint at T: the reference there too
              source.require_finite(S_ref.data(), head, "reference state", 0, l, h, t + 1);
            roundtrip_head(codec, S_n[i].data(), dv, dk, tmp.data(), {l, h});
            S_n[i].swap(tmp);
            const ErrorStats e = compare(S_ref.data(), S_n[i].data(), head);
            const int c = (t + 1) / spacing - 1;
            acc.err[v][i][c] += e.sum_sq_err;
            acc.ref[v][i][c] += e.sum_sq_ref;
            if (c == ns[i] - 1) {
              acc.head_err[v][i][h] = e.sum_sq_err;
              acc.head_ref[v][i][h] = e.sum_sq_ref;
            }
            if (ns[i] == 1)  // one checkpoint, at T: the error energy of each key column
              for (int r = 0; r < dv; ++r)
                for (int j = 0; j < dk; ++j) {
                  const size_t e_idx = static_cast<size_t>(r) * dk + j;
                  const double d = static_cast<double>(S_n[i][e_idx]) - S_ref[e_idx];
                  acc.column_err_n1[v][static_cast<size_t>(h) * dk + j] += d * d;
                }
          }
        }
      }
    }
    progress.tick();
  });
  ChainAccumulator total(variants, ns);
  for (const auto& a : per_layer) total.merge(a);

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
  for (int v = 0; v < variants; ++v) {
    const std::string vg = v == 0 ? g : g + "/" + variant_names[v];
    const std::string key = v == 0 ? "chain." : std::string("chain.") + variant_names[v] + ".";
    std::vector<double> relerr(ns.size());
    std::vector<double> along(ns.size() * 128, std::nan(""));
    std::vector<double> positions(ns.size() * 128, std::nan(""));
    for (size_t i = 0; i < ns.size(); ++i) {
      for (int c = 0; c < ns[i]; ++c) {
        const double r = total.ref[v][i][c];
        along[i * 128 + c] = r > 0 ? std::sqrt(total.err[v][i][c] / r) : 0.0;
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
    write_per_head(file, vg + "/per_head", summary, key, per_layer, v, ns, T, L, HV, dk,
                   n32 > 0 ? n128 / n32 : NAN);
  }
#ifdef STATECHECK_HAVE_CUDA
  if (o.device == Device::cuda)
    run_chain_cuda(m, source, codec, T, L, kAblationBetaFactor, file, summary);
#endif
  fmt::print("chain: {:.1f} s\n", progress.elapsed());
}

}  // namespace statecheck
