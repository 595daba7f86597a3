// The scalar fp32 operations of the working-state decode kernels' token step, callable from host
// and device code (WS_HD), so that the CPU reference (ws_decode_reference.cpp) and the kernels
// (ws_decode.cu) compute every rounding of the step alike: explicit round-to-nearest-even
// multiplies, adds and fused multiply-adds (the _rn intrinsics on the device, plain fp32
// operators and std::fma on the host, whose code is compiled with -ffp-contract=off), IEEE
// square root, and an exponential built from those operations only, because the device expf and
// the host libm expf round differently.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "core/working_state/element_codec.h"
#include "core/working_state/host_device.h"

namespace statecheck::wsk {

// Round-to-nearest-even multiply, add and subtract: the element codecs' own (element_codec.h).
WS_HD float mul(float a, float b) {
  return ws_mul(a, b);
}
WS_HD float add(float a, float b) {
  return ws_add(a, b);
}
WS_HD float sub(float a, float b) {
  return ws_sub(a, b);
}

// a * b + c with one rounding.
WS_HD float fma(float a, float b, float c) {
  return ws_fma(a, b, c);
}

WS_HD float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// e^x in fp32 for the log-space gates: x = n ln 2 + r with n = rint(x log2 e) (by the magic-number
// fused multiply-add) and |r| <= ln 2 / 2 (Cody-Waite: ln 2 split into a 16-bit head and a tail),
// e^r by the degree-7 Taylor polynomial in Horner form (truncation below 5.3e-9 relative; with the
// roundings of the evaluation the result is within about 2 ulp of e^x), scaled by 2^n through the
// exponent bits, in two steps where 2^n alone would be subnormal. Returns 0 for x <= -104 (e^x
// is below the smallest subnormal), +Inf above 88.8, NaN for NaN.
WS_HD float exp(float x) {
  if (x != x) return x;
  if (x <= -104.0f) return 0.0f;
  if (x > 88.8f) return ws_bits_float(0x7F800000u);
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float t = fma(x, 1.44269502f, kMagic);
  const float n = sub(t, kMagic);
  float r = fma(n, -0.693145751953125f, x);  // ln 2 head: 0x3F317200
  r = fma(n, -1.42860677e-06f, r);           // ln 2 - head
  float p = 1.98412701e-04f;                 // 1/5040
  p = fma(p, r, 1.38888892e-03f);            // 1/720
  p = fma(p, r, 8.33333377e-03f);            // 1/120
  p = fma(p, r, 4.16666679e-02f);            // 1/24
  p = fma(p, r, 1.66666672e-01f);            // 1/6
  p = fma(p, r, 0.5f);
  p = fma(p, r, 1.0f);
  p = fma(p, r, 1.0f);
  const int ni = static_cast<int>(n);
  if (ni > 127) return mul(mul(p, ws_bits_float(254u << 23)), 2.0f);
  if (ni < -126)
    return mul(mul(p, ws_bits_float(static_cast<uint32_t>(ni + 64 + 127) << 23)),
               ws_bits_float(static_cast<uint32_t>(-64 + 127) << 23));
  return mul(p, ws_bits_float(static_cast<uint32_t>(ni + 127) << 23));
}

// ---- The int8 step's dot products on codes (ws_decode_reference.h, "int8 RNE") ---------------
// The two dot products of a stored int8 row with the token's column vectors (x_j = a_j sc_j k_j,
// and the same with q) are taken on the codes, exactly: x is scaled by a power of two 2^E to
// integers n_j = rint(x_j 2^E) with max |n_j| in [2^21, 2^22] (22 bits of the largest |x_j|), each
// n_j split into three signed base-256 digits (n = 65536 d0 + 256 d1 + d2, each in [-128, 127]),
// and the integer sums D_p = sum_j c_j d_pj (|D_p| < 2^21: exact in int32, in fp32 and in any
// order, so tensor cores, dp4a and the host all give the same bits) recombined once:
// dot = fl(65536 D0 + 256 D1 + D2) 2^-E. Error against the exact sum_j c_j x_j: at most
// 0.5 sum_j |c_j| 2^-E (the rounding of n_j, <= 2^-22 max |x| per unit of code) plus one fp32
// rounding.

// E for a vector whose largest magnitude is K (finite, >= 0): K 2^E in [2^21, 2^22); 0 for K = 0.
// K in [2^(ex - 1), 2^ex) with ex from frexp, so E = 22 - ex, in [-106, 170].
WS_HD int dot_shift(float K) {
  if (K == 0.0f) return 0;
  int ex = 0;
#if defined(__CUDA_ARCH__)
  frexpf(K, &ex);
#else
  std::frexp(K, &ex);
#endif
  return 22 - ex;
}

// The three base-256 digits of n = rint(x 2^E) (|x| 2^E <= 2^22), round to nearest even in fp64
// where x 2^E is exact: d2 = n mod 256 in [-128, 127], then d1 the same of (n - d2) / 256, d0 =
// the rest, |d0| <= 64.
WS_HD void dot_digits(float x, int E, int& d0, int& d1, int& d2) {
  const double p2 = ws_bits_double(static_cast<uint64_t>(1023 + E) << 52);
#if defined(__CUDA_ARCH__)
  const int n = __double2int_rn(static_cast<double>(x) * p2);
#else
  const int n = static_cast<int>(std::nearbyint(static_cast<double>(x) * p2));
#endif
  d2 = ((n + 128) & 255) - 128;
  const int n1 = (n - d2) / 256;
  d1 = ((n1 + 128) & 255) - 128;
  d0 = (n1 - d1) / 256;
}

// fl(65536 D0 + 256 D1 + D2) 2^-E: the integer sum exact in int64, rounded once to fp32 (RNE),
// then scaled by the power of two (exact unless the result is subnormal; in two steps for E > 126).
WS_HD float dot_value(int D0, int D1, int D2, int E) {
  const int64_t n = static_cast<int64_t>(D0) * 65536 + static_cast<int64_t>(D1) * 256 + D2;
#if defined(__CUDA_ARCH__)
  const float f = __ll2float_rn(n);
#else
  const float f = static_cast<float>(n);
#endif
  if (E <= 126) return mul(f, ws_bits_float(static_cast<uint32_t>(127 - E) << 23));
  return mul(mul(f, ws_bits_float(1u << 23)), ws_bits_float(static_cast<uint32_t>(253 - E) << 23));
}

}  // namespace statecheck::wsk
