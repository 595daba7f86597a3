#include "core/state/layer_inputs.h"

#include <cmath>

#include "core/util/error.h"

namespace statecheck {

float RecurrenceShape::effective_scale() const {
  return scale != 0.0f ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
}

LayerInputs LayerInputs::zeros(const RecurrenceShape& s, int T) {
  LayerInputs in;
  in.T = T;
  in.q.assign(static_cast<size_t>(T) * s.H * s.dk, 0.0f);
  in.k.assign(static_cast<size_t>(T) * s.H * s.dk, 0.0f);
  in.v.assign(static_cast<size_t>(T) * s.HV * s.dv, 0.0f);
  in.g.assign(static_cast<size_t>(T) * s.gate_width(), 0.0f);
  in.beta.assign(static_cast<size_t>(T) * s.HV, 0.0f);
  return in;
}

void LayerInputs::check(const RecurrenceShape& s) const {
  auto expect = [&](const std::vector<float>& a, size_t n, const char* name, const char* layout) {
    if (a.size() != n)
      fail("layer inputs: '{}' has {} values, expected {} ({} with T={})", name, a.size(), n,
           layout, T);
  };
  if (s.H <= 0 || s.HV % s.H != 0)
    fail("recurrence shape: HV ({}) must be a multiple of H ({})", s.HV, s.H);
  expect(q, static_cast<size_t>(T) * s.H * s.dk, "q", "[T, H, d_k]");
  expect(k, static_cast<size_t>(T) * s.H * s.dk, "k", "[T, H, d_k]");
  expect(v, static_cast<size_t>(T) * s.HV * s.dv, "v", "[T, HV, d_v]");
  expect(g, static_cast<size_t>(T) * s.gate_width(), "g",
         s.gate == GateKind::gdn ? "[T, HV]" : "[T, HV, d_k]");
  expect(beta, static_cast<size_t>(T) * s.HV, "beta", "[T, HV]");
}

}  // namespace statecheck
