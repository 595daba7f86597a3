// Experiment `codec`: round-trip and decode error of every state codec on states produced by the
// fp32 reference recurrence (spec experiments.md; metrics of numerics.md section 3).
//
// Protocol, per linear layer (independent inputs per layer, from the drive):
//   1. prefill: run the fp32 reference from a zero state over `prefill` tokens -> S
//      (drive 'states': S comes from the file and there is no prefill);
//   2. for each codec c: S_hat = decode(encode(S)); state error of S_hat against S;
//   3. run the same `decode` steps from S and from S_hat; decode error of the stacked outputs,
//      also per decode step (drift along time).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/drive/states_file.h"
#include "core/drive/states_source.h"
#include "core/metrics/error_metrics.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "core/util/rng.h"
#include "experiments/codec_cuda.h"
#include "experiments/experiment.h"

namespace statecheck {

std::vector<Codec> codec_experiment_codecs(Dtype scale) {
  return {parse_codec("fp32", scale), parse_codec("bf16", scale), parse_codec("int8", scale),
          parse_codec("fp8_e4m3", scale), parse_codec("fp8_e4m3_raw", scale)};
}

void run_codec(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const StatesSource source = options_states_source(o, m);
  const RecurrenceShape shape = recurrence_shape(m);
  const int L = m.linear_layer_count(), HV = shape.HV, dv = shape.dv, dk = shape.dk;
  const int Tp = source.has_prefill() ? (o.prefill > 0 ? o.prefill : (o.quick ? 128 : 512)) : 0;
  if (o.prefill > 0 && !source.has_prefill())
    fmt::print("codec: --prefill {} is not used: drive {} starts from its own states\n", o.prefill,
               source.drive_name());
  const int Td = o.decode > 0 ? o.decode : (o.quick ? 32 : 128);
  const Dtype scale = o.scale_dtype_or_default();
  const std::vector<Codec> codecs = codec_experiment_codecs(scale);
  const int C = static_cast<int>(codecs.size());
  const int N = source.count();

  fmt::print(
      "codec: model {} (TP {}, {} layers x {} heads x {}x{}), drive {}, {} state(s), prefill {}, "
      "decode {}, scale dtype {}, {} threads\n",
      m.name, m.tp, L, HV, dv, dk, source.drive_name(), N, Tp, Td, dtype_name(scale),
      o.thread_count());

  // Per (codec, state n, layer, head): state error and decode error; per (codec, step): decode
  // drift.
  const size_t cells = static_cast<size_t>(N) * L * HV;
  std::vector<ErrorStats> state_err(C * cells), decode_err(C * cells);
  std::vector<double> ref_norm_sq(cells, 0.0);
  std::vector<std::vector<ErrorStats>> step_err(static_cast<size_t>(N) * L,
                                                std::vector<ErrorStats>(C * Td));

  Progress progress("codec layers", static_cast<long>(N) * L);
  parallel_for(N * L, o.thread_count(), [&](int item) {
    const int n = item / L, l = item % L;
    LayerInputs in = source.layer_inputs(n, l, Tp + Td);
    std::vector<float> S = source.initial_layer_state(n, l);
    if (Tp > 0) gated_delta_layer_fp32(shape, in, 0, Tp, S.data(), nullptr);
    std::vector<float> S_hat(static_cast<size_t>(dv) * dk), work(static_cast<size_t>(dv) * dk);
    std::vector<float> o_ref(static_cast<size_t>(Td) * dv), o_hat(static_cast<size_t>(Td) * dv);
    for (int h = 0; h < HV; ++h) {
      const float* S_h = S.data() + static_cast<size_t>(h) * dv * dk;
      source.require_finite(S_h, static_cast<size_t>(dv) * dk, "state", n, l, h, Tp);
      const size_t cell = (static_cast<size_t>(n) * L + l) * HV + h;
      for (size_t e = 0; e < static_cast<size_t>(dv) * dk; ++e)
        ref_norm_sq[cell] += double(S_h[e]) * S_h[e];
      std::copy(S_h, S_h + static_cast<size_t>(dv) * dk, work.begin());
      gated_delta_head_fp32(shape, in, h, Tp, Tp + Td, work.data(), o_ref.data());
      source.require_finite(work.data(), work.size(), "state", n, l, h, Tp + Td);
      source.require_finite(o_ref.data(), o_ref.size(), "decode outputs", n, l, h, Tp + Td);
      for (int c = 0; c < C; ++c) {
        roundtrip_head(codecs[c], S_h, dv, dk, S_hat.data(), {l, h});
        state_err[c * cells + cell] = compare_head(S_h, S_hat.data(), dv, dk);
        gated_delta_head_fp32(shape, in, h, Tp, Tp + Td, S_hat.data(), o_hat.data());
        source.require_finite(o_hat.data(), o_hat.size(), "decode outputs after a restore", n, l, h,
                              Tp + Td);
        decode_err[c * cells + cell] = compare(o_ref.data(), o_hat.data(), o_ref.size());
        for (int t = 0; t < Td; ++t)
          step_err[item][c * Td + t].merge(compare(o_ref.data() + static_cast<size_t>(t) * dv,
                                                   o_hat.data() + static_cast<size_t>(t) * dv, dv));
      }
    }
    progress.tick();
  });

  const std::string g = "codec";
  file.group(g);
  file.attr(g, "drive", source.drive_name());
  file.attr(g, "prefill_tokens", static_cast<int64_t>(Tp));
  file.attr(g, "decode_steps", static_cast<int64_t>(Td));
  file.attr(g, "scale_dtype", std::string(dtype_name(scale)));
  file.attr(g, "states", static_cast<int64_t>(N));
  file.attr(g, "device", std::string(device_name(o.device)));
  std::vector<std::string> names;
  for (const auto& c : codecs) names.push_back(c.kind_name());
  file.write_strings(g + "/codecs", names, "codecs measured, in the order of the per-codec arrays");
  {
    std::vector<double> norms(L * HV, 0.0);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < L * HV; ++i) norms[i] += ref_norm_sq[static_cast<size_t>(n) * L * HV + i];
    for (auto& x : norms) x = std::sqrt(x);
    file.write(g + "/state_norm_layer_head", norms, {size_t(L), size_t(HV)}, "1",
               "Frobenius norm of the reference state per [layer, head] (summed over states)");
  }

  const size_t conv_bytes = static_cast<size_t>(L) * m.conv_dim_shard() * (m.conv_width - 1) * 2;
  const StateShape sshape{L, HV, dv, dk};
  for (int c = 0; c < C; ++c) {
    const std::string name = codecs[c].kind_name();
    const std::string cg = g + "/" + name;
    ErrorStats total_state, total_decode;
    std::vector<double> relerr_lh(L * HV), decode_lh(L * HV), maxabs_lh(L * HV), small_lh(L * HV),
        relerr_l(L);
    for (int l = 0; l < L; ++l) {
      ErrorStats layer;
      for (int h = 0; h < HV; ++h) {
        ErrorStats sh, dh;
        for (int n = 0; n < N; ++n) {
          const size_t cell = (static_cast<size_t>(n) * L + l) * HV + h;
          sh.merge(state_err[c * cells + cell]);
          dh.merge(decode_err[c * cells + cell]);
        }
        relerr_lh[l * HV + h] = sh.relerr();
        decode_lh[l * HV + h] = dh.relerr();
        maxabs_lh[l * HV + h] = sh.max_abs;
        small_lh[l * HV + h] = sh.small_entry_share();
        layer.merge(sh);
        total_state.merge(sh);
        total_decode.merge(dh);
      }
      relerr_l[l] = layer.relerr();
    }
    std::vector<double> step(Td);
    for (int t = 0; t < Td; ++t) {
      ErrorStats s;
      for (const auto& cellsteps : step_err) s.merge(cellsteps[c * Td + t]);
      step[t] = s.relerr();
    }
    const std::vector<size_t> lh{size_t(L), size_t(HV)};
    file.write(cg + "/state_relerr_layer_head", relerr_lh, lh, "1",
               "||S_hat - S||_F / ||S||_F per [layer, head]");
    file.write(cg + "/decode_relerr_layer_head", decode_lh, lh, "1",
               "||O_hat - O||_F / ||O||_F of the decode outputs per [layer, head]");
    file.write(cg + "/max_abs_err_layer_head", maxabs_lh, lh, "state units",
               "max |S_hat - S| per [layer, head]");
    file.write(cg + "/small_entry_error_share_layer_head", small_lh, lh, "1",
               "share of squared error in entries below their column's median magnitude, per "
               "[layer, head]");
    file.write(cg + "/state_relerr_layer", relerr_l, {size_t(L)}, "1",
               "state relative error per layer");
    file.write(
        cg + "/decode_relerr_step", step, {size_t(Td)}, "1",
        "decode relative error at each decode step after the restore (all layers and heads)");
    const double bytes = static_cast<double>(codecs[c].temporal_bytes(sshape) + conv_bytes);
    file.write_scalar(cg + "/state_relerr", total_state.relerr(), "1",
                      "over the whole multi-layer state");
    file.write_scalar(cg + "/decode_relerr", total_decode.relerr(), "1", "over all decode outputs");
    file.write_scalar(cg + "/max_abs_err", total_state.max_abs, "state units", "max |S_hat - S|");
    file.write_scalar(cg + "/small_entry_error_share", total_state.small_entry_share(), "1",
                      "share of squared error in below-median entries");
    file.write_scalar(cg + "/bytes_per_state", bytes, "bytes",
                      "temporal values + scales + bf16 conv state, one sequence");

    summary.set(name + ".state_relerr", total_state.relerr());
    summary.set(name + ".decode_relerr", total_decode.relerr());
    summary.set(name + ".max_abs_err", total_state.max_abs);
    summary.set(name + ".small_entry_error_share", total_state.small_entry_share());
    summary.set(name + ".bytes_per_state", bytes);
    summary.set(name + ".state_relerr_head_min",
                *std::min_element(relerr_lh.begin(), relerr_lh.end()));
    summary.set(name + ".state_relerr_head_median", median_of(relerr_lh));
    summary.set(name + ".state_relerr_head_max",
                *std::max_element(relerr_lh.begin(), relerr_lh.end()));
  }
  if (o.device == Device::cuda) {
#ifdef STATECHECK_HAVE_CUDA
    run_codec_cuda(m, source, Tp, Td, codecs, file, summary);
#else
    fail("--device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#endif
  }
  const double fp8 = summary.get("fp8_e4m3.state_relerr");
  // Undefined (NaN, which fails its gate) when fp8_e4m3 makes no error: an all-zero state.
  if (!(fp8 > 0))
    fmt::print("codec: int8.state_relerr_over_fp8_e4m3 is undefined (fp8_e4m3 error {})\n", fp8);
  summary.set("int8.state_relerr_over_fp8_e4m3",
              fp8 > 0 ? summary.get("int8.state_relerr") / fp8 : NAN);
  fmt::print("codec: {:.1f} s\n", progress.elapsed());
}

}  // namespace statecheck
