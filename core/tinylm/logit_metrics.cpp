#include "core/tinylm/logit_metrics.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace statecheck {

void log_softmax(const float* z, int n, double* out) {
  double m = z[0];
  for (int v = 1; v < n; ++v) m = std::max(m, static_cast<double>(z[v]));
  double s = 0.0;
  for (int v = 0; v < n; ++v) s += std::exp(static_cast<double>(z[v]) - m);
  const double lse = m + std::log(s);
  for (int v = 0; v < n; ++v) out[v] = static_cast<double>(z[v]) - lse;
}

double kl_nats(const float* z_ref, const float* z, int n) {
  std::vector<double> lp(static_cast<size_t>(n)), lq(static_cast<size_t>(n));
  log_softmax(z_ref, n, lp.data());
  log_softmax(z, n, lq.data());
  double kl = 0.0;
  for (int v = 0; v < n; ++v) kl += std::exp(lp[v]) * (lp[v] - lq[v]);
  return kl;
}

int argmax(const float* z, int n) {
  return static_cast<int>(std::max_element(z, z + n) - z);
}

}  // namespace statecheck
