#include "core/model/param_count.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace statecheck {

namespace {

using nlohmann::json;

// Thrown inside the count when a field it needs is absent; carries the field's name.
struct MissingField {
  std::string field;
};

class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  // A required positive integer field.
  double pos(const char* key) const {
    if (!j_.is_object() || !j_.contains(key) || !j_[key].is_number_integer() ||
        j_[key].get<int64_t>() <= 0)
      throw MissingField{where_ + key};
    return static_cast<double>(j_[key].get<int64_t>());
  }
  // An optional non-negative integer field (null counts as absent).
  double opt(const char* key, double fallback) const {
    if (!j_.is_object() || !j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_number_integer() || j_[key].get<int64_t>() < 0)
      throw MissingField{where_ + key};
    return static_cast<double>(j_[key].get<int64_t>());
  }
  bool flag(const char* key, bool fallback) const {
    if (!j_.is_object() || !j_.contains(key) || !j_[key].is_boolean()) return fallback;
    return j_[key].get<bool>();
  }
  const json& raw() const { return j_; }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  std::string where_;
};

// MLP parameters of one layer: MoE (router, `routed` of the routed experts, shared experts) or
// dense. routed = experts for the total count, the experts per token for the active one.
double moe_params(double hidden, double experts, double routed, double moe_inter,
                  double shared_inter, bool shared_gate) {
  return hidden * experts + routed * 3.0 * hidden * moe_inter + 3.0 * hidden * shared_inter +
         (shared_gate && shared_inter > 0 ? hidden : 0.0);
}

// The experts one token is routed to (`key`), all of them when the config does not say (or says
// 0).
double experts_per_token(const Fields& f, const char* key, double experts, bool active) {
  if (!active) return experts;
  const double k = f.opt(key, experts);
  return k > 0 ? std::min(experts, k) : experts;
}

double qwen_params(const Fields& f, const ModelConfig& m, bool active) {
  const double hidden = f.pos("hidden_size"), vocab = f.pos("vocab_size");
  const double heads = f.pos("num_attention_heads");
  const double kv = m.full_attention.num_kv_heads, hd = m.full_attention.head_dim;
  const double gate = f.flag("attn_output_gate", true) ? 2.0 : 1.0;
  const double full =
      hidden * heads * hd * gate + 2.0 * hidden * kv * hd + heads * hd * hidden + 2.0 * hd;
  const double H = m.num_key_heads, HV = m.num_value_heads, dk = m.head_k_dim, dv = m.head_v_dim;
  const double linear = hidden * (2 * H * dk + 2 * HV * dv) + hidden * 2 * HV +
                        static_cast<double>(m.conv_dim()) * m.conv_width + 2 * HV + dv +
                        HV * dv * hidden;
  const double experts = f.opt("num_experts", 0);
  double moe = 0.0, dense = 0.0;
  if (experts > 0)
    moe = moe_params(hidden, experts, experts_per_token(f, "num_experts_per_tok", experts, active),
                     f.pos("moe_intermediate_size"), f.opt("shared_expert_intermediate_size", 0),
                     true);
  std::set<int> mlp_only;
  if (f.raw().contains("mlp_only_layers") && f.raw()["mlp_only_layers"].is_array())
    for (const json& v : f.raw()["mlp_only_layers"])
      if (v.is_number_integer()) mlp_only.insert(v.get<int>());
  const int sparse_step = static_cast<int>(std::max(1.0, f.opt("decoder_sparse_step", 1)));
  double total = vocab * hidden * (f.flag("tie_word_embeddings", false) ? 1.0 : 2.0) + hidden;
  for (int l = 0; l < m.num_layers; ++l) {
    const bool is_full = std::binary_search(m.full_layers.begin(), m.full_layers.end(), l);
    total += (is_full ? full : linear) + 2.0 * hidden;
    const bool sparse = experts > 0 && !mlp_only.count(l) && (l + 1) % sparse_step == 0;
    if (!sparse && dense == 0.0) dense = 3.0 * hidden * f.pos("intermediate_size");
    total += sparse ? moe : dense;
  }
  return total;
}

double kimi_params(const Fields& f, const ModelConfig& m, bool active) {
  const double hidden = f.pos("hidden_size"), vocab = f.pos("vocab_size");
  const double heads = f.pos("num_attention_heads");
  const double nope = f.pos("qk_nope_head_dim"), rope = m.full_attention.rope_dim;
  const double vhd = f.pos("v_head_dim"), kv_lora = m.full_attention.kv_lora_rank;
  const double q_lora = f.opt("q_lora_rank", 0);
  const double q = q_lora > 0 ? hidden * q_lora + q_lora + q_lora * heads * (nope + rope)
                              : hidden * heads * (nope + rope);
  const double full = q + hidden * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + vhd) +
                      heads * vhd * hidden;
  const double H = m.num_key_heads, d = m.head_k_dim, Hd = H * d;
  const double linear = 3.0 * hidden * Hd + 3.0 * Hd * m.conv_width + 2.0 * (hidden * d + d * Hd) +
                        hidden * H + 2.0 * Hd + d + Hd * hidden;
  const double experts = f.opt("num_experts", 0);
  const double first_dense = f.opt("first_k_dense_replace", 0);
  const double freq = std::max(1.0, f.opt("moe_layer_freq", 1));
  double moe = 0.0, dense = 0.0;
  if (experts > 0) {
    const double inter = f.pos("moe_intermediate_size");
    moe =
        moe_params(hidden, experts, experts_per_token(f, "num_experts_per_token", experts, active),
                   inter, f.opt("num_shared_experts", 0) * inter, false);
  }
  double total = vocab * hidden * (f.flag("tie_word_embeddings", false) ? 1.0 : 2.0) + hidden;
  for (int l = 0; l < m.num_layers; ++l) {
    const bool is_full = std::binary_search(m.full_layers.begin(), m.full_layers.end(), l);
    total += (is_full ? full : linear) + 2.0 * hidden;
    const bool sparse = experts > 0 && l >= first_dense &&
                        static_cast<int64_t>(l - first_dense) % static_cast<int64_t>(freq) == 0;
    if (!sparse && dense == 0.0) dense = 3.0 * hidden * f.pos("intermediate_size");
    total += sparse ? moe : dense;
  }
  return total;
}

}  // namespace

ParamCount hf_param_count(const json& top, const ModelConfig& m) {
  const bool nested = top.contains("text_config") && top["text_config"].is_object();
  const json& j = nested ? top["text_config"] : top;
  const Fields f(j, nested ? "text_config." : "");
  ParamCount c;
  bool dtype_found = false;  // the text config's dtype first, then the top level's
  for (const json* src : {&j, &top})
    for (const char* key : {"torch_dtype", "dtype"})
      if (!dtype_found && src->contains(key) && (*src)[key].is_string()) {
        c.dtype = (*src)[key].get<std::string>();
        dtype_found = true;
      }
  if (c.dtype == "float32")
    c.bytes_per_param = 4.0;
  else if (c.dtype == "bfloat16" || c.dtype == "float16")
    c.bytes_per_param = 2.0;
  else
    c.missing = fmt::format("dtype '{}' (expected bfloat16, float16 or float32)", c.dtype);
  if (!c.missing.empty()) return c;
  try {
    c.params = m.gate == GateKind::kda ? kimi_params(f, m, false) : qwen_params(f, m, false);
  } catch (const MissingField& e) {
    c.params = 0.0;
    c.missing = fmt::format("field '{}'", e.field);
    return c;
  }
  // The active count reads one more field; when that is malformed the total stands and the
  // active count falls back to it.
  try {
    c.active_params = m.gate == GateKind::kda ? kimi_params(f, m, true) : qwen_params(f, m, true);
  } catch (const MissingField&) {
    c.active_params = c.params;
  }
  return c;
}

}  // namespace statecheck
