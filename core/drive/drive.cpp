#include "core/drive/drive.h"

#include <algorithm>
#include <cmath>

#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/util/rng.h"

namespace statecheck {

const char* drive_kind_name(DriveKind k) {
  switch (k) {
    case DriveKind::seed_kda:
      return "seed-kda";
    case DriveKind::init_gdn:
      return "init-gdn";
    case DriveKind::init_kda:
      return "init-kda";
    case DriveKind::states:
      return "states";
    case DriveKind::tinylm:
      return "tinylm";
    case DriveKind::inputs:
      return "inputs";
  }
  return "?";
}

std::string DriveSpec::name() const {
  return drive_kind_name(kind);
}

DriveKind DriveSpec::token_drive(const ModelConfig& m) const {
  if (kind == DriveKind::states || kind == DriveKind::tinylm || kind == DriveKind::inputs)
    return m.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::init_kda;
  return kind;
}

DriveSpec parse_drive(const std::string& name, const std::string& states_file,
                      const std::string& inputs_file) {
  DriveSpec d;
  if (name == "seed-kda")
    d.kind = DriveKind::seed_kda;
  else if (name == "init-gdn")
    d.kind = DriveKind::init_gdn;
  else if (name == "init-kda")
    d.kind = DriveKind::init_kda;
  else if (name == "states")
    d.kind = DriveKind::states;
  else if (name == "tinylm")
    d.kind = DriveKind::tinylm;
  else if (name == "inputs")
    d.kind = DriveKind::inputs;
  else
    fail("unknown drive '{}' (expected seed-kda, init-gdn, init-kda, states, tinylm, inputs)",
         name);
  if (d.kind == DriveKind::states) {
    if (states_file.empty()) fail("drive 'states' needs --states FILE (safetensors or HDF5)");
    d.states_file = states_file;
  } else if (!states_file.empty()) {
    fail("--states {} is given but the drive is '{}' (use --drive states)", states_file, name);
  }
  if (d.kind == DriveKind::inputs) {
    if (inputs_file.empty())
      fail("drive 'inputs' needs --inputs FILE (safetensors or HDF5, docs/real_models.md)");
    d.inputs_file = inputs_file;
  } else if (!inputs_file.empty()) {
    fail("--inputs {} is given but the drive is '{}' (use --drive inputs)", inputs_file, name);
  }
  return d;
}

DriveSpec default_drive(const ModelConfig& m) {
  DriveSpec d;
  d.kind = m.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda;
  return d;
}

void check_drive_matches_model(const DriveSpec& d, const ModelConfig& m) {
  const bool kda_drive = d.kind == DriveKind::seed_kda || d.kind == DriveKind::init_kda;
  const bool gdn_drive = d.kind == DriveKind::init_gdn;
  if (kda_drive && m.gate != GateKind::kda)
    fail(
        "drive '{}' produces per-channel (KDA) gates but model '{}' is a GDN model (scalar gate "
        "per "
        "head); use --drive init-gdn",
        d.name(), m.name);
  if (gdn_drive && m.gate != GateKind::gdn)
    fail(
        "drive '{}' produces scalar (GDN) gates but model '{}' is a KDA model (per-channel gates); "
        "use --drive seed-kda or init-kda",
        d.name(), m.name);
}

namespace {

double softplus(double x) {
  return x > 20.0 ? x : std::log1p(std::exp(x));
}
// softplus^-1(y) = log(exp(y) - 1) = y + log(-expm1(-y)), stable for small y.
double softplus_inverse(double y) {
  return y + std::log(-std::expm1(-y));
}
double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

void fill_normal_bf16(Rng& rng, std::vector<float>& a, double stddev) {
  for (auto& x : a) x = round_to_bf16(static_cast<float>(stddev * rng.normal()));
}

}  // namespace

float beta_to_float(double beta) {
  if (!(beta >= 0.0 && beta <= 1.0)) fail("beta_to_float: beta {} is not in [0, 1]", beta);
  return std::clamp(static_cast<float>(beta), 0x1p-24f, 0x1.fffffep-1f);
}

LayerInputs synthetic_inputs(DriveKind kind, const RecurrenceShape& s, uint64_t seed, int layer,
                             int T) {
  const bool kda_gate = s.gate == GateKind::kda;
  if ((kind == DriveKind::seed_kda || kind == DriveKind::init_kda) && !kda_gate)
    fail("drive '{}' needs a KDA (per-channel gate) shape", drive_kind_name(kind));
  if (kind == DriveKind::init_gdn && kda_gate)
    fail("drive 'init-gdn' needs a GDN (scalar gate) shape");
  if (kind != DriveKind::seed_kda && kind != DriveKind::init_gdn && kind != DriveKind::init_kda)
    fail("drive '{}' is not synthetic", drive_kind_name(kind));

  LayerInputs in = LayerInputs::zeros(s, T);
  // Independent streams per (seed, layer, tensor): adding a tensor never shifts another.
  Rng rq(mix_seed(seed, static_cast<uint64_t>(layer), 1)), rk(mix_seed(seed, layer, 2)),
      rv(mix_seed(seed, layer, 3)), rg(mix_seed(seed, layer, 4)), rb(mix_seed(seed, layer, 5)),
      rp(mix_seed(seed, layer, 6));

  if (kind == DriveKind::seed_kda) {
    fill_normal_bf16(rq, in.q, 0.5);
    fill_normal_bf16(rk, in.k, 0.5);
    fill_normal_bf16(rv, in.v, 0.5);
    for (auto& b : in.beta) b = beta_to_float(rb.uniform());
    for (auto& g : in.g) g = static_cast<float>(-rg.uniform(0.0, 0.1) - 0.005);
    return in;
  }

  fill_normal_bf16(rq, in.q, 1.0);
  fill_normal_bf16(rk, in.k, 1.0);
  fill_normal_bf16(rv, in.v, 1.0);
  for (auto& b : in.beta) b = beta_to_float(sigmoid(rb.normal()));
  // Layer parameters at initialisation (Mamba2 / GDN convention).
  const int gate_params = kda_gate ? s.HV * s.dk : s.HV;
  std::vector<double> A(s.HV), dt_bias(gate_params);
  for (int h = 0; h < s.HV; ++h) A[h] = rp.uniform(1.0, 16.0);  // exp(A_log)
  for (auto& b : dt_bias)
    b = softplus_inverse(std::exp(rp.uniform(std::log(1e-3), std::log(1e-1))));
  for (int t = 0; t < T; ++t)
    for (int p = 0; p < gate_params; ++p) {
      const int h = kda_gate ? p / s.dk : p;
      in.g[static_cast<size_t>(t) * gate_params + p] =
          static_cast<float>(-A[h] * softplus(rg.normal() + dt_bias[p]));
    }
  return in;
}

}  // namespace statecheck
