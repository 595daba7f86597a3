// The first-order contraction model of chained checkpoint error (core/metrics/contraction_model.h)
// on hand-computed cases.
#include <cmath>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/metrics/contraction_model.h"
#include "core/util/error.h"

using namespace statecheck;

TEST(ContractionModel, AccumulatedCheckpointsIsTheGeometricSumOfContractedErrors) {
  const int T = 256;
  for (double rate : {-1e-3, 1e-5, 1e-2, 0.3, 2.0})  // a negative rate: the error grows
    for (int spacing : {1, 2, 8, 64, 256}) {
      // Checkpoint m from the end (m = 0 at T) has contracted for m * spacing tokens.
      double direct = 0;
      for (int m = 0; m < T / spacing; ++m) direct += std::exp(-rate * m * spacing);
      EXPECT_NEAR(accumulated_checkpoints(rate, T, spacing), direct, 1e-12 * direct)
          << "rate " << rate << ", spacing " << spacing;
    }
  // Nothing contracts: every checkpoint's error is still there.
  EXPECT_EQ(accumulated_checkpoints(0.0, T, 2), 128.0);
  EXPECT_TRUE(std::isnan(accumulated_checkpoints(std::nan(""), T, 8)));
  // A single checkpoint (spacing = T) is one checkpoint's worth whatever the rate.
  EXPECT_NEAR(accumulated_checkpoints(0.7, T, T), 1.0, 1e-15);
  EXPECT_THROW(accumulated_checkpoints(0.1, T, 0), Error);
  EXPECT_THROW(accumulated_checkpoints(0.1, T, 3), Error);  // 3 does not divide 256
}

namespace {

// Two value heads of one key head, d_k = 2, T = 2 tokens, with the given gates.
LayerInputs two_heads(RecurrenceShape& s, GateKind gate, std::vector<float> g,
                      std::vector<float> beta) {
  s.H = 1, s.HV = 2, s.dk = 2, s.dv = 2, s.gate = gate;
  LayerInputs in = LayerInputs::zeros(s, 2);
  in.g = std::move(g);
  in.beta = std::move(beta);
  return in;
}

// The float inputs are the decimal values rounded to fp32: a few ulps of fp32 at most.
void expect_values(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-7) << "index " << i;
}

}  // namespace

// GDN, g and beta [T, HV]. By hand:
//   head 0: mean g = (-0.1 - 0.3) / 2 = -0.2; mean(1 - (1 - beta)^2) over beta = 0.5, 1.0:
//           (0.75 + 1.0) / 2 = 0.875; rate = 0.4 + 0.875 / 2 = 0.8375 for both channels.
//   head 1: mean g = (-0.2 - 0.4) / 2 = -0.3; beta = 0.25, 0.0: (0.4375 + 0) / 2 = 0.21875;
//           rate = 0.6 + 0.21875 / 2 = 0.709375.
TEST(ContractionModel, GdnRatesHandComputed) {
  RecurrenceShape s;
  const LayerInputs in =
      two_heads(s, GateKind::gdn, {-0.1f, -0.2f, -0.3f, -0.4f}, {0.5f, 0.25f, 1.0f, 0.0f});
  expect_values(contraction_rates(s, in), {0.8375, 0.8375, 0.709375, 0.709375});
  expect_values(mean_log_decay(s, in), {-0.2, -0.3});
}

// KDA, g [T, HV, d_k]:
//   t = 0: head 0 (-0.1, 0.0), head 1 (-0.5, -0.7); t = 1: head 0 (-0.3, -0.2), head 1 (-0.1, 0.0)
// beta [T, HV] = 0.5 everywhere: write term (1 - 0.25) / 2 = 0.375.
//   head 0: rate_0 = 0.4 + 0.375 = 0.775, rate_1 = 0.2 + 0.375 = 0.575; mean g = -0.15.
//   head 1: rate_0 = 0.6 + 0.375 = 0.975, rate_1 = 0.7 + 0.375 = 1.075; mean g = -0.325.
// (A [T, d_k, HV] reading would mix the heads' values and miss all four.)
TEST(ContractionModel, KdaRatesPerKeyChannel) {
  RecurrenceShape s;
  LayerInputs in =
      two_heads(s, GateKind::kda, {-0.1f, 0.0f, -0.5f, -0.7f, -0.3f, -0.2f, -0.1f, 0.0f},
                {0.5f, 0.5f, 0.5f, 0.5f});
  expect_values(contraction_rates(s, in), {0.775, 0.575, 0.975, 1.075});
  expect_values(mean_log_decay(s, in), {-0.15, -0.325});
  in.g.pop_back();  // wrong size: refused, naming the array
  EXPECT_THROW(contraction_rates(s, in), Error);
}
