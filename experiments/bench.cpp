// Experiment `bench`: speed of the reference recurrence and the codecs against ceilings measured
// in the same run (docs/experiments.md, "bench": a byte and flop model per kernel, medians, a
// machine header in the result). `--device cpu` times the host code on one core: the fp32
// reference is compute-bound and is reported in GFLOP/s against the core's fp32 FMA peak
// (experiments/cpu_peak.h); the codecs are memory-bound and are reported in GB/s against the copy
// bandwidth. `--device cuda` times the CUDA paths (experiments/bench_gpu.cpp).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/drive/states_source.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "experiments/cpu_peak.h"
#include "experiments/experiment.h"

namespace statecheck {

namespace {

// Median wall time in seconds of `repeats` calls (after one warm-up call).
double median_seconds(int repeats, const std::function<void()>& body) {
  body();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// What bounds a kernel, and so which ceiling its figure is given against: the fp32 FMA peak
// (GFLOP/s) or the copy bandwidth (GB/s).
enum class Bound { compute, memory };

struct BenchRow {
  std::string name;
  double seconds = 0;
  double bytes = 0;  // bytes moved per call (byte model)
  double flops = 0;  // flops per call
  Bound bound = Bound::memory;
};

void cpu_bench(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  // --drive inputs: the file's first linear layer of its first sequence (its own shape flags);
  // otherwise the family's synthetic drive.
  const bool from_file = o.drive && o.drive->kind == DriveKind::inputs;
  const StatesSource source = from_file ? options_states_source(o, m) : StatesSource();
  const RecurrenceShape shape = from_file ? source.shape() : recurrence_shape(m);
  const int repeats = o.quick ? 3 : 7;
  std::vector<BenchRow> rows;

  // Copy bandwidth of one core: memcpy of a buffer well past the caches; bytes = read + write.
  const size_t copy_bytes = size_t(o.quick ? 64 : 256) << 20;
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes, 0);
  const double copy_s =
      median_seconds(repeats, [&] { std::memcpy(dst.data(), src.data(), copy_bytes); });
  const double copy_gbps = 2.0 * copy_bytes / copy_s / 1e9;
  // Arithmetic ceiling of the same core: fp32 FMA throughput (experiments/cpu_peak.h).
  const double peak_gflops = measure_fma_peak_gflops(repeats, o.quick ? 0.05 : 0.2);

  // Reference recurrence: all heads of one layer of the model, T tokens, one core.
  int T = o.quick ? 64 : 256;
  if (from_file) T = std::min(T, source.token_limit());
  const DriveKind drive = m.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda;
  if (o.drive && !from_file && o.drive->kind != drive)
    fmt::print("bench: times the {} drive's inputs; --drive {} applies to codec and chain\n",
               drive_kind_name(drive), o.drive->name());
  const LayerInputs in =
      from_file ? source.layer_inputs(0, 0, T) : synthetic_inputs(drive, shape, o.seed, 0, T);
  std::vector<float> S(static_cast<size_t>(shape.HV) * shape.dv * shape.dk, 0.0f);
  // 6 d_k d_v flops per head and token on a [d_v, d_k] state that stays in the core's caches:
  // compute-bound, so its figure is GFLOP/s against the FMA peak, not a fraction of copy.
  BenchRow ref{"cpu_reference_fp32", 0, 0, 0, Bound::compute};
  ref.seconds =
      median_seconds(repeats, [&] { gated_delta_layer_fp32(shape, in, 0, T, S.data(), nullptr); });
  ref.flops = gated_delta_flops_per_head_token(shape.dk, shape.dv) * shape.HV * T;
  rows.push_back(ref);

  // Working-state formats (docs/working_state.md): the same layer and tokens with the state stored
  // in the format after every token. Validated first: format fp32 must reproduce the plain
  // reference bit for bit, or no format is timed.
  {
    std::vector<float> plain(S.size(), 0.0f), ws(S.size(), 0.0f);
    gated_delta_layer_fp32(shape, in, 0, T, plain.data(), nullptr);
    gated_delta_layer_fp32_ws(shape, in, 0, T, ws.data(), nullptr, nullptr,
                              {WorkingStateFormat{}, o.seed, 0, 0});
    if (std::memcmp(plain.data(), ws.data(), plain.size() * sizeof(float)) != 0)
      fail("bench: the fp32 working-state format differs from the plain reference; not timed");
  }
  fmt::print(
      "\nbench: working-state formats, per-token cost against the plain fp32 step "
      "({} heads, d_k {}, d_v {}, {} tokens)\n",
      shape.HV, shape.dk, shape.dv, T);
  for (const WorkingStateFormat& f : all_working_state_formats()) {
    std::vector<float> Sw(S.size(), 0.0f), e(S.size(), 0.0f);
    const WorkingStateRun run{f, o.seed, 0, 0};
    BenchRow row{"cpu_ws_" + f.name(), 0, 0, 0};
    row.seconds = median_seconds(repeats, [&] {
      std::fill(Sw.begin(), Sw.end(), 0.0f);
      std::fill(e.begin(), e.end(), 0.0f);
      gated_delta_layer_fp32_ws(shape, in, 0, T, Sw.data(), e.data(), nullptr, run);
    });
    row.flops = ref.flops;
    // Byte model: the stored state read and written once per token at the format's bytes.
    row.bytes = 2.0 * S.size() * f.bytes_per_element(shape.dv) * T;
    const double per_token_us = row.seconds / T * 1e6;
    summary.set("bench." + row.name + ".us_per_token", per_token_us);
    summary.set("bench." + row.name + ".over_plain", row.seconds / ref.seconds);
    file.write_scalar("bench/" + row.name + "/us_per_token", per_token_us, "us",
                      "median time per token of the layer");
    fmt::print("  {:<16} {:>10.1f} us/token {:>8.2f}x plain\n", f.name(), per_token_us,
               row.seconds / ref.seconds);
    rows.push_back(row);
  }

  // Codecs: encode + decode of the whole multi-layer state of the model at its TP shard.
  const StateShape ss{m.linear_layer_count(), shape.HV, shape.dv, shape.dk};
  MultiLayerState state(ss);
  for (size_t e = 0; e < state.data.size(); ++e)
    state.data[e] = static_cast<float>(((e * 2654435761u) % 2001) - 1000) * 1e-4f;
  for (const char* name : {"int8", "fp8_e4m3", "bf16"}) {
    const Codec c = parse_codec(name, o.scale_dtype_or_default());
    EncodedState enc;
    MultiLayerState dec;
    BenchRow row{std::string("cpu_") + name + "_encode_decode", 0, 0, 0, Bound::memory};
    row.seconds = median_seconds(repeats, [&] {
      enc = encode(c, state);
      dec = decode(enc);
    });
    // Byte model: encode reads fp32 and writes the encoded bytes; decode reads them, writes fp32.
    row.bytes = 2.0 * (ss.size() * 4.0 + static_cast<double>(c.temporal_bytes(ss)));
    rows.push_back(row);
  }

  const std::string g = "bench";
  file.group(g);
  file.attr(g, "device", std::string("cpu, one core"));
  file.attr(g, "fma_peak_isa", std::string(fma_peak_isa()));
  file.attr(g, "drive", from_file ? source.drive_name() : std::string(drive_kind_name(drive)));
  file.write_scalar(g + "/copy_gbps", copy_gbps, "GB/s",
                    "memcpy bandwidth of one core, bytes read + written / time");
  file.write_scalar(
      g + "/fma_peak_gflops", peak_gflops, "GFLOP/s",
      "fp32 FMA throughput of one core, 96 independent accumulators, 2 flops per FMA");
  summary.set("bench.cpu_copy.gbps", copy_gbps);
  summary.set("bench.cpu_fma_peak.gflops", peak_gflops);
  fmt::print(
      "\nbench (cpu, one core; {} repeats, medians)   copy bandwidth {:.2f} GB/s, fp32 peak {:.1f} "
      "GFLOP/s ({}, measured)\n",
      repeats, copy_gbps, peak_gflops, fma_peak_isa());
  fmt::print("  {:<30} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "kernel", "bound", "time ms",
             "GFLOP/s", "of peak", "GB/s", "of copy");
  for (const auto& r : rows) {
    const double gbps = r.bytes / r.seconds / 1e9, gflops = r.flops / r.seconds / 1e9;
    const bool compute = r.bound == Bound::compute;
    const std::string dash = "-";
    fmt::print("  {:<30} {:>8} {:>10.3f} {:>10} {:>10} {:>10} {:>10}\n", r.name,
               compute ? "compute" : "memory", r.seconds * 1e3,
               r.flops > 0 ? fmt::format("{:.2f}", gflops) : dash,
               compute ? fmt::format("{:.1f}%", 100.0 * gflops / peak_gflops) : dash,
               compute ? dash : fmt::format("{:.2f}", gbps),
               compute ? dash : fmt::format("{:.1f}%", 100.0 * gbps / copy_gbps));
    const std::string k = g + "/" + r.name;
    file.write_scalar(k + "/seconds", r.seconds, "s", "median time per call");
    file.attr(k, "bound", std::string(compute ? "compute" : "memory"));
    if (compute) {
      file.write_scalar(k + "/gflops", gflops, "GFLOP/s",
                        "6 d_k d_v flops per head and token / median time");
      file.write_scalar(k + "/fraction_of_peak", gflops / peak_gflops, "1",
                        "GFLOP/s over the fp32 FMA peak of the same core");
      summary.set("bench." + r.name + ".gflops", gflops);
      summary.set("bench." + r.name + ".fraction_of_peak", gflops / peak_gflops);
    } else {
      file.write_scalar(k + "/gbps", gbps, "GB/s", "bytes of the byte model / median time");
      file.write_scalar(k + "/fraction_of_copy", gbps / copy_gbps, "1",
                        "GB/s over the copy bandwidth");
      summary.set("bench." + r.name + ".gbps", gbps);
      summary.set("bench." + r.name + ".fraction_of_copy", gbps / copy_gbps);
    }
  }
}

}  // namespace

void run_bench(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  if (o.device == Device::cpu) {
    if (!o.bench_codec || !o.bench_recurrence || !o.bench_ws)
      fail("--bench-sections chooses among the CUDA kernels: it needs --device cuda");
    return cpu_bench(o, m, file, summary);
  }
  if (o.drive && o.drive->kind == DriveKind::inputs)
    fmt::print(
        "bench: --device cuda times synthetic inputs of the model's shapes; --drive inputs "
        "applies to --device cpu\n");
#ifdef STATECHECK_HAVE_CUDA
  gpu_bench(o, m, file, summary);
#else
  fail("--device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#endif
}

}  // namespace statecheck
