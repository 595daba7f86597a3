// Error metrics (core/metrics/error_metrics.h) on hand-made heads whose errors are known exactly:
// relative Frobenius error, max-abs and the per-column small-entry share.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/metrics/error_metrics.h"

using namespace statecheck;

// A head [d_v 4, d_k 2]; every value below is exact in fp32, so every sum is exact in fp64.
//   column 0: ref [1, -2, 3, 4],         |ref| median (2 + 3) / 2 = 2.5:    rows 0, 1 are small
//   column 1: ref [10, 0.125, -0.25, 5], |ref| median (0.25 + 5) / 2 = 2.625: rows 1, 2 are small
//   errors:   column 0 [0.5, -1, 2, 0.25], column 1 [1, 0.5, 0.25, -2]
// Squared errors: column 0 [0.25, 1, 4, 0.0625], column 1 [1, 0.25, 0.0625, 4]; total 10.625,
// small 0.25 + 1 + 0.25 + 0.0625 = 1.5625, share 1.5625 / 10.625 = 5/34.
// sum ref^2 = 1 + 4 + 9 + 16 + 100 + 1/64 + 1/16 + 25 = 155.078125; max |error| = 2.
TEST(ErrorMetrics, CompareHeadHandComputedTwoColumns) {
  const float ref[8] = {1, 10, -2, 0.125f, 3, -0.25f, 4, 5};
  const float err[8] = {0.5f, 1, -1, 0.5f, 2, 0.25f, 0.25f, -2};
  float approx[8];
  for (int e = 0; e < 8; ++e) approx[e] = ref[e] + err[e];
  const ErrorStats s = compare_head(ref, approx, 4, 2);
  EXPECT_EQ(s.count, 8u);
  EXPECT_EQ(s.sum_sq_err, 10.625);
  EXPECT_EQ(s.sum_sq_ref, 155.078125);
  EXPECT_EQ(s.sum_sq_err_small, 1.5625);
  EXPECT_EQ(s.max_abs, 2.0);
  EXPECT_DOUBLE_EQ(s.small_entry_share(), 5.0 / 34.0);
  EXPECT_DOUBLE_EQ(s.relerr(), std::sqrt(10.625 / 155.078125));
  EXPECT_FALSE(s.non_finite);
}

// Odd d_v: the median is the middle magnitude, and an entry equal to it is not below it.
//   ref [3, -1, 2]: median |ref| 2, only row 1 (|-1|) is small; errors [1, 1, 1]: share 1/3.
TEST(ErrorMetrics, CompareHeadOddColumnEntryAtTheMedianIsNotSmall) {
  const float ref[3] = {3, -1, 2};
  const float approx[3] = {4, 0, 3};
  const ErrorStats s = compare_head(ref, approx, 3, 1);
  EXPECT_EQ(s.sum_sq_err, 3.0);
  EXPECT_EQ(s.sum_sq_err_small, 1.0);
  EXPECT_DOUBLE_EQ(s.small_entry_share(), 1.0 / 3.0);
}

// Merging heads adds their sums, so the merged share is the energy-weighted mean of the heads'
// shares: (1.5625 + 1) / (10.625 + 3) from the two heads above; no error at all gives share 0.
TEST(ErrorMetrics, MergedShareWeighsHeadsByErrorEnergy) {
  const float ref_a[8] = {1, 10, -2, 0.125f, 3, -0.25f, 4, 5};
  const float err_a[8] = {0.5f, 1, -1, 0.5f, 2, 0.25f, 0.25f, -2};
  float approx_a[8];
  for (int e = 0; e < 8; ++e) approx_a[e] = ref_a[e] + err_a[e];
  const float ref_b[3] = {3, -1, 2};
  const float approx_b[3] = {4, 0, 3};
  ErrorStats s = compare_head(ref_a, approx_a, 4, 2);
  s.merge(compare_head(ref_b, approx_b, 3, 1));
  EXPECT_DOUBLE_EQ(s.small_entry_share(), 2.5625 / 13.625);
  EXPECT_EQ(compare_head(ref_b, ref_b, 3, 1).small_entry_share(), 0.0);
}
