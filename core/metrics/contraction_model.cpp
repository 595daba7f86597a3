#include "core/metrics/contraction_model.h"

#include <cmath>

#include "core/util/error.h"

namespace statecheck {

std::vector<double> contraction_rates(const RecurrenceShape& s, const LayerInputs& in) {
  in.check(s);
  if (in.T < 1) fail("contraction_rates: needs at least one token, got T = {}", in.T);
  const bool kda = s.gate == GateKind::kda;
  std::vector<double> decay(static_cast<size_t>(s.HV) * s.dk, 0.0), write(s.HV, 0.0);
  for (int t = 0; t < in.T; ++t)
    for (int h = 0; h < s.HV; ++h) {
      for (int j = 0; j < s.dk; ++j) {
        const size_t gi = kda ? (static_cast<size_t>(t) * s.HV + h) * s.dk + j
                              : static_cast<size_t>(t) * s.HV + h;
        decay[static_cast<size_t>(h) * s.dk + j] += in.g[gi];
      }
      const double b = in.beta[static_cast<size_t>(t) * s.HV + h];
      write[h] += 1.0 - (1.0 - b) * (1.0 - b);
    }
  std::vector<double> rate(decay.size());
  for (int h = 0; h < s.HV; ++h)
    for (int j = 0; j < s.dk; ++j) {
      const size_t hj = static_cast<size_t>(h) * s.dk + j;
      rate[hj] = (-2.0 * decay[hj] + write[h] / s.dk) / in.T;
    }
  return rate;
}

std::vector<double> mean_log_decay(const RecurrenceShape& s, const LayerInputs& in) {
  in.check(s);
  if (in.T < 1) fail("mean_log_decay: needs at least one token, got T = {}", in.T);
  const int per_head = s.gate == GateKind::kda ? s.dk : 1;
  std::vector<double> m(s.HV, 0.0);
  for (int t = 0; t < in.T; ++t)
    for (int h = 0; h < s.HV; ++h)
      for (int j = 0; j < per_head; ++j)
        m[h] += in.g[(static_cast<size_t>(t) * s.HV + h) * per_head + j];
  for (auto& x : m) x /= static_cast<double>(in.T) * per_head;
  return m;
}

double accumulated_checkpoints(double rate, int T, int spacing) {
  if (spacing <= 0 || T <= 0 || T % spacing != 0)
    fail("accumulated_checkpoints: spacing {} must be positive and divide T = {}", spacing, T);
  if (rate == 0) return static_cast<double>(T / spacing);
  return std::expm1(-rate * T) / std::expm1(-rate * spacing);  // NaN stays NaN
}

}  // namespace statecheck
