// capacity's K grid, knee wording and pool defaults (issue items: the grid must reach past the
// checkpoint pool actually run, a knee at the grid's edge is "beyond the sweep", an explicit
// --ckpt-slots 0 is refused while its absence means 2 x --active-slots), and replay's load
// counters named per mode.
#include <gtest/gtest.h>

#include "core/model/model_config.h"
#include "core/util/error.h"
#include "experiments/cache_common.h"
#include "experiments/options.h"

using namespace statecheck;

namespace {

Options capacity_options(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"statecheck", "capacity"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse_command_line(argv).options;
}

}  // namespace

// The default grid reaches past the checkpoint pool: for C = 1024 the last K is >= 1.25 C, and
// for the default pools (A 256, C 512) it is the published grid (128..768, quick step 128).
TEST(CapacityGrid, DefaultGridReachesPastTheCheckpointPool) {
  const Options big = capacity_options({"--active-slots", "128", "--ckpt-slots", "1024"});
  const ModelConfig m = load_model(big.model);
  const int C = options_cache_config(big, m, CacheMode::int8, 1 << 20).ckpt_slots;
  ASSERT_EQ(C, 1024);
  const std::vector<int> ks = capacity_k_grid(big, C);
  EXPECT_GE(ks.back(), 1280);
  EXPECT_LE(ks.size(), 24u);
  EXPECT_EQ(ks.front(), 128);
  const Options quick = capacity_options({"--quick"});
  EXPECT_EQ(capacity_k_grid(quick, 512), (std::vector<int>{128, 256, 384, 512, 640, 768}));
  const Options full = capacity_options({});
  const std::vector<int> f = capacity_k_grid(full, 512);
  EXPECT_EQ(f.size(), 21u);  // 128, 160, ..., 768
  EXPECT_EQ(f.back(), 768);
  const Options listed = capacity_options({"--k-list", "100,640,700"});
  EXPECT_EQ(capacity_k_grid(listed, 512), (std::vector<int>{100, 640, 700}));
}

TEST(CapacityGrid, KneeAtTheEdgeIsBeyondTheSweep) {
  const std::vector<int> ks = {128, 256, 384};
  EXPECT_EQ(describe_knee(384, ks), "beyond the sweep (> 384)");
  EXPECT_EQ(describe_knee(256, ks), "256");
  EXPECT_EQ(describe_knee(0, ks), "none (no reuse at K = 128)");
}

// Absent: 2 x A. Explicit: as given; 0 is refused (test_options.cpp checks the message).
TEST(CapacityGrid, CheckpointDefaultOnlyWhenTheOptionIsAbsent) {
  const ModelConfig m = load_model("qwen3.5-35b-a3b");
  const Options absent = capacity_options({"--active-slots", "100"});
  EXPECT_EQ(options_cache_config(absent, m, CacheMode::int8, 1000).ckpt_slots, 200);
  const Options given = capacity_options({"--active-slots", "100", "--ckpt-slots", "7"});
  EXPECT_EQ(options_cache_config(given, m, CacheMode::int8, 1000).ckpt_slots, 7);
  EXPECT_THROW(capacity_options({"--ckpt-slots", "0"}), Error);
}

// A bf16 copy-on-write is a slot copy, an int8 one a dequantize, a KV-only restore copies
// nothing: each mode's counter carries its own name.
TEST(ReplayCounters, LoadsAreNamedForWhatTheyCount) {
  CacheConfig c;
  c.mode = CacheMode::bf16;
  EXPECT_STREQ(load_counter_name(c), "slot_copies");
  c.mode = CacheMode::int8;
  EXPECT_STREQ(load_counter_name(c), "dequantizes");
  c.kv_only_match = true;
  EXPECT_STREQ(load_counter_name(c), "restores_without_copy");
}
