// The 'tinylm' input drive of the numerical experiments (docs/experiments.md, "Drives"):
// real states and real recurrence inputs of the tiny trained language model on held-out text.
//
// Sequence n (n = 0 .. count() - 1) starts at byte n * kTinyLMDriveStride of the model's
// evaluation text. Its state is the fp32 model's per-layer temporal state after a prefix of
// kTinyLMDrivePrefix bytes (from a zero state); the tokens that extend it are the following bytes,
// teacher-forced through the fp32 model from that exact state, and the drive hands out, per
// layer, the q, k, v, g, beta its recurrence consumed (fp32 values, q and k before the
// recurrence's L2 normalisation; not rounded to bf16).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/recurrence/gated_delta.h"
#include "core/tinylm/tinylm.h"

namespace statecheck {

constexpr int kTinyLMDriveSequences = 4;
constexpr int kTinyLMDriveStride = 1024;  // bytes between sequence starts
constexpr int kTinyLMDrivePrefix = 1024;  // bytes before the state is taken

class TinyLMDrive {
 public:
  // Loads the tiny model of `config_path` and its evaluation text (prefixes run on first use).
  // Throws statecheck::Error on a bad model (see TinyLM::load) or a text shorter than one prefix
  // of the last sequence.
  explicit TinyLMDrive(const std::string& config_path);

  const TinyLMConfig& config() const { return model_.config(); }
  int count() const { return kTinyLMDriveSequences; }

  // Throws statecheck::Error (naming both shapes and how to fix the command line) unless `m` at its
  // TP shard has the tiny model's layers, heads, d_k, d_v and gate kind.
  void check_matches(const ModelConfig& m) const;

  // Temporal state of `layer` after the prefix of sequence n: [HV, d_v, d_k] fp32.
  std::vector<float> initial_layer_state(int n, int layer) const;

  // Recurrence inputs of `layer` for the T bytes after the prefix of sequence n. Thread-safe;
  // computed once per sequence for the longest T asked so far. Throws statecheck::Error when the
  // text has fewer than T bytes after the prefix.
  LayerInputs layer_inputs(int n, int layer, int T) const;

 private:
  struct Sequence {
    bool prefix_done = false;
    TinyLMState at_prefix;
    std::vector<LayerInputs> inputs;  // [L], for `computed` tokens
    int computed = 0;
    std::unique_ptr<std::mutex> mutex = std::make_unique<std::mutex>();
  };
  void ensure_prefix(Sequence& s, int n) const;

  TinyLM model_;
  std::vector<uint8_t> text_;
  std::string text_path_;
  mutable std::vector<Sequence> seqs_;
};

}  // namespace statecheck
