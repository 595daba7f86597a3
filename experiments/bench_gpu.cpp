// `statecheck bench --device cuda`: the CUDA paths against the copy bandwidth of the same GPU,
// measured in the same run (docs/gpu.md, "How figures are measured"). Every kernel is validated
// against its CPU reference on the benchmark's own data before it is timed; a kernel that fails
// its check gets no speed printed (and the run fails). Byte models: gated_delta_pool_bytes and
// checkpoint_store_bytes. Timing: CUDA events, L2 flushed before each repeat, launches replayed
// from CUDA graphs, medians. Yardsticks next to each row, same timer: a cudaMemcpy of the same
// bytes, and (where the byte model is split into read and written bytes) a plain stream of the
// same split and size (kernels/common/bandwidth.h).
#ifdef STATECHECK_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/dtype/fp8_e4m3.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "experiments/bench_gpu_rows.h"
#include "experiments/experiment.h"
#include "kernels/codec/checkpoint_codec.h"
#include "kernels/common/bandwidth.h"
#include "kernels/common/device.h"
#include "kernels/common/mma_peak.h"
#include "kernels/common/timing.h"
#include "kernels/gated_delta/gated_delta_pool.h"
#include "kernels/gated_delta/gated_delta_pool_reference.h"
#include "kernels/host/layer_upload.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_decode_reference.h"

namespace statecheck {

using namespace statecheck::cuda;
using namespace statecheck::bench_rows;

namespace {

// Fills a device pool of `slots` slots with N(0, 0.06^2)-like values (one random slot pattern,
// rescaled per slot), in the pool dtype.
void fill_pool(void* dst, size_t slot_elems, int64_t slots, Dtype dtype, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> pattern(slot_elems);
  for (auto& x : pattern) x = static_cast<float>(0.06 * rng.normal());
  for (int64_t s = 0; s < slots; ++s) {
    const float k = 0.5f + static_cast<float>(s % 7) * 0.25f;
    if (dtype == Dtype::fp32) {
      std::vector<float> v(slot_elems);
      for (size_t e = 0; e < slot_elems; ++e) v[e] = pattern[e] * k;
      STATECHECK_CUDA_CHECK(cudaMemcpy(static_cast<float*>(dst) + s * slot_elems, v.data(),
                                       slot_elems * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> v(slot_elems);
      for (size_t e = 0; e < slot_elems; ++e) v[e] = bf16_bits_from_float(pattern[e] * k);
      STATECHECK_CUDA_CHECK(cudaMemcpy(static_cast<uint16_t*>(dst) + s * slot_elems, v.data(),
                                       slot_elems * 2, cudaMemcpyHostToDevice));
    }
  }
}

// All-layer pool buffers of the geometry, [L, slots, ...].
struct DevicePool {
  DeviceBuffer<uint8_t> temporal, scales;
  DeviceBuffer<uint16_t> conv;
  int64_t slots = 0;
  StatePoolView view() {
    return {temporal.data(), scales.size() ? scales.data() : nullptr, conv.data(), slots};
  }
};

DevicePool make_pool(const PoolGeometry& g, int64_t slots, size_t value_bytes, size_t scale_bytes) {
  DevicePool p;
  p.slots = slots;
  p.temporal.resize(static_cast<size_t>(g.L) * slots * g.HV * g.dv * g.dk * value_bytes);
  if (scale_bytes) p.scales.resize(static_cast<size_t>(g.L) * slots * g.HV * g.dk * scale_bytes);
  p.conv.resize(static_cast<size_t>(g.L) * slots * g.conv_elems);
  STATECHECK_CUDA_CHECK(cudaMemset(p.conv.data(), 0x3C, p.conv.bytes()));
  return p;
}

// Checks store + load of `n` slots against the CPU codec for every head; returns mismatches.
long validate_codec(const PoolGeometry& g, DevicePool& active, Dtype adt, DevicePool& ckpt,
                    const Codec& c, const std::vector<int32_t>& src,
                    const std::vector<int32_t>& dst) {
  const size_t head = static_cast<size_t>(g.dv) * g.dk, ab = dtype_bytes(adt);
  const std::vector<uint8_t> a = active.temporal.download(), v = ckpt.temporal.download();
  const std::vector<uint8_t> s =
      ckpt.scales.size() ? ckpt.scales.download() : std::vector<uint8_t>();
  std::vector<float> S(head);
  std::vector<uint8_t> want_v(head * c.value_bytes()), want_s(g.dk * c.scale_bytes());
  long bad = 0;
  for (size_t i = 0; i < src.size(); ++i)
    for (int l = 0; l < g.L; ++l)
      for (int h = 0; h < g.HV; ++h) {
        const size_t ai = (static_cast<size_t>(l) * active.slots + src[i]) * g.HV + h;
        const size_t ci = (static_cast<size_t>(l) * ckpt.slots + dst[i]) * g.HV + h;
        for (size_t e = 0; e < head; ++e) {
          if (adt == Dtype::fp32)
            std::memcpy(&S[e], a.data() + (ai * head + e) * ab, 4);
          else {
            uint16_t b;
            std::memcpy(&b, a.data() + (ai * head + e) * ab, 2);
            S[e] = float_from_bf16_bits(b);
          }
        }
        encode_head(c, S.data(), g.dv, g.dk, want_v.data(), want_s.data(), {l, h});
        bad +=
            std::memcmp(want_v.data(), v.data() + ci * head * c.value_bytes(), want_v.size()) != 0;
        if (c.scale_bytes())
          bad += std::memcmp(want_s.data(), s.data() + ci * g.dk * c.scale_bytes(),
                             want_s.size()) != 0;
      }
  return bad;
}

void bench_codecs(const ModelConfig& m, const Options& o, GpuTimer& timer, std::vector<Row>& rows,
                  int repeats) {
  PoolGeometry g;
  g.L = m.linear_layer_count(), g.HV = m.value_heads_shard(), g.dv = m.head_v_dim,
  g.dk = m.head_k_dim;
  g.conv_elems = static_cast<int64_t>(m.conv_dim_shard()) * (m.conv_width - 1);
  const std::vector<int> ns = o.quick ? std::vector<int>{1, 8} : std::vector<int>{1, 8, 64};
  const int64_t slots = 65;
  for (Dtype adt : {Dtype::fp32, Dtype::bf16}) {
    DevicePool active = make_pool(g, slots, dtype_bytes(adt), 0);
    // The active pool's random contents, filled again after each load overwrote some slots.
    auto fill_active = [&] {
      fill_pool(active.temporal.data(),
                static_cast<size_t>(g.L) * slots * g.HV * g.dv * g.dk / slots, slots, adt,
                mix_seed(o.seed, 11));
    };
    fill_active();
    const std::string sd = adt == Dtype::fp32 ? "fp32" : "bf16";
    for (const std::string codec_name : {"int8", "fp8_e4m3", "copy"}) {
      const Codec c = codec_name == "copy"
                          ? parse_codec(sd)
                          : parse_codec(codec_name, parse_dtype(sd, "scale dtype"));
      DevicePool ckpt = make_pool(g, slots, c.value_bytes(), c.scale_bytes());
      for (int n : ns) {
        const std::vector<int32_t> src = distinct_slots(n, slots, mix_seed(o.seed, 100 + n)),
                                   dst = distinct_slots(n, slots, mix_seed(o.seed, 200 + n));
        DeviceBuffer<int32_t> d_src = to_device(src), d_dst = to_device(dst);
        checkpoint_store(g, active.view(), adt, ckpt.view(), c, d_src.data(), d_dst.data(), n);
        STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
        if (n == 8 || n == ns.back()) {
          const long bad = validate_codec(g, active, adt, ckpt, c, src, dst);
          if (bad)
            fail(
                "bench: {} store ({} active, N {}) differs from the CPU codec in {} heads: no "
                "speed reported",
                c.kind_name(), sd, n, bad);
        }
        const std::string base =
            fmt::format("{}_{}_active_N{}", codec_name == "copy" ? "slot_copy" : codec_name, sd, n);
        Row store{"store_" + base};
        store.set_times(timer.time(
            [&](cudaStream_t s) {
              checkpoint_store(g, active.view(), adt, ckpt.view(), c, d_src.data(), d_dst.data(), n,
                               nullptr, s);
            },
            repeats));
        store.bytes = checkpoint_store_bytes(g, adt, c, n);
        store.read_bytes = checkpoint_store_read_bytes(g, adt, n);
        store.write_bytes = store.bytes - store.read_bytes;
        rows.push_back(store);
        // Load into different active slots (copy-on-write); validated against decode of the stored
        // bytes.
        const std::vector<int32_t> back = distinct_slots(n, slots, mix_seed(o.seed, 300 + n));
        DeviceBuffer<int32_t> d_back = to_device(back);
        Row load{"load_" + base};
        load.set_times(timer.time(
            [&](cudaStream_t s) {
              checkpoint_load(g, ckpt.view(), c, active.view(), adt, d_dst.data(), d_back.data(), n,
                              s);
            },
            repeats));
        load.bytes = checkpoint_load_bytes(g, adt, c, n);
        load.read_bytes = checkpoint_load_read_bytes(g, adt, c, n);
        load.write_bytes = load.bytes - load.read_bytes;
        rows.push_back(load);
        fill_active();  // for the next store
      }
    }
  }
}

// Gated-delta kernel: decode (1 token per sequence) at several batches, and recurrent prefill.
void bench_recurrence(const Options& o, GpuTimer& timer, std::vector<Row>& rows, int repeats) {
  const int dk = 128, dv = 128;
  const std::vector<int> batches = o.quick ? std::vector<int>{1, 32} : std::vector<int>{1, 32, 256};
  for (const DecodeShape& sh : {DecodeShape{"gdn_H16_HV32", 16, 32, GateKind::gdn},
                                DecodeShape{"kda_H32_HV32", 32, 32, GateKind::kda}}) {
    for (Dtype dt : {Dtype::fp32, Dtype::bf16}) {
      for (const int batch : batches) {
        for (bool prefill : {false, true}) {
          // Recurrent prefill: fp32 state, 64 sequences of 256 tokens (2 per SM row-block wave),
          // timed once per shape; decode: one token per sequence at every batch.
          if (prefill && (dt != Dtype::fp32 || batch != batches.back())) continue;
          const int T = prefill ? (o.quick ? 64 : 256) : 1;
          const int B = prefill ? (o.quick ? 16 : 64) : batch;
          // Host batch (inputs and pool) for validation and upload.
          HostPoolBatch hb;
          hb.H = sh.H, hb.HV = sh.HV, hb.dk = dk, hb.dv = dv, hb.gate = sh.gate,
          hb.state_dtype = dt;
          const int64_t slots = B + 1;
          const size_t slot_elems = static_cast<size_t>(sh.HV) * dv * dk;
          Rng rng(mix_seed(o.seed, 7));
          std::vector<float> pool(slots * slot_elems);
          for (auto& x : pool) x = static_cast<float>(0.06 * rng.normal());
          if (dt == Dtype::fp32)
            hb.pool_fp32 = pool;
          else {
            hb.pool_bf16.resize(pool.size());
            for (size_t e = 0; e < pool.size(); ++e)
              hb.pool_bf16[e] = bf16_bits_from_float(pool[e]);
          }
          hb.slot_ids = distinct_slots(B, slots, mix_seed(o.seed, 5));
          hb.cu_seqlens.resize(B + 1);
          for (int b = 0; b <= B; ++b) hb.cu_seqlens[b] = b * T;
          RecurrenceShape rs;
          rs.H = sh.H, rs.HV = sh.HV, rs.dk = dk, rs.dv = dv, rs.gate = sh.gate;
          const LayerInputs in =
              synthetic_inputs(sh.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda,
                               rs, mix_seed(o.seed, 3), 0, B * T);
          hb.q = bf16_bits(in.q), hb.k = bf16_bits(in.k), hb.v = bf16_bits(in.v), hb.g = in.g,
          hb.beta = in.beta;
          DeviceBuffer<float> d_pool32;
          DeviceBuffer<uint16_t> d_pool16;
          if (dt == Dtype::fp32)
            d_pool32.upload(hb.pool_fp32);
          else
            d_pool16.upload(hb.pool_bf16);
          DeviceBuffer<int32_t> d_ids = to_device(hb.slot_ids), d_cu = to_device(hb.cu_seqlens);
          const DeviceLayerInputs d_in = upload_layer_inputs(rs, in);
          DeviceBuffer<uint16_t> d_o(static_cast<size_t>(B) * T * sh.HV * dv);
          d_o.fill_bytes(0xFF);
          GatedDeltaPoolArgs a =
              pool_args(rs, dt,
                        dt == Dtype::fp32 ? static_cast<void*>(d_pool32.data())
                                          : static_cast<void*>(d_pool16.data()),
                        slots, d_in, 0, B, d_ids.data(), d_cu.data(), d_o.data(), T);
          // Validate one launch against the CPU reference (decode: all sequences; prefill: the
          // first 4).
          gated_delta_pool(a);
          STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
          {
            HostPoolBatch check = hb;
            const int nv = prefill ? 4 : B;
            check.slot_ids.resize(nv);
            check.cu_seqlens.resize(nv + 1);
            const std::vector<uint16_t> o_ref = gated_delta_pool_reference(check);
            const std::vector<uint16_t> o_gpu = d_o.download();
            double err = 0, ref = 0;
            for (size_t e = 0; e < static_cast<size_t>(check.cu_seqlens.back()) * sh.HV * dv; ++e) {
              const double r = float_from_bf16_bits(o_ref[e]), x = float_from_bf16_bits(o_gpu[e]);
              if (!std::isfinite(x))
                fail("bench: gated_delta_pool output {} not written: no speed reported", e);
              err += (x - r) * (x - r);
              ref += r * r;
            }
            // Outputs are bf16 on both sides: the relative RMS difference stays at bf16 rounding
            // level (2^-8); anything larger is a wrong kernel.
            if (std::sqrt(err / ref) > std::ldexp(1.0, -8))
              fail(
                  "bench: gated_delta_pool {} B {} differs from the CPU reference (rel RMS "
                  "{:.3g}): no speed reported",
                  sh.name, B, std::sqrt(err / ref));
          }
          Row r{fmt::format("{}_{}_{}_state_B{}{}", prefill ? "prefill" : "decode", sh.name,
                            dtype_name(dt), B, prefill ? fmt::format("_T{}", T) : "")};
          r.set_times(timer.time([&](cudaStream_t s) { gated_delta_pool(a, s); }, repeats));
          r.kernel = gated_delta_kernel_name(gated_delta_pool_variant(a));
          r.bytes = gated_delta_pool_bytes(a, static_cast<int64_t>(B) * T);
          r.flops = gated_delta_pool_flops(a, static_cast<int64_t>(B) * T);
          r.tokens = static_cast<double>(B) * T;
          rows.push_back(r);
        }
      }
    }
  }
}

// Times, for every row whose bytes are split into read and written, the mixed stream of the same
// split and size (mixed_stream_for): the rate a plain stream moving those bytes in that
// proportion reaches with the same timer. For the codec launches (4 : 1 or 2 : 1 either way, tens
// of MB) it is the ceiling that the copy rate overstates. One timing per distinct stream.
void time_same_mix_streams(GpuTimer& timer, std::vector<Row>& rows, int repeats) {
  size_t most_read = 0, most_write = 0;
  for (const auto& r : rows) {
    if (r.read_bytes <= 0) continue;
    const MixedStream m = mixed_stream_for(r.read_bytes, r.write_bytes);
    most_read = std::max(most_read, m.read_bytes());
    most_write = std::max(most_write, m.write_bytes());
  }
  if (most_read == 0) return;
  DeviceBuffer<uint8_t> src(most_read), dst(most_write);
  STATECHECK_CUDA_CHECK(cudaMemset(src.data(), 0x3C, most_read));
  std::map<std::tuple<size_t, int, int>, TimingStats> time_of_stream;
  for (auto& r : rows) {
    if (r.read_bytes <= 0) continue;
    const MixedStream m = mixed_stream_for(r.read_bytes, r.write_bytes);
    auto [it, fresh] = time_of_stream.try_emplace(std::make_tuple(m.groups, m.reads, m.writes));
    if (fresh)
      it->second =
          timer.time([&](cudaStream_t s) { mixed_stream(m, src.data(), dst.data(), s); }, repeats);
    r.mix_bytes = static_cast<double>(m.read_bytes() + m.write_bytes());
    r.ms_mix = it->second.median_ms;
    r.ms_mix_memset_flush = it->second.memset_flush_median_ms;
  }
}

// Times, for every row, a device-to-device cudaMemcpy that moves the row's bytes (half read, half
// written) with the same timer, issued on the stream as the copy bandwidth is (a memcpy node of a
// CUDA graph runs on the copy engines, well below that rate): the rate a plain copy of that
// size reaches. Below a few hundred MB a launch's ramp-up, tail and (with the read flush) the
// write-back of its dirty L2 lines weigh on any kernel; this is the yardstick for them. One
// timing per distinct size.
void time_same_size_copies(GpuTimer& timer, std::vector<Row>& rows, int repeats) {
  double most = 0;
  for (const auto& r : rows) most = std::max(most, r.bytes);
  const size_t half_max = (static_cast<size_t>(most / 2) + 255) / 256 * 256;
  DeviceBuffer<uint8_t> src(half_max), dst(half_max);
  STATECHECK_CUDA_CHECK(cudaMemset(src.data(), 0x5A, half_max));
  std::map<double, double> ms_of_bytes;
  for (auto& r : rows) {
    auto [it, fresh] = ms_of_bytes.try_emplace(r.bytes, 0.0);
    if (fresh) {
      const size_t half = static_cast<size_t>(r.bytes / 2) / 16 * 16;
      it->second = timer
                       .time(
                           [&](cudaStream_t s) {
                             STATECHECK_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), half,
                                                                   cudaMemcpyDeviceToDevice, s));
                           },
                           repeats, /*use_graph=*/false)
                       .median_ms;
    }
    r.ms_same_size_copy = it->second;
  }
}

}  // namespace

void gpu_bench(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const std::string device = device_description();
  const int repeats = o.quick ? 10 : 30;
  GpuTimer timer(size_t(512) << 20);
  const double copy_gbps = measure_copy_gbps(timer, size_t(o.quick ? 1 : 4) << 30, repeats);
  const size_t stream_bytes = size_t(o.quick ? 1 : 4) << 30;
  const double read_gbps = measure_read_gbps(timer, stream_bytes, repeats);
  const double write_gbps = measure_write_gbps(timer, stream_bytes, repeats);
  fmt::print(
      "bench (cuda): {}\n  copy bandwidth (cudaMemcpy D2D, read + write): {:.1f} GB/s; read-only "
      "stream "
      "{:.1f} GB/s; write-only stream {:.1f} GB/s\n",
      device, copy_gbps, read_gbps, write_gbps);
  std::vector<Row> rows;
  if (o.bench_codec) bench_codecs(m, o, timer, rows, repeats);
  if (o.bench_recurrence) bench_recurrence(o, timer, rows, repeats);
  if (o.bench_ws) bench_working_state(o, timer, rows, repeats);
  if (o.bench_chunked) bench_chunked_prefill(o, timer, rows, repeats);
  const bool tensor_rows =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.tensor_core; });
  const double mma_tflops = tensor_rows ? measure_mma_bf16_tflops(timer, repeats) : 0.0;
  time_same_size_copies(timer, rows, repeats);
  time_same_mix_streams(timer, rows, repeats);

  const std::string g = "bench";
  file.group(g);
  file.attr(g, "device", device);
  file.attr(g, "repeats", static_cast<int64_t>(repeats));
  file.attr(
      g, "timing",
      std::string("CUDA events, CUDA graph replay, medians; median_ms: L2 flushed by a 512 MB "
                  "read before the launch and again inside the timed region after it, less "
                  "that read's own time (a launch pays its own bytes to HBM); "
                  "median_ms_memset_flush: after a 512 MB memset, launch only (the "
                  "Triton do_bench convention; charges the flush's dirty lines)"));
  file.write_scalar(g + "/copy_gbps", copy_gbps, "GB/s",
                    "device-to-device cudaMemcpy, bytes read + written / median time");
  summary.set("bench.copy.gbps", copy_gbps);
  file.write_scalar(g + "/read_gbps", read_gbps, "GB/s",
                    "read-only stream (16-byte loads, grid-stride), bytes / median time");
  file.write_scalar(g + "/write_gbps", write_gbps, "GB/s",
                    "write-only stream (16-byte stores, grid-stride), bytes / median time");
  summary.set("bench.read_stream.gbps", read_gbps);
  summary.set("bench.write_stream.gbps", write_gbps);
  fmt::print("  {:<46} {:>10} {:>10} {:>9} {:>12} {:>14} {:>15} {:>15} {:>8}\n", "kernel",
             "time us", "GB/s", "of copy", "tokens/s", "memset-flush", "same-size copy",
             "same-mix stream", "of mix");
  for (const auto& r : rows) {
    const double gbps = r.bytes / (r.ms * 1e-3) / 1e9;
    const double gbps_memset = r.bytes / (r.ms_memset_flush * 1e-3) / 1e9;
    const double gbps_same_size = r.bytes / (r.ms_same_size_copy * 1e-3) / 1e9;
    const double gbps_mix = r.ms_mix > 0 ? r.mix_bytes / (r.ms_mix * 1e-3) / 1e9 : 0.0;
    fmt::print("  {:<46} {:>10.2f} {:>10.1f} {:>8.1f}% {:>12.3g} {:>13.1f}% {:>14.1f}%", r.name,
               r.ms * 1e3, gbps, 100 * gbps / copy_gbps,
               r.tokens > 0 ? r.tokens / (r.ms * 1e-3) : 0.0, 100 * gbps_memset / copy_gbps,
               100 * gbps_same_size / copy_gbps);
    if (gbps_mix > 0)
      fmt::print(" {:>14.1f}% {:>7.1f}%\n", 100 * gbps_mix / copy_gbps, 100 * gbps / gbps_mix);
    else
      fmt::print("\n");
    const std::string k = g + "/" + r.name;
    file.write_scalar(k + "/median_ms", r.ms, "ms", "median time of one launch");
    file.write_scalar(k + "/bytes", r.bytes, "bytes",
                      "bytes of the kernel's byte model (read + written)");
    file.write_scalar(k + "/gbps", gbps, "GB/s", "byte model / median time");
    file.write_scalar(k + "/fraction_of_copy", gbps / copy_gbps, "1",
                      "GB/s over the copy bandwidth of this run");
    summary.set("bench." + r.name + ".gbps", gbps);
    summary.set("bench." + r.name + ".fraction_of_copy", gbps / copy_gbps);
    file.write_scalar(k + "/median_ms_memset_flush", r.ms_memset_flush, "ms",
                      "median time of one launch after a memset L2 flush (do_bench convention)");
    file.write_scalar(k + "/fraction_of_copy_memset_flush", gbps_memset / copy_gbps, "1",
                      "GB/s over the copy bandwidth, timed after a memset L2 flush");
    summary.set("bench." + r.name + ".fraction_of_copy_memset_flush", gbps_memset / copy_gbps);
    file.write_scalar(
        k + "/same_size_copy_fraction_of_copy", gbps_same_size / copy_gbps, "1",
        "GB/s of a cudaMemcpy moving the same bytes (half read, half written), "
        "same timer, over the copy bandwidth: what a plain copy of this size reaches");
    summary.set("bench." + r.name + ".same_size_copy_fraction_of_copy", gbps_same_size / copy_gbps);
    if (gbps_mix > 0) {
      file.write_scalar(k + "/read_bytes", r.read_bytes, "bytes", "bytes of the model read");
      file.write_scalar(k + "/write_bytes", r.write_bytes, "bytes", "bytes of the model written");
      file.write_scalar(k + "/same_mix_stream_fraction_of_copy", gbps_mix / copy_gbps, "1",
                        "GB/s of a plain stream moving the kernel's read and written bytes in the "
                        "same proportion and size (16-byte coalesced accesses, same timer), over "
                        "the copy bandwidth: the ceiling for this launch");
      file.write_scalar(k + "/fraction_of_same_mix_stream", gbps / gbps_mix, "1",
                        "the kernel's GB/s over that stream's");
      const double gbps_mix_memset = r.mix_bytes / (r.ms_mix_memset_flush * 1e-3) / 1e9;
      file.write_scalar(k + "/same_mix_stream_fraction_of_copy_memset_flush",
                        gbps_mix_memset / copy_gbps, "1",
                        "the same stream timed after a memset L2 flush (do_bench convention), "
                        "over the copy bandwidth");
      summary.set("bench." + r.name + ".same_mix_stream_fraction_of_copy_memset_flush",
                  gbps_mix_memset / copy_gbps);
      summary.set("bench." + r.name + ".same_mix_stream_fraction_of_copy", gbps_mix / copy_gbps);
      summary.set("bench." + r.name + ".fraction_of_same_mix_stream", gbps / gbps_mix);
    }
    if (!r.kernel.empty()) file.attr(k, "kernel", r.kernel);
    if (r.tokens > 0) {
      file.write_scalar(k + "/tokens_per_s", r.tokens / (r.ms * 1e-3), "tokens/s",
                        "sequence tokens processed per second");
      summary.set("bench." + r.name + ".tokens_per_s", r.tokens / (r.ms * 1e-3));
    }
  }
  if (!tensor_rows) return;
  file.write_scalar(g + "/mma_bf16_tflops", mma_tflops, "TFLOP/s",
                    "mma.sync m16n8k16 bf16 with fp32 accumulation from registers, full grid "
                    "(kernels/common/mma_peak.h): the ceiling of kernels built on it");
  summary.set("bench.mma_bf16.tflops", mma_tflops);
  fmt::print(
      "  tensor-core rows: FLOPs by the row's model, against the mma.sync bf16 peak of this "
      "run, {:.1f} TFLOP/s\n  {:<46} {:>10} {:>12} {:>10} {:>12}  {}\n",
      mma_tflops, "kernel", "time us", "tokens/s", "TFLOP/s", "of mma peak", "variant");
  for (const auto& r : rows) {
    if (!r.tensor_core) continue;
    const double tflops = r.flops / (r.ms * 1e-3) / 1e12;
    fmt::print("  {:<46} {:>10.1f} {:>12.4g} {:>10.1f} {:>11.1f}%  {}\n", r.name, r.ms * 1e3,
               r.tokens / (r.ms * 1e-3), tflops, 100 * tflops / mma_tflops, r.kernel);
    const std::string k = g + "/" + r.name;
    file.write_scalar(k + "/flops", r.flops, "FLOP", "FLOPs of the row's FLOP model");
    file.write_scalar(k + "/tflops", tflops, "TFLOP/s", "FLOP model / median time");
    file.write_scalar(k + "/fraction_of_mma_peak", tflops / mma_tflops, "1",
                      "TFLOP/s over the mma.sync bf16 peak of this run");
    summary.set("bench." + r.name + ".tflops", tflops);
    summary.set("bench." + r.name + ".fraction_of_mma_peak", tflops / mma_tflops);
  }
}

}  // namespace statecheck

#endif  // STATECHECK_HAVE_CUDA
