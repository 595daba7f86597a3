// The tiny byte-level gated-delta language model (data/tinylm/, trained by
// scripts/train_tinylm.py): configuration, weights, recurrent state and an fp32 CPU forward pass
// built on the project's reference recurrence (core/recurrence/gated_delta.h).
//
// Architecture (the structure of the real GDN layers; formulas as in the training script's
// docstring, which the golden test ties to this file), per block l, x [T, D]:
//   h    = RMSNorm(x) * attn_norm                     RMSNorm(x) = x / sqrt(mean(x^2) + eps)
//   qkv  = h W_qkv^T                                  [T, conv_dim], conv_dim = 2 H d_k + HV d_v,
//                                                     channels q [H d_k], k [H d_k], v [HV d_v]
//   y    = SiLU(causal depthwise conv1d(qkv))         width W: y[t, c] = sum_w cw[c, w] x[t-W+1+w,
//   c] g    = -exp(A_log) * softplus(h W_a^T + dt_bias)  GDN [T, HV]; KDA [T, HV, d_k] (A per head)
//   beta = sigmoid(h W_b^T)                           [T, HV]
//   o    = gated delta rule(q, k, v, g, beta)         gated_delta_layer_fp32: q, k L2-normalised
//                                                     (eps 1e-6 in the sqrt), scale d_k^-1/2, GVA
//   o    = RMSNorm_dv(o) * out_norm * SiLU(h W_z^T)   per value head, [T, HV, d_v]
//   x    = x + o W_o^T
//   x    = x + (SiLU(h2 W_gate^T) * (h2 W_up^T)) W_down^T,   h2 = RMSNorm(x) * mlp_norm
// logits = (RMSNorm(x) * final_norm) E^T, E the embedding [256, D] (tied) or lm_head.weight.
//
// Files (all named by config.json, relative to its directory): config.json (the statecheck model
// schema of data/models/README.md plus a "tinylm" section), model.safetensors (fp32 tensors
// under the names listed in tinylm.cpp), eval.txt (held-out text), golden.safetensors.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/backend/recurrence_backend.h"
#include "core/model/model_config.h"
#include "core/recurrence/gated_delta.h"
#include "core/state/state.h"

namespace statecheck {

// Shapes and file names of a tiny model, read from its config.json.
struct TinyLMConfig {
  std::string name;
  std::string config_path;  // the config.json this was read from
  std::string dir;          // its directory; file names below are relative to it
  GateKind gate = GateKind::gdn;
  int vocab = 256;
  int d_model = 0;
  int num_layers = 0;  // every layer is a gated-delta layer
  int H = 0;           // key heads
  int HV = 0;          // value heads, HV % H == 0
  int dk = 0;
  int dv = 0;
  int conv_width = 0;  // W
  int mlp_hidden = 0;  // F
  bool tie_embeddings = true;
  float norm_eps = 1e-6f;  // RMSNorm and gated RMSNorm
  std::string weights_file, eval_text_file, golden_file;

  int conv_dim() const { return 2 * H * dk + HV * dv; }
  int gate_width() const { return gate == GateKind::gdn ? HV : HV * dk; }  // per token
  RecurrenceShape recurrence_shape() const;
  StateShape state_shape() const;                       // [L, HV, d_v, d_k]
  std::string file(const std::string& relative) const;  // dir / relative
  // file(relative) for the config's field 'tinylm.<field>', checked to be an existing regular
  // file; throws statecheck::Error naming the config, the field and the path otherwise.
  std::string input_file(const char* field, const std::string& relative) const;
};

// Path of the shipped model's config: <data dir>/tinylm/config.json.
std::string default_tinylm_config_path();

// The tiny model an experiment uses given its --model option: that file when it is a JSON file
// with a "tinylm" section (a tiny model config), else the shipped model's config.
std::string tinylm_config_for(const std::string& model_option);

// Reads a tiny model's config.json. Throws statecheck::Error naming the file and the field:
// unreadable file, bad JSON, no "tinylm" section, a missing or non-positive size, HV % H != 0,
// vocab_size != 256, an l2norm_eps other than the reference recurrence's 1e-6, full-attention
// layers (the tiny model has none).
TinyLMConfig load_tinylm_config(const std::string& path);

// Recurrent state of the whole model after some tokens (one sequence):
//   temporal [L, HV, d_v, d_k] fp32 (MultiLayerState, what the codecs encode);
//   conv     [L, conv_dim, W - 1] fp32, channels first: conv[l, c, j] is the conv input of channel
//            c, (W - 1 - j) tokens before the next one. Restored exactly (never encoded).
struct TinyLMState {
  MultiLayerState temporal;
  std::vector<float> conv;
  int conv_dim = 0;
  int conv_window = 0;  // W - 1

  // The state before the first token: all zeros.
  static TinyLMState zeros(const TinyLMConfig& c);
  float* conv_layer(int l) { return conv.data() + static_cast<size_t>(l) * conv_dim * conv_window; }
  const float* conv_layer(int l) const {
    return conv.data() + static_cast<size_t>(l) * conv_dim * conv_window;
  }
};

// Runs the recurrence of one layer over all T tokens of `in` from S_hvk [HV, d_v, d_k] (updated
// in place), writing o [T, HV, d_v]. Lets a caller substitute another implementation (a backend
// of core/backend/recurrence_backend.h, through layer_recurrence()) for gated_delta_layer_fp32.
using RecurrenceFn = LayerRecurrenceFn;

struct ForwardOptions {
  // How the temporal state is kept between tokens (fp32, or rounded to bf16 after every token as a
  // bf16 state pool would); ignored when `recurrence` is set.
  Dtype storage = Dtype::fp32;
  // Replaces the CPU reference recurrence when set.
  RecurrenceFn recurrence;
  // When not null: receives the recurrence inputs of every layer, [L] x LayerInputs of T tokens
  // (q, k as they enter the recurrence, i.e. before its L2 normalisation).
  std::vector<LayerInputs>* layer_inputs = nullptr;
  // When not null: receives RMSNorm(x) * final_norm, the input of the LM head, [T, D].
  std::vector<float>* final_hidden = nullptr;
  // false: stop before the LM head (the state still advances); forward() returns no logits.
  bool logits = true;
};

class TinyLM {
 public:
  // Loads config.json and the weights it names. Every tensor is checked against the shapes the
  // config implies; errors (statecheck::Error) name the file and the tensor: missing tensor,
  // wrong shape, unsupported dtype, truncated file, non-finite value, unexpected extra tensor.
  static TinyLM load(const std::string& config_path);

  const TinyLMConfig& config() const { return cfg_; }
  size_t parameter_count() const;
  // The LM head [256, D] fp32 row-major (the embedding when tied).
  const std::vector<float>& lm_head_weight() const { return lm_head_; }

  // Teacher-forced forward pass over tokens[0..T) (bytes) continuing from `state`, which is
  // advanced past the last token. Returns logits [T, 256] fp32 row-major (natural log units,
  // unnormalised), or nothing when !opt.logits. Deterministic and split-invariant: running
  // [0, t) then [t, T) gives bit-identical logits and state to one run over [0, T).
  // Single-threaded; distinct TinyLM const calls may run in parallel. Throws statecheck::Error on
  // a state of the wrong shape.
  std::vector<float> forward(const uint8_t* tokens, int T, TinyLMState& state,
                             const ForwardOptions& opt = {}) const;

 private:
  struct Layer {
    std::vector<float> attn_norm;  // [D]
    std::vector<float> in_proj;   // [conv_dim + HV d_v + gate_width + HV, D]: rows q, k, v, z, a, b
    std::vector<float> conv;      // [conv_dim, W]
    std::vector<float> A_log;     // [HV]
    std::vector<float> dt_bias;   // [gate_width]
    std::vector<float> out_norm;  // [d_v]
    std::vector<float> o_proj;    // [D, HV d_v]
    std::vector<float> mlp_norm;  // [D]
    std::vector<float> gate_up;   // [2 F, D]: rows gate, up
    std::vector<float> down;      // [D, F]
  };
  TinyLMConfig cfg_;
  std::vector<float> embed_;    // [256, D]
  std::vector<float> lm_head_;  // [256, D]; equal to embed_ when tied
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
};

// Reads a text file as bytes (the evaluation text). Throws statecheck::Error naming the file when
// it cannot be read or is empty.
std::vector<uint8_t> read_bytes(const std::string& path);

}  // namespace statecheck
