// The parameter count of a Hugging Face config.json (core/model/param_count.h) against the stated
// parameter counts of the shipped models, loaded from their own Hugging Face configs
// (tests/data/hf_configs/<name>/, given as --model DIR), and the refusal when a field is missing.
#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/memory/memory_budget.h"
#include "core/model/model_config.h"
#include "core/model/param_count.h"
#include "core/util/error.h"
#include "tests/error_of.h"

using namespace statecheck;
using nlohmann::json;

namespace {
std::string hf_dir(const std::string& name) {
  return std::string(STATECHECK_TEST_DATA_DIR) + "/hf_configs/" + name;
}
}  // namespace

// The shipped configs state the nominal count of each model's name (35B, 80B, 48B); the count
// derived from the layers of the Hugging Face config must land within 3% of it: the names round
// (Kimi-Linear's card gives 49.1B for "48B", 2.3% above), and norms and biases are a few
// millionths. The vision tower of Qwen3.5 is not counted (about 0.4B, 1.2% of 35B).
TEST(ParamCount, ShippedModelsFromTheirHuggingFaceConfigsMatchTheirStatedParameters) {
  for (const std::string name : {"qwen3.5-35b-a3b", "qwen3-next-80b-a3b", "kimi-linear-48b-a3b"}) {
    SCOPED_TRACE(name);
    const ModelConfig shipped = load_model(name, 0);
    const ModelConfig hf = load_model(hf_dir(name), shipped.tp);
    EXPECT_TRUE(hf.weights_unknown.empty()) << hf.weights_unknown;
    EXPECT_NEAR(hf.params_billion / shipped.params_billion, 1.0, 0.03)
        << "derived " << hf.params_billion << "B, stated " << shipped.params_billion << "B";
    EXPECT_EQ(hf.weight_bytes_per_param, 2.0);  // bfloat16 configs
    // The same shapes as the shipped config, so the budget differs by the weights only.
    EXPECT_EQ(hf.linear_layers, shipped.linear_layers);
    EXPECT_EQ(hf.value_heads_shard(), shipped.value_heads_shard());
    // The budget's weights term: parameters x 2 bytes / TP, not 0.
    const Budget b = compute_budget(hf, StateDtypes{}, BudgetInputs{});
    EXPECT_NEAR(b.weights_bytes, hf.params_billion * 1e9 * 2.0 / hf.tp, 1.0);
    EXPECT_GT(b.weights_bytes / kGiB, 10.0);
  }
}

// Qwen3-Next-80B-A3B by hand, term by term (hidden 2048, vocab 151936, 48 layers of which 12 full
// attention, 512 experts of 512, one shared expert of 512), independently of the layer loop.
TEST(ParamCount, Qwen3NextByHand) {
  const double h = 2048, vocab = 151936;
  const double embed = 2 * vocab * h;  // untied LM head
  const double full = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256;
  const double conv = (2 * 16 * 128 + 32 * 128) * 4;
  const double linear = h * (2 * 16 * 128 + 2 * 32 * 128) + h * 64 + conv + 64 + 128 + 4096 * h;
  const double moe = h * 512 + 512 * 3 * h * 512 + 3 * h * 512 + h;
  const double want = embed + h + 12 * full + 36 * linear + 48 * (moe + 2 * h);
  const ModelConfig m = load_model(hf_dir("qwen3-next-80b-a3b"), 4);
  EXPECT_NEAR(m.params_billion * 1e9, want, 1.0);
  // Active: the 10 routed experts per token (num_experts_per_tok) instead of 512; the router
  // still scores all 512.
  const double moe_active = h * 512 + 10 * 3 * h * 512 + 3 * h * 512 + h;
  EXPECT_NEAR(m.active_params_billion * 1e9, want - 48 * (moe - moe_active), 1.0);
}

// Every shipped model's Hugging Face config gives an active count below the total; the shipped
// configs state the nominal one of the names (A3B), and a statecheck config without the field
// falls back to the total.
TEST(ParamCount, ActiveParametersCountTheRoutedExpertsPerToken) {
  for (const std::string name : {"qwen3.5-35b-a3b", "qwen3-next-80b-a3b", "kimi-linear-48b-a3b"}) {
    SCOPED_TRACE(name);
    const ModelConfig shipped = load_model(name, 0);
    const ModelConfig hf = load_model(hf_dir(name), shipped.tp);
    EXPECT_EQ(shipped.active_params(), 3.0);
    EXPECT_GT(hf.active_params_billion, 1.0);
    EXPECT_LT(hf.active_params_billion, 0.2 * hf.params_billion);
  }
  ModelConfig m;
  m.params_billion = 35.0;
  EXPECT_EQ(m.active_params(), 35.0);
  // A malformed or zero experts-per-token field leaves the total as it is and the active count
  // at the total (all experts).
  const ModelConfig ref = load_model(hf_dir("qwen3-next-80b-a3b"), 4);
  for (const nlohmann::json& bad : {nlohmann::json("ten"), nlohmann::json(0)}) {
    std::ifstream in(hf_dir("qwen3-next-80b-a3b") + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["num_experts_per_tok"] = bad;
    const ModelConfig c = parse_model_config(j, "config.json", 4);
    EXPECT_TRUE(c.weights_unknown.empty()) << c.weights_unknown;
    EXPECT_DOUBLE_EQ(c.params_billion, ref.params_billion);
    EXPECT_DOUBLE_EQ(c.active_params_billion, c.params_billion);
  }
}

// A field the count needs is missing: the weights are unknown, named, and the budget asks for
// --weights-gib instead of counting 0 bytes; --weights-gib then runs it.
TEST(ParamCount, MissingFieldIsNamedAndTheBudgetAsksForWeightsGib) {
  const json j = {{"model_type", "qwen3_next"},
                  {"num_hidden_layers", 48},
                  {"full_attention_interval", 4},
                  {"linear_num_key_heads", 16},
                  {"linear_num_value_heads", 32},
                  {"linear_key_head_dim", 128},
                  {"linear_value_head_dim", 128},
                  {"num_key_value_heads", 2},
                  {"head_dim", 256},
                  {"hidden_size", 2048}};
  const ModelConfig m = parse_model_config(j, "config.json", 4);
  EXPECT_NE(m.weights_unknown.find("'vocab_size'"), std::string::npos) << m.weights_unknown;
  EXPECT_EQ(m.params_billion, 0.0);
  const std::string err =
      test_support::error_of([&] { compute_budget(m, StateDtypes{}, BudgetInputs{}); });
  EXPECT_NE(err.find("--weights-gib"), std::string::npos) << err;
  EXPECT_NE(err.find("vocab_size"), std::string::npos) << err;
  BudgetInputs given;
  given.weights_gib = 20.0;
  EXPECT_EQ(compute_budget(m, StateDtypes{}, given).weights_bytes, 20.0 * kGiB);
}

// The config's dtype sets the bytes per weight: float32 doubles the weights of bfloat16.
TEST(ParamCount, DtypeSetsBytesPerWeight) {
  json j = json::parse(R"({"model_type": "kimi_linear", "num_hidden_layers": 4,
    "hidden_size": 64, "vocab_size": 100, "num_attention_heads": 2, "kv_lora_rank": 16,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "intermediate_size": 96,
    "linear_attn_config": {"num_heads": 2, "head_dim": 16, "short_conv_kernel_size": 4,
    "full_attn_layers": [4]}})");
  const ModelConfig bf16 = parse_model_config(j, "a.json", 1);
  j["torch_dtype"] = "float32";
  const ModelConfig fp32 = parse_model_config(j, "b.json", 1);
  EXPECT_EQ(bf16.weight_bytes_per_param, 2.0);
  EXPECT_EQ(fp32.weight_bytes_per_param, 4.0);
  EXPECT_GT(bf16.params_billion, 0.0);
  EXPECT_EQ(bf16.params_billion, fp32.params_billion);
  // Dense model by hand: embed 2 x 100 x 64, final norm 64; per layer norms 2 x 64 and an MLP
  // 3 x 64 x 96; 3 KDA layers, 1 MLA layer.
  const double h = 64, H = 2, d = 16, Hd = H * d;
  const double kda = 3 * h * Hd + 3 * Hd * 4 + 2 * (h * d + d * Hd) + h * H + 2 * Hd + d + Hd * h;
  const double mla = h * 2 * (8 + 4) + h * (16 + 4) + 16 + 16 * 2 * (8 + 8) + 2 * 8 * h;
  const double want = 2 * 100 * h + h + 3 * kda + mla + 4 * (2 * h + 3 * h * 96);
  EXPECT_NEAR(bf16.params_billion * 1e9, want, 1e-6);
}
