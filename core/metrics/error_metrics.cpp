#include "core/metrics/error_metrics.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace statecheck {

void ErrorStats::merge(const ErrorStats& o) {
  sum_sq_err += o.sum_sq_err;
  sum_sq_ref += o.sum_sq_ref;
  sum_sq_err_small += o.sum_sq_err_small;
  max_abs = std::max(max_abs, o.max_abs);
  count += o.count;
  non_finite = non_finite || o.non_finite;
}

double ErrorStats::relerr() const {
  if (non_finite) return std::numeric_limits<double>::infinity();
  if (sum_sq_ref == 0.0) return sum_sq_err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(sum_sq_err / sum_sq_ref);
}

double ErrorStats::small_entry_share() const {
  return sum_sq_err > 0.0 ? sum_sq_err_small / sum_sq_err : 0.0;
}

namespace {
template <typename R, typename A>
ErrorStats compare_impl(const R* ref, const A* approx, size_t n) {
  ErrorStats s;
  s.count = n;
  for (size_t e = 0; e < n; ++e) {
    const double a = static_cast<double>(approx[e]);
    if (!std::isfinite(a)) {
      s.non_finite = true;
      continue;
    }
    const double r = static_cast<double>(ref[e]);
    const double d = a - r;
    s.sum_sq_err += d * d;
    s.sum_sq_ref += r * r;
    s.max_abs = std::max(s.max_abs, std::fabs(d));
  }
  return s;
}
}  // namespace

ErrorStats compare(const float* ref, const float* approx, size_t n) {
  return compare_impl(ref, approx, n);
}
ErrorStats compare(const double* ref, const double* approx, size_t n) {
  return compare_impl(ref, approx, n);
}
ErrorStats compare(const double* ref, const float* approx, size_t n) {
  return compare_impl(ref, approx, n);
}

ErrorStats compare_head(const float* ref, const float* approx, int dv, int dk) {
  ErrorStats s = compare_impl(ref, approx, static_cast<size_t>(dv) * dk);
  std::vector<float> mag(dv);
  for (int j = 0; j < dk; ++j) {
    for (int i = 0; i < dv; ++i) mag[i] = std::fabs(ref[static_cast<size_t>(i) * dk + j]);
    // Median of the column's magnitudes (mean of the two middle values when d_v is even).
    std::vector<float> sorted = mag;
    const int mid = dv / 2;
    std::nth_element(sorted.begin(), sorted.begin() + mid, sorted.end());
    double median = sorted[mid];
    if (dv % 2 == 0 && dv > 0) {
      const float lower = *std::max_element(sorted.begin(), sorted.begin() + mid);
      median = 0.5 * (static_cast<double>(lower) + median);
    }
    for (int i = 0; i < dv; ++i) {
      if (mag[i] < median) {
        const double a = approx[static_cast<size_t>(i) * dk + j];
        if (!std::isfinite(a)) continue;
        const double d = a - ref[static_cast<size_t>(i) * dk + j];
        s.sum_sq_err_small += d * d;
      }
    }
  }
  return s;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace statecheck
