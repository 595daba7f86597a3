// Parameter count of a Hugging Face config.json of the Qwen3-Next / Qwen3.5 (GDN) and Kimi-Linear
// (KDA) families, for the weights term of the memory budget (core/memory/memory_budget.h).
//
// Counted, per the public modeling files (transformers models/qwen3_next/modeling_qwen3_next.py,
// Qwen3.5 alike; Kimi-Linear's modeling_kimi.py and fla's KimiDeltaAttention), in parameters:
//   embedding          vocab x hidden; the LM head the same again unless tie_word_embeddings
//   full attention     Qwen (gated MHA): q_proj hidden x heads x head_dim x (2 with
//                      attn_output_gate, the default), k_proj and v_proj hidden x kv_heads x
//                      head_dim each, o_proj heads x head_dim x hidden, q/k norms 2 head_dim;
//                      Kimi (MLA): q_proj hidden x heads x (nope + rope) (or through q_lora_rank),
//                      kv_a_proj hidden x (kv_lora_rank + rope), kv_b_proj kv_lora_rank x heads x
//                      (nope + v_head_dim), o_proj heads x v_head_dim x hidden
//   linear attention   GDN: in_proj_qkvz hidden x (2 H d_k + 2 HV d_v), in_proj_ba hidden x 2 HV,
//                      conv1d conv_dim x W, A_log and dt_bias HV each, norm d_v, out_proj
//                      HV d_v x hidden; KDA: q/k/v_proj hidden x H d each, short convs 3 H d x W,
//                      f_a/g_a hidden x d and f_b/g_b d x H d, b_proj hidden x H, A_log and dt_bias
//                      H d, o_norm d, o_proj H d x hidden
//   MLP                MoE layers: router hidden x experts, experts x 3 x hidden x
//                      moe_intermediate_size, shared experts 3 x hidden x shared size (Qwen:
//                      shared_expert_intermediate_size plus a hidden x 1 gate; Kimi:
//                      num_shared_experts x moe_intermediate_size); dense layers 3 x hidden x
//                      intermediate_size. Dense layers: Qwen mlp_only_layers and layers with
//                      (l + 1) % decoder_sparse_step != 0; Kimi the first first_k_dense_replace
//                      and those with (l - first_k_dense_replace) % moe_layer_freq != 0
//   norms              2 x hidden per layer plus the final norm
// The active count (what one token multiplies by) is the same with num_experts_per_tok (Qwen) or
// num_experts_per_token (Kimi) routed experts in place of all of them (all when absent).
// A vision tower (Qwen3.5's vision_config) is not counted: the budget is for the language model.
// Bytes per parameter come from the config's dtype (torch_dtype or dtype: bfloat16 / float16 2,
// float32 4; absent: bfloat16).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/model/model_config.h"

namespace statecheck {

struct ParamCount {
  double params = 0.0;             // total parameters (0 when `missing` is set)
  double active_params = 0.0;      // parameters one token is multiplied by (MoE: routed experts)
  double bytes_per_param = 2.0;    // from the config's dtype
  std::string dtype = "bfloat16";  // the dtype named by the config (or the assumed bfloat16)
  std::string missing;             // non-empty: the field the count needs and the config lacks
};

// Counts the parameters of the Hugging Face config `top` (the whole file; fields are read from
// `text_config` when present) for the model `m` already parsed from it (layers, linear-attention
// heads, full-attention layout). A field the count needs that is absent or not a positive integer
// is named in `missing` (the count is then 0, never a partial sum); the caller refuses the budget
// and asks for --weights-gib.
ParamCount hf_param_count(const nlohmann::json& top, const ModelConfig& m);

}  // namespace statecheck
