// Where the numerical experiments get their states and the tokens that extend them, resolved from
// a drive (docs/experiments.md, "Drives"):
//   synthetic drives: one sequence; the state is built by a prefill from zero over drive tokens;
//   'states': N states read from the file, extended by tokens of the model family's init drive;
//   'tinylm': states and layer inputs of the shipped tiny language model on its held-out text;
//   'inputs': N sequences of a real model's recurrence inputs from a file, each starting from the
//   file's initial state (or zero), the state built by a prefill over the file's first tokens.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/drive/drive.h"
#include "core/model/model_config.h"
#include "core/recurrence/gated_delta.h"
#include "core/state/state.h"

namespace statecheck {

class StatesSource {
 public:
  // The source of `drive` for model `m` (already TP-sharded), with the synthetic token streams
  // drawn from `seed`. `tinylm_config`: the tiny model's config.json, read for drive 'tinylm'
  // (it must describe the same shapes as `m`). Throws statecheck::Error for a drive that does not
  // match the model's gate kind, or an unreadable / mismatching states file.
  static StatesSource resolve(const DriveSpec& drive, uint64_t seed, const ModelConfig& m,
                              const std::string& tinylm_config);

  int count() const { return count_; }  // sequences (states) measured
  bool has_prefill() const {
    return prefill_;
  }  // state built by a prefill (from zero, or from
     // the inputs file's initial state)
  // Tokens each sequence holds: 0 for no limit (synthetic streams), the file's T for 'inputs'.
  int token_limit() const { return token_limit_; }
  // The recurrence shape of this source's inputs: recurrence_shape(m), except for 'inputs', whose
  // file says whether q and k are already L2-normalised and gives the readout scale.
  const RecurrenceShape& shape() const { return shape_; }
  const std::string& drive_name() const { return name_; }
  const DriveSpec& drive() const { return drive_; }

  // Inputs of layer `layer` of sequence n for T tokens (deterministic in seed, n, layer).
  LayerInputs layer_inputs(int n, int layer, int T) const { return inputs_(n, layer, T); }
  // Starting temporal state of that layer, [HV, d_v, d_k] fp32 (zeros for synthetic drives).
  std::vector<float> initial_layer_state(int n, int layer) const { return initial_(n, layer); }

  // Checks what the fp32 recurrence made of this source: `what` (a state or outputs, `count`
  // fp32 values) of sequence n, layer, head after `tokens` tokens. Throws statecheck::Error naming
  // the source and the place on a non-finite value: a starting state too large for fp32
  // arithmetic overflows the recurrence, and the experiments would otherwise report inf or NaN.
  void require_finite(const float* x, size_t count, const char* what, int n, int layer, int head,
                      int tokens) const;

 private:
  int count_ = 1;
  bool prefill_ = true;
  int token_limit_ = 0;
  RecurrenceShape shape_;
  std::string name_;
  DriveSpec drive_;
  std::function<LayerInputs(int, int, int)> inputs_;
  std::function<std::vector<float>(int, int)> initial_;
};

// Seed of sequence n's token stream: the run's seed for n = 0, a derived one otherwise.
uint64_t sequence_seed(uint64_t seed, int n);

}  // namespace statecheck
