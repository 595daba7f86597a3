// The single-token working-state decode kernel of fp8_e4m3 (ws_decode.cu, its only includer; int8
// has its own, ws_decode_token_int8.cuh): one launch of ws_decode in which no sequence has more
// than one token (WsDecodeArgs::max_tokens = 1), for fp8_e4m3 rounded to nearest even at d_k = 128
// without init_state. It computes the same bits as ws_decode_kernel (the same lane layout, the
// same fp32 operations in the same order, ws_decode_reference.h), with less work per element where
// the general kernel repeats itself:
//   - q and k are normalised once per block, by the 16 lanes that would each compute the same
//     sums in the general kernel (8 lanes per vector, the same butterfly), and the gates'
//     exponentials once per key channel; every thread reads them from shared memory;
//   - the column amax goes to shared memory as each thread's 4-row maxima, and 8 lanes per 4
//     columns reduce the 32 row groups (max is exact in any order), in place of two rounds of
//     shuffles per column in every thread;
//   - no token loop: the stored state is decoded once and encoded once.
// Layout: one block of 256 threads per (sequence, value head); 8 lanes per state row, lane `sub`
// owning key channels 16 sub .. 16 sub + 15; thread (row group rg, sub) holds rows rg + 32 r,
// r < 4 (rows from d_v up are absent and tested unless FULL, d_v = 128). Errors as ws_decode.h
// states: a sequence with more than one token {2, sequence, value head, its tokens}, non-finite
// values {1, sequence, value head, 0}; either leaves the slot as it was.
#pragma once

#include <cstdint>

#include "kernels/codec/rounding.cuh"
#include "kernels/working_state/ws_decode_chunks.cuh"
#include "kernels/working_state/ws_step_math.h"

namespace statecheck::cuda {
namespace {

constexpr int kTokenDk = 128;
constexpr int kTokenThreads = 256;
constexpr int kAmaxStride = 132;  // floats per row group's maxima: 4 banks apart, no conflicts

// Encodes the 16 elements x of one row chunk starting at key channel j0 with the reciprocal
// scales inv; the scales themselves are read from `col_scale` (at column_slot) only for a chunk
// the cheap way cannot decide, which is then encoded by the division as the element codecs do.
template <Store ST>
__device__ __forceinline__ void encode_token_chunk(const float (&x)[16], const float (&inv)[16],
                                                   const float* col_scale, int j0,
                                                   uint32_t (&w)[4]) {
  static_assert(ST == Store::fp8, "the int8 format has its own kernel");
  {
    uint32_t q[16];
    bool undecided = false;
#pragma unroll
    for (int e = 0; e < 16; e += 2) {
      const uint32_t two =
          fp8_codes2(x[e], x[e + 1], fp8_bracket(inv[e]), fp8_bracket(inv[e + 1]), undecided);
      q[e] = two, q[e + 1] = two >> 8;
    }
    if (__builtin_expect(undecided, 0)) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 s = *reinterpret_cast<const float4*>(col_scale + column_slot<16>(j0 + 4 * c));
        q[4 * c] = fp8_encode(__fdiv_rn(x[4 * c], s.x));
        q[4 * c + 1] = fp8_encode(__fdiv_rn(x[4 * c + 1], s.y));
        q[4 * c + 2] = fp8_encode(__fdiv_rn(x[4 * c + 2], s.z));
        q[4 * c + 3] = fp8_encode(__fdiv_rn(x[4 * c + 3], s.w));
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) w[c] = pack4(q[4 * c], q[4 * c + 1], q[4 * c + 2], q[4 * c + 3]);
  }
}

// Grid (num_seqs, HV), kTokenThreads threads. ST: fp8 (round to nearest even); FULL:
// d_v = 128, so no row is tested.
template <Store ST, bool KDA, bool FULL>
__global__ void __launch_bounds__(kTokenThreads, 2) ws_decode_token_kernel(WsParams p) {
  constexpr int CPL = 16, RPT = 4, NW = 4, DK = kTokenDk;
  // Per-column values sit at column_slot (the 8 lanes of a row read 8 different bank groups).
  __shared__ __align__(16) float sm_q[DK], sm_k[DK], sm_a[KDA ? DK : 4];
  __shared__ __align__(16) float sm_scale[DK], sm_inv[DK];
  __shared__ __align__(16) float sm_amax[32 * kAmaxStride];  // [row group][column_slot]
  const int seq = blockIdx.x, h = blockIdx.y;
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;                                 // uniform over the block
  if (refuse_extra_tokens(p, seq, h, t1 - t0)) return;  // launched only with max_tokens 1
  const int t = t0;
  const int tid = threadIdx.x, sub = tid & 7, rg = tid >> 3;
  const int j0 = sub * CPL;
  const int dv = p.dv;
  const int kh = h / (p.HV / p.H);
  const int64_t head = static_cast<int64_t>(p.slot_ids[seq]) * p.HV + h;
  uint8_t* codes = p.codes + head * dv * DK;
  int rows[RPT];
  bool row_ok[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    rows[r] = rg + 32 * r;
    row_ok[r] = FULL || rows[r] < dv;
  }

  // The stored state's codes and column scales, first, so their loads overlap the token's set-up.
  uint32_t w[RPT][NW];
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    if (row_ok[r]) {
      load_words<NW>(codes + rows[r] * DK + j0, w[r]);
    } else {
#pragma unroll
      for (int c = 0; c < NW; ++c) w[r][c] = 0u;
    }
  }
  float sc[CPL];
  const uint8_t* src_scales =
      static_cast<const uint8_t*>(p.scales) + head * head_scale_bytes<ST>(DK, p.bf16_scale);
  if (p.bf16_scale)
    load_bf16<CPL>(reinterpret_cast<const uint16_t*>(src_scales) + j0, sc);
  else
    load_f32<CPL>(reinterpret_cast<const float*>(src_scales) + j0, sc);

  // The token's q and k, normalised and scaled, and its decays, once per block.
  if (tid < 16) {
    const bool is_k = tid >= 8;
    float x[CPL];
    load_bf16<CPL>((is_k ? p.k : p.q) + (static_cast<int64_t>(t) * p.H + kh) * DK + j0, x);
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < CPL; ++e) ss = wsk::fma(x[e], x[e], ss);
    float scale = is_k ? 1.0f : p.scale;
    if (p.qk_l2norm) scale = ws_div(scale, wsk::sqrt(wsk::add(row_sum(ss, 0x0000FFFFu), 1e-6f)));
    float* dst = is_k ? sm_k : sm_q;
#pragma unroll
    for (int e = 0; e < CPL; e += 4)
      *reinterpret_cast<float4*>(dst + column_slot<CPL>(j0 + e)) =
          make_float4(wsk::mul(x[e], scale), wsk::mul(x[e + 1], scale), wsk::mul(x[e + 2], scale),
                      wsk::mul(x[e + 3], scale));
  }
  if constexpr (KDA) {
    if (tid >= kTokenThreads - DK) {
      const int j = tid - (kTokenThreads - DK);
      sm_a[column_slot<CPL>(j)] = wsk::exp(p.g[(static_cast<int64_t>(t) * p.HV + h) * DK + j]);
    }
  } else if (tid == 32) {
    sm_a[0] = wsk::exp(p.g[static_cast<int64_t>(t) * p.HV + h]);
  }
  float vr[RPT];
  const uint16_t* vt = p.v + (static_cast<int64_t>(t) * p.HV + h) * dv;
#pragma unroll
  for (int r = 0; r < RPT; ++r) vr[r] = row_ok[r] ? bf16_value(vt[rows[r]]) : 0.0f;
  const float beta = p.beta[static_cast<int64_t>(t) * p.HV + h];

  float s[RPT][CPL];
#pragma unroll
  for (int r = 0; r < RPT; ++r) decode_chunk<ST, CPL>(w[r], sc, s[r]);
  __syncthreads();
  float q[CPL], kk[CPL], a[KDA ? CPL : 1];
#pragma unroll
  for (int e = 0; e < CPL; e += 4) {
    const int slot = column_slot<CPL>(j0 + e);
    const float4 qv = *reinterpret_cast<const float4*>(sm_q + slot);
    const float4 kv = *reinterpret_cast<const float4*>(sm_k + slot);
    q[e] = qv.x, q[e + 1] = qv.y, q[e + 2] = qv.z, q[e + 3] = qv.w;
    kk[e] = kv.x, kk[e + 1] = kv.y, kk[e + 2] = kv.z, kk[e + 3] = kv.w;
    if constexpr (KDA) {
      const float4 av = *reinterpret_cast<const float4*>(sm_a + slot);
      a[e] = av.x, a[e + 1] = av.y, a[e + 2] = av.z, a[e + 3] = av.w;
    }
  }
  if constexpr (!KDA) a[0] = sm_a[0];

  // The delta rule on the rows and the readout: the general kernel's operations, in its order.
  bool bad = false;
  float out[RPT];
  delta_rule_rows<RPT, CPL, KDA>(s, a, kk, q, beta, vr, row_ok, out, bad);
  if (p.o && sub == 0) {
    uint16_t* ot = p.o + (static_cast<int64_t>(t) * p.HV + h) * dv;
#pragma unroll
    for (int r = 0; r < RPT; ++r)
      if (row_ok[r]) ot[rows[r]] = ws_bf16_rne(out[r]);
  }

  // Each thread's maxima over its rows, per column.
  {
    float m[CPL];
    row_maxima(s, row_ok, m);
    float* dst = sm_amax + rg * kAmaxStride;
#pragma unroll
    for (int e = 0; e < CPL; e += 4)
      *reinterpret_cast<float4*>(dst + column_slot<CPL>(j0 + e)) =
          make_float4(m[e], m[e + 1], m[e + 2], m[e + 3]);
  }
  if (__syncthreads_or(bad)) {
    record_refusal(p, 1, seq, h, 0);
    return;  // the stored state and scales are left as they were
  }

  // The column scales: lanes ro = 0..7 of columns 4 cq .. 4 cq + 3 take row groups ro + 8 i, then
  // a butterfly over the 8; lane ro < 4 forms column 4 cq + ro's scale.
  {
    const int cq = tid >> 3, ro = tid & 7;
    const int slot = column_slot<CPL>(4 * cq);
    const float4 mx = column_quad_max<32>(sm_amax + slot, kAmaxStride, ro);
    if (ro < 4) {
      const float amax = ro == 0 ? mx.x : ro == 1 ? mx.y : ro == 2 ? mx.z : mx.w;
      const int j = 4 * cq + ro;
      const float col = ws_column_scale(amax, 448.0f, p.bf16_scale);  // E4M3 max
      sm_scale[slot + ro] = col;
      sm_inv[slot + ro] = __fdiv_rn(1.0f, col);
      if (p.bf16_scale)
        reinterpret_cast<uint16_t*>(p.scales)[head * DK + j] = ws_bf16_rne(col);
      else
        reinterpret_cast<float*>(p.scales)[head * DK + j] = col;
    }
  }
  __syncthreads();

  // The codes, written in place.
  float inv[CPL];
#pragma unroll
  for (int e = 0; e < CPL; e += 4) {
    const float4 b = *reinterpret_cast<const float4*>(sm_inv + column_slot<CPL>(j0 + e));
    inv[e] = b.x, inv[e + 1] = b.y, inv[e + 2] = b.z, inv[e + 3] = b.w;
  }
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    uint32_t wd[NW];
    encode_token_chunk<ST>(s[r], inv, sm_scale, j0, wd);
    if (row_ok[r]) store_words<NW>(codes + static_cast<int64_t>(rows[r]) * DK + j0, wd);
  }
}

}  // namespace
}  // namespace statecheck::cuda
