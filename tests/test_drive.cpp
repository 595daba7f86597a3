// Synthetic drives (core/drive/drive.h): ranges, bf16-exact q, k, v and sample moments against
// the distributions the drive table states. Tolerances are 5 standard deviations of the sample
// statistic (a false failure has probability below 1e-6 per check; the draws are seeded, so a
// given build either always passes or always fails), plus any bias from rounding to bf16.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/drive/drive.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"

using namespace statecheck;

namespace {

RecurrenceShape shape_of(GateKind gate) {
  RecurrenceShape s;
  s.H = 2;
  s.HV = 4;
  s.dk = 32;
  s.dv = 36;
  s.gate = gate;
  return s;
}

bool bf16_exact(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & 0xFFFFu) == 0;
}

// Checks x ~ N(0, sigma^2) rounded to bf16: every value bf16-exact; the sample mean within
// 5 sigma / sqrt(N); the sample mean of x^2 within 5 sigma^2 sqrt(2 / N) (Var(x^2) = 2 sigma^4)
// plus the bf16 bias (each |x| moves by at most 2^-8 of itself, x^2 by at most 2^-7 + 2^-16 <
// 2^-6).
void expect_normal_bf16(const std::vector<float>& a, double sigma, const char* what) {
  SCOPED_TRACE(what);
  const double n = static_cast<double>(a.size());
  double sum = 0, sq = 0;
  size_t not_exact = 0;
  for (float x : a) {
    not_exact += !bf16_exact(x);
    sum += x;
    sq += double(x) * x;
  }
  EXPECT_EQ(not_exact, 0u);
  EXPECT_NEAR(sum / n, 0.0, 5 * sigma / std::sqrt(n));
  const double var = sigma * sigma;
  EXPECT_NEAR(sq / n, var, 5 * var * std::sqrt(2 / n) + var * std::ldexp(1.0, -6));
}

// beta = sigmoid(b) with b ~ N(0, 1): every beta in (0, 1), and logit(beta) = b has mean 0 and
// mean square 1 (5-sigma tolerances as above; fp32 rounding of beta moves logit(beta) by about
// 2^-24 / (beta (1 - beta)), below 1e-5 for beta in [0.01, 0.99], i.e. |b| < 4.6).
void expect_sigmoid_of_normal(const std::vector<float>& beta) {
  const double n = static_cast<double>(beta.size());
  double sum = 0, sq = 0;
  for (float b : beta) {
    ASSERT_GT(b, 0.0f);
    ASSERT_LT(b, 1.0f);
    const double logit = std::log(double(b) / (1.0 - b));
    sum += logit;
    sq += logit * logit;
  }
  EXPECT_NEAR(sum / n, 0.0, 5 / std::sqrt(n) + 1e-4);
  EXPECT_NEAR(sq / n, 1.0, 5 * std::sqrt(2 / n) + 1e-4);
}

}  // namespace

// seed-kda: q, k, v ~ 0.5 N(0, 1) rounded to bf16; g = -U(0, 0.1) - 0.005 per channel, so in
// [-0.105, -0.005] with mean -0.055 and standard deviation 0.1 / sqrt(12); beta ~ U(0, 1), mean
// 1/2, standard deviation 1 / sqrt(12).
TEST(Drive, SeedKdaRangesAndMoments) {
  const RecurrenceShape s = shape_of(GateKind::kda);
  const int T = 1024;
  for (int layer : {0, 3}) {
    SCOPED_TRACE(layer);
    const LayerInputs in = synthetic_inputs(DriveKind::seed_kda, s, 11, layer, T);
    ASSERT_EQ(in.g.size(), size_t(T) * s.HV * s.dk);
    expect_normal_bf16(in.q, 0.5, "q");
    expect_normal_bf16(in.k, 0.5, "k");
    expect_normal_bf16(in.v, 0.5, "v");
    double gsum = 0, bsum = 0;
    for (float g : in.g) {
      ASSERT_GE(g, -0.105f);
      ASSERT_LE(g, -0.005f);
      gsum += g;
    }
    const double ng = static_cast<double>(in.g.size()), nb = static_cast<double>(in.beta.size());
    EXPECT_NEAR(gsum / ng, -0.055, 5 * 0.1 / std::sqrt(12 * ng));
    for (float b : in.beta) {
      ASSERT_GT(b, 0.0f);
      ASSERT_LT(b, 1.0f);
      bsum += b;
    }
    EXPECT_NEAR(bsum / nb, 0.5, 5 / std::sqrt(12 * nb));
  }
}

// init-gdn: q, k, v ~ N(0, 1) rounded to bf16; beta = sigmoid(N(0, 1)); per head
// -g_t = A softplus(a_t + dt_bias) with A = exp(A_log) in [1, 16], dt_bias = softplus^-1(dt),
// dt in [1e-3, 1e-1], a_t ~ N(0, 1). Hence g < 0 everywhere, and per head:
//   median_t(-g) = A softplus(dt_bias) = A dt (softplus is increasing, a's median is 0), in
//   [1e-3, 1.6];
//   quantile ratio q84 / q16 of -g = softplus(b + 1) / softplus(b - 1) with b = dt_bias in
//   [softplus^-1(1e-3), softplus^-1(0.1)] = [-6.91, -2.25]: it falls from e^2 = 7.39 (b -> -inf,
//   softplus(x) ~ e^x) to 6.61 at b = -2.25, whatever A is.
// Sampling: the sample p-quantile of a ~ N(0, 1) over T draws has standard deviation
// sqrt(p (1 - p) / T) / phi(z_p): 1.25 / sqrt(T) for the median, 1.51 / sqrt(T) at p = 0.16 and
// 0.84; 5 of them move -g by a factor of at most e^delta (softplus' / softplus <= 1).
TEST(Drive, InitGdnRangesAndMoments) {
  const RecurrenceShape s = shape_of(GateKind::gdn);
  const int T = 4096;
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, 5, 1, T);
  ASSERT_EQ(in.g.size(), size_t(T) * s.HV);
  expect_normal_bf16(in.q, 1.0, "q");
  expect_normal_bf16(in.k, 1.0, "k");
  expect_normal_bf16(in.v, 1.0, "v");
  expect_sigmoid_of_normal(in.beta);
  const double d_med = 5 * 1.25 / std::sqrt(T), d_q = 5 * 1.51 / std::sqrt(T);
  auto softplus = [](double x) { return std::log1p(std::exp(x)); };
  for (int h = 0; h < s.HV; ++h) {
    SCOPED_TRACE(h);
    std::vector<double> neg_g(T);
    for (int t = 0; t < T; ++t) {
      const float g = in.g[size_t(t) * s.HV + h];
      ASSERT_LT(g, 0.0f);
      neg_g[t] = -g;
    }
    std::sort(neg_g.begin(), neg_g.end());
    const double med = neg_g[T / 2], q16 = neg_g[size_t(0.1587 * T)],
                 q84 = neg_g[size_t(0.8413 * T)];
    EXPECT_GE(med, 1e-3 * std::exp(-d_med));
    EXPECT_LE(med, 16 * 0.1 * std::exp(d_med));
    const double ratio = q84 / q16;
    EXPECT_GE(ratio, softplus(-2.25 + 1) / softplus(-2.25 - 1) * std::exp(-2 * d_q));
    EXPECT_LE(ratio, std::exp(2.0) * std::exp(2 * d_q));
  }
}

// beta_to_float: the fp32 rounding of a draw inside [2^-24, 1 - 2^-24]; a draw that rounds to 1.0f
// (from the tie 1 - 2^-25 up) lands on 1 - 2^-24, one below 2^-24 on 2^-24. Hand-computed values.
TEST(Drive, BetaStaysInsideTheOpenUnitInterval) {
  EXPECT_EQ(beta_to_float(0.5), 0.5f);
  EXPECT_EQ(beta_to_float(0.1), 0.1f);
  EXPECT_EQ(beta_to_float(1.0 - 0x1p-24), 0x1.fffffep-1f);  // exactly representable: kept
  EXPECT_EQ(beta_to_float(1.0 - 0x1p-25), 0x1.fffffep-1f);  // the tie: rounds to even, 1.0f
  EXPECT_EQ(beta_to_float(1.0 - 0x1p-30), 0x1.fffffep-1f);  // would round to 1.0f
  EXPECT_EQ(beta_to_float(1.0), 0x1.fffffep-1f);
  EXPECT_EQ(beta_to_float(0x1p-20), 0x1p-20f);  // small but above the floor: kept
  EXPECT_EQ(beta_to_float(0x1p-30), 0x1p-24f);
  EXPECT_EQ(beta_to_float(0.0), 0x1p-24f);
  for (double bad : {-1e-9, 1.0 + 1e-9, std::nan("")})
    EXPECT_THROW(beta_to_float(bad), Error) << bad;
}
