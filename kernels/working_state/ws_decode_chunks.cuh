// Device helpers of the working-state decode kernel (ws_decode.cu, its only includer): the block
// shape constants, the kernel's parameter block WsParams, and the load / store, decode and
// encode of one row chunk of CPL key channels in each store format (bf16, int8, fp8 E4M3).
// A chunk's codes are packed 4 int8 / E4M3 codes or 2 bf16 values per 32-bit word; pointers are
// aligned as each loader states. The fp32 rounding order is the one written out in
// ws_decode_reference.h. Errors: none here; the launcher (ws_decode.cu) checks the arguments.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/working_state/element_codec.h"
#include "core/working_state/philox.h"
#include "kernels/codec/rounding.cuh"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_step_math.h"

namespace statecheck::cuda {
namespace {

constexpr int kLanesPerRow = 8;
constexpr int kMaxDv = 128;  // rows of a head: 4 per thread in 256 threads

enum class Store { bf16, int8, fp8 };

struct WsParams {
  int num_seqs, H, HV, dk, dv;
  int max_tokens;  // WsDecodeArgs::max_tokens
  bool qk_l2norm, sr, bf16_scale;
  float scale;
  uint8_t* codes;
  void* scales;
  const int32_t* slot_ids;
  const int32_t* cu;
  const int32_t* positions;
  const int32_t* seq_index;
  uint64_t seed;
  uint32_t layer;
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const float* g;
  const float* beta;
  uint16_t* o;
  int32_t* error_info;
  const float* init_state;
};

// Bytes of one head's column scales: d_k fp32 or bf16 values; none for the bf16 stores.
template <Store ST>
__host__ __device__ __forceinline__ int head_scale_bytes(int dk, bool bf16_scale) {
  return ST == Store::bf16 ? 0 : dk * (bf16_scale ? 2 : 4);
}

// Where key channel j's value sits in a per-column row of shared memory: lane sub's channels
// sub * CPL .. + CPL are its CPL / 4 chunks of 4 (one 16-byte access each), and chunk c is stored
// at chunk position (c + sub / (32 / CPL)) mod (CPL / 4) of the lane's range, so that the 8 lanes
// of a row, reading their chunk c at once, touch 8 different 16-byte bank groups (in order, lanes
// sub and sub + 32 / CPL would share one). A permutation of each lane's range: a thread per column
// reads and writes 32 consecutive columns in 32 different banks either way.
template <int CPL>
__host__ __device__ __forceinline__ int column_slot(int j) {
  constexpr int C = CPL / 4;
  if constexpr (C == 1) {
    return j;
  } else {
    const int sub = j / CPL, c = (j % CPL) / 4;
    return sub * CPL + 4 * ((c + sub / (8 / C)) % C) + j % 4;
  }
}

__device__ __forceinline__ float bf16_value(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

// N consecutive 32-bit words at p (4 * N bytes, aligned to min(16, 4 * N)).
template <int N>
__device__ __forceinline__ void load_words(const void* p, uint32_t (&w)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
      const uint4 x = reinterpret_cast<const uint4*>(p)[c];
      w[4 * c] = x.x, w[4 * c + 1] = x.y, w[4 * c + 2] = x.z, w[4 * c + 3] = x.w;
    }
  } else if constexpr (N == 2) {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    w[0] = x.x, w[1] = x.y;
  } else {
    static_assert(N == 1, "1, 2 or a multiple of 4 words");
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

template <int N>
__device__ __forceinline__ void store_words(void* p, const uint32_t (&w)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int c = 0; c < N / 4; ++c)
      reinterpret_cast<uint4*>(p)[c] =
          make_uint4(w[4 * c], w[4 * c + 1], w[4 * c + 2], w[4 * c + 3]);
  } else if constexpr (N == 2) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    *reinterpret_cast<uint32_t*>(p) = w[0];
  }
}

// N (a multiple of 4) consecutive bf16 values at p as fp32 (exact).
template <int N>
__device__ __forceinline__ void load_bf16(const uint16_t* p, float (&out)[N]) {
  uint32_t w[N / 2];
  load_words<N / 2>(p, w);
#pragma unroll
  for (int c = 0; c < N / 2; ++c) {
    out[2 * c] = __uint_as_float(w[c] << 16);
    out[2 * c + 1] = __uint_as_float(w[c] & 0xFFFF0000u);
  }
}

// N (a multiple of 4) consecutive fp32 values at p (16-byte aligned).
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float (&out)[N]) {
#pragma unroll
  for (int c = 0; c < N / 4; ++c) {
    const float4 x = reinterpret_cast<const float4*>(p)[c];
    out[4 * c] = x.x, out[4 * c + 1] = x.y, out[4 * c + 2] = x.z, out[4 * c + 3] = x.w;
  }
}

// Sum over the 8 lanes of a row (lanes differing in their low 3 bits): every lane gets
// ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)), x_l the value of the row's lane l. The
// warp's lanes in `mask` execute it (whole rows of 8).
__device__ __forceinline__ float row_sum(float x, unsigned mask = 0xffffffffu) {
  x = __fadd_rn(x, __shfl_xor_sync(mask, x, 1));
  x = __fadd_rn(x, __shfl_xor_sync(mask, x, 2));
  x = __fadd_rn(x, __shfl_xor_sync(mask, x, 4));
  return x;
}

// Thread 0 of a refusing block records {code, seq, h, value} in error_info (if given) unless an
// earlier refusal of the launch was recorded: code 1 a non-finite value (value: the token's offset
// in its sequence), 2 a sequence with more tokens than max_tokens (value: its tokens).
__device__ __forceinline__ void record_refusal(const WsParams& p, int code, int seq, int h,
                                               int value) {
  if (threadIdx.x == 0 && p.error_info && atomicCAS(&p.error_info[0], 0, code) == 0) {
    p.error_info[1] = seq;
    p.error_info[2] = h;
    p.error_info[3] = value;
  }
}

// Under max_tokens 1, a sequence with more tokens than one is refused by every kernel: block
// (seq, h) records {2, seq, h, tokens} and returns before it touches the slot. True when refused
// (uniform over the block).
__device__ __forceinline__ bool refuse_extra_tokens(const WsParams& p, int seq, int h, int tokens) {
  if (p.max_tokens != 1 || tokens <= 1) return false;
  record_refusal(p, 2, seq, h, tokens);
  return true;
}

// The maxima of 4 consecutive floats at `col` over ROWS rows `stride` floats apart, taken by the 8
// lanes ro = 0..7 of an aligned group of a warp (the single-token kernels' column amax): lane ro
// reads rows ro, ro + 8, ..., then a 3-step butterfly gives each lane of the group all 4 maxima.
template <int ROWS>
__device__ __forceinline__ float4 column_quad_max(const float* col, int stride, int ro) {
  static_assert(ROWS % 8 == 0, "8 lanes take the rows in turn");
  float4 mx = *reinterpret_cast<const float4*>(col + ro * stride);
#pragma unroll
  for (int i = 1; i < ROWS / 8; ++i) {
    const float4 y = *reinterpret_cast<const float4*>(col + (ro + 8 * i) * stride);
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
  return mx;
}

// The gated delta rule and the readout on a thread's RPT rows of CPL key channels, in the order
// ws_decode_reference.h writes out: per row, S <- S * a element by element (a: the head's decay,
// or KDA's per-channel decays, a[KDA ? e : 0]), part = the fma chain of S k over e = 0 .. CPL - 1
// then row_sum, wgt = beta (v - part), S <- S + wgt k, acc = the fma chain of S q, out =
// row_sum(acc). Sets `bad` when a row that exists (row_ok) has a non-finite output.
template <int RPT, int CPL, bool KDA>
__device__ __forceinline__ void delta_rule_rows(float (&s)[RPT][CPL], const float* a,
                                                const float (&kk)[CPL], const float (&q)[CPL],
                                                float beta, const float (&vr)[RPT],
                                                const bool (&row_ok)[RPT], float (&out)[RPT],
                                                bool& bad) {
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < CPL; ++e) {
      s[r][e] = wsk::mul(s[r][e], a[KDA ? e : 0]);
      part = wsk::fma(s[r][e], kk[e], part);
    }
    const float wgt = wsk::mul(beta, wsk::sub(vr[r], row_sum(part)));
    float acc = 0.0f;
#pragma unroll
    for (int e = 0; e < CPL; ++e) {
      s[r][e] = wsk::fma(wgt, kk[e], s[r][e]);
      acc = wsk::fma(s[r][e], q[e], acc);
    }
    out[r] = row_sum(acc);
    if (row_ok[r]) bad |= !(fabsf(out[r]) <= 3.40282347e38f);
  }
}

// The low bytes of a, b, c, d as one word (a in byte 0).
__device__ __forceinline__ uint32_t pack4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040u), __byte_perm(c, d, 0x0040u), 0x5410u);
}

// Maximum over the 8 lanes of a row (exact, so every lane gets the same value).
__device__ __forceinline__ float row_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}

// Integer sum over the 8 lanes of a row (exact).
__device__ __forceinline__ int row_sum_int(int x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

// Code e (0..3) of a word of 4 int8 codes as fp32, exactly: the code plus 128 as the low byte
// of the float 2^23 + (code + 128), minus 2^23 + 128 (`biased` = word ^ 0x80808080).
__device__ __forceinline__ float int8_code_value(uint32_t biased, int e) {
  return __fadd_rn(__uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u + e)), -8388736.0f);
}

// Element e of the new int8 state from the biased word of its codes: fma(code, a sc, w k), the
// update of docs/working_state.md ("int8 in the CUDA decode").
__device__ __forceinline__ float int8_new_state(uint32_t biased, int e, float asc, float wgt,
                                                float k) {
  return wsk::fma(int8_code_value(biased, e), asc, wsk::mul(wgt, k));
}

// ws_int8_rne_recip in the word the kernels pack: the bits of fma(x, inv, 1.5 * 2^23), whose low
// byte is the int8 RNE code of x for the reciprocal scale inv.
__device__ __forceinline__ uint32_t int8_rne_bits(float x, float inv) {
  return __float_as_uint(__fmaf_rn(x, inv, 12582912.0f));
}

// The int8 RNE codes of CPL elements x for the reciprocal scales inv, packed 4 per word
// (ws_int8_rne_recip: one fused multiply-add each, the low bytes of the sums).
template <int CPL>
__device__ __forceinline__ void encode_int8_recip(const float* x, const float* inv,
                                                  uint32_t (&w)[CPL / 4]) {
#pragma unroll
  for (int c = 0; c < CPL / 4; ++c) {
    uint32_t b[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) b[e] = int8_rne_bits(x[4 * c + e], inv[4 * c + e]);
    w[c] = pack4(b[0], b[1], b[2], b[3]);
  }
}

// The three base-256 digits (wsk::dot_digits) of 4 values x at shift E, packed as signed bytes:
// word p holds digit p of x[0..3] in bytes 0..3.
__device__ __forceinline__ void digit_words(const float* x, int E, uint32_t& w0, uint32_t& w1,
                                            uint32_t& w2) {
  uint32_t b[3][4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    int d0, d1, d2;
    wsk::dot_digits(x[e], E, d0, d1, d2);
    b[0][e] = static_cast<uint32_t>(d0), b[1][e] = static_cast<uint32_t>(d1),
    b[2][e] = static_cast<uint32_t>(d2);
  }
  w0 = pack4(b[0][0], b[0][1], b[0][2], b[0][3]);
  w1 = pack4(b[1][0], b[1][1], b[1][2], b[1][3]);
  w2 = pack4(b[2][0], b[2][1], b[2][2], b[2][3]);
}

// The int8 step on a thread's RPT rows of CPL key channels from their codes cw (4 per word) and
// column scales sc, in the order ws_decode_reference.h writes out for int8 RNE: per column
// asc = a sc, x = asc k, y = asc q; the rows' dot products with x and y exact on base-256 digits
// (wsk::dot_digits at the row's shared shift, 8-lane integer sums of dp4a products, then
// wsk::dot_value); w = beta (v - S x) into wgt, out = fma(w, k.q, S y) with k.q the fma chain over
// the lane's channels then row_sum. The new state S_new = fma(code, asc, w k) (int8_new_state) is
// not kept: m[e] is the maximum of its |values| in column e over the existing rows (row_ok; 0
// without any), the thread's part of the column amax, and the encode forms it again. A column
// value that is not finite sets every output to NaN and `bad`; a non-finite output of an existing
// row sets `bad`.
template <int RPT, int CPL, bool KDA>
__device__ __forceinline__ void exact_int8_rows(const uint32_t (&cw)[RPT][CPL / 4],
                                                const float (&sc)[CPL], const float* a,
                                                const float (&kk)[CPL], const float (&q)[CPL],
                                                float beta, const float (&vr)[RPT],
                                                const bool (&row_ok)[RPT], float (&asc)[CPL],
                                                float (&wgt)[RPT], float (&m)[CPL],
                                                float (&out)[RPT], bool& bad) {
  constexpr int NW = CPL / 4;
  float x[CPL], y[CPL];
  bool col_bad = false;
  float xm = 0.0f, ym = 0.0f, kq = 0.0f;
#pragma unroll
  for (int e = 0; e < CPL; ++e) {
    asc[e] = wsk::mul(a[KDA ? e : 0], sc[e]);
    x[e] = wsk::mul(asc[e], kk[e]);
    y[e] = wsk::mul(asc[e], q[e]);
    col_bad |= !(fabsf(asc[e]) <= 3.40282347e38f) || !(fabsf(x[e]) <= 3.40282347e38f) ||
               !(fabsf(y[e]) <= 3.40282347e38f);
    xm = fmaxf(xm, fabsf(x[e]));
    ym = fmaxf(ym, fabsf(y[e]));
    kq = wsk::fma(kk[e], q[e], kq);
  }
#pragma unroll
  for (int e = 0; e < CPL; ++e) m[e] = 0.0f;
  if (__any_sync(0xffffffffu, col_bad)) {  // every warp holds all key channels
#pragma unroll
    for (int r = 0; r < RPT; ++r) out[r] = __uint_as_float(0x7FC00000u), wgt[r] = 0.0f;
    bad = true;
    return;
  }
  kq = row_sum(kq);
  // The rows' dot products with x, then with y (one vector's digits live at a time).
  float part[RPT], ypart[RPT];
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const float* vec = pass == 0 ? x : y;
    const int shift = wsk::dot_shift(row_max(pass == 0 ? xm : ym));
    uint32_t dw[3][NW];
#pragma unroll
    for (int c = 0; c < NW; ++c) digit_words(vec + 4 * c, shift, dw[0][c], dw[1][c], dw[2][c]);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      int D[3] = {0, 0, 0};
#pragma unroll
      for (int c = 0; c < NW; ++c)
#pragma unroll
        for (int d = 0; d < 3; ++d)
          D[d] = __dp4a(static_cast<int>(cw[r][c]), static_cast<int>(dw[d][c]), D[d]);
#pragma unroll
      for (int d = 0; d < 3; ++d) D[d] = row_sum_int(D[d]);
      (pass == 0 ? part : ypart)[r] = wsk::dot_value(D[0], D[1], D[2], shift);
    }
  }
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    wgt[r] = wsk::mul(beta, wsk::sub(vr[r], part[r]));
    out[r] = wsk::fma(wgt[r], kq, ypart[r]);
    if (row_ok[r]) {
      bad |= !(fabsf(out[r]) <= 3.40282347e38f);
#pragma unroll
      for (int c = 0; c < NW; ++c) {
        const uint32_t biased = cw[r][c] ^ 0x80808080u;
#pragma unroll
        for (int e = 0; e < 4; ++e)
          m[4 * c + e] =
              fmaxf(m[4 * c + e],
                    fabsf(int8_new_state(biased, e, asc[4 * c + e], wgt[r], kk[4 * c + e])));
      }
    }
  }
}

// The int8 RNE codes (encode_int8_recip) of a row's new state formed again from its codes cw (4 per
// word), asc and w by the operations of exact_int8_rows: the same bits as encoding the state held.
template <int CPL>
__device__ __forceinline__ void encode_int8_new_state(const uint32_t (&cw)[CPL / 4],
                                                      const float (&asc)[CPL], float wgt,
                                                      const float (&kk)[CPL],
                                                      const float (&inv)[CPL],
                                                      uint32_t (&w)[CPL / 4]) {
#pragma unroll
  for (int c = 0; c < CPL / 4; ++c) {
    const uint32_t biased = cw[c] ^ 0x80808080u;
    uint32_t b[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      b[e] = int8_rne_bits(int8_new_state(biased, e, asc[4 * c + e], wgt, kk[4 * c + e]),
                           inv[4 * c + e]);
    w[c] = pack4(b[0], b[1], b[2], b[3]);
  }
}

// m[e] = max over the thread's existing rows r (row_ok) of |s[r][e]|, 0 without any: the
// thread's part of the column amax (exact, so any order of rows gives the same value; a
// non-finite element makes its head refused before the maxima are used).
template <int RPT, int CPL>
__device__ __forceinline__ void row_maxima(const float (&s)[RPT][CPL], const bool (&row_ok)[RPT],
                                           float (&m)[CPL]) {
#pragma unroll
  for (int e = 0; e < CPL; ++e) m[e] = row_ok[0] ? fabsf(s[0][e]) : 0.0f;
#pragma unroll
  for (int r = 1; r < RPT; ++r)
    if (row_ok[r]) {
#pragma unroll
      for (int e = 0; e < CPL; ++e) m[e] = fmaxf(m[e], fabsf(s[r][e]));
    }
}

// Codes of CPL elements in the store's packing: 4 int8 / E4M3 codes or 2 bf16 values per word.
template <Store ST, int CPL>
struct Packed {
  static constexpr int kWords = ST == Store::bf16 ? CPL / 2 : CPL / 4;
};

// Element e of a packed chunk as fp32: code * scale (int8: two codes made exact halves by one
// byte permute and one half2 subtraction, then fp32), E4M3 * scale (exact conversion through half),
// or the bf16 value. Equal to ws_int_decode / ws_fp8_e4m3_decode(c) * s / ws_bf16_decode.
template <Store ST, int CPL>
__device__ __forceinline__ void decode_chunk(const uint32_t (&w)[Packed<ST, CPL>::kWords],
                                             const float (&s)[CPL], float (&x)[CPL]) {
  if constexpr (ST == Store::bf16) {
#pragma unroll
    for (int c = 0; c < CPL / 2; ++c) {
      x[2 * c] = __uint_as_float(w[c] << 16);
      x[2 * c + 1] = __uint_as_float(w[c] & 0xFFFF0000u);
    }
  } else if constexpr (ST == Store::int8) {
#pragma unroll
    for (int c = 0; c < CPL / 4; ++c) {
      const uint32_t biased = w[c] ^ 0x80808080u;  // code + 128 in each byte
      // Two codes per half2: byte b under the exponent byte 0x64 is the half 1024 + b, exact, and
      // minus 1152 the code itself (|code| <= 128: integers are exact in half below 2048).
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const uint32_t two = __byte_perm(biased, 0x64646464u, hh ? 0x4342u : 0x4140u);
        __half2 halves;
        memcpy(&halves, &two, sizeof two);
        const __half2 codes = __hsub2(halves, __half2half2(__ushort_as_half(0x6480u)));
        const float2 f = __half22float2(codes);
        x[4 * c + 2 * hh] = __fmul_rn(f.x, s[4 * c + 2 * hh]);
        x[4 * c + 2 * hh + 1] = __fmul_rn(f.y, s[4 * c + 2 * hh + 1]);
      }
    }
  } else {
#pragma unroll
    for (int c = 0; c < CPL / 4; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>(w[c] >> (16 * h)), __NV_E4M3);
        const float2 f = __half22float2(__half2(r));
        x[4 * c + 2 * h] = __fmul_rn(f.x, s[4 * c + 2 * h]);
        x[4 * c + 2 * h + 1] = __fmul_rn(f.y, s[4 * c + 2 * h + 1]);
      }
  }
}

// Encodes CPL elements x of one row chunk starting at element index `element` (a multiple of 4)
// with column scales s (and reciprocals inv = 1 / s) into packed codes, as the element codecs
// of element_codec.h: RNE int8 and E4M3 the cheap way of kernels/codec/rounding.cuh (proved there
// to give the division's code for amax-derived scales), with the division for a chunk where the
// cheap way cannot decide (encode_chunk_or_divide);
// stochastic roundings by the element codec itself, with the Philox words of the chunk.
template <Store ST, int CPL, bool SR>
__device__ __forceinline__ void encode_chunk(const WsParams& p, const float (&x)[CPL],
                                             const float (&s)[CPL], const float (&inv)[CPL],
                                             Philox4x32Key key, uint32_t element, uint32_t pos,
                                             uint32_t seq, uint32_t (&w)[Packed<ST, CPL>::kWords]) {
  if constexpr (SR) {
#pragma unroll
    for (int c = 0; c < CPL / 4; ++c) {
      const Philox4x32Counter r = philox4x32_10(rounding_counter(element + 4u * c, pos, seq), key);
      const uint32_t rw[4] = {r.c0, r.c1, r.c2, r.c3};
      if constexpr (ST == Store::bf16) {
        w[2 * c] = ws_bf16_sr(x[4 * c], rw[0]) | (uint32_t{ws_bf16_sr(x[4 * c + 1], rw[1])} << 16);
        w[2 * c + 1] =
            ws_bf16_sr(x[4 * c + 2], rw[2]) | (uint32_t{ws_bf16_sr(x[4 * c + 3], rw[3])} << 16);
      } else {
        uint32_t b[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = 4 * c + e;
          if constexpr (ST == Store::int8)
            b[e] = static_cast<uint8_t>(ws_int8_sr(x[j], s[j], rw[e]));
          else
            b[e] = ws_fp8_e4m3_sr(ws_div(x[j], s[j]), rw[e]);
        }
        w[c] = pack4(b[0], b[1], b[2], b[3]);
      }
    }
    return;
  }
  if constexpr (ST == Store::bf16) {
#pragma unroll
    for (int c = 0; c < CPL / 2; ++c)
      w[c] = ws_bf16_rne(x[2 * c]) | (uint32_t{ws_bf16_rne(x[2 * c + 1])} << 16);
  } else {
    uint32_t q[CPL];
    encode_chunk_or_divide<ST == Store::int8 ? Kind::int8 : Kind::fp8, CPL>(x, s, inv, q);
#pragma unroll
    for (int c = 0; c < CPL / 4; ++c)
      w[c] = pack4(q[4 * c], q[4 * c + 1], q[4 * c + 2], q[4 * c + 3]);
  }
}

}  // namespace
}  // namespace statecheck::cuda
