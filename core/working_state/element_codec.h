// The element-wise encode and decode of every working-state format (docs/working_state.md,
// "Formats"), as plain functions on scalars, shared bit for bit by the CPU reference and the CUDA
// kernels (WS_HD: host and device under nvcc). No Eigen, containers or exceptions: callers check
// inputs (finite values, shapes) before they get here.
//
// All arithmetic is fp32 with IEEE round-to-nearest-even (the division and the addition use the
// _rn intrinsics on the device so the kernels match without relying on compiler flags).
//   bf16     RNE:  bits(x) + 0x7FFF + lsb, low 16 bits dropped (the bf16 cast of core/dtype/bf16.h)
//   bf16-sr:       bits(x) + (r & 0xFFFF), low 16 bits dropped; a carry into the all-ones
//                  exponent saturates to the largest finite bf16 (0x7F7F) of x's sign
//   int8     RNE:  clamp(rint(x / s), -127, 127)           (the checkpoint codec's int8_code);
//                  the decode kernels take rint(x * fl(1 / s)) of the exact product instead
//                  (ws_int8_rne_recip)
//   int8-sr:       clamp(floor(x / s + u), -127, 127),     u = (r >> 8) * 2^-24
//   fp8_e4m3 RNE:  OCP E4M3 of y = x / s, ties to even, |y| >= 448 saturates to +-448
//   fp8_e4m3-sr:   E4M3 neighbours lo <= |y| < hi: away from zero (hi) iff u < (|y| - lo) / gap,
//                  sign kept; |y| >= 448 saturates
//   int4 (EF residual): clamp(rint(e / s), -7, 7)
// with r the Philox word of the element (philox.h) and s the column scale (ws_column_scale).
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cmath>
#include <cstring>
#endif

#include "core/working_state/host_device.h"
#include "core/working_state/philox.h"

namespace statecheck {

WS_HD uint32_t ws_float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

WS_HD double ws_bits_double(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

WS_HD float ws_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// fp32 x / y, rounded to nearest even.
WS_HD float ws_div(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(x, y);
#else
  return x / y;
#endif
}

// fp32 x + y, rounded to nearest even.
WS_HD float ws_add(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  return x + y;
#endif
}

// fp32 x - y, rounded to nearest even (never contracted with a neighbouring product).
WS_HD float ws_sub(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(x, y);
#else
  return x - y;
#endif
}

// fp32 x * y, rounded to nearest even (never contracted into a fused multiply-add).
WS_HD float ws_mul(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}

// Nearest integer, ties to even (the default rounding mode on the host).
WS_HD float ws_rint(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

WS_HD float ws_floor(float x) {
#if defined(__CUDA_ARCH__)
  return floorf(x);
#else
  return std::floor(x);
#endif
}

WS_HD float ws_clamp(float x, float lo, float hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// ---- bf16 -----------------------------------------------------------------------------------

// fp32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet bit set), overflow gives +-Inf.
WS_HD uint16_t ws_bf16_rne(float x) {
  const uint32_t u = ws_float_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// fp32 -> bf16 bits, stochastic rounding with word r (finite x): the kept bits round away from
// zero with probability (dropped bits) / 2^16, so E[decode] = x. A result past the largest finite
// bf16 saturates to 0x7F7F (sign kept).
WS_HD uint16_t ws_bf16_sr(float x, uint32_t r) {
  const uint32_t u = ws_float_bits(x);
  const uint32_t t = (u + (r & 0xFFFFu)) & 0xFFFF0000u;
  if ((t & 0x7F800000u) == 0x7F800000u)
    return static_cast<uint16_t>(((u & 0x80000000u) >> 16) | 0x7F7Fu);
  return static_cast<uint16_t>(t >> 16);
}

WS_HD float ws_bf16_decode(uint16_t b) {
  return ws_bits_float(static_cast<uint32_t>(b) << 16);
}

// ---- column scales --------------------------------------------------------------------------

// Scale of one key channel from its amax (max_i |S[i, j]| >= 0, finite): 1 for a zero column
// (all codes are then 0), else max(amax, 1e-8) / code_max in fp32, then rounded to bf16 (RNE)
// when bf16_scale. code_max: 127 (int8), 448 (fp8_e4m3), 7 (int4 residual).
WS_HD float ws_column_scale(float amax, float code_max, bool bf16_scale) {
  if (amax == 0.0f) return 1.0f;
  const float s = ws_div(amax < 1e-8f ? 1e-8f : amax, code_max);
  return bf16_scale ? ws_bf16_decode(ws_bf16_rne(s)) : s;
}

// ---- int8 and int4 --------------------------------------------------------------------------

WS_HD int8_t ws_int8_rne(float x, float scale) {
  return static_cast<int8_t>(ws_rint(ws_clamp(ws_div(x, scale), -127.0f, 127.0f)));
}

// fp32 x * y + z with one rounding (to nearest even).
WS_HD float ws_fma(float x, float y, float z) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(x, y, z);
#else
  return std::fma(x, y, z);
#endif
}

// The decode kernels' int8 RNE code of x for the reciprocal scale inv = fl(1 / s): rint of the
// exact product x inv, ties to even, from one fused multiply-add onto 1.5 * 2^23 (where floats are
// integers: the low byte of the sum's bits is the code in two's complement). It differs from
// ws_int8_rne (rint of fl(x / s)) only where x / s lies within about 2^-24 |x / s| of a
// half-integer. Precondition (the caller's): x finite and |x inv| < 127.5; outside it the code
// wraps modulo 256 and a non-finite x gives an arbitrary byte. Amax-derived scales meet it without
// a clamp: |x| <= amax, s = amax / 127 rounded to fp32 (or further to bf16, relative error below
// 2^-8) give |x inv| <= 127 (1 + 2^-24)^2 / (1 - 2^-8), below 127.499.
WS_HD int8_t ws_int8_rne_recip(float x, float inv) {
  return static_cast<int8_t>(ws_float_bits(ws_fma(x, inv, 12582912.0f)) & 0xFFu);
}

WS_HD int8_t ws_int8_sr(float x, float scale, uint32_t r) {
  const float y = ws_clamp(ws_div(x, scale), -127.0f, 127.0f);
  return static_cast<int8_t>(ws_clamp(ws_floor(ws_add(y, rounding_uniform(r))), -127.0f, 127.0f));
}

WS_HD float ws_int_decode(int code, float scale) {
  return ws_mul(static_cast<float>(code), scale);
}

// int4 code in [-7, 7] of a residual e for its column scale, round to nearest even.
WS_HD int8_t ws_int4_rne(float e, float scale) {
  return static_cast<int8_t>(ws_rint(ws_clamp(ws_div(e, scale), -7.0f, 7.0f)));
}

// ---- fp8 E4M3 -------------------------------------------------------------------------------

// E4M3 code -> fp32 (exact); 0x7F and 0xFF decode to NaN.
WS_HD float ws_fp8_e4m3_decode(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu, m = c & 0x7u;
  if (e == 0xFu && m == 0x7u) return ws_bits_float(0x7FC00000u);
  if (e == 0)
    return ws_bits_float(sign | ws_float_bits(ws_mul(static_cast<float>(m), 0.001953125f)));
  return ws_bits_float(sign | ((e + 120u) << 23) | (m << 20));  // rebias 7 -> 127
}

// E4M3 code of y, round to nearest even, |y| >= 448 (and +-Inf) saturating to +-448, NaN -> 0x7F.
// Normal range: the fp32 significand rounded to 3 bits at bit 20 (a carry moves the exponent);
// subnormal range (|y| < 2^-6): multiples of 2^-9, |y| * 512 exact.
WS_HD uint8_t ws_fp8_e4m3_rne(float y) {
  const uint32_t u = ws_float_bits(y);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (a >= 0x43E00000u) return sign | 0x7Eu;  // 448
  if (a < 0x3C800000u)                        // 2^-6
    return sign | static_cast<uint8_t>(ws_rint(ws_mul(ws_bits_float(a), 512.0f)));
  const uint32_t rounded = a + 0x7FFFFu + ((a >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded >> 20) - (120u << 3));
}

// E4M3 code of y, stochastic rounding with word r: with lo <= |y| < hi the neighbouring E4M3
// magnitudes and gap = hi - lo, the magnitude rounds to hi iff u < (|y| - lo) / gap (exact in
// fp32: |y| - lo is exact within a binade, gap a power of two), so E[decode] = y up to the 2^-24
// resolution of u. |y| >= 448 saturates to +-448; NaN -> 0x7F.
WS_HD uint8_t ws_fp8_e4m3_sr(float y, uint32_t r) {
  const uint32_t u = ws_float_bits(y);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (a >= 0x43E00000u) return sign | 0x7Eu;
  const float uniform = rounding_uniform(r);
  if (a < 0x3C800000u) {
    const float t = ws_mul(ws_bits_float(a), 512.0f);  // exact, < 8
    const float lo = ws_floor(t);
    const uint32_t code = static_cast<uint32_t>(lo) + (uniform < ws_sub(t, lo) ? 1u : 0u);
    return sign | static_cast<uint8_t>(code);
  }
  const uint32_t lo_bits = a & 0xFFF00000u;
  const float gap = ws_bits_float(((a >> 23) - 3u) << 23);  // 2^(E - 3)
  const float fraction = ws_div(ws_sub(ws_bits_float(a), ws_bits_float(lo_bits)), gap);
  const uint32_t code = ((lo_bits >> 20) - (120u << 3)) + (uniform < fraction ? 1u : 0u);
  return sign | static_cast<uint8_t>(code);
}

}  // namespace statecheck
