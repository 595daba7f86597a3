// Model configurations: the shapes of the linear-attention (gated delta rule) layers of a real
// model, its full-attention KV layout and its tensor-parallel sharding.
//
// Shipped configs live in data/models/<name>.json (schema documented in data/models/README.md);
// a Hugging Face config.json of the Qwen3-Next / Qwen3.5 / Kimi-Linear families is accepted too.
// Values and sources: shared docs/numerics.md, "Real model shapes" and each file's "source" field.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/state/gate.h"
#include "core/state/layer_inputs.h"

namespace statecheck {

// Full-attention layers' KV cache layout. mha: K and V of num_kv_heads x head_dim per token;
// mla: one latent of kv_lora_rank + rope_dim per token, replicated on every TP rank.
struct FullAttentionSpec {
  enum class Kind { mha, mla } kind = Kind::mha;
  int num_kv_heads = 0;  // mha only
  int head_dim = 0;      // mha only
  int kv_lora_rank = 0;  // mla only
  int rope_dim = 0;      // mla only
};

// How a model's conv state is laid out per layer: [channels, W - 1] (Qwen) or [W - 1, channels]
// (Kimi). Bytes are the same; recorded so pools and dumps can be read correctly.
enum class ConvLayout { channels_first, window_first };

struct ModelConfig {
  std::string name;    // e.g. "qwen3.5-35b-a3b"
  std::string source;  // where the values come from (URL of the public config.json)
  GateKind gate = GateKind::gdn;
  int num_layers = 0;              // all decoder layers
  std::vector<int> linear_layers;  // 0-based indices of gated-delta layers
  std::vector<int> full_layers;    // 0-based indices of full-attention layers
  int num_key_heads = 0;           // H (whole model, before TP)
  int num_value_heads = 0;         // HV (whole model, before TP); HV % H == 0
  int head_k_dim = 0;              // d_k
  int head_v_dim = 0;              // d_v
  int conv_width = 4;              // W
  ConvLayout conv_layout = ConvLayout::channels_first;
  FullAttentionSpec full_attention;
  double params_billion = 0.0;  // total parameters, for the weights estimate of the budget
  // Parameters one token is multiplied by (MoE: its routed experts only), for the prefill time
  // model of capacity --device cuda; 0: not known, taken as params_billion.
  double active_params_billion = 0.0;
  double weight_bytes_per_param = 2.0;  // bytes of one weight (the config's dtype; bf16 default)
  // Non-empty when the parameter count is not known (what is missing); the memory budget then
  // refuses to run without --weights-gib instead of counting 0 bytes of weights.
  std::string weights_unknown;
  std::string ssm_dtype = "float32";  // the engine's default temporal-state dtype for this model
  int tp = 1;                         // tensor-parallel degree this config is sharded for
  int default_tp = 1;                 // TP used when the command line gives none ("default_tp")

  double active_params() const {
    return active_params_billion > 0 ? active_params_billion : params_billion;
  }
  int linear_layer_count() const { return static_cast<int>(linear_layers.size()); }
  int full_layer_count() const { return static_cast<int>(full_layers.size()); }
  // Heads and conv channels per TP rank.
  int key_heads_shard() const { return num_key_heads / tp; }
  int value_heads_shard() const { return num_value_heads / tp; }
  // conv channels of the whole model: q, k (H x d_k each) and v (HV x d_v).
  int conv_dim() const { return 2 * num_key_heads * head_k_dim + num_value_heads * head_v_dim; }
  int conv_dim_shard() const { return conv_dim() / tp; }
  // Full-attention KV heads per rank: at least 1 (heads are replicated when fewer than TP).
  int kv_heads_shard() const;
};

// Loads a shipped model by name (data/models/<name>.json; the name matched case-insensitively), a
// config file by path, or a folder holding config.json (the Hugging Face layout), in the
// statecheck schema or as a Hugging Face config.json, and shards it for `tp` ranks (tp <= 0: the
// config's default_tp, 1 for Hugging Face files). A Hugging Face config's parameter count is
// derived from its fields (core/model/param_count.h); a statecheck config's is `params_billion`.
// Errors (statecheck::Error, naming the file and field): unknown name (with the closest shipped
// name by edit distance), a folder without config.json, unreadable file, bad JSON,
// missing or non-integer field, HV % H != 0, TP not dividing H, HV or the conv channels, a layer
// index out of range, an unknown Hugging Face model_type.
ModelConfig load_model(const std::string& name_or_path, int tp = 0);

// Parses a config from JSON (statecheck schema or Hugging Face); `origin` names it in errors.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& origin, int tp = 0);

// The shipped name closest to `name` by Levenshtein distance over lower-case letters, or "" when
// none is within half the length of the longer of the two (no plausible suggestion).
std::string closest_model_name(const std::string& name);

// Names of the shipped models (files under data/models/), sorted.
std::vector<std::string> shipped_model_names();

// The data directory: $STATECHECK_DATA_DIR if set, else <source tree>/data.
std::string data_dir();

// Checks the consistency rules above; throws statecheck::Error naming `origin` and the field,
// spelled as in the statecheck schema whatever the file's schema ("linear.num_value_heads" also
// for a Hugging Face linear_num_value_heads): one spelling per field. conv_width must be >= 2.
void validate_model(const ModelConfig& m, const std::string& origin);

// The recurrence shape of one linear-attention layer of `m` at its TP shard (key and value heads
// per shard, d_k, d_v, gate kind; q and k L2-normalised, scale d_k^-1/2).
RecurrenceShape recurrence_shape(const ModelConfig& m);

}  // namespace statecheck
