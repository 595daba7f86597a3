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

}  // namespace statecheck::wsk
