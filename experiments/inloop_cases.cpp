#include "experiments/inloop_cases.h"

#include <algorithm>
#include <cmath>

#include "core/drive/states_source.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"

namespace statecheck::inloop {

std::vector<int> log_checkpoints(int T) {
  std::vector<int> c;
  for (int p = 1; p <= T; p *= 2) {
    c.push_back(p);
    if (p >= 2 && p + p / 2 <= T && p + p / 2 < 2 * p) c.push_back(p + p / 2);
  }
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  if (c.back() != T) c.push_back(T);
  return c;
}

Trace run_trace(const RecurrenceBackend& b, const LayerCase& c, const std::vector<int>& cps) {
  const std::unique_ptr<LayerRun> run = b.bind_at(c.shape, c.in, 1, c.layer, 0);
  run->write(0, c.S0.data());
  const size_t hv = static_cast<size_t>(c.shape.HV) * c.shape.dv;
  Trace t;
  t.outputs.assign(static_cast<size_t>(c.in.T) * hv, 0.0f);
  int t0 = 0;
  for (int cp : cps) {
    run->advance(0, t0, cp, t.outputs.data() + static_cast<size_t>(t0) * hv);
    t.states.emplace_back(c.S0.size());
    run->read(0, t.states.back().data());
    t0 = cp;
  }
  return t;
}

std::vector<LayerCase> synthetic_cases(DriveKind kind, const ModelConfig& m, uint64_t seed,
                                       int layers, int T) {
  RecurrenceShape s = recurrence_shape(m);
  const int group = s.group();
  s.HV = std::min(s.HV, kMaxHeads);
  s.H = std::max(1, s.HV / group);
  s.HV = s.H * group;
  std::vector<LayerCase> cases(layers);
  for (int l = 0; l < layers; ++l) {
    cases[l].shape = s;
    cases[l].in = synthetic_inputs(kind, s, seed, l, T);
    cases[l].S0.assign(static_cast<size_t>(s.HV) * s.dv * s.dk, 0.0f);
    cases[l].layer = l;
  }
  return cases;
}

std::vector<LayerCase> tinylm_cases(const Options& o, int T) {
  const std::string config = tinylm_config_for(o.model);
  const ModelConfig m = load_model(config, 1);
  const StatesSource src = StatesSource::resolve(parse_drive("tinylm", ""), o.seed, m, config);
  const RecurrenceShape s = recurrence_shape(m);
  std::vector<LayerCase> cases(m.linear_layer_count());
  for (int l = 0; l < static_cast<int>(cases.size()); ++l) {
    cases[l].shape = s;
    cases[l].in = src.layer_inputs(0, l, T);
    cases[l].S0 = src.initial_layer_state(0, l);
    cases[l].layer = l;
  }
  return cases;
}

ModelConfig family_model(const Options& o, GateKind gate) {
  const ModelConfig m = options_model(o);
  if (m.gate == gate && m.linear_layer_count() > 0 && o.model.find("tinylm") == std::string::npos)
    return m;
  return load_model(gate == GateKind::gdn ? "qwen3.5-35b-a3b" : "kimi-linear-48b-a3b", 0);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

int format_index(const std::vector<WorkingStateFormat>& formats, WorkingStateKind k) {
  for (size_t i = 0; i < formats.size(); ++i)
    if (formats[i].kind == k) return static_cast<int>(i);
  fail("inloop: format {} is not measured", static_cast<int>(k));
}

}  // namespace statecheck::inloop
