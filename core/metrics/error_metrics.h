// Scale-free error metrics of an approximation against a reference, accumulated in fp64.
//
// relerr = ||approx - ref||_F / ||ref||_F; max_abs = max |approx - ref|; small_entry_share = the
// fraction of squared error sitting in entries whose |ref| is below the median |ref| of their
// column (the test of "int8 error concentrates on small entries"; docs/numerics.md
// section 3, error metrics).
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

namespace statecheck {

struct ErrorStats {
  double sum_sq_err = 0.0;        // sum (approx - ref)^2
  double sum_sq_ref = 0.0;        // sum ref^2
  double sum_sq_err_small = 0.0;  // part of sum_sq_err in below-median entries
  double max_abs = 0.0;
  size_t count = 0;
  bool non_finite = false;  // an approx element was NaN or Inf

  void merge(const ErrorStats& o);
  // ||err|| / ||ref||; 0 when both are 0; +Inf when the reference is 0 but the error is not, or
  // when a non-finite value was seen.
  double relerr() const;
  // sum_sq_err_small / sum_sq_err (0 when there is no error).
  double small_entry_share() const;
};

// Error of a flat array of n values (no column structure: small-entry share left at 0).
ErrorStats compare(const float* ref, const float* approx, size_t n);
ErrorStats compare(const double* ref, const double* approx, size_t n);
ErrorStats compare(const double* ref, const float* approx, size_t n);

// Error of one head [d_v, d_k] with the per-column small-entry split.
ErrorStats compare_head(const float* ref_vk, const float* approx_vk, int dv, int dk);

// Median of `v` (the mean of the two middle values for an even count); 0 for an empty vector.
// Used for the per-head summaries (min / median / max over [layer, head]).
double median_of(std::vector<double> v);

}  // namespace statecheck
