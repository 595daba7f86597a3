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
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/codec/codec.h"
#include "core/metrics/error_metrics.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/chain_cuda.h"
#include "experiments/experiment.h"
#include "experiments/states_source.h"

namespace statecheck {

namespace {

constexpr double kAblationBetaFactor = 1e-3;

struct ChainAccumulator {
  // [variant][n index][checkpoint] sums of squared error and squared reference.
  std::vector<std::vector<std::vector<double>>> err, ref;
  ChainAccumulator(int variants, const std::vector<int>& ns) {
    err.resize(variants);
    ref.resize(variants);
    for (int v = 0; v < variants; ++v)
      for (int n : ns) {
        err[v].push_back(std::vector<double>(n, 0.0));
        ref[v].push_back(std::vector<double>(n, 0.0));
      }
  }
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

}  // namespace

void run_chain(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  check_device(o);
  const StatesSource source = StatesSource::from_options(o, m);
  const RecurrenceShape shape = RecurrenceShape::of_model(m);
  const Codec codec = parse_codec(o.codec, parse_scale_dtype(o.scale_dtype_or_default()));
  const int T = o.chain_tokens;
  std::vector<int> ns;
  for (int n = 1; n <= 128; n *= 2) ns.push_back(n);
  for (int n : ns)
    if (T % n != 0) fail("chain: T = {} tokens is not divisible by n = {} checkpoints", T, n);
  const int L_all = m.linear_layer_count();
  const int L =
      o.chain_layers > 0 ? std::min(o.chain_layers, L_all) : (o.quick ? std::min(2, L_all) : L_all);
  const int HV = shape.HV, dv = shape.dv, dk = shape.dk;
  const size_t head = static_cast<size_t>(dv) * dk;
  const int variants = 2;  // 0: the drive as is; 1: ablation without contraction
  const char* variant_names[variants] = {"", "ablation_no_contraction"};

  fmt::print(
      "chain: model {} (TP {}), drive {}, codec {} ({} scale), T {}, n in 1..128, layers {}/{}, {} "
      "heads each\n",
      m.name, m.tp, source.drive_name(), codec.kind_name(), scale_dtype_name(codec.scale_dtype), T,
      L, L_all, HV);

  std::vector<ChainAccumulator> per_layer(L, ChainAccumulator(variants, ns));
  Progress progress("chain layers", L);
  parallel_for(L, o.thread_count(), [&](int l) {
    const LayerInputs base = source.layer_inputs(0, l, T);
    const std::vector<float> initial = source.initial_layer_state(0, l);
    ChainAccumulator& acc = per_layer[l];
    std::vector<float> S_ref(head), tmp(head);
    std::vector<std::vector<float>> S_n(ns.size(), std::vector<float>(head));
    for (int v = 0; v < variants; ++v) {
      const LayerInputs in = v == 0 ? base : without_contraction(base);
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
            roundtrip_head(codec, S_n[i].data(), dv, dk, tmp.data(), {l, h});
            S_n[i].swap(tmp);
            const ErrorStats e = compare(S_ref.data(), S_n[i].data(), head);
            const int c = (t + 1) / spacing - 1;
            acc.err[v][i][c] += e.sum_sq_err;
            acc.ref[v][i][c] += e.sum_sq_ref;
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
  file.attr(g, "scale_dtype", std::string(scale_dtype_name(codec.scale_dtype)));
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
    file.write(vg + "/n", n_values, {ns.size()}, "checkpoints", "number of chained checkpoints n");
    file.write(vg + "/relerr", relerr, {ns.size()}, "1",
               "||S_chained - S_ref||_F / ||S_ref||_F at T, after the n-th checkpoint, per n");
    file.write(vg + "/relerr_at_checkpoint", along, {ns.size(), 128}, "1",
               "relative error right after checkpoint c (column) for each n (row); NaN past n");
    file.write(vg + "/checkpoint_position", positions, {ns.size(), 128}, "tokens",
               "token position of checkpoint c for each n; NaN past n");
    file.write_scalar(vg + "/saturation_ratio", n32 > 0 ? n128 / n32 : NAN, "1",
                      "relerr(n=128) / relerr(n=32)");
  }
#ifdef STATECHECK_HAVE_CUDA
  if (o.device == "cuda")
    run_chain_cuda(m, source, codec, T, L, kAblationBetaFactor, file, summary);
#endif
  fmt::print("chain: {:.1f} s\n", progress.elapsed());
}

}  // namespace statecheck
