// Experiment `codec`: round-trip and decode error of every state codec on states produced by a
// recurrence backend (docs/experiments.md, "codec"; metrics of docs/numerics.md, "Error
// metrics").
//
// Protocol, per linear layer (independent inputs per layer, from the drive), on a backend
// (core/backend/recurrence_backend.h):
//   1. prefill: run the recurrence from the drive's starting state over `prefill` tokens -> S
//      (drive 'states': S comes from the file and there is no prefill);
//   2. for each codec c: S_hat = decode(encode(S)) through the backend's codec path; state error
//      of S_hat against S, and whether S_hat equals the CPU codec applied to S bit for bit;
//   3. run the same `decode` steps from S and from S_hat; decode error of the outputs, per head,
//      per decode step (drift along time) and per layer.
// `--device cpu` runs it on the fp32 reference (Eigen) with the CPU codecs; `--device cuda` runs
// it on the fp32 reference and then on the CUDA pool kernels (bf16 q/k/v and outputs, fp32 state
// pool, donate / copy-on-write through the checkpoint kernels), recorded side by side with the
// GPU path's prefill states and decode outputs compared against the CPU reference's, and then
// the working-state decode kernels beside their CPU reference (record_working_state_device).
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/backend/recurrence_backend.h"
#include "core/codec/codec.h"
#include "core/drive/states_source.h"
#include "core/metrics/error_metrics.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/experiment.h"
#include "experiments/report_table.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/common/device.h"
#include "kernels/host/cuda_backend.h"
#include "kernels/host/ws_cuda_backend.h"
#include "kernels/host/ws_reference_backend.h"
#include "kernels/working_state/ws_decode.h"
#endif

namespace statecheck {

std::vector<Codec> codec_experiment_codecs(Dtype scale) {
  return {parse_codec("fp32", scale), parse_codec("bf16", scale), parse_codec("int8", scale),
          parse_codec("fp8_e4m3", scale), parse_codec("fp8_e4m3_raw", scale)};
}

namespace {

// What one backend measured. Cells are (state n, layer l, head h), flat index (n L + l) HV + h;
// items are (n, l), flat index n L + l.
struct CodecMeasurement {
  int N = 0, L = 0, HV = 0, Tp = 0, Td = 0;
  std::vector<Codec> codecs;
  std::vector<ErrorStats> state_err, decode_err;  // [codec][cell]
  std::vector<ErrorStats> layer_decode_err;       // [codec][item]: over the layer's outputs
  std::vector<double> ref_norm_sq;                // [cell]
  std::vector<std::vector<ErrorStats>> step_err;  // [item][codec * Td + t]
  std::vector<long> codec_mismatches;             // [codec]: heads unlike the CPU codec's bytes
  // With keep_layers: [item] the prefilled state [HV, d_v, d_k] and the reference decode outputs
  // [Td, HV, d_v].
  std::vector<std::vector<float>> prefill_state, ref_outputs;
  double seconds = 0.0;
};

void gather_head(const std::vector<float>& o_thv, int Td, int HV, int dv, int h, float* o_tv) {
  for (int t = 0; t < Td; ++t)
    std::copy_n(o_thv.data() + (static_cast<size_t>(t) * HV + h) * dv, dv,
                o_tv + static_cast<size_t>(t) * dv);
}

CodecMeasurement measure_codec(const RecurrenceBackend& backend, const StatesSource& source,
                               const RecurrenceShape& shape, int L, int Tp, int Td,
                               const std::vector<Codec>& codecs, int threads, bool keep_layers) {
  CodecMeasurement r;
  const int N = source.count(), HV = shape.HV, dv = shape.dv, dk = shape.dk;
  const int C = static_cast<int>(codecs.size());
  r.N = N, r.L = L, r.HV = HV, r.Tp = Tp, r.Td = Td, r.codecs = codecs;
  const size_t cells = static_cast<size_t>(N) * L * HV, items = static_cast<size_t>(N) * L;
  const size_t head = static_cast<size_t>(dv) * dk, layer = head * HV;
  r.state_err.resize(C * cells), r.decode_err.resize(C * cells),
      r.layer_decode_err.resize(C * items);
  r.ref_norm_sq.assign(cells, 0.0);
  r.step_err.assign(items, std::vector<ErrorStats>(C * Td));
  std::vector<std::vector<long>> mismatches(items, std::vector<long>(C, 0));
  if (keep_layers) r.prefill_state.resize(items), r.ref_outputs.resize(items);

  Progress progress(backend.name() == "cuda" ? "codec layers (cuda)" : "codec layers",
                    static_cast<long>(items));
  parallel_for(static_cast<int>(items), std::min(threads, backend.max_threads()), [&](int item) {
    const int n = item / L, l = item % L;
    const LayerInputs in = source.layer_inputs(n, l, Tp + Td);
    const std::vector<float> initial = source.initial_layer_state(n, l);
    // States: 0 the prefilled state, 1 the reference decode, 2 the restored state.
    const std::unique_ptr<LayerRun> run = backend.bind(shape, in, 3);
    run->write(0, initial.data());
    if (Tp > 0) run->advance(0, 0, Tp, nullptr);
    std::vector<float> S(layer), work(layer), S_hat(layer), cpu_hat(head);
    std::vector<float> o_ref(static_cast<size_t>(Td) * HV * dv), o_hat(o_ref.size());
    std::vector<float> o_ref_h(static_cast<size_t>(Td) * dv), o_hat_h(o_ref_h.size());
    run->read(0, S.data());
    for (int h = 0; h < HV; ++h) {
      const float* S_h = S.data() + h * head;
      source.require_finite(S_h, head, "state", n, l, h, Tp);
      const size_t cell = static_cast<size_t>(item) * HV + h;
      for (size_t e = 0; e < head; ++e) r.ref_norm_sq[cell] += double(S_h[e]) * S_h[e];
    }
    run->copy(1, 0);
    run->advance(1, Tp, Tp + Td, o_ref.data());
    run->read(1, work.data());
    for (int h = 0; h < HV; ++h) {
      source.require_finite(work.data() + h * head, head, "state", n, l, h, Tp + Td);
      gather_head(o_ref, Td, HV, dv, h, o_ref_h.data());
      source.require_finite(o_ref_h.data(), o_ref_h.size(), "decode outputs", n, l, h, Tp + Td);
    }
    for (int c = 0; c < C; ++c) {
      run->copy(2, 0);
      run->roundtrip(2, codecs[c], l);
      run->read(2, S_hat.data());
      run->advance(2, Tp, Tp + Td, o_hat.data());
      for (int h = 0; h < HV; ++h) {
        const size_t cell = static_cast<size_t>(item) * HV + h;
        const float* S_h = S.data() + h * head;
        const float* S_hat_h = S_hat.data() + h * head;
        roundtrip_head(codecs[c], S_h, dv, dk, cpu_hat.data(), {l, h});
        mismatches[item][c] += std::memcmp(cpu_hat.data(), S_hat_h, head * sizeof(float)) != 0;
        r.state_err[c * cells + cell] = compare_head(S_h, S_hat_h, dv, dk);
        gather_head(o_ref, Td, HV, dv, h, o_ref_h.data());
        gather_head(o_hat, Td, HV, dv, h, o_hat_h.data());
        source.require_finite(o_hat_h.data(), o_hat_h.size(), "decode outputs after a restore", n,
                              l, h, Tp + Td);
        r.decode_err[c * cells + cell] = compare(o_ref_h.data(), o_hat_h.data(), o_ref_h.size());
        for (int t = 0; t < Td; ++t)
          r.step_err[item][c * Td + t].merge(compare(o_ref_h.data() + static_cast<size_t>(t) * dv,
                                                     o_hat_h.data() + static_cast<size_t>(t) * dv,
                                                     dv));
      }
      r.layer_decode_err[c * items + item] = compare(o_ref.data(), o_hat.data(), o_ref.size());
    }
    if (keep_layers) {
      r.prefill_state[item] = std::move(S);
      r.ref_outputs[item] = std::move(o_ref);
    }
    progress.tick();
  });
  r.codec_mismatches.assign(C, 0);
  for (const auto& m : mismatches)
    for (int c = 0; c < C; ++c) r.codec_mismatches[c] += m[c];
  r.seconds = progress.elapsed();
  return r;
}

// The reference backend's results: datasets under codec/ and the summary keys <codec>.*.
void record_codec(const CodecMeasurement& r, const ModelConfig& m, const StatesSource& source,
                  Dtype scale, const std::string& device, H5Writer& file, Summary& summary) {
  const int N = r.N, L = r.L, HV = r.HV, Td = r.Td, C = static_cast<int>(r.codecs.size());
  const size_t cells = static_cast<size_t>(N) * L * HV;
  const std::string g = "codec";
  file.group(g);
  file.attr(g, "drive", source.drive_name());
  file.attr(g, "prefill_tokens", static_cast<int64_t>(r.Tp));
  file.attr(g, "decode_steps", static_cast<int64_t>(Td));
  file.attr(g, "scale_dtype", std::string(dtype_name(scale)));
  file.attr(g, "states", static_cast<int64_t>(N));
  file.attr(g, "device", device);
  std::vector<std::string> names;
  for (const auto& c : r.codecs) names.push_back(c.kind_name());
  file.write_strings(g + "/codecs", names, "codecs measured, in the order of the per-codec arrays");
  {
    std::vector<double> norms(L * HV, 0.0);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < L * HV; ++i)
        norms[i] += r.ref_norm_sq[static_cast<size_t>(n) * L * HV + i];
    for (auto& x : norms) x = std::sqrt(x);
    file.write(g + "/state_norm_layer_head", norms, {size_t(L), size_t(HV)}, "1",
               "Frobenius norm of the reference state per [layer, head] (summed over states)");
  }

  const RecurrenceShape shape = recurrence_shape(m);
  const size_t conv_bytes = static_cast<size_t>(L) * m.conv_dim_shard() * (m.conv_width - 1) * 2;
  const StateShape sshape{L, HV, shape.dv, shape.dk};
  ReportTable table(fmt::format("codec: error per codec ({}, {} state(s), decode {} steps)",
                                source.drive_name(), N, Td),
                    {"codec", "bytes/state", "state relerr", "decode relerr", "max |S_hat - S|"});
  for (int c = 0; c < C; ++c) {
    const std::string name = r.codecs[c].kind_name();
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
          sh.merge(r.state_err[c * cells + cell]);
          dh.merge(r.decode_err[c * cells + cell]);
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
      for (const auto& cellsteps : r.step_err) s.merge(cellsteps[c * Td + t]);
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
    const double bytes = static_cast<double>(r.codecs[c].temporal_bytes(sshape) + conv_bytes);
    file.write_scalar(cg + "/state_relerr", total_state.relerr(), "1",
                      "over the whole multi-layer state");
    file.write_scalar(cg + "/decode_relerr", total_decode.relerr(), "1", "over all decode outputs");
    file.write_scalar(cg + "/max_abs_err", total_state.max_abs, "state units", "max |S_hat - S|");
    file.write_scalar(cg + "/small_entry_error_share", total_state.small_entry_share(), "1",
                      "share of squared error in below-median entries");
    file.write_scalar(cg + "/bytes_per_state", bytes, "bytes",
                      "temporal values + scales + bf16 conv state, one sequence");

    table.add_row({name, fmt::format("{:.0f}", bytes), report_number(total_state.relerr()),
                   report_number(total_decode.relerr()), report_number(total_state.max_abs)});
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
  table.print();
}

// A second backend's results beside the reference's: codec/cuda/ and the summary keys cuda.*:
//   cuda.<codec>.state_relerr / decode_relerr   errors of the GPU path (its decode outputs are
//                                               bf16, as a serving engine returns them)
//   cuda.<codec>.codec_mismatches               heads whose restored state differs from the CPU
//                                               codec applied to the same GPU state (must be 0)
//   cuda.prefill_state_relerr_vs_cpu            GPU prefill state against the CPU reference's
//   cuda.decode_output_relerr_vs_cpu            GPU decode outputs against the CPU reference's
// Totals run over (state, layer, head) cells, and the decode errors over whole layers' outputs,
// in the order of the states and layers.
[[maybe_unused]] void record_codec_device(const CodecMeasurement& dev, const CodecMeasurement& ref,
                                          const std::string& device, H5Writer& file,
                                          Summary& summary) {
  const size_t cells = static_cast<size_t>(dev.N) * dev.L * dev.HV,
               items = static_cast<size_t>(dev.N) * dev.L;
  const std::string g = "codec/cuda";
  file.group(g);
  file.attr(g, "device", device);
  file.attr(
      g, "path",
      std::string("bf16 q/k/v, fp32 state pool; prefill and decode with gated_delta_pool, "
                  "donate/copy-on-write with checkpoint_store/checkpoint_load; bf16 outputs"));
  for (size_t c = 0; c < dev.codecs.size(); ++c) {
    ErrorStats state, decode;
    for (size_t cell = 0; cell < cells; ++cell) state.merge(dev.state_err[c * cells + cell]);
    for (size_t item = 0; item < items; ++item)
      decode.merge(dev.layer_decode_err[c * items + item]);
    const std::string name = dev.codecs[c].kind_name();
    file.write_scalar(g + "/" + name + "/state_relerr", state.relerr(), "1",
                      "restored vs prefilled GPU state");
    file.write_scalar(g + "/" + name + "/decode_relerr", decode.relerr(), "1",
                      "bf16 decode outputs from the restored vs the original GPU state");
    file.write_scalar(
        g + "/" + name + "/codec_mismatches", static_cast<double>(dev.codec_mismatches[c]), "heads",
        "heads whose GPU-restored state differs from the CPU codec on the same state");
    summary.set("cuda." + name + ".state_relerr", state.relerr());
    summary.set("cuda." + name + ".decode_relerr", decode.relerr());
    summary.set("cuda." + name + ".codec_mismatches", static_cast<double>(dev.codec_mismatches[c]));
  }
  ErrorStats prefill_vs_ref, decode_vs_ref;
  for (size_t item = 0; item < items; ++item) {
    prefill_vs_ref.merge(compare(ref.prefill_state[item].data(), dev.prefill_state[item].data(),
                                 dev.prefill_state[item].size()));
    decode_vs_ref.merge(compare(ref.ref_outputs[item].data(), dev.ref_outputs[item].data(),
                                dev.ref_outputs[item].size()));
  }
  file.write_scalar(g + "/prefill_state_relerr_vs_cpu", prefill_vs_ref.relerr(), "1",
                    "GPU prefill state against the fp32 CPU reference");
  file.write_scalar(g + "/decode_output_relerr_vs_cpu", decode_vs_ref.relerr(), "1",
                    "GPU bf16 decode outputs against the fp32 CPU reference outputs");
  summary.set("cuda.prefill_state_relerr_vs_cpu", prefill_vs_ref.relerr());
  summary.set("cuda.decode_output_relerr_vs_cpu", decode_vs_ref.relerr());
}

#ifdef STATECHECK_HAVE_CUDA
// The working-state decode kernels beside their CPU reference (codec/cuda/working_state/<format>
// and the summary keys cuda.ws.<format>.*): for every format with a kernel, the decode steps of
// each (state, layer) run from the CPU reference's prefilled fp32 state with the state kept in
// that format between tokens, once by the CUDA kernel (cuda_ws_backend) and once by the kernel's
// CPU reference (ws_reference_backend), both with bf16 q/k/v, keyed by (seed, layer, state):
//   cuda.ws.<format>.output_mismatches   decode outputs whose bits differ between the two (0;
//                                        cuda.ws.output_mismatches: over every format, gated)
//   cuda.ws.<format>.decode_relerr       GPU outputs against the fp32 CPU decode from the same
//                                        state (the bf16 inputs alone give
//                                        cuda.decode_output_relerr_vs_cpu)
void record_working_state_device(const CodecMeasurement& ref, const StatesSource& source,
                                 const RecurrenceShape& shape, uint64_t seed, int threads,
                                 H5Writer& file, Summary& summary) {
  std::vector<WorkingStateFormat> formats;
  for (const WorkingStateFormat& f : all_working_state_formats())
    if (cuda::ws_decode_supports(f)) formats.push_back(f);
  const int F = static_cast<int>(formats.size()), L = ref.L, Tp = ref.Tp, Td = ref.Td;
  const int items = ref.N * L;
  std::vector<std::vector<float>> gpu(static_cast<size_t>(F) * items),
      cpu(static_cast<size_t>(F) * items);
  // Item `item` decoded under every format, by the CUDA kernels (`gpu`) or their CPU reference;
  // the layer's inputs are read once for all formats.
  auto decode_item = [&](int item, bool gpu_side, std::vector<std::vector<float>>& out) {
    const int n = item / L, l = item % L;
    const LayerInputs in = source.layer_inputs(n, l, Tp + Td);
    for (int fi = 0; fi < F; ++fi) {
      const std::unique_ptr<RecurrenceBackend> backend =
          gpu_side ? cuda::cuda_ws_backend(formats[fi], seed)
                   : cuda::ws_reference_backend(formats[fi], seed);
      const std::unique_ptr<LayerRun> run = backend->bind_at(shape, in, 1, l, n);
      run->write(0, ref.prefill_state[item].data());
      std::vector<float>& o = out[static_cast<size_t>(fi) * items + item];
      o.assign(ref.ref_outputs[item].size(), 0.0f);
      run->advance(0, Tp, Tp + Td, o.data());
    }
  };
  Progress progress("codec working-state decode (cuda + reference)", 2L * items);
  for (int item = 0; item < items; ++item) {  // one device: one run after another
    decode_item(item, true, gpu);
    progress.tick();
  }
  parallel_for(items, threads, [&](int item) {
    decode_item(item, false, cpu);
    progress.tick();
  });
  const std::string g = "codec/cuda/working_state";
  file.group(g);
  file.attr(g, "protocol",
            std::string("decode steps from the CPU reference's prefilled fp32 state, the state "
                        "kept in the format between tokens; GPU kernel and its CPU reference"));
  ReportTable table(
      fmt::format("codec: working-state decode kernels ({} steps), GPU beside its CPU reference",
                  Td),
      {"format", "output mismatches", "decode relerr"});
  int64_t total = 0;  // over every format
  for (int fi = 0; fi < F; ++fi) {
    int64_t differ = 0;
    ErrorStats err;
    for (int item = 0; item < items; ++item) {
      const std::vector<float>& a = gpu[static_cast<size_t>(fi) * items + item];
      const std::vector<float>& b = cpu[static_cast<size_t>(fi) * items + item];
      for (size_t e = 0; e < a.size(); ++e) differ += std::memcmp(&a[e], &b[e], sizeof(float)) != 0;
      err.merge(compare(ref.ref_outputs[item].data(), a.data(), a.size()));
    }
    const std::string name = formats[fi].name(), fg = g + "/" + name;
    file.write_scalar(fg + "/output_mismatches", static_cast<double>(differ), "elements",
                      "decode outputs whose bits differ between the GPU and its CPU reference");
    file.write_scalar(fg + "/decode_relerr", err.relerr(), "1",
                      "GPU decode outputs against the fp32 CPU decode from the same state");
    summary.set("cuda.ws." + name + ".output_mismatches", static_cast<double>(differ));
    summary.set("cuda.ws." + name + ".decode_relerr", err.relerr());
    table.add_row({name, fmt::format("{}", differ), report_number(err.relerr())});
    total += differ;
  }
  summary.set("cuda.ws.output_mismatches", static_cast<double>(total));
  table.print();
}
#endif

}  // namespace

void run_codec(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const StatesSource source = options_states_source(o, m);
  const RecurrenceShape shape = source.shape();
  const int L = m.linear_layer_count(), HV = shape.HV, dv = shape.dv, dk = shape.dk;
  int Tp = source.has_prefill() ? (o.prefill > 0 ? o.prefill : (o.quick ? 128 : 512)) : 0;
  if (o.prefill > 0 && !source.has_prefill())
    fmt::print("codec: --prefill {} is not used: drive {} starts from its own states\n", o.prefill,
               source.drive_name());
  int Td = o.decode > 0 ? o.decode : (o.quick ? 32 : 128);
  if (const int T = source.token_limit(); T > 0) {
    // A file of T tokens: the defaults take a quarter of it (at most the default) for the decode
    // and the rest for the prefill (quick: at most 128), so that every token of it is used.
    if (o.decode == 0) Td = std::max(1, std::min(Td, T / 4));
    if (o.prefill == 0) Tp = o.quick ? std::min(128, T - Td) : T - Td;
    if (Tp < 0 || Tp + Td > T)
      fail("codec: prefill {} + decode {} tokens, but drive {} holds {} tokens per sequence", Tp,
           Td, source.drive_name(), T);
  }
  const Dtype scale = o.scale_dtype_or_default();
  const std::vector<Codec> codecs = codec_experiment_codecs(scale);
  const bool cuda = o.device == Device::cuda;

  fmt::print(
      "codec: model {} (TP {}, {} layers x {} heads x {}x{}), drive {}, {} state(s), prefill {}, "
      "decode {}, scale dtype {}, {} threads\n",
      m.name, m.tp, L, HV, dv, dk, source.drive_name(), source.count(), Tp, Td, dtype_name(scale),
      o.thread_count());

  const std::unique_ptr<RecurrenceBackend> cpu = cpu_fp32_backend();
  const CodecMeasurement ref =
      measure_codec(*cpu, source, shape, L, Tp, Td, codecs, o.thread_count(), cuda);
  record_codec(ref, m, source, scale, device_name(o.device), file, summary);
  if (cuda) {
#ifdef STATECHECK_HAVE_CUDA
    fmt::print("codec (cuda): {}\n", cuda::device_description());
    const std::unique_ptr<RecurrenceBackend> gpu = cuda::cuda_backend();
    const CodecMeasurement dev =
        measure_codec(*gpu, source, shape, L, Tp, Td, codecs, o.thread_count(), true);
    record_codec_device(dev, ref, cuda::device_description(), file, summary);
    record_working_state_device(ref, source, shape, o.seed, o.thread_count(), file, summary);
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
  fmt::print("codec: {:.1f} s\n", ref.seconds);
}

}  // namespace statecheck
