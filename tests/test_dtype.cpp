// bf16 and OCP FP8 E4M3 conversions against independently derived values.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "core/dtype/bf16.h"
#include "core/dtype/fp8_e4m3.h"

using namespace statecheck;

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(round_to_bf16(1.0f + 0x1.0p-8f), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd mantissa) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1.0p-8f), 1.0f + 0x1.0p-6f);
  // Just above the half goes up, just below goes down.
  EXPECT_EQ(round_to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f), 1.0f + 0x1.0p-7f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1.0p-8f - 0x1.0p-20f), 1.0f);
  EXPECT_EQ(bf16_bits_from_float(-2.0f), 0xC000);
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
  EXPECT_TRUE(std::isinf(round_to_bf16(INFINITY)));
  // Largest float rounds up to infinity (round to nearest, overflow).
  EXPECT_TRUE(std::isinf(round_to_bf16(3.4028235e38f)));
}

TEST(Bf16, RelativeErrorAtMostTwoToMinusEight) {
  for (float x = 1e-30f; x < 1e30f; x *= 1.0137f) {
    EXPECT_LE(std::fabs(round_to_bf16(x) - x), std::ldexp(std::fabs(x), -8)) << x;
  }
}

// Independent decode: build the fp32 bit pattern of the E4M3 value directly.
static float e4m3_by_bits(uint8_t code) {
  const uint32_t sign = (code & 0x80u) ? 0x80000000u : 0u;
  const int e = (code >> 3) & 0xF, m = code & 7;
  if (e == 0xF && m == 7) return NAN;
  if (e == 0) {
    // subnormal m * 2^-9: exact in fp32 as a normal number (or zero)
    float v = static_cast<float>(m) / 512.0f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  const uint32_t bits =
      sign | (static_cast<uint32_t>(e - 7 + 127) << 23) | (static_cast<uint32_t>(m) << 20);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

TEST(Fp8E4m3, DecodeTableAll256Codes) {
  for (int code = 0; code < 256; ++code) {
    const float a = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    const float b = e4m3_by_bits(static_cast<uint8_t>(code));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << "code " << code;
      EXPECT_TRUE((code & 0x7F) == 0x7F) << "only S.1111.111 is NaN, code " << code;
    } else {
      EXPECT_EQ(a, b) << "code " << code;
    }
  }
  // Hand-checked anchors (OCP OFP8 spec table): 1.0, max normal, min normal, min subnormal.
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), 0x1.0p-6f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), 0x1.0p-9f);
  EXPECT_EQ(fp8_e4m3_to_float(0xFE), -448.0f);
  // Codes 0..0x7E are strictly increasing.
  for (int code = 1; code <= 0x7E; ++code)
    EXPECT_LT(fp8_e4m3_to_float(code - 1), fp8_e4m3_to_float(code)) << code;
}

TEST(Fp8E4m3, EncodeRoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    const uint8_t back = fp8_e4m3_from_float(v);
    if (v == 0.0f)
      EXPECT_EQ(back & 0x7F, 0);
    else
      EXPECT_EQ(back, code) << v;
  }
}

TEST(Fp8E4m3, SaturatesAt448) {
  EXPECT_EQ(fp8_e4m3_from_float(448.0f), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(460.0f), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(1e6f), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_float(-1e6f), 0xFE);
  EXPECT_EQ(fp8_e4m3_from_float(INFINITY), 0x7E);
}

TEST(Fp8E4m3, RoundsToNearestEven) {
  // Between 1.0 (0x38, mantissa 0) and 1.125 (0x39): the midpoint 1.0625 goes to even (1.0).
  EXPECT_EQ(fp8_e4m3_from_float(1.0625f), 0x38);
  // Between 1.125 (0x39, odd) and 1.25 (0x3A, even): midpoint 1.1875 goes to 1.25.
  EXPECT_EQ(fp8_e4m3_from_float(1.1875f), 0x3A);
  // Subnormal midpoint 1.5 * 2^-9 between 2^-9 (odd) and 2^-8 (even).
  EXPECT_EQ(fp8_e4m3_from_float(1.5f * 0x1.0p-9f), 0x02);
  // Half the smallest subnormal rounds to zero (tie to even 0).
  EXPECT_EQ(fp8_e4m3_from_float(0x1.0p-10f), 0x00);
  // Every value's encoding is a nearest code.
  for (float x = 1e-4f; x < 440.0f; x *= 1.013f) {
    const float y = fp8_e4m3_to_float(fp8_e4m3_from_float(x));
    const uint8_t c = fp8_e4m3_from_float(x);
    const float lo = c > 0 ? fp8_e4m3_to_float(c - 1) : y;
    EXPECT_LE(std::fabs(y - x), std::fabs(lo - x)) << x;
    if (c < 0x7E) {
      EXPECT_LE(std::fabs(y - x), std::fabs(fp8_e4m3_to_float(c + 1) - x)) << x;
    }
  }
}
