// gated_delta_general_kernel (GatedDeltaKernel::general): the gated delta rule for any d_k up to
// 256, a warp per 8 state rows, warp-wide sums. Included by gated_delta_pool.cu only.
#pragma once

#include "kernels/gated_delta/gated_delta_common.cuh"

namespace statecheck::cuda {
namespace {

constexpr int kRowsPerWarp = 8;  // state rows (value channels) each warp keeps in registers
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Grid (num_seqs, HV, ceil(d_v / 32)), block 128 threads. Each warp owns 8 state rows of one
// (sequence, value head) and keeps them in registers over all of the sequence's tokens; lane l
// owns key columns (c * 32 + l) * VEC + e. Row dot products (u = S k, o = S q) are warp sums.
template <int VEC, int NCHUNK, bool KDA, typename StateT>
__global__ void __launch_bounds__(kWarps * 32) gated_delta_general_kernel(Params p) {
  constexpr int NCOL = VEC * NCHUNK;
  const int seq = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = (blockIdx.z * kWarps + warp) * kRowsPerWarp;
  if (row0 >= p.dv) return;  // whole warp idle; the kernel uses no block-wide barrier
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;  // no token: the state is left as it is, bits and all (NaN payloads too)
  const int dk = p.dk, dv = p.dv;
  const int kh = h / (p.HV / p.H);
  const int slot = p.slot_ids[seq];
  StateT* S = reinterpret_cast<StateT*>(p.pool) + (static_cast<size_t>(slot) * p.HV + h) * dv * dk;

  int col[NCHUNK];
  bool col_ok[NCHUNK];
#pragma unroll
  for (int c = 0; c < NCHUNK; ++c) {
    col[c] = (c * 32 + lane) * VEC;
    col_ok[c] = col[c] < dk;  // VEC divides d_k, so a vector is wholly in or out
  }

  float s[kRowsPerWarp][NCOL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c) {
      if (row < dv && col_ok[c]) {
        load_vec<VEC>(S + static_cast<size_t>(row) * dk + col[c], &s[r][c * VEC]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[r][c * VEC + e] = 0.0f;
      }
    }
  }

  for (int t = t0; t < t1; ++t) {
    float kk[NCOL], qq[NCOL], dec[NCOL];
    const __nv_bfloat16* qt = p.q + (static_cast<size_t>(t) * p.H + kh) * dk;
    const __nv_bfloat16* kt = p.k + (static_cast<size_t>(t) * p.H + kh) * dk;
    float qsum = 0.0f, ksum = 0.0f;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int j = col[c] + e;
        const float qv = col_ok[c] ? __bfloat162float(qt[j]) : 0.0f;
        const float kv = col_ok[c] ? __bfloat162float(kt[j]) : 0.0f;
        qq[c * VEC + e] = qv;
        kk[c * VEC + e] = kv;
        qsum += qv * qv;
        ksum += kv * kv;
      }
    float qscale = p.scale, kscale = 1.0f;
    if (p.qk_l2norm) {
      qscale = p.scale / sqrtf(warp_sum(qsum) + 1e-6f);
      kscale = 1.0f / sqrtf(warp_sum(ksum) + 1e-6f);
    }
    if constexpr (KDA) {
      const float* gt = p.g + (static_cast<size_t>(t) * p.HV + h) * dk;
#pragma unroll
      for (int c = 0; c < NCHUNK; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) dec[c * VEC + e] = col_ok[c] ? expf(gt[col[c] + e]) : 0.0f;
    } else {
      const float a = expf(p.g[static_cast<size_t>(t) * p.HV + h]);
#pragma unroll
      for (int i = 0; i < NCOL; ++i) dec[i] = a;
    }
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      qq[i] *= qscale;
      kk[i] *= kscale;
    }
    const float beta = p.beta[static_cast<size_t>(t) * p.HV + h];
    const __nv_bfloat16* vt = p.v + (static_cast<size_t>(t) * p.HV + h) * dv;
    __nv_bfloat16* ot = p.o ? p.o + (static_cast<size_t>(t) * p.HV + h) * dv : nullptr;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = row0 + r;
      if (row >= dv) break;  // uniform across the warp
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < NCOL; ++i) {
        s[r][i] *= dec[i];
        part += s[r][i] * kk[i];
      }
      const float u = warp_sum(part);
      const float w = beta * (__bfloat162float(vt[row]) - u);
      float out = 0.0f;
#pragma unroll
      for (int i = 0; i < NCOL; ++i) {
        s[r][i] += w * kk[i];
        out += s[r][i] * qq[i];
      }
      out = warp_sum(out);
      if (ot && lane == r) ot[row] = __float2bfloat16_rn(out);
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
    if (row >= dv) break;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c)
      if (col_ok[c]) store_vec<VEC>(S + static_cast<size_t>(row) * dk + col[c], &s[r][c * VEC]);
  }
}

}  // namespace
}  // namespace statecheck::cuda
