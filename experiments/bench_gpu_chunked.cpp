// The chunked prefill rows of `statecheck bench --device cuda` (bench_gpu_rows.h).
#ifdef STATECHECK_HAVE_CUDA

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "experiments/bench_gpu_rows.h"
#include "kernels/chunked_delta/chunked_prefill.h"
#include "kernels/common/device.h"
#include "kernels/host/layer_upload.h"

namespace statecheck::bench_rows {

using namespace statecheck::cuda;

namespace {

// Relative Frobenius difference of two device arrays (bf16 bits or fp32), downloaded.
template <typename T>
double rel_frobenius(const DeviceBuffer<T>& x, const DeviceBuffer<T>& ref) {
  const std::vector<T> a = x.download(), b = ref.download();
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double u, v;
    if constexpr (sizeof(T) == 2)
      u = float_from_bf16_bits(a[i]), v = float_from_bf16_bits(b[i]);
    else
      u = a[i], v = b[i];
    if (!std::isfinite(u)) return INFINITY;
    d += (u - v) * (u - v), n += v * v;
  }
  return std::sqrt(d / n);
}

}  // namespace

void bench_chunked_prefill(const Options& o, GpuTimer& timer, std::vector<Row>& rows, int repeats) {
  const int dk = 128, dv = 128;
  const std::vector<std::pair<int, int>> shapes =
      o.quick ? std::vector<std::pair<int, int>>{{16, 64}, {2, 512}}
              : std::vector<std::pair<int, int>>{{64, 256}, {8, 4096}, {1, 32768}};
  int most_tokens = 0;
  for (const auto& [B, T] : shapes) most_tokens = std::max(most_tokens, B * T);
  const double tol16 = 4.0 * std::ldexp(1.0, -8);
  for (const DecodeShape& sh : {DecodeShape{"gdn_H16_HV32", 16, 32, GateKind::gdn},
                                DecodeShape{"kda_H32_HV32", 32, 32, GateKind::kda}}) {
    RecurrenceShape rs;
    rs.H = sh.H, rs.HV = sh.HV, rs.dk = dk, rs.dv = dv, rs.gate = sh.gate;
    // One set of drive inputs per gate, long enough for every shape (each takes a prefix).
    const DeviceLayerInputs d_in = upload_layer_inputs(
        rs, synthetic_inputs(sh.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda,
                             rs, mix_seed(o.seed, 21), 0, most_tokens));
    for (const auto& [B, T] : shapes) {
      const int64_t slots = B + 1;
      const size_t slot_elems = static_cast<size_t>(sh.HV) * dv * dk;
      std::vector<float> pool(slots * slot_elems);
      Rng rng(mix_seed(o.seed, 23));
      for (auto& x : pool) x = static_cast<float>(0.06 * rng.normal());
      DeviceBuffer<float> d_chunk, d_fused, d_rec;
      d_chunk.upload(pool), d_fused.upload(pool), d_rec.upload(pool);
      std::vector<int32_t> cu(B + 1);
      for (int b = 0; b <= B; ++b) cu[b] = b * T;
      DeviceBuffer<int32_t> d_ids = to_device(distinct_slots(B, slots, mix_seed(o.seed, 25)));
      DeviceBuffer<int32_t> d_cu = to_device(cu);
      const size_t outs = static_cast<size_t>(B) * T * sh.HV * dv;
      DeviceBuffer<uint16_t> o_chunk(outs), o_fused(outs), o_rec(outs);
      o_chunk.fill_bytes(0xFF), o_fused.fill_bytes(0xFF), o_rec.fill_bytes(0xFF);
      GatedDeltaPoolArgs ac = pool_args(rs, Dtype::fp32, d_chunk.data(), slots, d_in, 0, B,
                                        d_ids.data(), d_cu.data(), o_chunk.data(), T);
      GatedDeltaPoolArgs af = pool_args(rs, Dtype::fp32, d_fused.data(), slots, d_in, 0, B,
                                        d_ids.data(), d_cu.data(), o_fused.data(), T);
      GatedDeltaPoolArgs ar = pool_args(rs, Dtype::fp32, d_rec.data(), slots, d_in, 0, B,
                                        d_ids.data(), d_cu.data(), o_rec.data(), T);
      // The split form (the default when the host knows the token count), with its workspace
      // allocated here, outside the timed region; the fused form beside it.
      ChunkedPrefillOptions split;
      split.total_tokens = cu.back();
      DeviceBuffer<uint8_t> workspace(chunked_prefill_workspace_bytes(ac, split.total_tokens));
      split.workspace = workspace.data(), split.workspace_bytes = workspace.bytes();
      ChunkedPrefillOptions fused;
      fused.form = ChunkedForm::fused;
      chunked_prefill_pool(ac, split);
      chunked_prefill_pool(af, fused);
      gated_delta_pool(ar);
      STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
      if (o_chunk.download() != o_fused.download() || d_chunk.download() != d_fused.download())
        fail(
            "bench: chunked prefill {} B {} T {}: the split and fused forms differ (they agree "
            "bit for bit by construction): no speed reported",
            sh.name, B, T);
      const double err_o = rel_frobenius(o_chunk, o_rec), err_s = rel_frobenius(d_chunk, d_rec);
      if (!(err_o <= tol16 && err_s <= tol16))
        fail(
            "bench: chunked prefill {} B {} T {} differs from the recurrent kernel (outputs "
            "{:.3g}, "
            "states {:.3g}, tol16 {:.3g}): no speed reported",
            sh.name, B, T, err_o, err_s, tol16);
      fmt::print(
          "  chunked prefill {} B {} T {}: against the recurrent kernel, outputs {:.3g}, "
          "states {:.3g} (tol16 {:.3g}); split and fused forms bit for bit equal\n",
          sh.name, B, T, err_o, err_s, tol16);
      const std::string suffix = fmt::format("{}_fp32_state_B{}_T{}", sh.name, B, T);
      const double tokens = static_cast<double>(B) * T;
      // Rows: the split form at its chosen value tile and at the other, the fused form at its own.
      auto with_tile = [](ChunkedPrefillOptions opt, int tile) {
        opt.value_tile = tile;
        return opt;
      };
      const int chosen = chunked_prefill_value_tile(ac, split), other = chosen == 64 ? 32 : 64;
      const std::pair<ChunkedPrefillOptions, std::string> runs[] = {
          {with_tile(split, chosen), ""},
          {with_tile(split, other), fmt::format("_vt{}", other)},
          {with_tile(fused, chunked_prefill_value_tile(ac, fused)), "_fused"}};
      for (const auto& [opt, tag] : runs) {
        Row r{"prefill_chunked_" + suffix + tag};
        r.set_times(timer.time([&](cudaStream_t s) { chunked_prefill_pool(ac, opt, s); }, repeats));
        r.kernel = fmt::format("chunked_{}_value_tile{}",
                               opt.form == ChunkedForm::fused ? "fused" : "split", opt.value_tile);
        r.bytes = gated_delta_pool_bytes(ac, B * static_cast<int64_t>(T));
        r.flops = chunked_prefill_flops(ac, cu);
        r.tokens = tokens;
        r.tensor_core = true;
        rows.push_back(r);
      }
      Row r{"prefill_recurrent_" + suffix};
      r.set_times(timer.time([&](cudaStream_t s) { gated_delta_pool(ar, s); }, repeats));
      r.kernel = gated_delta_kernel_name(gated_delta_pool_variant(ar));
      r.bytes = gated_delta_pool_bytes(ar, B * static_cast<int64_t>(T));
      r.flops = gated_delta_pool_flops(ar, B * static_cast<int64_t>(T));
      r.tokens = tokens;
      rows.push_back(r);
    }
  }
}

}  // namespace statecheck::bench_rows

#endif  // STATECHECK_HAVE_CUDA
