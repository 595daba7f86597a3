// Summary keys (experiments/summary_keys.h): every key carries its experiment's prefix, the
// previous release's codec and GPU-path names map to the current ones (the gate reads both), each
// key of a run gets a unit, and summary.json carries "meta", "units" and "renamed".
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/io/summary.h"
#include "experiments/experiment.h"
#include "experiments/summary_keys.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using nlohmann::json;

TEST(SummaryKeys, EveryKeyGetsItsExperimentPrefix) {
  Summary codec;
  codec.set("int8.state_relerr", 1.0);
  codec.set("cuda.int8.decode_relerr", 2.0);
  codec.set("cuda.prefill_state_relerr_vs_cpu", 3.0);
  codec.set("codec.already", 4.0);
  const Summary c = with_experiment_prefix("codec", codec);
  EXPECT_EQ(c.get("codec.int8.state_relerr"), 1.0);
  EXPECT_EQ(c.get("codec.cuda.int8.decode_relerr"), 2.0);
  EXPECT_EQ(c.get("codec.cuda.prefill_state_relerr_vs_cpu"), 3.0);
  EXPECT_EQ(c.get("codec.already"), 4.0);
  EXPECT_EQ(c.values().size(), 4u);
  Summary chain;
  chain.set("chain.saturation_ratio", 1.4);
  chain.set("cuda.chain.relerr_n1", 5.0);
  const Summary h = with_experiment_prefix("chain", chain);
  EXPECT_EQ(h.get("chain.saturation_ratio"), 1.4);
  EXPECT_EQ(h.get("chain.cuda.relerr_n1"), 5.0);
}

// The previous names, read for one release: the rule, its inverse in "renamed", and the gate.
TEST(SummaryKeys, PreviousNamesMapToCurrentOnes) {
  EXPECT_EQ(current_summary_key("int8.state_relerr"), "codec.int8.state_relerr");
  EXPECT_EQ(current_summary_key("fp8_e4m3_raw.state_relerr"), "codec.fp8_e4m3_raw.state_relerr");
  EXPECT_EQ(current_summary_key("int8_bf16_scale.decode_relerr"),
            "codec.int8_bf16_scale.decode_relerr");
  EXPECT_EQ(current_summary_key("cuda.int8.codec_mismatches"), "codec.cuda.int8.codec_mismatches");
  EXPECT_EQ(current_summary_key("cuda.chain.saturation_ratio"), "chain.cuda.saturation_ratio");
  for (const char* same : {"chain.saturation_ratio", "kl.int8_bf16_scale.mean_nats",
                           "memory.kv_tokens.engine", "codec.int8.state_relerr", "int8"})
    EXPECT_EQ(current_summary_key(same), same);
  Summary s;
  s.set("codec.int8.state_relerr", 1.0);
  s.set("codec.cuda.int8.state_relerr", 1.0);
  s.set("chain.cuda.relerr_n1", 1.0);
  s.set("chain.relerr_n1", 1.0);
  s.set("memory.kv_tokens.engine", 1.0);
  const auto renamed = renamed_keys(s);
  const std::map<std::string, std::string> want = {
      {"int8.state_relerr", "codec.int8.state_relerr"},
      {"cuda.int8.state_relerr", "codec.cuda.int8.state_relerr"},
      {"cuda.chain.relerr_n1", "chain.cuda.relerr_n1"}};
  EXPECT_EQ(renamed, want);
  // A thresholds row under the previous name checks the current key.
  std::vector<ThresholdRow> rows(1);
  rows[0].key = "int8.state_relerr";
  rows[0].op = "<";
  rows[0].limit = 0.5;
  upgrade_threshold_keys(rows);
  check_thresholds(s, rows);
  EXPECT_EQ(rows[0].key, "codec.int8.state_relerr");
  EXPECT_TRUE(rows[0].present);
  EXPECT_FALSE(rows[0].pass);  // 1.0 is not < 0.5
}

TEST(SummaryKeys, UnitsFromTheKeyName) {
  const std::pair<const char*, const char*> cases[] = {
      {"codec.int8.state_relerr", "1 (relative Frobenius error)"},
      {"codec.int8.state_relerr_over_fp8_e4m3", "1"},
      {"codec.int8.bytes_per_state", "bytes"},
      {"memory.active.total_gib", "GiB"},
      {"memory.state_pools_over_cache_memory_gib", "GiB"},
      {"memory.kv_tokens.overcommit", "tokens"},
      {"memory.kv_bytes_per_token", "bytes per token"},
      {"memory.auto.active_slots", "slots"},
      {"kl.int8_bf16_scale.p99_nats", "nats"},
      {"kl.ref_bits_per_byte", "bits per byte"},
      {"kl.int8_bf16_scale.top1_agreement", "1"},
      {"capacity.int8.knee_K", "distinct prefixes"},
      {"capacity.cuda.hit_p50_ms", "ms"},
      {"bench.copy.gbps", "GB/s"},
      {"bench.cpu_reference_fp32.gflops", "GFLOP/s"},
      {"replay.bf16.wall_s", "s"},
      {"replay.bf16.token_hit_rate", "1"},
      {"replay.bf16.evictions", "count"},
      {"firecount.requests", "requests"},
      {"codec.int8.max_abs_err", "state units"},
  };
  for (const auto& [key, unit] : cases) EXPECT_EQ(summary_key_unit(key), unit) << key;
  EXPECT_EQ(summary_key_unit("codec.something_new"), "");
}

// A quick codec run on the tiny fixture model, end to end: summary.json has "meta" (the run's
// model, TP, seed, device, command line), a unit for every metric key, every metric key under
// "codec.", the previous names under "renamed", and the thresholds under the current names.
TEST(SummaryKeys, SummaryJsonOfARunHasMetaUnitsAndPrefixedKeys) {
  const test_support::TempDir dir("summary_keys");
  Options o;
  o.experiment = "codec";
  o.model = std::string(STATECHECK_TEST_DATA_DIR) + "/states/model_tiny_gdn.json";
  o.model_given = true;
  o.quick = true;
  o.threads = 2;
  o.seed = 42;
  o.command_line = "statecheck codec --quick (from test_summary_keys)";
  o.out = dir.file("codec.h5");
  o.summary = dir.file("codec.json");
  ASSERT_EQ(run_experiment(o), 0);
  std::ifstream in(o.summary);
  const json j = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  ASSERT_TRUE(j.contains("meta"));
  const json& meta = j["meta"];
  EXPECT_EQ(meta["model"], "tiny-gdn-test");
  EXPECT_EQ(meta["tp"], 1);
  EXPECT_EQ(meta["seed"], 42);
  EXPECT_EQ(meta["device"], "cpu");
  EXPECT_EQ(meta["command_line"], o.command_line);
  EXPECT_EQ(meta["quick"], true);
  for (const char* k : {"tool_version", "git_commit", "created_utc"})
    EXPECT_FALSE(meta[k].get<std::string>().empty()) << k;
  size_t metrics = 0;
  for (const auto& [k, v] : j.items()) {
    if (k == "meta" || k == "units" || k == "renamed" || k == "thresholds") continue;
    ++metrics;
    EXPECT_EQ(k.rfind("codec.", 0), 0u) << k;
    EXPECT_TRUE(j["units"].contains(k)) << "no unit for " << k;
  }
  EXPECT_GT(metrics, 20u);
  EXPECT_EQ(j["renamed"]["int8.state_relerr"], "codec.int8.state_relerr");
  EXPECT_TRUE(j["thresholds"].contains("codec.int8.state_relerr"));
  EXPECT_FALSE(j["thresholds"].contains("int8.state_relerr"));
}
