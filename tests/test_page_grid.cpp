// The radix tree's page grid (docs/cache_model.md, "Page size"): with a tree page P larger than
// the chunk granularity Cg, as under SGLang's decode context parallelism (tree page = page size x
// dcp size), every cached state sits at a depth on the grid lcm(Cg, P) and restores bit for bit.
// The shape is SGLang #34808's: Kimi-Linear, page 64 x dcp 8 = a 512-token tree page, Cg 64, a
// prompt whose Cg-grid checkpoint (20416) lies 448 tokens past the deepest page boundary (19968).
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "core/cache/engine.h"
#include "core/util/error.h"
#include "core/workloads/workload.h"
#include "tests/error_of.h"

using namespace statecheck;
using statecheck::test_support::error_of;

namespace {

EngineConfig paged_config(int page) {
  EngineConfig e;
  e.cache.mode = CacheMode::int8;
  e.cache.strategy = CacheStrategy::extra_buffer;
  e.cache.active_slots = 64;
  e.cache.ckpt_slots = 128;
  e.cache.kv_tokens = 1 << 18;
  e.cache.chunk_granularity = 64;
  e.cache.page_size = page;
  e.cache.track_interval = 512;
  e.cache.payload = true;  // every restore is compared bit for bit with the state of its prefix
  e.cache.shape.temporal = StateShape{1, 2, 8, 16};
  e.cache.shape.conv_elems = 12;
  e.chunked_prefill = 8192;
  e.check_invariants = true;
  return e;
}

// Depths of the nodes that hold a state.
std::set<int64_t> cached_depths(const RadixTree& t) {
  std::vector<std::pair<int32_t, int32_t>> slot_node;
  t.collect_state_slots(slot_node);
  std::set<int64_t> d;
  for (const auto& [slot, node] : slot_node) d.insert(t.depth(node));
  return d;
}

}  // namespace

// One 20450-token prompt alone: chunks [0, 8192), [8192, 16384), [16384, 20450). On the absolute
// 512 grid the checkpoints are 8192, 16384 and floor(20450 / 512) * 512 = 19968 (SGLang after
// #34808); the Cg grid alone would pick 16384 + floor(4066 / 64) * 64 = 20416, a depth no 512-token
// page can name. A second request with the same prompt hits 19968 and its restore is checked bit
// for bit.
TEST(PageGrid, Sglang34808ShapeEveryStateOnTheGridAndRestoredBitForBit) {
  Engine e(paged_config(512));
  const std::vector<int32_t> prompt = synthetic_tokens(7, 1, 20450);
  RequestSpec a;
  a.prompt = prompt;
  a.output_len = 2;
  e.submit(a);
  e.run();
  EXPECT_EQ(cached_depths(e.cache().tree()), (std::set<int64_t>{8192, 16384, 19968}));
  RequestSpec b = a;
  b.prompt.push_back(5);
  b.arrival = e.now();
  e.submit(b);
  e.run();
  ASSERT_EQ(e.records().size(), 2u);
  EXPECT_EQ(e.records()[1].cached_tokens, 19968);
  EXPECT_GT(e.cache().counters().restore_checks, 0);
  for (int64_t d : cached_depths(e.cache().tree())) EXPECT_EQ(d % 512, 0) << d;
}

// Two requests sharing one prefill budget: the second one's chunks start off the grid (3192,
// 11384, 19576), where no h snapshot lies on the 512 grid ((d - start) % 64 != 0), so only the
// first chunk's 3072 is tracked (SGLang #39115 donates only where a snapshot exists). Every cached
// state stays on the grid and a request with the second prompt restores it bit for bit.
TEST(PageGrid, ChunksStartingOffTheGridTrackOnlyWhereASnapshotExists) {
  Engine e(paged_config(512));
  RequestSpec a, b;
  a.prompt = synthetic_tokens(7, 2, 5000);
  a.output_len = 1;
  b.prompt = synthetic_tokens(7, 3, 20500);
  b.output_len = 1;
  e.submit(a);
  e.submit(b);
  e.run();
  const std::set<int64_t> depths = cached_depths(e.cache().tree());
  for (int64_t d : depths) EXPECT_EQ(d % 512, 0) << d;
  EXPECT_TRUE(depths.count(3072)) << "the second prompt's first chunk [0, 3192) tracks 3072";
  RequestSpec c = b;
  c.arrival = e.now();
  e.submit(c);
  e.run();
  EXPECT_EQ(e.records().back().cached_tokens, 3072);
  EXPECT_GT(e.cache().counters().restore_checks, 0);
}

// A state off the page grid cannot enter the tree, and keys are matched in whole pages.
TEST(PageGrid, InsertOffTheGridIsRefusedAndMatchesCoverWholePages) {
  CacheConfig c = paged_config(512).cache;
  c.payload = false;
  StateCache cache(c);
  const std::vector<int32_t> t = synthetic_tokens(9, 1, 2048);
  SlotAllocator& states = cache.cached_state_allocator();
  const int32_t s1 = states.alloc();
  cache.kv().alloc(2048);
  EXPECT_NE(error_of([&] {
              cache.tree().insert(t.data(), 20416 % 2048, s1, 0);
            }).find("off the page grid (page size 512)"),
            std::string::npos);
  cache.tree().insert(t.data(), 1024, s1, 0);
  cache.kv().free(2048 - 1024);
  // 1023 tokens match no whole page beyond 512; 1100 tokens match the two pages.
  EXPECT_EQ(cache.tree().match(t.data(), 1023).matched_len, 512);
  EXPECT_EQ(cache.tree().match(t.data(), 1100).hit_len, 1024);
  cache.tree().check(/*idle=*/true);
}

// The engine's grid rules (SGLang asserts them): Cg and P divide one another, P > 1 needs
// extra_buffer, the track interval and the chunked-prefill size are multiples of lcm(Cg, P).
TEST(PageGrid, ConfigurationsOffTheGridAreRefused) {
  auto msg = [](const EngineConfig& c) { return error_of([&] { Engine e(c); }); };
  EngineConfig c = paged_config(512);
  c.cache.chunk_granularity = 96;
  EXPECT_NE(msg(c).find("must divide one another"), std::string::npos);
  c = paged_config(512);
  c.cache.strategy = CacheStrategy::no_buffer;
  EXPECT_NE(msg(c).find("needs extra_buffer"), std::string::npos);
  c = paged_config(512);
  c.cache.track_interval = 256;
  EXPECT_NE(msg(c).find("track interval 256 is not a multiple of the state grid 512"),
            std::string::npos);
  c = paged_config(512);
  c.chunked_prefill = 8192 + 64;
  EXPECT_NE(msg(c).find("chunked prefill size 8256 is not a multiple of the state grid 512"),
            std::string::npos);
  c = paged_config(1);
  c.cache.track_interval = 100;
  EXPECT_NE(msg(c).find("track interval 100 is not a multiple of the state grid 64"),
            std::string::npos);
}
