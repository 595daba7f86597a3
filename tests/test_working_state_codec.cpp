// The element-wise working-state encodes (core/working_state/element_codec.h) and the column
// store (column_store.h): hand-computed cases, the existing core/dtype conversions as a second
// implementation, SR unbiasedness within 5 sigma, reproducibility, and the exact EF residual.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype/bf16.h"
#include "core/dtype/fp8_e4m3.h"
#include "core/util/rng.h"
#include "core/working_state/column_store.h"

using namespace statecheck;

namespace {
// The rounding word whose uniform is exactly `u` (u a multiple of 2^-24 in [0, 1)).
uint32_t word_for(double u) {
  return static_cast<uint32_t>(std::ldexp(u, 24)) << 8;
}
}  // namespace

TEST(WsBf16, RneHandValuesAndAgreesWithDtypeCast) {
  EXPECT_EQ(ws_bf16_decode(ws_bf16_rne(1.0f + 0x1.0p-8f)), 1.0f);  // tie -> even
  EXPECT_EQ(ws_bf16_decode(ws_bf16_rne(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  Rng rng(7);
  for (int n = 0; n < 100000; ++n) {
    const float x =
        static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.uniform(-40, 40))));
    ASSERT_EQ(ws_bf16_rne(x), bf16_bits_from_float(x)) << x;
  }
}

TEST(WsBf16, StochasticHandValues) {
  // 1 + 2^-9 has dropped bits 0x4000: it rounds up iff (r & 0xFFFF) >= 0xC000.
  const float x = 1.0f + 0x1.0p-9f;
  EXPECT_EQ(ws_bf16_decode(ws_bf16_sr(x, 0xBFFFu)), 1.0f);
  EXPECT_EQ(ws_bf16_decode(ws_bf16_sr(x, 0xC000u)), 1.0f + 0x1.0p-7f);
  EXPECT_EQ(ws_bf16_decode(ws_bf16_sr(-x, 0xC000u)), -(1.0f + 0x1.0p-7f));  // magnitude rounds
  // High bits of r are ignored.
  EXPECT_EQ(ws_bf16_sr(x, 0xABCD0000u | 0xC000u), ws_bf16_sr(x, 0xC000u));
  // The largest finite float rounding up saturates to the largest finite bf16, sign kept.
  EXPECT_EQ(ws_bf16_sr(3.4028235e38f, 0xFFFFu), 0x7F7Fu);
  EXPECT_EQ(ws_bf16_sr(-3.4028235e38f, 0xFFFFu), 0xFF7Fu);
  // bf16-representable values are kept for every r.
  EXPECT_EQ(ws_bf16_decode(ws_bf16_sr(1.5f, 0xFFFFu)), 1.5f);
}

TEST(WsScale, ColumnScaleRules) {
  EXPECT_EQ(ws_column_scale(0.0f, 127.0f, false), 1.0f);  // zero column
  EXPECT_EQ(ws_column_scale(127.0f, 127.0f, false), 1.0f);
  EXPECT_EQ(ws_column_scale(1e-12f, 127.0f, false), 1e-8f / 127.0f);  // floor of amax
  EXPECT_EQ(ws_column_scale(1.0f, 127.0f, true), round_to_bf16(1.0f / 127.0f));
  EXPECT_EQ(ws_column_scale(448.0f, 448.0f, false), 1.0f);
}

TEST(WsInt8, RneAndStochasticHandValues) {
  EXPECT_EQ(ws_int8_rne(2.5f, 1.0f), 2);  // ties to even
  EXPECT_EQ(ws_int8_rne(3.5f, 1.0f), 4);
  EXPECT_EQ(ws_int8_rne(-2.5f, 1.0f), -2);
  EXPECT_EQ(ws_int8_rne(1000.0f, 1.0f), 127);  // clamp
  EXPECT_EQ(ws_int8_rne(-1000.0f, 1.0f), -127);
  EXPECT_EQ(ws_int8_rne(0.75f, 0.25f), 3);
  // floor(2.25 + u): 2 for u < 0.75, 3 from u = 0.75. The fp32 sum is rounded before the floor
  // (ulp 2^-22 near 3), so u = 0.75 - 2^-24 already gives 3; 0.75 - 2^-20 is exact and gives 2.
  EXPECT_EQ(ws_int8_sr(2.25f, 1.0f, word_for(0.5)), 2);
  EXPECT_EQ(ws_int8_sr(2.25f, 1.0f, word_for(0.75 - 0x1.0p-20)), 2);
  EXPECT_EQ(ws_int8_sr(2.25f, 1.0f, word_for(0.75 - 0x1.0p-24)), 3);
  EXPECT_EQ(ws_int8_sr(2.25f, 1.0f, word_for(0.75)), 3);
  EXPECT_EQ(ws_int8_sr(-2.25f, 1.0f, word_for(0.25 - 0x1.0p-20)), -3);
  EXPECT_EQ(ws_int8_sr(-2.25f, 1.0f, word_for(0.25)), -2);
  EXPECT_EQ(ws_int8_sr(127.0f, 1.0f, word_for(0.99)), 127);  // clamp
  EXPECT_EQ(ws_int_decode(-64, 0.5f), -32.0f);
  EXPECT_EQ(ws_int4_rne(3.5f, 1.0f), 4);
  EXPECT_EQ(ws_int4_rne(9.0f, 1.0f), 7);
  EXPECT_EQ(ws_int4_rne(-9.0f, 1.0f), -7);
}

// The decode kernels' int8 encode (ws_int8_rne_recip) against rint of the exact product x inv,
// taken in fp64 (exact: 24 x 24 bits) with ties to even: equal on hand cases (ties, negative
// codes in two's complement), on random values of random amax-derived scales (fp32 and bf16),
// on each column's amax itself (the code is then 127, or 126 where a bf16 scale rounded up, for
// amax above the scale's floor of 1e-8) and on
// values a few ulp around every half-integer boundary; never outside [-127, 127]. Against the
// division (ws_int8_rne) the codes differ only next to a boundary: none of the random values.
TEST(WsInt8, RecipEncodeRoundsTheExactProduct) {
  const auto exact = [](float x, float inv) {
    return static_cast<int>(std::nearbyint(static_cast<double>(x) * static_cast<double>(inv)));
  };
  EXPECT_EQ(ws_int8_rne_recip(2.5f, 1.0f), 2);
  EXPECT_EQ(ws_int8_rne_recip(3.5f, 1.0f), 4);
  EXPECT_EQ(ws_int8_rne_recip(-2.5f, 1.0f), -2);
  EXPECT_EQ(ws_int8_rne_recip(-127.0f, 1.0f), -127);
  EXPECT_EQ(static_cast<uint8_t>(ws_int8_rne_recip(-127.0f, 1.0f)), 0x81);
  EXPECT_EQ(ws_int8_rne_recip(0.75f, 4.0f), 3);
  EXPECT_EQ(ws_int8_rne_recip(0.0f, 1.0f), 0);
  Rng rng(23);
  long random_differ = 0;
  for (int n = 0; n < 200000; ++n) {
    const bool bf16 = n % 2 == 1;
    const float amax = static_cast<float>(
        std::ldexp(rng.uniform(1.0, 2.0), static_cast<int>(rng.uniform(-30, 10))));
    const float s = ws_column_scale(amax, 127.0f, bf16), inv = 1.0f / s;
    const float x = static_cast<float>(rng.uniform(-1.0, 1.0)) * amax;
    ASSERT_EQ(ws_int8_rne_recip(x, inv), exact(x, inv)) << "x " << x << " s " << s;
    random_differ += ws_int8_rne_recip(x, inv) != ws_int8_rne(x, s);
    for (float edge : {amax, -amax}) {
      const int code = ws_int8_rne_recip(edge, inv);
      ASSERT_EQ(code, exact(edge, inv));
      if (amax < 1e-8f)  // the scale's floor: 1e-8 / 127
        ASSERT_LE(std::abs(code), 127);
      else
        ASSERT_TRUE(bf16 ? (std::abs(code) == 127 || std::abs(code) == 126) : std::abs(code) == 127)
            << "amax " << amax << " code " << code;
    }
  }
  EXPECT_EQ(random_differ, 0);
  long near = 0, ties_split = 0;
  for (int k = -127; k < 127; ++k)
    for (int n = 0; n < 40; ++n) {
      const float amax = static_cast<float>(std::ldexp(rng.uniform(1.0, 2.0), -3));
      const float sc = ws_column_scale(amax, 127.0f, n % 2 == 1), inv = 1.0f / sc;
      float x = static_cast<float>((k + 0.5) * static_cast<double>(sc));
      for (int u = static_cast<int>(rng.uniform(-6, 6)); u != 0; u += u > 0 ? -1 : 1)
        x = std::nextafter(x, u > 0 ? INFINITY : -INFINITY);
      if (std::fabs(x) > amax) continue;
      const int code = ws_int8_rne_recip(x, inv);
      ASSERT_EQ(code, exact(x, inv)) << "x " << x << " s " << sc;
      ASSERT_LE(std::abs(code), 127);
      ++near;
      ties_split += code != ws_int8_rne(x, sc);
    }
  EXPECT_GT(near, 5000);
  EXPECT_GT(ties_split, 0);  // the test reached values where the product and the division part
}

TEST(WsFp8, RneHandValues) {
  EXPECT_EQ(ws_fp8_e4m3_rne(1.0f), 0x38);
  EXPECT_EQ(ws_fp8_e4m3_rne(1.0625f), 0x38);  // halfway 1 and 1.125 -> even (1)
  EXPECT_EQ(ws_fp8_e4m3_rne(1.1875f), 0x3A);  // halfway 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(ws_fp8_e4m3_rne(-448.0f), 0xFE);
  EXPECT_EQ(ws_fp8_e4m3_rne(500.0f), 0x7E);  // saturates
  EXPECT_EQ(ws_fp8_e4m3_rne(INFINITY), 0x7E);
  EXPECT_EQ(ws_fp8_e4m3_rne(0x1.0p-10f), 0x00);      // half the smallest subnormal -> 0 (even)
  EXPECT_EQ(ws_fp8_e4m3_rne(3 * 0x1.0p-10f), 0x02);  // 1.5 subnormal steps -> 2
  EXPECT_EQ(ws_fp8_e4m3_rne(0x1.0p-6f - 0x1.0p-11f), 0x08);  // rounds up into the normal range
  EXPECT_EQ(ws_fp8_e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(ws_fp8_e4m3_decode(0x01), 0x1.0p-9f);
  EXPECT_TRUE(std::isnan(ws_fp8_e4m3_decode(0x7F)));
}

TEST(WsFp8, RneAgreesWithDtypeEncoderOnEveryCodeBoundary) {
  // The frexp-based encoder of core/dtype is a second implementation: compare on every code's
  // value, every midpoint between neighbours, one fp32 ulp either side, and random values.
  for (int c = 0; c < 0x7F; ++c) {
    const float lo = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    const float hi = c + 1 < 0x7F ? fp8_e4m3_to_float(static_cast<uint8_t>(c + 1)) : 480.0f;
    const float mid = 0.5f * (lo + hi);
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      ASSERT_EQ(ws_fp8_e4m3_rne(x), fp8_e4m3_from_float(x)) << x;
      ASSERT_EQ(ws_fp8_e4m3_rne(-x), fp8_e4m3_from_float(-x)) << -x;
    }
    ASSERT_EQ(ws_fp8_e4m3_decode(static_cast<uint8_t>(c)), lo);
    ASSERT_EQ(ws_fp8_e4m3_decode(static_cast<uint8_t>(c | 0x80)), fp8_e4m3_to_float(c | 0x80));
  }
  Rng rng(11);
  for (int n = 0; n < 100000; ++n) {
    const float x =
        static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.uniform(-14, 10))));
    ASSERT_EQ(ws_fp8_e4m3_rne(x), fp8_e4m3_from_float(x)) << x;
  }
}

TEST(WsFp8, StochasticHandValues) {
  // 1 + 1/32 lies a quarter of the way from 1 to 1.125: away from zero iff u < 0.25.
  EXPECT_EQ(ws_fp8_e4m3_sr(1.03125f, word_for(0.25 - 0x1.0p-24)), 0x39);
  EXPECT_EQ(ws_fp8_e4m3_sr(1.03125f, word_for(0.25)), 0x38);
  EXPECT_EQ(ws_fp8_e4m3_sr(-1.03125f, word_for(0.0)), 0xB9);
  // Subnormal: 2.5 steps of 2^-9 -> 2 or 3.
  EXPECT_EQ(ws_fp8_e4m3_sr(2.5f * 0x1.0p-9f, word_for(0.49)), 0x03);
  EXPECT_EQ(ws_fp8_e4m3_sr(2.5f * 0x1.0p-9f, word_for(0.5)), 0x02);
  // 7.5 subnormal steps round up into the smallest normal 2^-6 (code 0x08).
  EXPECT_EQ(ws_fp8_e4m3_sr(7.5f * 0x1.0p-9f, word_for(0.0)), 0x08);
  // Top binade: 440 between 416 and 448; saturation above.
  EXPECT_EQ(ws_fp8_e4m3_sr(440.0f, word_for(0.0)), 0x7E);
  EXPECT_EQ(ws_fp8_e4m3_sr(440.0f, word_for(0.9)), 0x7D);
  EXPECT_EQ(ws_fp8_e4m3_sr(1e6f, word_for(0.0)), 0x7E);
  // Representable values are kept for every u.
  EXPECT_EQ(ws_fp8_e4m3_sr(1.125f, word_for(1.0 - 0x1.0p-24)), 0x39);
}

// Mean of many SR draws of one value lies within 5 sigma of it, sigma = gap sqrt(p (1 - p) / N)
// for a value a fraction p of the gap above its lower neighbour; and the draw is a function of
// (key, element, token, sequence) only.
TEST(WsStochasticRounding, UnbiasedWithinFiveSigmaAndReproducible) {
  const int N = 200000;
  struct Case {
    const char* name;
    double x, gap, p;
  };
  const Case cases[] = {{"bf16-sr", 1.0 + 0x1.0p-9, 0x1.0p-7, 0.25},
                        {"int8-sr", 2.3, 1.0, 0.3},
                        {"fp8_e4m3-sr", 1.1, 0.125, 0.8}};
  for (const Case& c : cases) {
    const Philox4x32Key key = rounding_key(1234, 2, 3);
    double sum = 0.0;
    for (int n = 0; n < N; ++n) {
      const uint32_t element = static_cast<uint32_t>(n % 4096),
                     token = static_cast<uint32_t>(n / 4096);
      const uint32_t r = rounding_word(key, element, token, 0);
      ASSERT_EQ(r, rounding_word(key, element, token, 0));
      const float x = static_cast<float>(c.x);
      double d = 0.0;
      if (c.name[0] == 'b') d = ws_bf16_decode(ws_bf16_sr(x, r));
      if (c.name[0] == 'i') d = ws_int_decode(ws_int8_sr(x, 1.0f, r), 1.0f);
      if (c.name[0] == 'f') d = ws_fp8_e4m3_decode(ws_fp8_e4m3_sr(x, r));
      sum += d;
    }
    const double exact = static_cast<float>(c.x);
    const double sigma = c.gap * std::sqrt(c.p * (1.0 - c.p) / N);
    EXPECT_NEAR(sum / N, exact, 5.0 * sigma) << c.name;
  }
}

// A head of d_v = 3, d_k = 2 whose column amaxes make exact scales: column 0 amax 127 * 2^-7
// (scale 2^-7), column 1 amax 127 (scale 1). Codes by hand: rint(S / scale), ties to even.
TEST(WsStoreColumn, Int8HandComputedHead) {
  std::vector<float> S = {127.0f / 128, 5.5f, 2.5f / 128, -127.0f, -0.75f / 128, 0.5f};
  ws_store_head({WorkingStateKind::int8, false}, S.data(), nullptr, 3, 2, {{0, 0}, 0, 0});
  const std::vector<float> want = {127.0f / 128, 6.0f, 2.0f / 128, -127.0f, -1.0f / 128, 0.0f};
  for (size_t e = 0; e < S.size(); ++e) EXPECT_EQ(S[e], want[e]) << e;
}

TEST(WsStoreColumn, Fp8HandComputedColumn) {
  // amax 448 * 2^-4 gives scale 2^-4; values / scale = 448, 1.0625 (tie -> 1), -3.3 (-> -3.25).
  std::vector<float> S = {28.0f, 1.0625f / 16, -3.3f / 16};
  ws_store_head({WorkingStateKind::fp8_e4m3, false}, S.data(), nullptr, 3, 1, {{0, 0}, 0, 0});
  EXPECT_EQ(S[0], 28.0f);
  EXPECT_EQ(S[1], 1.0f / 16);
  EXPECT_EQ(S[2], -3.25f / 16);
}

TEST(WsStoreColumn, Fp32IsIdentityAndBf16IsTheCast) {
  Rng rng(3);
  std::vector<float> S(60 * 7);
  for (float& x : S) x = static_cast<float>(rng.normal());
  std::vector<float> a = S, b = S;
  ws_store_head({WorkingStateKind::fp32, false}, a.data(), nullptr, 60, 7, {{0, 0}, 0, 0});
  ws_store_head({WorkingStateKind::bf16, false}, b.data(), nullptr, 60, 7, {{0, 0}, 0, 0});
  for (size_t e = 0; e < S.size(); ++e) {
    EXPECT_EQ(ws_float_bits(a[e]), ws_float_bits(S[e]));
    EXPECT_EQ(b[e], round_to_bf16(S[e]));
  }
}

// Error feedback: the carried residual is the exact difference y - decode(codes) with
// y = S + e_prev (checked in fp64, where the subtraction has no rounding); int4 keeps that
// difference to within half its own step.
TEST(WsStoreColumn, ErrorFeedbackResidualIsTheExactDifference) {
  const int dv = 63, dk = 5;
  Rng rng(5);
  std::vector<float> S(dv * dk), e(dv * dk), e4(dv * dk);
  for (size_t n = 0; n < S.size(); ++n) {
    S[n] = static_cast<float>(0.06 * rng.normal());
    e[n] = e4[n] = static_cast<float>(1e-4 * rng.normal());
  }
  std::vector<float> S1 = S, S2 = S, e_before = e;
  ws_store_head({WorkingStateKind::int8_ef, false}, S1.data(), e.data(), dv, dk, {{0, 0}, 0, 0});
  ws_store_head({WorkingStateKind::int8_ef_int4, false}, S2.data(), e4.data(), dv, dk,
                {{0, 0}, 0, 0});
  for (int j = 0; j < dk; ++j) {
    double amax = 0.0, eamax = 0.0;
    for (int i = 0; i < dv; ++i) {
      const float y = S[i * dk + j] + e_before[i * dk + j];
      amax = std::max(amax, std::fabs(static_cast<double>(y)));
      eamax = std::max(eamax, std::fabs(static_cast<double>(y) - S2[i * dk + j]));
    }
    const double step = static_cast<float>(amax / 127.0);
    for (int i = 0; i < dv; ++i) {
      const int n = i * dk + j;
      const float y = S[n] + e_before[n];
      EXPECT_EQ(static_cast<double>(e[n]), static_cast<double>(y) - S1[n]) << n;
      EXPECT_LE(std::fabs(e[n]), 0.5 * step * (1 + 1e-6)) << n;
      EXPECT_EQ(S1[n], S2[n]);  // same codes: the residual format changes only e
      const double exact = static_cast<double>(y) - S2[n];
      EXPECT_LE(std::fabs(e4[n] - exact), 0.5 * static_cast<float>(eamax / 7.0) * (1 + 1e-6)) << n;
    }
  }
}

TEST(WsStoreColumn, StochasticHeadIsReproducibleAndKeyed) {
  Rng rng(9);
  std::vector<float> S(32 * 16);
  for (float& x : S) x = static_cast<float>(rng.normal());
  for (WorkingStateKind k :
       {WorkingStateKind::bf16_sr, WorkingStateKind::int8_sr, WorkingStateKind::fp8_e4m3_sr}) {
    std::vector<float> a = S, b = S, c = S;
    const RoundingPlace place{rounding_key(77, 1, 2), 5, 0};
    ws_store_head({k, false}, a.data(), nullptr, 32, 16, place);
    ws_store_head({k, false}, b.data(), nullptr, 32, 16, place);
    ws_store_head({k, false}, c.data(), nullptr, 32, 16, {place.key, 6, 0});
    EXPECT_EQ(a, b) << static_cast<int>(k);
    EXPECT_NE(a, c) << static_cast<int>(k);  // another token draws other words
  }
}

// The row-order store (the CPU reference's) gives the column store's result bit for bit, for
// every format, on an awkward head (d_v = 60, d_k = 7: Philox blocks straddle rows), including a
// zero column and the carried int4 residual.
TEST(WsStoreColumn, RowOrderEqualsColumnOrderEveryFormat) {
  const int dv = 60, dk = 7;
  Rng rng(21);
  std::vector<float> S(dv * dk), e0(dv * dk);
  for (size_t n = 0; n < S.size(); ++n) {
    S[n] = (n % dk == 3) ? 0.0f : static_cast<float>(0.05 * rng.normal());
    e0[n] = (n % dk == 3) ? 0.0f : static_cast<float>(1e-4 * rng.normal());
  }
  std::vector<float> scratch(2 * dk);
  for (const WorkingStateFormat& f : all_working_state_formats())
    for (bool bf16_scale : {false, true}) {
      WorkingStateFormat g = f;
      g.bf16_scale = bf16_scale && f.has_scales();
      std::vector<float> a = S, b = S, ea = e0, eb = e0;
      const RoundingPlace place{rounding_key(3, 1, 2), 17, 4};
      ws_store_head(g, a.data(), ea.data(), dv, dk, place);
      ws_store_head_rows(g, b.data(), eb.data(), dv, dk, place, scratch.data(),
                         scratch.data() + dk);
      for (size_t n = 0; n < S.size(); ++n) {
        ASSERT_EQ(ws_float_bits(a[n]), ws_float_bits(b[n])) << g.name() << " element " << n;
        if (g.error_feedback()) {
          ASSERT_EQ(ws_float_bits(ea[n]), ws_float_bits(eb[n])) << g.name();
        }
      }
    }
}
