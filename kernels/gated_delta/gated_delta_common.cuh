// Device pieces shared by the gated-delta pool kernels (gated_delta_pool.cu includes it and the
// kernel files, nothing else does): the launch parameters, and the rows8 layout's per-lane token
// inputs, token step and row loads / stores, used by rows8.cuh, decode_packed_bf16.cuh and
// decode_staged.cuh. Device pointers as in gated_delta_pool.h (q, k, v, o bf16; g, beta fp32;
// the pool in the state dtype); sizes in elements.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/common/vector_io.cuh"
#include "kernels/gated_delta/pool_params.h"

namespace statecheck::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block

using Params = PoolParams;  // pool_params.h

// Token inputs one lane needs, loaded one token ahead of their use (software pipelining).
template <int NCH, bool KDA, int RPL>
struct TokenRegs {
  float q[NCH * 4], k[NCH * 4], g[KDA ? NCH * 4 : 1], v[RPL], beta;
};

__device__ __forceinline__ void load_bf16x4(const __nv_bfloat16* p, float* out) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
}

// Sum over the 8 lanes that share a row (lanes differing in their low 3 bits).
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  return x;
}

// The inputs of token t that a lane of the rows8 layout (rows8.cuh) reads for value head h: its key
// columns c * 32 + sub * 4 + e of q and k (key head kh) and, for KDA, of g; v at its rows; beta.
template <int NCH, bool KDA, int RPL>
__device__ __forceinline__ void load_token(const Params& p, int t, int h, int kh, int sub,
                                           const int (&rows)[RPL], const bool (&row_ok)[RPL],
                                           TokenRegs<NCH, KDA, RPL>& r) {
  constexpr int dk = NCH * 32;
  const __nv_bfloat16* qt = p.q + (static_cast<size_t>(t) * p.H + kh) * dk;
  const __nv_bfloat16* kt = p.k + (static_cast<size_t>(t) * p.H + kh) * dk;
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    load_bf16x4(qt + c * 32 + sub * 4, &r.q[c * 4]);
    load_bf16x4(kt + c * 32 + sub * 4, &r.k[c * 4]);
  }
  if constexpr (KDA) {
    const float* gt = p.g + (static_cast<size_t>(t) * p.HV + h) * dk;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const float4 x = *reinterpret_cast<const float4*>(gt + c * 32 + sub * 4);
      r.g[c * 4] = x.x, r.g[c * 4 + 1] = x.y, r.g[c * 4 + 2] = x.z, r.g[c * 4 + 3] = x.w;
    }
  } else {
    r.g[0] = p.g[static_cast<size_t>(t) * p.HV + h];
  }
  const __nv_bfloat16* vt = p.v + (static_cast<size_t>(t) * p.HV + h) * p.dv;
#pragma unroll
  for (int i = 0; i < RPL; ++i) r.v[i] = row_ok[i] ? __bfloat162float(vt[rows[i]]) : 0.0f;
  r.beta = p.beta[static_cast<size_t>(t) * p.HV + h];
}

// The token-wide part of a step, in place in the token registers: q and k L2-normalised over
// the row's 8 lanes (if p.qk_l2norm) and scaled (q by p.scale), KDA's per-channel g replaced by
// exp(g). Returns GDN's decay exp(g) (0 for KDA). Shared by token_step and token_step_packed, so
// that both start from the same bits.
template <int NCH, bool KDA, int RPL>
__device__ __forceinline__ float prepare_token(const Params& p, TokenRegs<NCH, KDA, RPL>& cur) {
  constexpr int NCOL = NCH * 4;
  float qsum = 0.0f, ksum = 0.0f;
#pragma unroll
  for (int i = 0; i < NCOL; ++i) {
    qsum = __fmaf_rn(cur.q[i], cur.q[i], qsum);
    ksum = __fmaf_rn(cur.k[i], cur.k[i], ksum);
  }
  float qscale = p.scale, kscale = 1.0f;
  if (p.qk_l2norm) {
    qscale = p.scale / sqrtf(row_sum(qsum) + 1e-6f);
    kscale = 1.0f / sqrtf(row_sum(ksum) + 1e-6f);
  }
#pragma unroll
  for (int i = 0; i < NCOL; ++i) {
    cur.k[i] = __fmul_rn(cur.k[i], kscale);
    cur.q[i] = __fmul_rn(cur.q[i], qscale);
    if constexpr (KDA) cur.g[i] = expf(cur.g[i]);
  }
  return KDA ? 0.0f : expf(cur.g[0]);
}

// One token of the recurrence on a lane's RPL state rows s (rows8 layout): q and k normalised,
// decay, delta-rule write, readout. out[r] is row r's output, summed over the row's 8 lanes. The
// token registers are consumed (q, k and g are scaled in place). Every rounding is spelled out
// (__fmul_rn, __fmaf_rn: no contraction left to the compiler), so that the packed bf16 decode
// (token_step_packed) repeats it bit for bit.
template <int NCH, bool KDA, int RPL>
__device__ __forceinline__ void token_step(const Params& p, TokenRegs<NCH, KDA, RPL>& cur,
                                           float (&s)[RPL][NCH * 4], float (&out)[RPL]) {
  constexpr int NCOL = NCH * 4;
  const float a = prepare_token(p, cur);
  const float* kk = cur.k;
  const float* qq = cur.q;
  float part[RPL], w[RPL];
#pragma unroll
  for (int r = 0; r < RPL; ++r) {
    part[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      s[r][i] = __fmul_rn(s[r][i], KDA ? cur.g[KDA ? i : 0] : a);
      part[r] = __fmaf_rn(s[r][i], kk[i], part[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < RPL; ++r) w[r] = __fmul_rn(cur.beta, cur.v[r] - row_sum(part[r]));
#pragma unroll
  for (int r = 0; r < RPL; ++r) {
    out[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      s[r][i] = __fmaf_rn(w[r], kk[i], s[r][i]);
      out[r] = __fmaf_rn(s[r][i], qq[i], out[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < RPL; ++r) out[r] = row_sum(out[r]);
}

// Loads a lane's RPL state rows (rows8 layout: key columns c * 32 + sub * 4 + e) of a head whose
// rows of d_k = NCH * 32 elements start at `head`; rows that do not exist read as zeros.
template <int NCH, int RPL, typename StateT>
__device__ __forceinline__ void load_lane_rows(const StateT* head, const int (&rows)[RPL],
                                               const bool (&row_ok)[RPL], int sub,
                                               float (&s)[RPL][NCH * 4]) {
#pragma unroll
  for (int i = 0; i < RPL; ++i)
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      if (row_ok[i]) {
        load_vec<4>(head + static_cast<size_t>(rows[i]) * (NCH * 32) + c * 32 + sub * 4,
                    &s[i][c * 4]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[i][c * 4 + e] = 0.0f;
      }
    }
}

// Stores what load_lane_rows loaded (existing rows only), rounding to the state dtype.
template <int NCH, int RPL, typename StateT>
__device__ __forceinline__ void store_lane_rows(StateT* head, const int (&rows)[RPL],
                                                const bool (&row_ok)[RPL], int sub,
                                                const float (&s)[RPL][NCH * 4]) {
#pragma unroll
  for (int i = 0; i < RPL; ++i)
    if (row_ok[i])
#pragma unroll
      for (int c = 0; c < NCH; ++c)
        store_vec<4>(head + static_cast<size_t>(rows[i]) * (NCH * 32) + c * 32 + sub * 4,
                     &s[i][c * 4]);
}

// Writes token t's outputs of a lane's rows (lane sub == 0 of each row) as bf16, if o is wanted.
template <int RPL>
__device__ __forceinline__ void store_outputs(const Params& p, int t, int h, int sub,
                                              const int (&rows)[RPL], const bool (&row_ok)[RPL],
                                              const float (&out)[RPL]) {
  if (!p.o || sub != 0) return;
  __nv_bfloat16* ot = p.o + (static_cast<size_t>(t) * p.HV + h) * p.dv;
#pragma unroll
  for (int r = 0; r < RPL; ++r)
    if (row_ok[r]) ot[rows[r]] = __float2bfloat16_rn(out[r]);
}

}  // namespace
}  // namespace statecheck::cuda
