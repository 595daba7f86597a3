// store_strips_kernel (CheckpointKernel::store_strips): the int8 / fp8_e4m3 store on d_v 128 or
// 256, one block per strip of key columns of a head. Included by checkpoint_codec.cu only.
#pragma once

#include "kernels/codec/codec_common.cuh"
#include "kernels/codec/rounding.cuh"
#include "kernels/common/vector_io.cuh"

namespace statecheck::cuda {
namespace {

// COLS consecutive elements of an active row (fp32 or bf16) as fp32: 16-byte (fp32) or 8-byte
// (bf16) accesses of four elements (vector_io.cuh).
template <int COLS, typename ActiveT>
__device__ __forceinline__ void load_cols(const ActiveT* p, float* v) {
#pragma unroll
  for (int c = 0; c < COLS; c += 4) load_vec<4>(p + c, v + c);
}

// Store, int8 or fp8_e4m3 (K): one block per (part, layer, pair) in a 3-D grid (no index
// division), `part` being a (head, strip of 8 * COLS key columns) or a conv chunk. THREADS / 8 row
// groups: thread t holds columns COLS * (t % 8) .. + COLS - 1 of the strip for rows
// t / 8 + (THREADS / 8) r, r < ROWS, in registers (ROWS * THREADS / 8 == d_v exactly, no bounds
// checks). Column amax: own rows, then the lanes of the warp sharing the columns (shuffles), then
// the warps (shared memory); one thread per column forms the scale and its reciprocal once and
// publishes them. A strip containing a non-finite value writes nothing and records its position.
// Requires d_k % (8 * COLS) == 0.
template <typename ActiveT, typename ScaleT, Kind K, int THREADS, int ROWS, int COLS>
__global__ void __launch_bounds__(THREADS) store_strips_kernel(CodecParams p) {
  static_assert(K == Kind::int8 || K == Kind::fp8, "scaled codecs only");
  constexpr int kWarpsHere = THREADS / 32, kGroups = THREADS / 8, kStrip = 8 * COLS;
  constexpr float kCodeMax = K == Kind::int8 ? 127.0f : 448.0f;
  __shared__ __align__(16) float warp_amax[kWarpsHere][kStrip];  // read and written as float4
  __shared__ __align__(16) float col_scale[kStrip];
  __shared__ __align__(16) float col_inv[kStrip];
  __shared__ int worst;
  const int strips = p.dk / kStrip;
  const Job job = grid_job();
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV * strips) return conv_job(p, job, src_slot, dst_slot, p.HV * strips);
  const int h = job.part / strips;
  const int strip0 = (job.part - h * strips) * kStrip;
  const int c0 = COLS * (threadIdx.x & 7);  // first column of this thread within the strip
  const int j0 = strip0 + c0;
  const int row0 = threadIdx.x >> 3;
  const size_t head = static_cast<size_t>(p.dv) * p.dk;
  const ActiveT* src =
      reinterpret_cast<const ActiveT*>(p.src_temporal) +
      ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * head +
      static_cast<size_t>(row0) * p.dk + j0;
  int8_t* dst = reinterpret_cast<int8_t*>(p.dst_temporal) +
                ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * head +
                static_cast<size_t>(row0) * p.dk + j0;
  const int row_step = kGroups * p.dk;  // elements between a thread's rows
  if (threadIdx.x == 0) worst = -1;

  float x[ROWS][COLS];
  float m[COLS];
#pragma unroll
  for (int e = 0; e < COLS; ++e) m[e] = 0.0f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    load_cols<COLS>(src + r * row_step, x[r]);
#pragma unroll
    for (int e = 0; e < COLS; ++e) m[e] = max_nan(m[e], fabsf(x[r][e]));
  }
#pragma unroll
  for (int e = 0; e < COLS; ++e) {
    m[e] = max_nan(m[e], __shfl_xor_sync(0xFFFFFFFFu, m[e], 8));
    m[e] = max_nan(m[e], __shfl_xor_sync(0xFFFFFFFFu, m[e], 16));
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane < 8) {
#pragma unroll
    for (int e = 0; e < COLS; e += 4)
      *reinterpret_cast<float4*>(&warp_amax[warp][c0 + e]) =
          make_float4(m[e], m[e + 1], m[e + 2], m[e + 3]);
  }
  __syncthreads();
  bool finite = true;
  ScaleT sq{};
  if (threadIdx.x < kStrip) {  // one thread per column: the scale, once
    float c = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsHere; ++w) c = max_nan(c, warp_amax[w][threadIdx.x]);
    finite = isfinite(c);
    sq = from_float<ScaleT>(fmaxf(c, 1e-8f) / kCodeMax);
    col_scale[threadIdx.x] = to_float<ScaleT>(sq);
    col_inv[threadIdx.x] = 1.0f / col_scale[threadIdx.x];
  }
  if (!__syncthreads_and(finite)) {
    // Rare: name an offender (the host reports one) and refuse the strip.
    int first = -1;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < COLS; ++e)
        if (first < 0 && !isfinite(x[r][e])) first = (row0 + kGroups * r) * p.dk + j0 + e;
    report_non_finite(p, job.layer, h, first, worst);
    return;
  }
  if (threadIdx.x < kStrip)
    reinterpret_cast<ScaleT*>(
        p.dst_scales)[((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) *
                          p.dk +
                      strip0 + threadIdx.x] = sq;
  float s[COLS], inv[COLS];
  Fp8Bracket br[COLS];
  column_scales<COLS>(col_scale, col_inv, c0, s, inv, br);
  // Quantize row by row (encode_row: the exact quotient only where the cheap way cannot decide).
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    uint32_t q[COLS];
    encode_row<K, COLS>(x[r], s, inv, br, q);
    if constexpr (COLS == 8) {
      *reinterpret_cast<uint2*>(dst + r * row_step) = make_uint2(
          pack_low_bytes(q[0], q[1], q[2], q[3]), pack_low_bytes(q[4], q[5], q[6], q[7]));
    } else {
      *reinterpret_cast<uint32_t*>(dst + r * row_step) = pack_low_bytes(q[0], q[1], q[2], q[3]);
    }
  }
}

}  // namespace
}  // namespace statecheck::cuda
