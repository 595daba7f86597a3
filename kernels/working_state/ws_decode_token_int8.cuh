// The single-token int8 working-state decode kernel (ws_decode.cu, its only includer): one launch
// of ws_decode in which no sequence has more than one token (WsDecodeArgs::max_tokens = 1), for
// int8 rounded to nearest even at d_k = 128 without init_state. It computes the int8 step of
// ws_decode_reference.h bit for bit, as the general kernel does, with the row dot products on
// tensor cores: the codes are the A operand of mma.sync m16n8k32 s8 x s8 -> s32 as loaded, and the
// six digit columns of the token's vectors (base-256 digits of a sc k and a sc q at their shifts,
// wsk::dot_digits) are the B operand, so both dot products of a tile of 16 rows cost four mma and
// are exact. What is left per element is the code's conversion to fp32 (a byte permute and an
// add), the update fma(code, a sc, w k) and the column maximum, then at the encode the conversion
// and the update again and the requantization (one fused multiply-add and three quarters of a
// byte permute).
// Layout: 256 / MT threads per (sequence, value head), MT row tiles of 16 per warp (tile i: rows
// 16 i .. 16 i + 15); warp w holds tiles MT w .. MT w + MT - 1 as the mma's A fragments: lane
// (g = lane / 4, t = lane % 4) holds rows 16 i + g and 16 i + g + 8 of each, key channels
// 64 c + 16 t .. + 15 for c = 0, 1 (16-byte loads). mma kt = 2 c + i takes the lane's words 2 i
// and 2 i + 1 of chunk c, a permutation of the k index shared with B.
// Launched with MT = 2: 128 threads, six blocks per SM at 80 registers (d_v = 128; five at 96 with
// rows tested), so that more heads are in flight at the same warps per SM (docs/kernel_notes.md has
// the timings of MT = 1 and 2). The new state is not held from the update to the encode but formed
// again there from the codes by the same function (int8_new_state).
// Errors as ws_decode.h states: a sequence with more than one token {2, sequence, value head, its
// tokens}, non-finite values {1, sequence, value head, 0}; either leaves the slot as it was.
#pragma once

#include <cstdint>

#include "kernels/working_state/ws_decode_chunks.cuh"
#include "kernels/working_state/ws_step_math.h"

namespace statecheck::cuda {
namespace {

constexpr int kInt8Dk = 128;
constexpr int kDigitStride = 192;    // bytes per digit row: rows g and g + 1 in other bank groups
constexpr int kPartialStride = 132;  // floats per row of partial maxima

// Position of key channel j in the per-column arrays read by the lanes: chunk c, lane t, word m,
// element e at ((4 c + m) * 4 + t) * 4 + e, so that the 4 lanes t of a word read 64 consecutive
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

// The shared memory of one head's step.
struct alignas(16) Int8TokenShared {
  float q[kInt8Dk], k[kInt8Dk], a[kInt8Dk];       // q, k normalised and scaled; decays (GDN: a[0])
  float asc[kInt8Dk], kn[kInt8Dk], inv[kInt8Dk];  // a sc, k and 1 / scale at lane_order
  float scale[kInt8Dk];                           // the new scales, by key channel
  uint8_t digit[6 * kDigitStride];                // B: digits 0-2 of x, then of y, by key channel
  float kq;
  int shift[2];
};

// Threads of the kernel with MT row tiles of 16 per warp: the 8 tiles of d_v = 128 over 8 / MT
// warps.
template <int MT>
constexpr int int8_token_threads() {
  return 256 / MT;
}

// Grid (num_seqs, HV), int8_token_threads<MT>() threads: block (seq, h) steps value head h of
// sequence seq in place. FULL: d_v = 128, so no row is tested. MT: row tiles per warp (1: 8 warps,
// 3 blocks per SM; 2: 4 warps, 6 blocks per SM, the same 24 warps holding twice the heads; 5 with
// rows tested, whose extra registers would spill at 6). A refusal returns the whole block early.
template <bool KDA, bool FULL, int MT>
__global__ void __launch_bounds__(int8_token_threads<MT>(), FULL || MT == 1 ? 3 * MT : 5)
    ws_decode_token_int8_kernel(WsParams p) {
  constexpr int DK = kInt8Dk;
  constexpr int kThreads = int8_token_threads<MT>();
  static_assert(MT == 1 || MT == 2,
                "one thread per key channel in the column set-up: >= 128 threads");
  constexpr int kRows = 2 * MT;         // rows per lane
  constexpr int kParts = 8 * (8 / MT);  // partial rows: [8 warp + g], each a max over kRows rows
  __shared__ Int8TokenShared sh;
  __shared__ __align__(16) float partial[kParts * kPartialStride];
  const int seq = blockIdx.x, h = blockIdx.y;
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;                                 // uniform over the block
  if (refuse_extra_tokens(p, seq, h, t1 - t0)) return;  // launched only with max_tokens 1
  const int64_t head = static_cast<int64_t>(p.slot_ids[seq]) * p.HV + h;
  const int64_t th = static_cast<int64_t>(t0) * p.HV + h;
  const int kh = h / (p.HV / p.H);
  uint8_t* codes = p.codes + head * p.dv * DK;
  const void* stored_scales =
      static_cast<const uint8_t*>(p.scales) + head * kInt8Dk * (p.bf16_scale ? 2 : 4);
  const uint16_t* qt = p.q + (static_cast<int64_t>(t0) * p.H + kh) * kInt8Dk;
  const uint16_t* kt = p.k + (static_cast<int64_t>(t0) * p.H + kh) * kInt8Dk;
  const uint16_t* vt = p.v + th * p.dv;
  const float* gt = p.g + th * (KDA ? kInt8Dk : 1);
  const float beta = p.beta[th];
  const int tok = t0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int dv = p.dv;
  // Lane rows: 16 (MT warp + r / 2) + g + 8 (r % 2), the A fragments' rows of tile MT warp + r / 2.
  int rows[kRows];
  bool row_ok[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    rows[r] = 16 * (MT * warp + r / 2) + g + 8 * (r % 2);
    row_ok[r] = FULL || rows[r] < dv;
  }

  // The stored codes first, so that their loads overlap the token's set-up.
  uint4 cw[kRows][2];  // [row][chunk c]: key channels 64 c + 16 t ..
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c)
      cw[r][c] = row_ok[r] ? *reinterpret_cast<const uint4*>(codes + rows[r] * DK + 64 * c + 16 * t)
                           : make_uint4(0u, 0u, 0u, 0u);
  // The column scales of the lane's 4 key channels lane + 32 i (warps 0-3), for the set-up below.
  float sc4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (tid < DK) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      sc4[i] = p.bf16_scale ? bf16_value(static_cast<const uint16_t*>(stored_scales)[lane + 32 * i])
                            : static_cast<const float*>(stored_scales)[lane + 32 * i];
  }

  // q and k normalised and scaled (8 lanes per vector, as the reference's lanes), the decays.
  if (tid < 16) {
    const bool is_k = tid >= 8;
    const int j0 = (tid & 7) * 16;
    float x[16];
    load_bf16<16>((is_k ? kt : qt) + j0, x);
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 16; ++e) ss = wsk::fma(x[e], x[e], ss);
    float scale = is_k ? 1.0f : p.scale;
    if (p.qk_l2norm) scale = ws_div(scale, wsk::sqrt(wsk::add(row_sum(ss, 0x0000FFFFu), 1e-6f)));
    float* dst = is_k ? sh.k : sh.q;
#pragma unroll
    for (int e = 0; e < 16; ++e) dst[j0 + e] = wsk::mul(x[e], scale);
  }
  if constexpr (KDA) {
    if (tid >= kThreads - DK) {
      const int j = tid - (kThreads - DK);
      sh.a[j] = wsk::exp(gt[j]);
    }
  } else if (tid == 32) {
    sh.a[0] = wsk::exp(gt[0]);
  }
  float vr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) vr[r] = row_ok[r] ? bf16_value(vt[rows[r]]) : 0.0f;
  __syncthreads();

  // The column values: warps 0-3 each form all 128 (4 per lane) for the shifts, and the digits,
  // a sc and k of their own column j = tid; 8 lanes the fma chains of k.q (those of warp 4, or
  // with 4 warps those of warp 0 after their column).
  bool col_bad = false;
  if (tid < DK) {
    float xm = 0.0f, ym = 0.0f, mine_asc = 0.0f, mine_x = 0.0f, mine_y = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = lane + 32 * i;
      const float asc = wsk::mul(sh.a[KDA ? j : 0], sc4[i]);
      const float x = wsk::mul(asc, sh.k[j]), y = wsk::mul(asc, sh.q[j]);
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
    if (tid == 0) sh.shift[0] = ex, sh.shift[1] = ey;
    const int j = tid;
    int d[6];
    wsk::dot_digits(mine_x, ex, d[0], d[1], d[2]);
    wsk::dot_digits(mine_y, ey, d[3], d[4], d[5]);
#pragma unroll
    for (int n = 0; n < 6; ++n) sh.digit[n * kDigitStride + j] = static_cast<uint8_t>(d[n]);
    sh.asc[lane_order(j)] = mine_asc;
    sh.kn[lane_order(j)] = sh.k[j];
  }
  if (const int kl = kThreads > DK ? tid - DK : tid; kl >= 0 && kl < 8) {
    const int j0 = kl * 16;
    float kq = 0.0f;
#pragma unroll
    for (int e = 0; e < 16; ++e) kq = wsk::fma(sh.k[j0 + e], sh.q[j0 + e], kq);
    kq = row_sum(kq, 0x000000FFu);
    if (kl == 0) sh.kq = kq;
  }
  if (__syncthreads_or(col_bad)) {
    if (p.o && t == 0) {
      uint16_t* ot = p.o + (static_cast<int64_t>(tok) * p.HV + h) * dv;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (row_ok[r]) ot[rows[r]] = 0x7FC0u;
    }
    record_refusal(p, 1, seq, h, 0);
    return;  // the stored state and scales are left as they were
  }

  // Both dot products of each of the warp's tiles of 16 rows: C[row][n] = sum_k code[row][k]
  // digit_n[k], n = x's digits 0, 1, 2 and y's 0, 1, 2 (B columns 6 and 7 are zero).
  int acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[mt][i] = 0;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const uint4 b =
        g < 6 ? *reinterpret_cast<const uint4*>(sh.digit + g * kDigitStride + 64 * c + 16 * t)
              : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 2; ++i)
        mma_s8(acc[mt], word_of(cw[2 * mt][c], 2 * i), word_of(cw[2 * mt + 1][c], 2 * i),
               word_of(cw[2 * mt][c], 2 * i + 1), word_of(cw[2 * mt + 1][c], 2 * i + 1),
               word_of(b, 2 * i), word_of(b, 2 * i + 1));
  }
  // Lane 4 g + t holds columns 2 t, 2 t + 1 of a tile's rows g (acc 0, 1) and g + 8 (acc 2, 3).
  const int quad = lane & ~3;
  const int ex = sh.shift[0], ey = sh.shift[1];
  const float kq = sh.kq;
  float wgt[kRows];
  bool bad = false;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    int D[6];
#pragma unroll
    for (int n = 0; n < 6; ++n)
      D[n] = __shfl_sync(0xffffffffu, acc[r / 2][2 * (r % 2) + (n & 1)], quad + (n >> 1));
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

  // The new state S = fma(code, a sc, w k) and each lane's maxima over its kRows rows.
#pragma unroll
  for (int c = 0; c < 2; ++c)
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int u = ((4 * c + m) * 4 + t) * 4;
      const float4 asc = *reinterpret_cast<const float4*>(sh.asc + u);
      const float4 kn = *reinterpret_cast<const float4*>(sh.kn + u);
      const float a4[4] = {asc.x, asc.y, asc.z, asc.w}, k4[4] = {kn.x, kn.y, kn.z, kn.w};
      float mx[4];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint32_t biased = word_of(cw[r][c], m) ^ 0x80808080u;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = int8_new_state(biased, e, a4[e], wgt[r], k4[e]);
          mx[e] = r == 0 ? fabsf(v) : fmaxf(mx[e], fabsf(v));
        }
      }
      *reinterpret_cast<float4*>(partial + (8 * warp + g) * kPartialStride + u) =
          make_float4(mx[0], mx[1], mx[2], mx[3]);
    }
  if (__syncthreads_or(bad)) {
    record_refusal(p, 1, seq, h, 0);
    return;
  }

  // The column amax over the kParts partial rows: lanes ro = 0..7 of the 4 channels at u = 4 cq
  // take rows ro + 8 i, then a butterfly over the 8; lane ro < 4 forms channel u + ro's scale.
  col_bad = false;
#pragma unroll
  for (int cq = tid >> 3; cq < DK / 4; cq += kThreads / 8) {
    const int ro = tid & 7;
    const float4 mx = column_quad_max<kParts>(partial + 4 * cq, kPartialStride, ro);
    if (ro < 4) {
      const float amax = ro == 0 ? mx.x : ro == 1 ? mx.y : ro == 2 ? mx.z : mx.w;
      col_bad |= !(amax <= 3.40282347e38f);
      // u = 4 cq + ro = ((4 c + m) * 4 + t) * 4 + e: key channel 64 c + 16 t + 4 m + e.
      const int j = 64 * (cq >> 4) + 16 * (cq & 3) + 4 * ((cq >> 2) & 3) + ro;
      const float col = ws_column_scale(amax, 127.0f, p.bf16_scale);
      sh.scale[j] = col;
      sh.inv[4 * cq + ro] = __fdiv_rn(1.0f, col);
    }
  }
  if (__syncthreads_or(col_bad)) {
    record_refusal(p, 1, seq, h, 0);
    return;
  }
  for (int j = tid; j < DK; j += kThreads) {
    if (p.bf16_scale)
      reinterpret_cast<uint16_t*>(p.scales)[head * DK + j] = ws_bf16_rne(sh.scale[j]);
    else
      reinterpret_cast<float*>(p.scales)[head * DK + j] = sh.scale[j];
  }

  // The codes, written in place.
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    uint32_t wd[kRows][4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int u = ((4 * c + m) * 4 + t) * 4;
      const float4 inv = *reinterpret_cast<const float4*>(sh.inv + u);
      const float i4[4] = {inv.x, inv.y, inv.z, inv.w};
      const float4 asc = *reinterpret_cast<const float4*>(sh.asc + u);
      const float4 kn = *reinterpret_cast<const float4*>(sh.kn + u);
      const float a4[4] = {asc.x, asc.y, asc.z, asc.w}, k4[4] = {kn.x, kn.y, kn.z, kn.w};
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint32_t biased = word_of(cw[r][c], m) ^ 0x80808080u;
        uint32_t b[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          // The new state again, by the operations of the update above.
          b[e] = int8_rne_bits(int8_new_state(biased, e, a4[e], wgt[r], k4[e]), i4[e]);
        }
        wd[r][m] = pack4(b[0], b[1], b[2], b[3]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (row_ok[r])
        *reinterpret_cast<uint4*>(codes + rows[r] * DK + 64 * c + 16 * t) =
            make_uint4(wd[r][0], wd[r][1], wd[r][2], wd[r][3]);
  }
}

}  // namespace
}  // namespace statecheck::cuda
