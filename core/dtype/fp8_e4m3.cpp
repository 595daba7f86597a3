#include "core/dtype/fp8_e4m3.h"

#include <cmath>
#include <limits>

namespace statecheck {

float fp8_e4m3_to_float(uint8_t code) {
  const bool negative = (code & 0x80u) != 0;
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 7 - 3);
  }
  return negative ? -magnitude : magnitude;
}

uint8_t fp8_e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  const float a = std::fabs(x);
  if (a >= kFp8E4m3Max) return sign | 0x7Eu;  // saturate (also +-Inf)
  if (a < 0x1.0p-6f) {
    // Subnormal range: multiples of 2^-9. a * 512 is exact (power-of-two scaling, no underflow).
    // rint rounds half to even under the default rounding mode; 8 * 2^-9 = 2^-6 is code 0x08,
    // the smallest normal, so a round-up into the normal range needs no special case.
    const int m = static_cast<int>(std::nearbyint(a * 512.0f));
    return sign | static_cast<uint8_t>(m);
  }
  int e2 = 0;
  const float fraction = std::frexp(a, &e2);  // a = fraction * 2^e2, fraction in [0.5, 1)
  int exponent = e2 - 1;                      // a = 1.f * 2^exponent, exponent in [-6, 8]
  // Significand scaled to [8, 16): exact (power-of-two scaling of a float).
  int q = static_cast<int>(std::nearbyint(std::ldexp(fraction, 4)));
  if (q == 16) {
    q = 8;
    exponent += 1;
  }
  const int biased = exponent + 7;
  uint8_t code = static_cast<uint8_t>((biased << 3) | (q - 8));
  if (code > 0x7E) code = 0x7E;  // a < 448 cannot reach here, kept as a guard
  return sign | code;
}

}  // namespace statecheck
