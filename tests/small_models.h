// Test helper: small model configs for experiment tests that run in seconds.
#pragma once

#include <nlohmann/json.hpp>

#include "core/model/model_config.h"

namespace statecheck::test_support {

// 3 GDN layers (full attention at 1-based layer 4), 2 key heads and 4 value heads (GVA) of
// d_v x d_k, conv kernel 4, at TP 1.
inline ModelConfig small_gdn_model(int dk, int dv) {
  const nlohmann::json j = {{"model_type", "qwen3_next"},
                            {"num_hidden_layers", 4},
                            {"full_attention_interval", 4},
                            {"linear_num_key_heads", 2},
                            {"linear_num_value_heads", 4},
                            {"linear_key_head_dim", dk},
                            {"linear_value_head_dim", dv},
                            {"linear_conv_kernel_dim", 4},
                            {"num_key_value_heads", 1},
                            {"head_dim", 64},
                            {"hidden_size", 64}};
  return parse_model_config(j, "small-gdn", 1);
}

}  // namespace statecheck::test_support
