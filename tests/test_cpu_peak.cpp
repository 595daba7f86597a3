// The FMA peak loop of bench (experiments/cpu_peak.h): it runs every accumulator for every
// iteration with the arithmetic of a fused multiply-add, checked against closed forms.
#include <cmath>

#include <gtest/gtest.h>

#include "experiments/cpu_peak.h"

using namespace statecheck;

// acc = n after n steps of acc * 1 + 1 from 0, exact below 2^24: the sum is 96 n.
TEST(CpuPeak, EveryAccumulatorRunsEveryIteration) {
  EXPECT_EQ(fma_chains(0, 1.0f, 1.0f), 0.0);
  EXPECT_EQ(fma_chains(1, 1.0f, 1.0f), 1.0 * kFmaAccumulators);
  EXPECT_EQ(fma_chains(1000, 1.0f, 1.0f), 1000.0 * kFmaAccumulators);
  EXPECT_EQ(fma_chains(1000003, 1.0f, 1.0f), 1000003.0 * kFmaAccumulators);
}

// acc * 0.5 + 1 from 0: 1, 1.5, 1.75, ..., 2 - 2^(1-n), exact in fp32 for n <= 24.
TEST(CpuPeak, StepsAreMultiplyThenAdd) {
  for (int n = 1; n <= 24; ++n)
    EXPECT_EQ(fma_chains(n, 0.5f, 1.0f), kFmaAccumulators * (2.0 - std::ldexp(1.0, 1 - n))) << n;
  // a = 3, b = -1 from 0: -1, -4, -13: the b is added after the product, not before it.
  EXPECT_EQ(fma_chains(3, 3.0f, -1.0f), -13.0 * kFmaAccumulators);
}

// A rate: positive and finite (its size depends on the machine, so no figure is asserted).
TEST(CpuPeak, MeasuredPeakIsAPositiveRate) {
  const double g = measure_fma_peak_gflops(3, 0.002);
  EXPECT_GT(g, 0.0);
  EXPECT_TRUE(std::isfinite(g));
}
