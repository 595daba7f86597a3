// Experiment `bench`: speed of the reference recurrence and the codecs, against the copy bandwidth
// measured in the same run (docs/experiments.md, "bench": a byte and flop model per
// kernel, medians, a machine header in the result). `--device cpu` times the host code on one
// core; `--device cuda` times the CUDA paths (kernels/bench).
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

struct BenchRow {
  std::string name;
  double seconds = 0;
  double bytes = 0;  // bytes moved per call (byte model)
  double flops = 0;  // flops per call
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
  BenchRow ref{"cpu_reference_fp32", 0, 0, 0};
  ref.seconds =
      median_seconds(repeats, [&] { gated_delta_layer_fp32(shape, in, 0, T, S.data(), nullptr); });
  ref.flops = gated_delta_flops_per_head_token(shape.dk, shape.dv) * shape.HV * T;
  // Byte model: state read + written once per token (it stays in cache between tokens, so this is
  // an upper bound of memory traffic), plus the token inputs.
  ref.bytes = 2.0 * S.size() * 4 * T;
  rows.push_back(ref);

  // Codecs: encode + decode of the whole multi-layer state of the model at its TP shard.
  const StateShape ss{m.linear_layer_count(), shape.HV, shape.dv, shape.dk};
  MultiLayerState state(ss);
  for (size_t e = 0; e < state.data.size(); ++e)
    state.data[e] = static_cast<float>(((e * 2654435761u) % 2001) - 1000) * 1e-4f;
  for (const char* name : {"int8", "fp8_e4m3", "bf16"}) {
    const Codec c = parse_codec(name, o.scale_dtype_or_default());
    EncodedState enc;
    MultiLayerState dec;
    BenchRow row{std::string("cpu_") + name + "_encode_decode", 0, 0, 0};
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
  file.attr(g, "drive", from_file ? source.drive_name() : std::string(drive_kind_name(drive)));
  file.write_scalar(g + "/copy_gbps", copy_gbps, "GB/s",
                    "memcpy bandwidth of one core, bytes read + written / time");
  summary.set("bench.cpu_copy.gbps", copy_gbps);
  fmt::print("\nbench (cpu, one core; {} repeats, medians)   copy bandwidth {:.2f} GB/s\n", repeats,
             copy_gbps);
  fmt::print("  {:<30} {:>10} {:>10} {:>10} {:>12}\n", "kernel", "time ms", "GFLOP/s", "GB/s",
             "of copy");
  for (const auto& r : rows) {
    const double gbps = r.bytes / r.seconds / 1e9, gflops = r.flops / r.seconds / 1e9;
    fmt::print("  {:<30} {:>10.3f} {:>10} {:>10.2f} {:>11.1f}%\n", r.name, r.seconds * 1e3,
               r.flops > 0 ? fmt::format("{:.2f}", gflops) : std::string("-"), gbps,
               100.0 * gbps / copy_gbps);
    file.write_scalar(g + "/" + r.name + "/seconds", r.seconds, "s", "median time per call");
    file.write_scalar(g + "/" + r.name + "/gbps", gbps, "GB/s",
                      "bytes of the byte model / median time");
    file.write_scalar(g + "/" + r.name + "/fraction_of_copy", gbps / copy_gbps, "1",
                      "GB/s over the copy bandwidth");
    summary.set("bench." + r.name + ".gbps", gbps);
    summary.set("bench." + r.name + ".fraction_of_copy", gbps / copy_gbps);
    if (r.flops > 0) {
      file.write_scalar(g + "/" + r.name + "/gflops", gflops, "GFLOP/s",
                        "6 d_k d_v flops per head and token / median time");
      summary.set("bench." + r.name + ".gflops", gflops);
    }
  }
}

}  // namespace

void run_bench(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  if (o.device == Device::cpu) return cpu_bench(o, m, file, summary);
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
