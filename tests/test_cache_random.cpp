// A seeded random sequence of operations (arrive, scheduler step = admit / prefill / decode /
// finish, abort, retract, evict, match-then-cancel, flush) on small pools, with every invariant of
// docs/cache_model.md section 4 checked after each operation, in every configuration: bf16 and
// int8, no_buffer and extra_buffer, payload and bookkeeping.
//
// A soak: the operations per configuration and seed and the seeds are parameters,
//   STATECHECK_SOAK_OPS=N         operations per configuration and seed (default 12500: the 8
//                                 configurations run 10^5 operations in all, the CI size)
//   STATECHECK_SOAK_SEEDS=a,b,..  seeds (default: one per configuration, 1..8)
// e.g. STATECHECK_SOAK_SEEDS=$(seq -s, 1 100) statecheck_tests --gtest_filter='*CacheRandomOps*'
// for 10^7 (docs/robustness.md gives its time and result). A long soak is spread over seeds: one
// sequence's requests accumulate (arrivals outpace completions), so its cost per operation grows
// with its length.
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/cache/engine.h"
#include "core/util/rng.h"
#include "core/workloads/workload.h"

using namespace statecheck;

namespace {

struct SoakConfig {
  CacheMode mode;
  CacheStrategy strategy;
  bool payload;
  uint64_t default_seed;
};

// gtest prints a parameter with this (the test name carries the same words).
void PrintTo(const SoakConfig& c, std::ostream* os) {
  *os << cache_mode_name(c.mode) << " " << cache_strategy_name(c.strategy) << " "
      << (c.payload ? "payload" : "bookkeeping") << " seed " << c.default_seed;
}

int64_t soak_ops() {
  const char* env = std::getenv("STATECHECK_SOAK_OPS");
  if (!env || !*env) return 12500;
  char* end = nullptr;
  const long long n = std::strtoll(env, &end, 10);
  if (*end != '\0' || n < 1) ADD_FAILURE() << "STATECHECK_SOAK_OPS must be a positive integer";
  return n < 1 ? 12500 : n;
}

std::vector<uint64_t> soak_seeds(uint64_t default_seed) {
  const char* env = std::getenv("STATECHECK_SOAK_SEEDS");
  if (!env || !*env) return {default_seed};
  std::vector<uint64_t> seeds;
  std::stringstream in(env);
  std::string item;
  while (std::getline(in, item, ',')) seeds.push_back(std::stoull(item));
  return seeds;
}

// Counts of the operations that must happen in every run (each is asserted > 0).
struct OpCounts {
  int64_t cancels = 0, aborts = 0, flushes = 0;
};

void random_operations(const SoakConfig& c, uint64_t seed, int64_t ops) {
  EngineConfig cfg;
  cfg.cache.mode = c.mode;
  cfg.cache.strategy = c.strategy;
  cfg.cache.active_slots =
      12;                      // 4 requests of 3 slots (extra_buffer) contend with the cache (bf16)
  cfg.cache.ckpt_slots = 6;    // int8: a small checkpoint pool evicts often
  cfg.cache.kv_tokens = 1500;  // KV eviction and decode retraction happen
  cfg.cache.chunk_granularity = 8;
  cfg.cache.track_interval = 16;
  cfg.cache.payload = c.payload;  // payload: every copy-on-write load is compared bit for bit
  cfg.cache.shape.temporal = StateShape{1, 1, 4, 8};
  cfg.cache.shape.conv_elems = 3;
  cfg.max_running = 4;
  cfg.chunked_prefill = 96;     // long prompts are chunked
  cfg.check_invariants = true;  // inside step() as well
  Engine e(cfg);
  Rng rng(seed);
  // Five stems so that prompts share prefixes of many lengths; a small vocabulary for suffixes.
  std::vector<std::vector<int32_t>> stems;
  for (int s = 0; s < 5; ++s) stems.push_back(synthetic_tokens(seed, 10 + s, 20 + 30 * s));
  auto random_prompt = [&] {
    const auto& stem = stems[rng.below(stems.size())];
    std::vector<int32_t> p(stem.begin(),
                           stem.begin() + static_cast<int64_t>(1 + rng.below(stem.size())));
    const int64_t tail = static_cast<int64_t>(rng.below(40));
    for (int64_t i = 0; i < tail; ++i) p.push_back(static_cast<int32_t>(rng.below(6)));
    return p;
  };
  int64_t submitted = 0;
  OpCounts done;
  for (int64_t op = 0; op < ops; ++op) {
    const double u = rng.uniform();
    if (u < 0.25) {
      RequestSpec s;
      s.prompt = random_prompt();
      s.output_len = static_cast<int32_t>(1 + rng.below(40));
      s.arrival = e.now() + rng.uniform(0.0, 0.05);
      e.submit(std::move(s));
      ++submitted;
    } else if (u < 0.72) {
      e.step();
    } else if (u < 0.77) {
      if (submitted > 0) {
        e.abort(static_cast<int64_t>(rng.below(static_cast<uint64_t>(submitted))));
        ++done.aborts;
      }
    } else if (u < 0.80) {
      e.retract_one();
    } else if (u < 0.86) {
      e.cache().tree().evict_full(static_cast<int64_t>(1 + rng.below(200)));
    } else if (u < 0.92) {
      e.cache().tree().evict_state(static_cast<int32_t>(1 + rng.below(3)));
    } else if (u < 0.99) {
      // Match, then cancel (a request the scheduler matched but did not admit): the copy-on-write
      // slot the match took must come back, which e.check() below verifies slot by slot.
      CacheRequest probe;
      probe.id = -2;
      const std::vector<int32_t> p = random_prompt();
      e.cache().match(probe, p.data(), static_cast<int64_t>(p.size()));
      e.cache().cancel(probe);
      ++done.cancels;
    } else {
      // Flush: the running requests are aborted first (a flush needs an idle engine); waiting
      // ones stay queued.
      for (const int64_t id : e.running_ids()) e.abort(id);
      e.flush();
      ++done.flushes;
      ASSERT_EQ(e.cache().tree().node_count(), 1) << "op " << op;
    }
    try {
      e.check();
    } catch (const std::exception& ex) {
      FAIL() << "op " << op << " (u " << u << "): " << ex.what();
    }
  }
  e.run();  // drain
  e.check();
  EXPECT_EQ(e.running(), 0);
  EXPECT_EQ(static_cast<int64_t>(e.records().size()), submitted);
  e.cache().tree().check(/*idle=*/true);
  EXPECT_GT(e.cache().counters().admissions, submitted / 2);
  EXPECT_GT(e.cache().counters().cow_loads, 0);  // hits happened
  // The paths under test were exercised: state and KV eviction, decode retraction, cancel,
  // abort, flush.
  EXPECT_GT(e.cache().tree().counters().state_evictions, 0);
  EXPECT_GT(e.cache().tree().counters().full_evicted_nodes, 0);
  EXPECT_GT(e.retractions(), 0);
  EXPECT_GT(e.cache().counters().cancelled_matches, 0);
  EXPECT_GT(done.cancels, 0);
  EXPECT_GT(done.aborts, 0);
  EXPECT_GT(done.flushes, 0);
  if (c.payload) {
    EXPECT_GT(e.cache().counters().restore_checks, 0);
  }
}

class CacheRandomOps : public ::testing::TestWithParam<SoakConfig> {};

TEST_P(CacheRandomOps, InvariantsHoldAfterEveryOperation) {
  const int64_t ops = soak_ops();
  for (const uint64_t seed : soak_seeds(GetParam().default_seed)) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << ops << " operations");
    random_operations(GetParam(), seed, ops);
  }
}

std::string soak_name(const ::testing::TestParamInfo<SoakConfig>& info) {
  return std::string(cache_mode_name(info.param.mode)) + "_" +
         cache_strategy_name(info.param.strategy) + "_" +
         (info.param.payload ? "payload" : "bookkeeping");
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, CacheRandomOps,
    ::testing::Values(SoakConfig{CacheMode::bf16, CacheStrategy::no_buffer, true, 1},
                      SoakConfig{CacheMode::bf16, CacheStrategy::extra_buffer, true, 2},
                      SoakConfig{CacheMode::int8, CacheStrategy::no_buffer, true, 3},
                      SoakConfig{CacheMode::int8, CacheStrategy::extra_buffer, true, 4},
                      SoakConfig{CacheMode::bf16, CacheStrategy::no_buffer, false, 5},
                      SoakConfig{CacheMode::bf16, CacheStrategy::extra_buffer, false, 6},
                      SoakConfig{CacheMode::int8, CacheStrategy::no_buffer, false, 7},
                      SoakConfig{CacheMode::int8, CacheStrategy::extra_buffer, false, 8}),
    soak_name);

}  // namespace
