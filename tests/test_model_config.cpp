// Model configs: shipped files, Hugging Face config.json parsing, TP sharding, errors.
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model/model_config.h"
#include "core/util/error.h"
#include "tests/error_of.h"

using namespace statecheck;
using nlohmann::json;

TEST(ModelConfig, ShippedModelsMatchTheSpecTable) {
  const ModelConfig q = load_model("qwen3.5-35b-a3b", 1);
  EXPECT_EQ(q.gate, GateKind::gdn);
  EXPECT_EQ(q.num_layers, 40);
  EXPECT_EQ(q.linear_layer_count(), 30);
  EXPECT_EQ(q.full_layer_count(), 10);
  EXPECT_EQ(q.full_layers.front(), 3);
  EXPECT_EQ(q.full_layers.back(), 39);
  EXPECT_EQ(q.num_key_heads, 16);
  EXPECT_EQ(q.num_value_heads, 32);
  EXPECT_EQ(q.head_k_dim, 128);
  EXPECT_EQ(q.conv_dim(), 2 * 16 * 128 + 32 * 128);

  const ModelConfig n = load_model("qwen3-next-80b-a3b", 1);
  EXPECT_EQ(n.linear_layer_count(), 36);
  EXPECT_EQ(n.full_layer_count(), 12);

  const ModelConfig k = load_model("kimi-linear-48b-a3b", 1);
  EXPECT_EQ(k.gate, GateKind::kda);
  EXPECT_EQ(k.linear_layer_count(), 20);
  EXPECT_EQ(k.full_layers, (std::vector<int>{3, 7, 11, 15, 19, 23, 26}));
  EXPECT_EQ(k.conv_dim(), 3 * 32 * 128);
  EXPECT_EQ(k.full_attention.kind, FullAttentionSpec::Kind::mla);
  EXPECT_EQ(k.kv_heads_shard(), 1);
}

TEST(ModelConfig, TensorParallelSharding) {
  const ModelConfig q = load_model("qwen3.5-35b-a3b", 4);
  EXPECT_EQ(q.value_heads_shard(), 8);
  EXPECT_EQ(q.key_heads_shard(), 4);
  EXPECT_EQ(q.conv_dim_shard(), 2048);
  EXPECT_EQ(q.kv_heads_shard(), 1);  // 2 KV heads over 4 ranks: replicated, 1 per GPU
  EXPECT_EQ(load_model("qwen3.5-35b-a3b", 2).kv_heads_shard(), 1);
  EXPECT_EQ(load_model("qwen3.5-35b-a3b", 1).kv_heads_shard(), 2);
  EXPECT_EQ(load_model("qwen3.5-35b-a3b").tp, 4);  // default_tp of the shipped file
  EXPECT_EQ(load_model("kimi-linear-48b-a3b").tp, 1);
  EXPECT_THROW(load_model("qwen3.5-35b-a3b", 3), Error);
  EXPECT_THROW(load_model("kimi-linear-48b-a3b", 64), Error);
}

TEST(ModelConfig, HuggingFaceQwen3Next) {
  const json j = {{"model_type", "qwen3_next"},   {"num_hidden_layers", 48},
                  {"full_attention_interval", 4}, {"linear_num_key_heads", 16},
                  {"linear_num_value_heads", 32}, {"linear_key_head_dim", 128},
                  {"linear_value_head_dim", 128}, {"linear_conv_kernel_dim", 4},
                  {"num_key_value_heads", 2},     {"head_dim", 256},
                  {"hidden_size", 2048},          {"some_future_field", {1, 2, 3}}};
  const ModelConfig m = parse_model_config(j, "config.json", 4);
  EXPECT_EQ(m.linear_layer_count(), 36);
  EXPECT_EQ(m.full_layers.front(), 3);
  EXPECT_EQ(m.value_heads_shard(), 8);
  EXPECT_EQ(m.conv_dim_shard(), 2048);
  EXPECT_EQ(m.name, "qwen3_next");  // no '_name_or_path': the model type
  json named = j;
  named["_name_or_path"] = "";  // left empty by a local save: the model type too
  EXPECT_EQ(parse_model_config(named, "config.json", 4).name, "qwen3_next");
  named["_name_or_path"] = "Qwen/Qwen3-Next-80B-A3B-Instruct";
  EXPECT_EQ(parse_model_config(named, "config.json", 4).name, "Qwen/Qwen3-Next-80B-A3B-Instruct");
}

TEST(ModelConfig, HuggingFaceQwen35NestedTextConfigWithLayerTypes) {
  json types = json::array();
  for (int l = 0; l < 40; ++l)
    types.push_back((l + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  const json j = {{"model_type", "qwen3_5_moe"},
                  {"text_config",
                   {{"model_type", "qwen3_5_moe_text"},
                    {"num_hidden_layers", 40},
                    {"layer_types", types},
                    {"linear_num_key_heads", 16},
                    {"linear_num_value_heads", 32},
                    {"linear_key_head_dim", 128},
                    {"linear_value_head_dim", 128},
                    {"linear_conv_kernel_dim", 4},
                    {"num_key_value_heads", 2},
                    {"head_dim", 256},
                    {"mamba_ssm_dtype", "float32"}}},
                  {"vision_config", {{"depth", 27}}}};
  const ModelConfig m = parse_model_config(j, "config.json", 1);
  const ModelConfig shipped = load_model("qwen3.5-35b-a3b", 1);
  EXPECT_EQ(m.linear_layers, shipped.linear_layers);
  EXPECT_EQ(m.full_layers, shipped.full_layers);
  EXPECT_EQ(m.ssm_dtype, "float32");
}

TEST(ModelConfig, HuggingFaceKimiLinear) {
  const json j = {
      {"model_type", "kimi_linear"},
      {"num_hidden_layers", 27},
      {"kv_lora_rank", 512},
      {"qk_rope_head_dim", 64},
      {"linear_attn_config",
       {{"num_heads", 32},
        {"head_dim", 128},
        {"short_conv_kernel_size", 4},
        {"kda_layers", {1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26}},
        {"full_attn_layers", {4, 8, 12, 16, 20, 24, 27}}}}};
  const ModelConfig m = parse_model_config(j, "config.json", 1);
  const ModelConfig shipped = load_model("kimi-linear-48b-a3b", 1);
  EXPECT_EQ(m.linear_layers, shipped.linear_layers);
  EXPECT_EQ(m.gate, GateKind::kda);
  EXPECT_EQ(m.conv_dim(), shipped.conv_dim());

  // kda_layers of the right count that do not partition the layers with full_attn_layers.
  const std::vector<std::pair<std::vector<int>, std::string>> bad = {
      {{1, 2, 4, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26},
       "'linear_attn_config.kda_layers[2]' is layer 4, already listed in 'full_attn_layers'"},
      {{1, 1, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26},
       "'linear_attn_config.kda_layers[1]' is layer 1, already listed in 'kda_layers'"},
      {{0, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26},
       "'linear_attn_config.kda_layers[0]' is 0, outside 1..num_hidden_layers (27)"}};
  for (const auto& [kda, want] : bad) {
    json k = j;
    k["linear_attn_config"]["kda_layers"] = kda;
    const std::string err =
        statecheck::test_support::error_of([&] { parse_model_config(k, "config.json", 1); });
    EXPECT_NE(err.find(want), std::string::npos) << "error: '" << err << "'";
  }
}

TEST(ModelConfig, InconsistentOrMissingFieldsAreClearErrors) {
  json j = {{"model_type", "qwen3_next"},
            {"num_hidden_layers", 8},
            {"full_attention_interval", 4},
            {"linear_num_key_heads", 16},
            {"linear_num_value_heads", 24},
            {"linear_key_head_dim", 128},
            {"linear_value_head_dim", 128},
            {"num_key_value_heads", 2},
            {"head_dim", 256}};
  try {
    parse_model_config(j, "bad.json", 1);
    FAIL() << "HV % H != 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "linear.num_value_heads (24) is not a multiple of linear.num_key_heads (16)"),
              std::string::npos)
        << e.what();
  }
  j["linear_num_value_heads"] = 32;
  try {
    parse_model_config(j, "bad.json", 3);
    FAIL() << "TP 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TP 3 does not divide"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("this model shards at TP 1, 2, 4, 8, 16"),
              std::string::npos)
        << e.what();
  }
  j.erase("linear_key_head_dim");
  try {
    parse_model_config(j, "bad.json", 1);
    FAIL() << "missing field accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: missing field 'linear_key_head_dim'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_model_config(json{{"model_type", "llama"}, {"num_hidden_layers", 2}}, "x", 1),
               Error);
  EXPECT_THROW(parse_model_config(json{{"foo", 1}}, "x", 1), Error);
  EXPECT_THROW(load_model("no-such-model"), Error);
  EXPECT_THROW(load_model("/nonexistent/dir/model.json"), Error);
}

// Fields that parse but make no sense are refused with the field named, not turned into a
// truncated index, a division by zero or an infinite weight size later.
TEST(ModelConfig, OutOfRangeFieldsAreNamed) {
  std::ifstream in(data_dir() + "/models/qwen3.5-35b-a3b.json");
  const json base = json::parse(in);
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {[](json& j) { j["full_attention_layers"] = json::array({4294967298ull}); },
       "field 'full_attention_layers[0]' = 4294967298 is outside [-1e6, 1e6]"},
      {[](json& j) { j["name"] = ""; }, "field 'name' (Hugging Face: '_name_or_path' or"},
      {[](json& j) { j["name"] = std::string(257, 'x'); },
       "field 'name' has 257 characters (at most 256)"},
      {[](json& j) { j["name"] = "a\nb"; },
       "field 'name' has a control character (code 10) at position 1"},
      {[](json& j) { j["default_tp"] = 0; }, "field 'default_tp' must be positive"},
      {[](json& j) { j["params_billion"] = 1e308; }, "field 'params_billion'"},
      {[](json& j) { j["active_params_billion"] = "3"; },
       "field 'active_params_billion' must be a number"},
      {[](json& j) { j["active_params_billion"] = -1.0; }, "field 'active_params_billion' must be"},
      {[](json& j) { j["active_params_billion"] = 36.0; },
       "field 'active_params_billion' must be in [0, min(params_billion = 35, 1e5)]"},
      {[](json& j) {
         j.erase("params_billion");
         j["active_params_billion"] = 1e308;
       },
       "field 'active_params_billion' must be in [0, min(params_billion = 0, 1e5)]"},
      {[](json& j) { j["full_attention"]["num_kv_heads"] = 0; },
       "field 'full_attention.num_kv_heads' must be positive"},
      {[](json& j) {
         j["full_attention"] = {{"kind", "mla"}, {"kv_lora_rank", -1}, {"rope_dim", 64}};
       },
       "field 'full_attention.kv_lora_rank' must be positive"},
  };
  for (const auto& [edit, message] : cases) {
    json j = base;
    edit(j);
    const std::string err = test_support::error_of([&] { parse_model_config(j, "m.json", 0); });
    EXPECT_NE(err.find("m.json: " + message), std::string::npos)
        << "expected '" << message << "', got '" << err << "'";
  }
  // Kimi's layer lists are 1-based: 0 is named as such, not reported as layer -1.
  json kimi = {{"model_type", "kimi_linear"},
               {"num_hidden_layers", 4},
               {"kv_lora_rank", 512},
               {"qk_rope_head_dim", 64},
               {"linear_attn_config",
                {{"num_heads", 32},
                 {"head_dim", 128},
                 {"short_conv_kernel_size", 4},
                 {"full_attn_layers", {0}}}}};
  const std::string err = test_support::error_of([&] { parse_model_config(kimi, "k.json", 1); });
  EXPECT_NE(err.find("'linear_attn_config.full_attn_layers[0]' is 0, outside 1..num_hidden_layers "
                     "(4) (1-based)"),
            std::string::npos)
      << err;
  // Text after the JSON object is an error, not ignored.
  const std::string path = testing::TempDir() + "/trailing.json";
  std::ofstream(path) << base.dump() << " trailing";
  EXPECT_NE(test_support::error_of([&] { load_model(path); }).find("not valid JSON"),
            std::string::npos);
}

// `--model DIR` (a Hugging Face model folder holding config.json), names in any case, and the
// closest shipped name suggested on a miss.
TEST(ModelConfig, FolderCaseInsensitiveNamesAndSuggestions) {
  const std::string dir = std::string(STATECHECK_TEST_DATA_DIR) + "/hf_configs/qwen3-next-80b-a3b";
  const ModelConfig folder = load_model(dir, 4);
  EXPECT_EQ(folder.linear_layers, load_model("qwen3-next-80b-a3b", 4).linear_layers);
  EXPECT_EQ(load_model("Qwen3-Next-80B-A3B", 0).name, "qwen3-next-80b-a3b");
  EXPECT_EQ(load_model("KIMI-LINEAR-48B-A3B", 0).gate, GateKind::kda);
  const std::string miss = statecheck::test_support::error_of([] { load_model("qwen3-next-80b"); });
  EXPECT_NE(miss.find("did you mean 'qwen3-next-80b-a3b'?"), std::string::npos) << miss;
  const std::string far = statecheck::test_support::error_of([] { load_model("llama"); });
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_EQ(closest_model_name("Qwen3.5-35B"), "qwen3.5-35b-a3b");
  const std::string empty_dir = std::string(STATECHECK_TEST_DATA_DIR) + "/hf_configs";
  const std::string no_config = statecheck::test_support::error_of([&] { load_model(empty_dir); });
  EXPECT_NE(no_config.find("a folder without config.json"), std::string::npos) << no_config;
}
