// The single-token int8 working-state decode kernel (ws_decode.cu, its only includer): one launch
// of ws_decode in which no sequence has more than one token (WsDecodeArgs::max_tokens = 1), for
// int8 rounded to nearest even at d_k = 128 without init_state. It computes the int8 step of
// ws_decode_reference.h bit for bit, as the general kernel does, with the row dot products on
// tensor cores: the codes are the A operand of mma.sync m16n8k32 s8 x s8 -> s32 as loaded, and the
// six digit columns of the token's vectors (base-256 digits of a sc k and a sc q at their shifts,
// wsk::dot_digits) are the B operand, so both dot products of 16 rows cost four mma per warp and
// are exact. What is left per element is the code's conversion to fp32 (a byte permute and an
// add), the update fma(code, a sc, w k), the column maximum and the requantization (one fused
// multiply-add and three quarters of a byte permute).
// Layout: one block of 256 threads per (sequence, value head); warp w holds rows 16 w .. 16 w + 15
// as the mma's A fragments: lane (g = lane / 4, t = lane % 4) holds rows 16 w + g and 16 w + g + 8,
// key channels 64 h + 16 t .. + 15 for h = 0, 1 (four 16-byte loads). mma kt = 2 h + i takes the
// lane's words 2 i and 2 i + 1 of chunk h, a permutation of the k index shared with B. Errors as
// ws_decode.h states: a sequence with more than one token {2, sequence, value head, its tokens},
// non-finite values {1, sequence, value head, 0}; either leaves the slot as it was.
#pragma once

#include <cstdint>

#include "kernels/working_state/ws_decode_chunks.cuh"
#include "kernels/working_state/ws_step_math.h"

namespace statecheck::cuda {
namespace {

constexpr int kInt8TokenThreads = 256;
constexpr int kDigitStride = 192;    // bytes per digit row: rows g and g + 1 in other bank groups
constexpr int kPartialStride = 132;  // floats per row of partial maxima

// Position of key channel j in the per-column arrays read by the lanes: chunk h, lane t, word m,
// element e at ((4 h + m) * 4 + t) * 4 + e, so that the 4 lanes t of a word read 64 consecutive
// bytes.
__device__ __forceinline__ int lane_order(int j) {
  return ((((j >> 6) * 4 + ((j >> 2) & 3)) * 4 + ((j >> 4) & 3)) << 2) | (j & 3);
}

__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word_of(const uint4& x, int m) {
  return m == 0 ? x.x : m == 1 ? x.y : m == 2 ? x.z : x.w;
}

// Grid (num_seqs, HV), kInt8TokenThreads threads. FULL: d_v = 128, so no row is tested.
template <bool KDA, bool FULL>
__global__ void __launch_bounds__(kInt8TokenThreads, 2) ws_decode_token_int8_kernel(WsParams p) {
  constexpr int DK = 128;
  __shared__ __align__(16) float sm_q[DK], sm_k[DK], sm_a[KDA ? DK : 4];
  __shared__ __align__(16) float sm_asc[DK], sm_kn[DK], sm_inv[DK], sm_scale[DK];
  __shared__ __align__(16) uint8_t sm_digit[6 * kDigitStride];
  __shared__ __align__(16) float sm_partial[64 * kPartialStride];
  __shared__ float sm_kq;
  __shared__ int sm_shift[2];
  const int seq = blockIdx.x, h = blockIdx.y;
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;                                 // uniform over the block
  if (refuse_extra_tokens(p, seq, h, t1 - t0)) return;  // launched only with max_tokens 1
  const int tok = t0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int dv = p.dv;
  const int kh = h / (p.HV / p.H);
  const int64_t head = static_cast<int64_t>(p.slot_ids[seq]) * p.HV + h;
  uint8_t* codes = p.codes + head * dv * DK;
  const int rows[2] = {16 * warp + g, 16 * warp + g + 8};
  const bool row_ok[2] = {FULL || rows[0] < dv, FULL || rows[1] < dv};

  // The stored codes first, so that their loads overlap the token's set-up.
  uint4 cw[2][2];  // [row][chunk h]
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c)
      cw[r][c] = row_ok[r] ? *reinterpret_cast<const uint4*>(codes + rows[r] * DK + 64 * c + 16 * t)
                           : make_uint4(0u, 0u, 0u, 0u);

  // q and k normalised and scaled (8 lanes per vector, as the reference's lanes), the decays.
  if (tid < 16) {
    const bool is_k = tid >= 8;
    const int j0 = (tid & 7) * 16;
    float x[16];
    load_bf16<16>((is_k ? p.k : p.q) + (static_cast<int64_t>(tok) * p.H + kh) * DK + j0, x);
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 16; ++e) ss = wsk::fma(x[e], x[e], ss);
    float scale = is_k ? 1.0f : p.scale;
    if (p.qk_l2norm) scale = ws_div(scale, wsk::sqrt(wsk::add(row_sum(ss, 0x0000FFFFu), 1e-6f)));
    float* dst = is_k ? sm_k : sm_q;
#pragma unroll
    for (int e = 0; e < 16; ++e) dst[j0 + e] = wsk::mul(x[e], scale);
  }
  if constexpr (KDA) {
    if (tid >= kInt8TokenThreads - DK) {
      const int j = tid - (kInt8TokenThreads - DK);
      sm_a[j] = wsk::exp(p.g[(static_cast<int64_t>(tok) * p.HV + h) * DK + j]);
    }
  } else if (tid == 32) {
    sm_a[0] = wsk::exp(p.g[static_cast<int64_t>(tok) * p.HV + h]);
  }
  float vr[2];
  const uint16_t* vt = p.v + (static_cast<int64_t>(tok) * p.HV + h) * dv;
#pragma unroll
  for (int r = 0; r < 2; ++r) vr[r] = row_ok[r] ? bf16_value(vt[rows[r]]) : 0.0f;
  const float beta = p.beta[static_cast<int64_t>(tok) * p.HV + h];
  __syncthreads();

  // The column values: warps 0-3 each form all 128 (4 per lane) for the shifts, and the digits,
  // a sc and k of their own column j = tid; lanes 0-7 of warp 4 the fma chains of k.q.
  bool col_bad = false;
  if (tid < DK) {
    const uint8_t* src_scales =
        static_cast<const uint8_t*>(p.scales) + head * DK * (p.bf16_scale ? 2 : 4);
    float xm = 0.0f, ym = 0.0f, mine_asc = 0.0f, mine_x = 0.0f, mine_y = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = lane + 32 * i;
      const float sc = p.bf16_scale ? bf16_value(reinterpret_cast<const uint16_t*>(src_scales)[j])
                                    : reinterpret_cast<const float*>(src_scales)[j];
      const float asc = wsk::mul(sm_a[KDA ? j : 0], sc);
      const float x = wsk::mul(asc, sm_k[j]), y = wsk::mul(asc, sm_q[j]);
      col_bad |= !(fabsf(asc) <= 3.40282347e38f) || !(fabsf(x) <= 3.40282347e38f) ||
                 !(fabsf(y) <= 3.40282347e38f);
      xm = fmaxf(xm, fabsf(x));
      ym = fmaxf(ym, fabsf(y));
      if (i == warp) mine_asc = asc, mine_x = x, mine_y = y;
    }
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      xm = fmaxf(xm, __shfl_xor_sync(0xffffffffu, xm, d));
      ym = fmaxf(ym, __shfl_xor_sync(0xffffffffu, ym, d));
    }
    const int ex = wsk::dot_shift(xm), ey = wsk::dot_shift(ym);
    if (tid == 0) sm_shift[0] = ex, sm_shift[1] = ey;
    const int j = tid;
    int d[6];
    wsk::dot_digits(mine_x, ex, d[0], d[1], d[2]);
    wsk::dot_digits(mine_y, ey, d[3], d[4], d[5]);
#pragma unroll
    for (int n = 0; n < 6; ++n) sm_digit[n * kDigitStride + j] = static_cast<uint8_t>(d[n]);
    sm_asc[lane_order(j)] = mine_asc;
    sm_kn[lane_order(j)] = sm_k[j];
  } else if (tid < DK + 8) {
    const int j0 = (tid - DK) * 16;
    float kq = 0.0f;
#pragma unroll
    for (int e = 0; e < 16; ++e) kq = wsk::fma(sm_k[j0 + e], sm_q[j0 + e], kq);
    kq = row_sum(kq, 0x000000FFu);
    if (tid == DK) sm_kq = kq;
  }
  if (__syncthreads_or(col_bad)) {
    if (p.o && t == 0) {
      uint16_t* ot = p.o + (static_cast<int64_t>(tok) * p.HV + h) * dv;
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (row_ok[r]) ot[rows[r]] = 0x7FC0u;
    }
    if (tid == 0 && p.error_info && atomicCAS(&p.error_info[0], 0, 1) == 0) {
      p.error_info[1] = seq;
      p.error_info[2] = h;
      p.error_info[3] = 0;
    }
    return;  // the stored state and scales are left as they were
  }

  // Both dot products of the warp's 16 rows: C[row][n] = sum_k code[row][k] digit_n[k], n = x's
  // digits 0, 1, 2 and y's 0, 1, 2 (B columns 6 and 7 are zero).
  int acc[4] = {0, 0, 0, 0};
  {
    uint4 b[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
    if (g < 6) {
#pragma unroll
      for (int c = 0; c < 2; ++c)
        b[c] = *reinterpret_cast<const uint4*>(sm_digit + g * kDigitStride + 64 * c + 16 * t);
    }
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int i = 0; i < 2; ++i)
        mma_s8(acc, word_of(cw[0][c], 2 * i), word_of(cw[1][c], 2 * i),
               word_of(cw[0][c], 2 * i + 1), word_of(cw[1][c], 2 * i + 1), word_of(b[c], 2 * i),
               word_of(b[c], 2 * i + 1));
  }
  // Lane 4 g + t holds columns 2 t, 2 t + 1 of rows g (acc 0, 1) and g + 8 (acc 2, 3).
  const int quad = lane & ~3;
  const int ex = sm_shift[0], ey = sm_shift[1];
  const float kq = sm_kq;
  float wgt[2];
  bool bad = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int D[6];
#pragma unroll
    for (int n = 0; n < 6; ++n)
      D[n] = __shfl_sync(0xffffffffu, acc[2 * r + (n & 1)], quad + (n >> 1));
    const float part = wsk::dot_value(D[0], D[1], D[2], ex);
    const float ypart = wsk::dot_value(D[3], D[4], D[5], ey);
    const float w = wsk::mul(beta, wsk::sub(vr[r], part));
    const float out = wsk::fma(w, kq, ypart);
    wgt[r] = row_ok[r] ? w : 0.0f;
    if (row_ok[r]) {
      bad |= !(fabsf(out) <= 3.40282347e38f);
      if (p.o && t == 0)
        p.o[(static_cast<int64_t>(tok) * p.HV + h) * dv + rows[r]] = ws_bf16_rne(out);
    }
  }

  // The new state S = fma(code, a sc, w k) and each lane's maxima over its two rows.
  float s[2][32];
#pragma unroll
  for (int c = 0; c < 2; ++c)
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int u = ((4 * c + m) * 4 + t) * 4;
      const float4 asc = *reinterpret_cast<const float4*>(sm_asc + u);
      const float4 kn = *reinterpret_cast<const float4*>(sm_kn + u);
      const float a4[4] = {asc.x, asc.y, asc.z, asc.w}, k4[4] = {kn.x, kn.y, kn.z, kn.w};
      float mx[4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t biased = word_of(cw[r][c], m) ^ 0x80808080u;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = wsk::fma(int8_code_value(biased, e), a4[e], wsk::mul(wgt[r], k4[e]));
          s[r][16 * c + 4 * m + e] = v;
          mx[e] = r == 0 ? fabsf(v) : fmaxf(mx[e], fabsf(v));
        }
      }
      *reinterpret_cast<float4*>(sm_partial + (8 * warp + g) * kPartialStride + u) =
          make_float4(mx[0], mx[1], mx[2], mx[3]);
    }
  if (__syncthreads_or(bad)) {
    if (tid == 0 && p.error_info && atomicCAS(&p.error_info[0], 0, 1) == 0) {
      p.error_info[1] = seq;
      p.error_info[2] = h;
      p.error_info[3] = 0;
    }
    return;
  }

  // The column amax over the 64 partial rows: lanes ro = 0..7 of the 4 channels at u = 4 cq take
  // rows ro + 8 i, then a butterfly over the 8; lane ro < 4 forms channel u + ro's scale.
  {
    const int cq = tid >> 3, ro = tid & 7;
    float4 mx = *reinterpret_cast<const float4*>(sm_partial + ro * kPartialStride + 4 * cq);
#pragma unroll
    for (int i = 1; i < 8; ++i) {
      const float4 y =
          *reinterpret_cast<const float4*>(sm_partial + (ro + 8 * i) * kPartialStride + 4 * cq);
      mx.x = fmaxf(mx.x, y.x), mx.y = fmaxf(mx.y, y.y), mx.z = fmaxf(mx.z, y.z),
      mx.w = fmaxf(mx.w, y.w);
    }
#pragma unroll
    for (int d = 1; d < 8; d <<= 1) {
      mx.x = fmaxf(mx.x, __shfl_xor_sync(0xffffffffu, mx.x, d));
      mx.y = fmaxf(mx.y, __shfl_xor_sync(0xffffffffu, mx.y, d));
      mx.z = fmaxf(mx.z, __shfl_xor_sync(0xffffffffu, mx.z, d));
      mx.w = fmaxf(mx.w, __shfl_xor_sync(0xffffffffu, mx.w, d));
    }
    col_bad = false;
    if (ro < 4) {
      const float amax = ro == 0 ? mx.x : ro == 1 ? mx.y : ro == 2 ? mx.z : mx.w;
      col_bad = !(amax <= 3.40282347e38f);
      // u = 4 cq + ro = ((4 h + m) * 4 + t) * 4 + e: key channel 64 h + 16 t + 4 m + e.
      const int j = 64 * (cq >> 4) + 16 * (cq & 3) + 4 * ((cq >> 2) & 3) + ro;
      const float col = ws_column_scale(amax, 127.0f, p.bf16_scale);
      sm_scale[j] = col;
      sm_inv[4 * cq + ro] = __fdiv_rn(1.0f, col);
    }
  }
  if (__syncthreads_or(col_bad)) {
    if (tid == 0 && p.error_info && atomicCAS(&p.error_info[0], 0, 1) == 0) {
      p.error_info[1] = seq;
      p.error_info[2] = h;
      p.error_info[3] = 0;
    }
    return;
  }
  if (tid < DK) {
    if (p.bf16_scale)
      reinterpret_cast<uint16_t*>(p.scales)[head * DK + tid] = ws_bf16_rne(sm_scale[tid]);
    else
      reinterpret_cast<float*>(p.scales)[head * DK + tid] = sm_scale[tid];
  }

  // The codes, written in place.
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    uint32_t wd[2][4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const float4 inv = *reinterpret_cast<const float4*>(sm_inv + ((4 * c + m) * 4 + t) * 4);
      const float i4[4] = {inv.x, inv.y, inv.z, inv.w};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        uint32_t b[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          b[e] = __float_as_uint(__fmaf_rn(s[r][16 * c + 4 * m + e], i4[e], 12582912.0f));
        wd[r][m] = pack4(b[0], b[1], b[2], b[3]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (row_ok[r])
        *reinterpret_cast<uint4*>(codes + rows[r] * DK + 64 * c + 16 * t) =
            make_uint4(wd[r][0], wd[r][1], wd[r][2], wd[r][3]);
  }
}

}  // namespace
}  // namespace statecheck::cuda
