// Input drives of the numerical experiments: where q, k, v, g and beta come from.
//
//   seed-kda   the public decode-error test (docs/numerics.md, "Real model shapes"):
//              q, k, v ~ 0.5 N(0,1) rounded to bf16, beta ~ U(0, 1), per-channel
//              g ~ -U(0, 0.1) - 0.005; KDA only.
//   init-gdn   the real GDN layer's gate parameterisation at initialisation (docs/numerics.md
//              section 1): per head exp(A_log) ~ U[1, 16], dt ~ logU[1e-3, 1e-1],
//              dt_bias = softplus^-1(dt); per token a, b ~ N(0, 1) (unit-variance projections),
//              g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b); q, k ~ N(0, 1)
//              (L2-normalised in the recurrence), v ~ N(0, 1); q, k, v rounded to bf16.
//   init-kda   the same with a per-(head, key channel) dt_bias and a per-channel a, so g is
//              per channel.
//   states     states supplied in a file (core/io/states_file.h); the tokens that extend them
//              come from the model family's init drive.
//   tinylm     states of the shipped tiny language model over its held-out text.
//   inputs     recurrence inputs of a real model's layers read from a file (core/drive/
//              inputs_file.h): its sequences, its tokens, its initial states.
// Every synthetic stream is a pure function of (seed, layer): layers can be generated in any
// order or in parallel and give the same numbers.
#pragma once

#include <cstdint>
#include <string>

#include "core/model/model_config.h"
#include "core/recurrence/gated_delta.h"

namespace statecheck {

enum class DriveKind { seed_kda, init_gdn, init_kda, states, tinylm, inputs };

struct DriveSpec {
  DriveKind kind = DriveKind::init_gdn;
  std::string states_file;  // drive 'states' only
  // drive 'states': the tensor name or per-layer pattern with "{i}" (--states-key; "": the rules
  // of core/drive/states_file.h)
  std::string states_key;
  std::string inputs_file;  // drive 'inputs' only

  std::string name() const;
  // The synthetic drive that generates tokens (for 'states' and 'tinylm' continuations: the
  // model family's init drive).
  DriveKind token_drive(const ModelConfig& m) const;
};

// Parses a drive name ("seed-kda", "init-gdn", "init-kda", "states", "tinylm", "inputs"); 'states'
// needs `states_file`, 'inputs' needs `inputs_file`. Throws statecheck::Error on an unknown name,
// a missing file argument, or a file given to a drive that does not read it.
DriveSpec parse_drive(const std::string& name, const std::string& states_file,
                      const std::string& inputs_file = "");

// The drive used when none is given: init-gdn for GDN models, seed-kda for KDA models.
DriveSpec default_drive(const ModelConfig& m);

// Throws statecheck::Error when the drive's gate kind does not match the model family (a KDA drive
// on a GDN model or the reverse). The 'inputs' drive's gate kind is checked when its file is
// opened (core/drive/inputs_file.h).
void check_drive_matches_model(const DriveSpec& d, const ModelConfig& m);

// A drawn beta (U(0, 1) or a sigmoid, in double) rounded to fp32 and kept inside the open interval
// the delta rule assumes (docs/numerics.md, "The recurrence": beta in (0, 1)): a draw within 2^-25
// of 1 rounds to 1.0f and an exact 0 stays 0, so the result is clamped to [2^-24, 1 - 2^-24], the
// top being the largest float below 1 and the floor chosen to mirror it (draws in (0, 2^-24), which
// fp32 holds exactly, are raised to 2^-24 too). Throws statecheck::Error for a value outside
// [0, 1] or NaN.
float beta_to_float(double beta);

// Synthetic inputs of one layer for T tokens (see the table above). Throws for non-synthetic
// kinds or a gate-kind mismatch with `shape`.
LayerInputs synthetic_inputs(DriveKind kind, const RecurrenceShape& shape, uint64_t seed, int layer,
                             int T);

const char* drive_kind_name(DriveKind k);

}  // namespace statecheck
