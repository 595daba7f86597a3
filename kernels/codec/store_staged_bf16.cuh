// store_staged_bf16_kernel (CheckpointKernel::store_staged_bf16): the int8 / fp8_e4m3 store of
// bf16 active states with 128 x 128 heads, each head staged in shared memory by one bulk copy.
// Included by checkpoint_codec.cu only.
#pragma once

#include "kernels/codec/codec_common.cuh"
#include "kernels/codec/rounding.cuh"
#include "kernels/common/bulk_copy.cuh"

namespace statecheck::cuda {
namespace {

// Eight consecutive bf16 values (one 16-byte word) as fp32, exactly.
__device__ __forceinline__ void bf16x8_to_float(const uint4& w, float* v) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}

// Running |x| maximum of four bf16 pairs (NaN wins, as max_nan; the maximum of bf16 values is
// exact in bf16).
__device__ __forceinline__ void amax_bf16x8(const uint4& w, __nv_bfloat162* m) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t a = words[i] & 0x7FFF7FFFu;  // |x| of both halves
    m[i] = __hmax2_nan(m[i], *reinterpret_cast<const __nv_bfloat162*>(&a));
  }
}

// Store of bf16 active states with 128 x 128 heads (the serving shape), int8 or fp8_e4m3 (K):
// one 128-thread block per (part, layer, pair) of a 3-D grid, part being a head or a conv chunk.
// One bulk copy brings the head's 32 KB into shared memory, so the loads are in flight without
// registers or per-element load instructions, and the block's fixed costs (indices, scales,
// barriers) are paid once per head. Thread t owns key columns 8 (t % 16) .. + 7 and rows t / 16 +
// 8 r (r < 16). Column amax on bf16 pairs, then lanes t and t ^ 16 (shuffle), then the 4 warps
// (shared memory); one thread per column forms the scale; then each thread quantizes its rows
// from shared memory and writes 8 codes per row (two rows per warp write: 256 contiguous bytes).
// Same results as store_strips_kernel, which serves the other bf16 shapes.
template <typename ScaleT, Kind K>
__global__ void __launch_bounds__(kFastThreads) store_staged_bf16_kernel(CodecParams p) {
  static_assert(K == Kind::int8 || K == Kind::fp8, "scaled codecs only");
  constexpr int kDim = 128, kRowGroups = kFastThreads / 16, kRows = kDim / kRowGroups;
  static_assert(kFastThreads == kDim, "one thread per key column forms the scales");
  constexpr float kCodeMax = K == Kind::int8 ? 127.0f : 448.0f;
  __shared__ __align__(128) uint4 tile[kDim * kDim / 8];  // the head, row i at tile[16 i ..]
  __shared__ __align__(16) uint32_t warp_amax[kFastThreads / 32][kDim / 2];  // bf16 pairs
  __shared__ __align__(16) float col_scale[kDim];
  __shared__ __align__(16) float col_inv[kDim];
  __shared__ uint64_t bar;
  __shared__ int worst;
  const Job job = grid_job();
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV) return conv_job(p, job, src_slot, dst_slot, p.HV);
  const int h = job.part;
  constexpr size_t kHead = static_cast<size_t>(kDim) * kDim;
  if (threadIdx.x == 0) {
    worst = -1;
    init_copy_barrier(&bar);
  }
  __syncthreads();
  if (threadIdx.x == 0)
    bulk_copy_to_shared(
        tile,
        reinterpret_cast<const __nv_bfloat16*>(p.src_temporal) +
            ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * kHead,
        kHead * 2, &bar);
  const int cg = threadIdx.x & 15, rg = threadIdx.x >> 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  wait_copy_barrier(&bar, 0);

  __nv_bfloat162 m[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] = __float2bfloat162_rn(0.0f);
#pragma unroll
  for (int r = 0; r < kRows; ++r) amax_bf16x8(tile[(rg + kRowGroups * r) * 16 + cg], m);
  uint32_t mw[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    mw[i] = *reinterpret_cast<const uint32_t*>(&m[i]);
    const uint32_t other = __shfl_xor_sync(0xFFFFFFFFu, mw[i], 16);
    const __nv_bfloat162 both = __hmax2_nan(m[i], *reinterpret_cast<const __nv_bfloat162*>(&other));
    mw[i] = *reinterpret_cast<const uint32_t*>(&both);
  }
  if (lane < 16)
    *reinterpret_cast<uint4*>(&warp_amax[warp][4 * cg]) = make_uint4(mw[0], mw[1], mw[2], mw[3]);
  __syncthreads();
  // One thread per column: the scale, once.
  const int col = threadIdx.x;
  float c = 0.0f;
#pragma unroll
  for (int w = 0; w < kFastThreads / 32; ++w)
    c = max_nan(c, __uint_as_float(((warp_amax[w][col >> 1] >> (16 * (col & 1))) & 0xFFFFu) << 16));
  const bool finite = isfinite(c);
  const ScaleT sq = from_float<ScaleT>(fmaxf(c, 1e-8f) / kCodeMax);
  col_scale[col] = to_float<ScaleT>(sq);
  col_inv[col] = 1.0f / col_scale[col];
  if (!__syncthreads_and(finite)) {
    // Rare: name an offender (the host reports one) and refuse the head.
    int first = -1;
    for (int r = 0; r < kRows && first < 0; ++r) {
      float v[8];
      bf16x8_to_float(tile[(rg + kRowGroups * r) * 16 + cg], v);
      for (int e = 0; e < 8; ++e)
        if (first < 0 && !isfinite(v[e])) first = (rg + kRowGroups * r) * kDim + 8 * cg + e;
    }
    report_non_finite(p, job.layer, h, first, worst);
    return;
  }
  reinterpret_cast<ScaleT*>(
      p.dst_scales)[((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * kDim +
                    col] = sq;
  float s[8], inv[8];
  Fp8Bracket br[8];
  column_scales<8>(col_scale, col_inv, 8 * cg, s, inv, br);
  int8_t* dst = reinterpret_cast<int8_t*>(p.dst_temporal) +
                ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * kHead +
                static_cast<size_t>(rg) * kDim + 8 * cg;
  // Quantize row by row (encode_row: the exact quotient only where the cheap way cannot decide).
#pragma unroll 4
  for (int r = 0; r < kRows; ++r) {
    float x[8];
    bf16x8_to_float(tile[(rg + kRowGroups * r) * 16 + cg], x);
    uint32_t q[8];
    encode_row<K, 8>(x, s, inv, br, q);
    *reinterpret_cast<uint2*>(dst + static_cast<size_t>(r) * kRowGroups * kDim) =
        make_uint2(pack_low_bytes(q[0], q[1], q[2], q[3]), pack_low_bytes(q[4], q[5], q[6], q[7]));
  }
}

}  // namespace
}  // namespace statecheck::cuda
