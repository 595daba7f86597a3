// The CUDA half of `capacity --device cuda`: what a cache hit and a miss cost on the GPU, with the
// state pools in device memory and the project's kernels doing the work.
//
// For each sweep point (mode, K) the PROBE requests are replayed with the hit lengths the cache
// model decided (`cached_tokens`): a hit is served by copy-on-write from the checkpoint pool
// (int8: checkpoint_load dequantizes into the request's active slot; bf16 single pool: a slot
// copy from the cached slot) and the recurrence over the uncached suffix, all linear layers; a miss
// recomputes the recurrence over the whole prompt, all linear layers (gated_delta_pool, recurrent
// prefill from the request's slot). The donate of a finished request (checkpoint_store) is timed as
// well. Pools have the model's real per-slot shape ([L, slots, HV, d_v, d_k] in the temporal
// dtype; int8 checkpoint values + scales; bf16 conv windows). Only the linear-attention state work
// is timed (no projections, MLP or full attention), with the project's recurrent prefill kernel
// (a chunked prefill kernel would make misses cheaper; the hit's copy-on-write is exact either
// way). Latency: CUDA events around each probe, launched alone; throughput: the sampled probes in
// batches of `parallel` (one varlen launch per layer), probes per second.
#ifdef STATECHECK_HAVE_CUDA

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "experiments/capacity_cuda.h"
#include "kernels/codec/checkpoint_codec.h"
#include "kernels/common/device.h"
#include "kernels/gated_delta/gated_delta_pool.h"

namespace statecheck {

using namespace statecheck::cuda;

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double idx = p * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

std::vector<uint16_t> bits(const std::vector<float>& a) {
  std::vector<uint16_t> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = bf16_bits_from_float(a[i]);
  return r;
}

}  // namespace

void run_capacity_cuda(const Options& o, const ModelConfig& m,
                       const std::vector<CapacityProbes>& points, H5Writer& file,
                       Summary& summary) {
  const RecurrenceShape rs = recurrence_shape(m);
  PoolGeometry geo;
  geo.L = m.linear_layer_count(), geo.HV = rs.HV, geo.dv = rs.dv, geo.dk = rs.dk;
  geo.conv_elems = static_cast<int64_t>(m.conv_dim_shard()) * (m.conv_width - 1);
  const Dtype adt = o.temporal_dtype;
  const int parallel = 8,
            slots = parallel + 2;  // 0 reserved, 1..8 requests, 9 the cached bf16 state
  const size_t slot_elems = static_cast<size_t>(geo.HV) * geo.dv * geo.dk;
  const size_t layer_elems = slot_elems * slots;
  const Codec int8 = parse_codec("int8", o.scale_dtype_or_default());
  const Codec copy = parse_codec(adt == Dtype::fp32 ? "fp32" : "bf16");

  DeviceBuffer<uint8_t> active(static_cast<size_t>(geo.L) * layer_elems * dtype_bytes(adt));
  STATECHECK_CUDA_CHECK(cudaMemset(active.data(), 0, active.bytes()));
  DeviceBuffer<uint16_t> active_conv(static_cast<size_t>(geo.L) * slots * geo.conv_elems);
  DeviceBuffer<uint8_t> ck_values(static_cast<size_t>(geo.L) * 2 * slot_elems),
      ck_scales(static_cast<size_t>(geo.L) * 2 * geo.HV * geo.dk * int8.scale_bytes());
  DeviceBuffer<uint16_t> ck_conv(static_cast<size_t>(geo.L) * 2 * geo.conv_elems);
  StatePoolView av{active.data(), nullptr, active_conv.data(), slots};
  StatePoolView cv{ck_values.data(), ck_scales.data(), ck_conv.data(), 2};

  // Token inputs: one synthetic stream long enough for `parallel` of the longest prompt.
  int64_t max_prompt = 1;
  for (const auto& pt : points)
    for (const auto& r : pt.probes) max_prompt = std::max(max_prompt, r.prompt_len);
  const int64_t T_all = max_prompt * parallel;
  const DriveKind dk = m.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::init_kda;
  const LayerInputs in = synthetic_inputs(dk, rs, o.seed, 0, static_cast<int>(T_all));
  DeviceBuffer<uint16_t> q = to_device(bits(in.q)), k = to_device(bits(in.k)),
                         v = to_device(bits(in.v));
  DeviceBuffer<float> g = to_device(in.g), beta = to_device(in.beta);

  // Prefill the cached state once and donate it (timed), so hits restore real numbers.
  std::vector<int32_t> ids_host(parallel);
  for (int i = 0; i < parallel; ++i) ids_host[i] = i + 1;
  DeviceBuffer<int32_t> ids = to_device(ids_host), one = to_device(std::vector<int32_t>{1}),
                        cached_slot = to_device(std::vector<int32_t>{9});
  DeviceBuffer<int32_t> cu(parallel + 1);
  cudaStream_t stream = nullptr;
  cudaEvent_t e0, e1;
  STATECHECK_CUDA_CHECK(cudaEventCreate(&e0));
  STATECHECK_CUDA_CHECK(cudaEventCreate(&e1));

  auto prefill = [&](const std::vector<int64_t>& lens, const int32_t* slot_ids) {
    std::vector<int32_t> cu_host(lens.size() + 1, 0);
    int64_t longest = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      cu_host[i + 1] = cu_host[i] + static_cast<int32_t>(lens[i]);
      longest = std::max(longest, lens[i]);
    }
    if (cu_host.back() == 0) return;
    STATECHECK_CUDA_CHECK(cudaMemcpyAsync(cu.data(), cu_host.data(), cu_host.size() * 4,
                                          cudaMemcpyHostToDevice, stream));
    for (int l = 0; l < geo.L; ++l) {
      GatedDeltaPoolArgs a;
      a.num_seqs = static_cast<int>(lens.size()), a.H = rs.H, a.HV = rs.HV, a.dk = rs.dk,
      a.dv = rs.dv;
      a.gate = rs.gate, a.state_dtype = adt, a.pool_slots = slots,
      a.max_seq_len = static_cast<int>(longest);
      a.state_pool = active.data() + static_cast<size_t>(l) * layer_elems * dtype_bytes(adt);
      a.slot_ids = slot_ids, a.cu_seqlens = cu.data(), a.q = q.data(), a.k = k.data(),
      a.v = v.data();
      a.g = g.data(), a.beta = beta.data();
      gated_delta_pool(a, stream);
    }
  };
  auto elapsed_ms = [&] {
    float ms = 0;
    STATECHECK_CUDA_CHECK(cudaEventSynchronize(e1));
    STATECHECK_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms);
  };

  prefill({max_prompt}, cached_slot.data());
  checkpoint_store(geo, av, adt, cv, int8, cached_slot.data(), one.data(), 1, nullptr,
                   stream);  // warm-up
  std::vector<double> donate_ms;
  for (int r = 0; r < 5; ++r) {
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0, stream));
    checkpoint_store(geo, av, adt, cv, int8, cached_slot.data(), one.data(), 1, nullptr, stream);
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1, stream));
    donate_ms.push_back(elapsed_ms());
  }

  const std::string gname = "capacity/cuda";
  file.group(gname);
  file.attr(gname, "device", device_description());
  file.attr(gname, "work",
            std::string("linear-attention state work only: copy-on-write + recurrent prefill of "
                        "the uncached tokens, all linear layers, project kernels"));
  file.write_scalar(gname + "/donate_ms", percentile(donate_ms, 0.5), "ms",
                    "median time of one int8 donate (checkpoint_store of one slot, all layers)");
  summary.set("capacity.cuda.donate_ms", percentile(donate_ms, 0.5));
  std::vector<double> all_hits, all_misses;
  const size_t max_samples = o.quick ? 16 : 64;
  fmt::print("capacity (cuda): {}\n  {:>5} {:>5} {:>7} {:>9} {:>9} {:>9} {:>12}\n",
             device_description(), "mode", "K", "probes", "p50 ms", "p90 ms", "p99 ms", "probes/s");
  for (const auto& pt : points) {
    // An even sample of the PROBE pass.
    std::vector<RequestRecord> sample;
    const size_t n = pt.probes.size(), take = std::min(n, max_samples);
    for (size_t i = 0; i < take; ++i) sample.push_back(pt.probes[i * n / take]);
    std::vector<double> lat, hit_lat, miss_lat;
    for (const auto& r : sample) {
      STATECHECK_CUDA_CHECK(cudaEventRecord(e0, stream));
      if (r.cached_tokens > 0) {
        if (pt.mode == "int8")
          checkpoint_load(geo, cv, int8, av, adt, one.data(), one.data(), 1, stream);
        else
          checkpoint_load(geo, av, copy, av, adt, cached_slot.data(), one.data(), 1, stream);
      }
      prefill({r.prompt_len - r.cached_tokens}, one.data());
      STATECHECK_CUDA_CHECK(cudaEventRecord(e1, stream));
      const double ms = elapsed_ms();
      lat.push_back(ms);
      (r.cached_tokens > 0 ? hit_lat : miss_lat).push_back(ms);
    }
    // Throughput: batches of `parallel` probes, one varlen launch per layer.
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0, stream));
    for (size_t b = 0; b < sample.size(); b += parallel) {
      std::vector<int64_t> lens;
      std::vector<int32_t> hit_slots;
      for (size_t i = b; i < std::min(sample.size(), b + parallel); ++i) {
        lens.push_back(sample[i].prompt_len - sample[i].cached_tokens);
        if (sample[i].cached_tokens > 0) hit_slots.push_back(static_cast<int32_t>(i - b + 1));
      }
      if (!hit_slots.empty()) {
        DeviceBuffer<int32_t> dst = to_device(hit_slots);
        std::vector<int32_t> src_host(hit_slots.size(), pt.mode == "int8" ? 1 : 9);
        DeviceBuffer<int32_t> src = to_device(src_host);
        const int nh = static_cast<int>(hit_slots.size());
        if (pt.mode == "int8")
          checkpoint_load(geo, cv, int8, av, adt, src.data(), dst.data(), nh, stream);
        else
          checkpoint_load(geo, av, copy, av, adt, src.data(), dst.data(), nh, stream);
      }
      prefill(lens, ids.data());
    }
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1, stream));
    const double total_ms = elapsed_ms();
    const double rps = sample.size() / (total_ms * 1e-3);
    all_hits.insert(all_hits.end(), hit_lat.begin(), hit_lat.end());
    all_misses.insert(all_misses.end(), miss_lat.begin(), miss_lat.end());
    const std::string key = fmt::format("capacity.cuda.{}.K{}", pt.mode, pt.K);
    const std::string pg = fmt::format("{}/{}/K{}", gname, pt.mode, pt.K);
    file.write(pg + "/probe_latency_ms", lat, {lat.size()}, "ms",
               "per sampled PROBE request, launched alone");
    file.write_scalar(pg + "/throughput_rps", rps, "requests/s", "sampled probes in batches of 8");
    file.write_scalar(pg + "/hit_fraction",
                      sample.empty() ? 0.0 : double(hit_lat.size()) / sample.size(), "1",
                      "share of the sampled probes served from the cache");
    for (const auto& [name, p] :
         {std::pair<const char*, double>{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}}) {
      summary.set(key + ".probe_" + name + "_ms", percentile(lat, p));
      file.write_scalar(pg + "/probe_" + name + "_ms", percentile(lat, p), "ms",
                        "latency percentile of the probes");
    }
    summary.set(key + ".throughput_rps", rps);
    fmt::print("  {:>5} {:>5} {:>7} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.1f}\n", pt.mode, pt.K,
               sample.size(), percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99),
               rps);
  }
  const double hit = percentile(all_hits, 0.5), miss = percentile(all_misses, 0.5);
  summary.set("capacity.cuda.hit_p50_ms", hit);
  summary.set("capacity.cuda.miss_p50_ms", miss);
  summary.set("capacity.cuda.miss_over_hit", hit > 0 ? miss / hit : std::nan(""));
  file.write_scalar(gname + "/hit_p50_ms", hit, "ms",
                    "median latency of a probe served from the cache");
  file.write_scalar(gname + "/miss_p50_ms", miss, "ms",
                    "median latency of a probe recomputed from scratch");
  fmt::print("  hit p50 {:.3f} ms, miss p50 {:.3f} ms (x{:.1f}), donate {:.3f} ms\n", hit, miss,
             miss / hit, percentile(donate_ms, 0.5));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace statecheck

#endif  // STATECHECK_HAVE_CUDA
