// State cache hooks and the scheduler model: the caching strategies of docs/cache_model.md,
// the failure shapes of section 4, the payload restore contract, and allocation errors.
#include <cstring>

#include <gtest/gtest.h>

#include "core/cache/engine.h"
#include "core/codec/codec.h"
#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/workloads/workload.h"
#include "tests/error_of.h"

using namespace statecheck;
using statecheck::test_support::error_of;

namespace {

EngineConfig small_config(CacheMode mode, CacheStrategy strategy) {
  EngineConfig e;
  e.cache.mode = mode;
  e.cache.strategy = strategy;
  e.cache.active_slots = 64;
  e.cache.ckpt_slots = 128;
  e.cache.kv_tokens = 1 << 16;
  e.cache.chunk_granularity = 64;
  e.cache.track_interval = 256;
  e.cache.payload = true;
  e.cache.shape.temporal = StateShape{1, 2, 8, 16};
  e.cache.shape.conv_elems = 12;
  e.check_invariants = true;
  return e;
}

// Requests sent one at a time: a fixed 200-token prefix + a distinct 60-token suffix, 4 outputs.
// The first request's extra_buffer track point, floor(260 / 64) * 64 = 256, lies in its suffix.
std::vector<RequestSpec> fixed_prefix_requests(int n) {
  const std::vector<int32_t> prefix = synthetic_tokens(1, 1, 200);
  std::vector<RequestSpec> v;
  for (int i = 0; i < n; ++i) {
    RequestSpec s;
    s.prompt = prefix;
    const std::vector<int32_t> suffix = synthetic_tokens(1, 100 + i, 60);
    s.prompt.insert(s.prompt.end(), suffix.begin(), suffix.end());
    s.output_len = 4;
    v.push_back(s);
  }
  return v;
}

std::vector<float> expected_restore(const CacheConfig& c, const std::vector<int32_t>& tokens,
                                    int64_t len) {
  std::vector<float> ref(c.shape.temporal_elems());
  std::vector<uint16_t> conv(c.shape.conv_elems);
  reference_state(prefix_hash(tokens.data(), static_cast<size_t>(len)), c.shape, c.temporal,
                  ref.data(), conv.data());
  if (c.mode == CacheMode::bf16) return ref;
  Codec codec;
  codec.kind = CodecKind::int8;
  codec.scale_dtype = c.scale;
  const StateShape& s = c.shape.temporal;
  std::vector<float> out(ref.size());
  std::vector<uint8_t> values(s.head_size()),
      scales(static_cast<size_t>(s.dk) * codec.scale_bytes());
  for (size_t h = 0; h < static_cast<size_t>(s.layers) * s.heads; ++h) {
    encode_head(codec, ref.data() + h * s.head_size(), s.dv, s.dk, values.data(), scales.data());
    decode_head(codec, values.data(), scales.data(), s.dv, s.dk, out.data() + h * s.head_size());
  }
  if (c.temporal == Dtype::bf16)
    for (float& x : out) x = round_to_bf16(x);
  return out;
}

// Serves request `t` once through `cache` from its cached prefix: one prefill chunk (extra_buffer
// tracks floor(extend / 64) * 64), no decode, then finishes it. Returns the tracked length.
int64_t serve_once(StateCache& cache, const std::vector<int32_t>& t) {
  CacheRequest r;
  r.id = 1000;
  const int64_t n = static_cast<int64_t>(t.size());
  cache.match(r, t.data(), n);
  cache.admit(r, t.data(), n);
  EXPECT_TRUE(cache.alloc_kv(r, n - r.hit_len));
  const int64_t tracked = cache.prefill_track(r, t.data(), r.hit_len, n - r.hit_len);
  cache.cache_finished(r, t.data());
  return tracked;
}

}  // namespace

// Spec cache.md section 3: under no_buffer a fixed prefix with divergent suffixes reuses nothing:
// the second request splits the first leaf at the branch point and every later one hits that
// tombstone.
TEST(CacheStrategy, NoBufferFixedPrefixDivergentSuffixReusesNothing) {
  for (CacheMode mode : {CacheMode::bf16, CacheMode::int8}) {
    Engine e(small_config(mode, CacheStrategy::no_buffer));
    const auto rec = run_closed_loop(e, fixed_prefix_requests(10), 1);
    int64_t cached = 0, prompt = 0;
    for (const auto& r : rec) {
      cached += r.cached_tokens;
      prompt += r.prompt_len;
    }
    EXPECT_LT(static_cast<double>(cached), 0.01 * static_cast<double>(prompt))
        << cache_mode_name(mode);
    EXPECT_EQ(e.cache().counters().cow_loads, 0) << cache_mode_name(mode);
    e.check();
  }
}

// Under extra_buffer the first request caches its state at 256, inside its own suffix; the second
// splits that leaf at 200 (a tombstone), hits nothing, records the branching point
// floor(200 / 64) * 64 = 192, tracks and caches the state there; every request from the third on
// hits it.
TEST(CacheStrategy, ExtraBufferHitsTheBranchPointFromTheThirdRequest) {
  for (CacheMode mode : {CacheMode::bf16, CacheMode::int8}) {
    Engine e(small_config(mode, CacheStrategy::extra_buffer));
    const auto rec = run_closed_loop(e, fixed_prefix_requests(10), 1);
    EXPECT_EQ(rec[0].cached_tokens, 0);
    EXPECT_EQ(rec[1].cached_tokens, 0);
    for (size_t i = 2; i < rec.size(); ++i) EXPECT_EQ(rec[i].cached_tokens, 192) << "request " << i;
    EXPECT_EQ(e.cache().counters().cow_loads, 8);
    EXPECT_EQ(e.cache().counters().restore_checks, 8);  // each load compared bit for bit
    e.check();
  }
}

// A restored state equals decode(encode(donated state)) bit for bit (int8) or the donated state
// (bf16); computed here independently of the cache's own check.
TEST(CacheStrategy, RestoredStateIsTheRoundTripOfTheDonatedState) {
  for (CacheMode mode : {CacheMode::bf16, CacheMode::int8}) {
    for (bool bf16_temporal : {false, true}) {
      CacheConfig c = small_config(mode, CacheStrategy::extra_buffer).cache;
      c.temporal = bf16_temporal ? Dtype::bf16 : Dtype::fp32;
      c.scale = bf16_temporal ? Dtype::bf16 : Dtype::fp32;
      StateCache cache(c);
      const std::vector<int32_t> a = synthetic_tokens(2, 1, 100);
      ASSERT_EQ(serve_once(cache, a), 64);
      std::vector<int32_t> b(a.begin(), a.begin() + 80);
      b.push_back(7);
      CacheRequest rb;
      rb.id = 1;
      cache.match(rb, b.data(), static_cast<int64_t>(b.size()));
      ASSERT_EQ(rb.hit_len, 64);
      cache.admit(rb, b.data(), static_cast<int64_t>(b.size()));
      const std::vector<float> want = expected_restore(c, a, 64);
      const float* got = cache.active().temporal(rb.active);
      EXPECT_EQ(0, std::memcmp(got, want.data(), want.size() * sizeof(float)))
          << cache_mode_name(mode) << (bf16_temporal ? " bf16 temporal" : " fp32 temporal");
      if (mode == CacheMode::int8) {  // the quantization is real: the raw state differs
        CacheConfig raw = c;
        raw.mode = CacheMode::bf16;
        const std::vector<float> donated = expected_restore(raw, a, 64);
        EXPECT_NE(0, std::memcmp(got, donated.data(), donated.size() * sizeof(float)));
      }
      cache.release(rb);
      cache.check({});
    }
  }
}

// Failure shape 1 (docs/cache_model.md): a request matched (copy-on-write slot taken) but not
// admitted must give the slot back.
TEST(CacheFailureShape, MatchedButNotAdmittedGivesTheSlotBack) {
  for (CacheMode mode : {CacheMode::bf16, CacheMode::int8}) {
    StateCache cache(small_config(mode, CacheStrategy::extra_buffer).cache);
    const std::vector<int32_t> a = synthetic_tokens(3, 1, 100);
    ASSERT_EQ(serve_once(cache, a), 64);
    const int32_t free_before = cache.active().allocator().available();
    CacheRequest rb;
    rb.id = 1;
    cache.match(rb, a.data(), 100);
    ASSERT_EQ(rb.hit_len, 64);
    ASSERT_NE(rb.active, kNoSlot);  // the copy-on-write slot was taken at match time
    EXPECT_EQ(cache.active().allocator().available(), free_before - 1);
    EXPECT_FALSE(cache.can_admit(rb, int64_t{1} << 40));  // not enough KV: not admitted
    cache.cancel(rb);
    EXPECT_EQ(cache.active().allocator().available(), free_before);
    EXPECT_EQ(cache.counters().cancelled_matches, 1);
    cache.check({});
  }
}

// The same through the engine: a request that cannot get its KV waits at the head of the queue
// without holding a slot, and is admitted once the first request has finished.
TEST(CacheFailureShape, EngineQueuedRequestHoldsNoSlot) {
  EngineConfig cfg = small_config(CacheMode::int8, CacheStrategy::extra_buffer);
  cfg.cache.kv_tokens = 400;
  Engine e(cfg);
  RequestSpec a;
  a.prompt = synthetic_tokens(4, 1, 200);
  a.output_len = 150;
  e.submit(a);
  RequestSpec b = a;  // shares the whole prompt: would hit the tracked state at 192
  b.prompt.push_back(5);
  e.submit(b);
  int steps = 0;
  while (e.running() < 1 || steps < 3) {
    ASSERT_TRUE(e.step());
    ++steps;
  }
  EXPECT_EQ(e.running(), 1);
  EXPECT_EQ(e.waiting(), 1);
  EXPECT_GE(e.cache().counters().cancelled_matches, 1);
  e.check();  // the waiting request holds nothing
  e.run();
  ASSERT_EQ(e.records().size(), 2u);
  EXPECT_EQ(e.records()[1].cached_tokens, 192);
  e.check();
}

// A request larger than the KV pool can never be admitted: the error names it by the caller's
// description of its tag (a trace line in replay), or by id and tag without one.
TEST(CacheFailureShape, NeverAdmittableRequestIsNamed) {
  EngineConfig cfg = small_config(CacheMode::int8, CacheStrategy::extra_buffer);
  cfg.cache.kv_tokens = 100;
  for (const bool described : {false, true}) {
    Engine e(cfg);
    if (described)
      e.describe_request = [](int64_t tag) { return "trace.jsonl line " + std::to_string(tag); };
    RequestSpec s;
    s.prompt = synthetic_tokens(7, 1, 300);
    s.tag = 42;
    e.submit(s);
    const std::string err = error_of([&] { e.run(); });
    const std::string want = described ? "trace.jsonl line 42 (300 prompt tokens"
                                       : "request 0 (tag 42) (300 prompt tokens";
    EXPECT_NE(err.find(want), std::string::npos) << "error: '" << err << "'";
  }
}

// Failure shape 2: a finished request with nothing tracked must not insert an empty node.
TEST(CacheFailureShape, FinishedWithNothingTrackedInsertsNothing) {
  for (CacheMode mode : {CacheMode::bf16, CacheMode::int8}) {
    StateCache cache(small_config(mode, CacheStrategy::extra_buffer).cache);
    const std::vector<int32_t> t = synthetic_tokens(5, 1, 40);  // extend 40 < Cg = 64: no track
    CacheRequest r;
    r.id = 0;
    cache.match(r, t.data(), 40);
    cache.admit(r, t.data(), 40);
    ASSERT_TRUE(cache.alloc_kv(r, 40));
    EXPECT_EQ(cache.prefill_track(r, t.data(), 0, 40), -1);
    cache.cache_finished(r, t.data());
    EXPECT_EQ(cache.tree().node_count(), 1);
    EXPECT_EQ(cache.counters().empty_finishes, 1);
    EXPECT_EQ(cache.counters().quantizes, 0);
    EXPECT_EQ(cache.kv().available(), cache.kv().size());
    EXPECT_EQ(cache.active().allocator().available(), cache.active().allocator().size());
    cache.check({});
  }
}

// Failure shape 3: donating when every cached state is locked must skip the donation, not crash.
TEST(CacheFailureShape, DonationWithEveryCachedStateLockedIsSkipped) {
  EngineConfig cfg = small_config(CacheMode::int8, CacheStrategy::extra_buffer);
  cfg.cache.ckpt_slots = 1;
  StateCache cache(cfg.cache);
  const std::vector<int32_t> a = synthetic_tokens(6, 1, 100);
  ASSERT_EQ(serve_once(cache, a), 64);  // the one checkpoint slot now holds [0, 64)
  ASSERT_EQ(cache.checkpoint().allocator().available(), 0);
  std::vector<int32_t> b(a.begin(), a.begin() + 64);
  const std::vector<int32_t> tail = synthetic_tokens(6, 2, 100);
  b.insert(b.end(), tail.begin(), tail.end());
  CacheRequest rb;
  rb.id = 1;
  cache.match(rb, b.data(), static_cast<int64_t>(b.size()));
  ASSERT_EQ(rb.hit_len, 64);
  cache.admit(rb, b.data(), static_cast<int64_t>(b.size()));  // locks the only cached state
  ASSERT_TRUE(cache.alloc_kv(rb, static_cast<int64_t>(b.size()) - 64));
  cache.prefill_track(rb, b.data(), 64, static_cast<int64_t>(b.size()) - 64);
  cache.cache_unfinished(rb, b.data(), static_cast<int64_t>(b.size()));  // needs a checkpoint slot
  EXPECT_EQ(cache.counters().skipped_donations, 1);
  cache.check({&rb});
  cache.cache_finished(rb, b.data());  // tracked state still there: the donation is skipped again
  EXPECT_EQ(cache.counters().skipped_donations, 2);
  EXPECT_EQ(cache.tree().node_count(), 2);
  cache.check({});
}

TEST(CacheAllocation, EvictsAStateBeforeFailingWithAClearError) {
  EngineConfig cfg = small_config(CacheMode::bf16, CacheStrategy::extra_buffer);
  cfg.cache.active_slots = 3;  // exactly one request (live + 2 tracking slots)
  StateCache cache(cfg.cache);
  const std::vector<int32_t> a = synthetic_tokens(7, 1, 100);
  ASSERT_EQ(serve_once(cache, a), 64);  // one state cached in the shared pool, 2 slots free
  ASSERT_EQ(cache.active().allocator().available(), 2);
  const std::vector<int32_t> b = synthetic_tokens(7, 2, 100);
  CacheRequest rb;
  rb.id = 1;
  cache.match(rb, b.data(), 100);
  EXPECT_TRUE(cache.can_admit(rb, 100));
  cache.admit(rb, b.data(), 100);  // evicts the cached state to get its third slot
  EXPECT_EQ(cache.tree().counters().state_evictions, 1);
  cache.check({&rb});
  CacheRequest rc;
  rc.id = 2;
  cache.match(rc, a.data(), 100);
  EXPECT_FALSE(cache.can_admit(rc, 100));
  try {
    cache.admit(rc, a.data(), 100);
    FAIL() << "admission without slots accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot allocate state slot"), std::string::npos)
        << e.what();
  }
  cache.check({&rb});
}

TEST(CacheInvariants, LeakedAndDoubleOwnedSlotsAreNamed) {
  StateCache cache(small_config(CacheMode::int8, CacheStrategy::extra_buffer).cache);
  const std::vector<int32_t> a = synthetic_tokens(8, 1, 100);
  CacheRequest ra;
  ra.id = 42;
  cache.match(ra, a.data(), 100);
  cache.admit(ra, a.data(), 100);
  ASSERT_TRUE(cache.alloc_kv(ra, 100));
  try {
    cache.check({});  // the request's slots and KV are not declared: leaked
    FAIL() << "leak not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("active pool: 3 leaked slot(s) [1, 2, 3]"),
              std::string::npos)
        << e.what();
  }
  CacheRequest twin = ra;
  twin.id = 43;
  twin.kv_len = twin.protected_len;
  try {
    cache.check({&ra, &twin});  // two requests claim the same slots
    FAIL() << "double ownership not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("double-owned"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("request 42 live + request 43 live"), std::string::npos)
        << e.what();
  }
  cache.check({&ra});
  cache.release(ra);
  cache.check({});
}

// The K-sweep mechanism at a small scale (docs/cache_model.md): with A = 32 active slots and 2
// requests in flight holding 3 slots each, the single pool keeps at most 32 - 6 = 26 states; the
// int8 pool keeps C = 64. WARM and PROBE visit the prefixes in the same order, so LRU evicts each
// state before its PROBE once K exceeds the capacity.
TEST(CacheWorkload, KSweepCollapsesBeyondWhatThePoolCaches) {
  auto reuse = [](CacheMode mode, int K) {
    EngineConfig cfg = small_config(mode, CacheStrategy::extra_buffer);
    cfg.cache.active_slots = 32;
    cfg.cache.ckpt_slots = 64;
    cfg.cache.payload = false;
    cfg.check_invariants = false;
    KSweepParams p;
    p.K = K;
    p.prefix_min = p.prefix_max = 200;
    p.parallel = 2;
    return run_ksweep(cfg, p);
  };
  // The PROBE ceiling: the WARM state sits at floor(208 / 64) * 64 = 192 <= 200 tokens of prefix.
  const KSweepResult small = reuse(CacheMode::bf16, 24);
  EXPECT_DOUBLE_EQ(small.cached_prefix_fraction, 192.0 / 208.0);
  EXPECT_DOUBLE_EQ(small.reuse_frac, 192.0 / 208.0);
  EXPECT_DOUBLE_EQ(reuse(CacheMode::int8, 24).reuse_frac, 192.0 / 208.0);
  EXPECT_EQ(reuse(CacheMode::bf16, 40).reuse_frac, 0.0);  // 40 > 26
  EXPECT_DOUBLE_EQ(reuse(CacheMode::int8, 40).reuse_frac, 192.0 / 208.0);
  EXPECT_DOUBLE_EQ(reuse(CacheMode::int8, 64).reuse_frac, 192.0 / 208.0);  // exactly C
  EXPECT_EQ(reuse(CacheMode::int8, 80).reuse_frac, 0.0);                   // 80 > 64
}

// The few-shot mechanism at a small scale: no_buffer never dequantizes; extra_buffer dequantizes
// for every request after the first two batches.
TEST(CacheWorkload, FewShotDequantizeLoadsByStrategy) {
  FewShotParams p;
  p.prefix_len = 300;
  p.questions = 40;
  p.repeats = 2;
  p.parallel = 4;
  EngineConfig nb = small_config(CacheMode::int8, CacheStrategy::no_buffer);
  const FewShotResult a = run_fewshot(nb, p);
  EXPECT_EQ(a.requests, 80);
  EXPECT_EQ(a.dequant_loads, 0);
  EngineConfig eb = small_config(CacheMode::int8, CacheStrategy::extra_buffer);
  const FewShotResult b = run_fewshot(eb, p);
  for (size_t i = 2 * p.parallel; i < b.cow_load.size(); ++i)
    EXPECT_EQ(b.cow_load[i], 1) << "request " << i;
  EXPECT_GE(b.cached[2 * p.parallel], 256);  // at least the branching point floor(300 / 64) * 64
}

// The unbounded reference of `replay` matches KV only (every node counts as holding a state), so
// a request can hit, and lock, a tombstone. Here the second request's match splits the first
// request's leaf at 1535 tokens and locks that tombstone; the third splits again one token deeper;
// the second, finishing, donates its state exactly at its locked tombstone. Its release must
// unlock what it locked (once a state lock without a state lock count, an error at the release).
TEST(CacheKvOnlyMatch, StateInsertedAtALockedTombstoneIsReleasedCleanly) {
  EngineConfig cfg = small_config(CacheMode::int8, CacheStrategy::no_buffer);
  cfg.cache.payload = false;
  cfg.cache.kv_only_match = true;
  Engine engine(cfg);
  auto blocks = [](std::vector<int32_t> hashes) {  // replay's mapping: block h -> h * 512 + j
    std::vector<int32_t> t;
    for (int32_t h : hashes)
      for (int32_t j = 0; j < 512; ++j) t.push_back(h * 512 + j);
    return t;
  };
  RequestSpec a{blocks({0, 1, 2, 3}), 1, 0.0, 0};
  RequestSpec b{blocks({0, 1, 2}), 1, 1000.0, 1};
  RequestSpec c{blocks({0, 1, 2, 4}), 5, 1000.0, 2};
  engine.submit(a);
  engine.submit(b);
  engine.submit(c);
  engine.run();
  engine.check();
  const CacheCounters& k = engine.cache().counters();
  EXPECT_EQ(k.admissions, 3);
  EXPECT_EQ(k.prompt_tokens, 2048 + 1536 + 2048);
  EXPECT_EQ(k.hit_tokens, 1535 + 1536);  // b: all but its last token; c: b's split + 1 token
  EXPECT_EQ(k.state_hits, 2);
}

// KV-only matching models an unbounded cache: an eviction under it could strand a locked
// tombstone as a leaf, so pools that would need one are refused by name (replay sizes the
// reference's pools beyond what the trace fills).
TEST(CacheKvOnlyMatch, PoolsThatWouldEvictAreRefused) {
  EngineConfig cfg = small_config(CacheMode::int8, CacheStrategy::extra_buffer);
  cfg.cache.payload = false;
  cfg.cache.kv_only_match = true;
  cfg.cache.active_slots = 16;
  cfg.cache.ckpt_slots = 16;
  cfg.cache.kv_tokens = 100;
  Engine engine(cfg);
  std::vector<int32_t> a(100), b;
  for (int32_t i = 0; i < 100; ++i) a[i] = i + 1;
  b.assign(a.begin(), a.begin() + 30);
  for (int32_t i = 0; i < 40; ++i) b.push_back(1000 + i);
  engine.submit(RequestSpec{a, 1, 0.0, 0});
  engine.submit(RequestSpec{b, 1, 0.0, 1});
  const std::string e = error_of([&] { engine.run(); });
  EXPECT_NE(e.find("KV-only matching models an unbounded cache, but the KV pool is full"),
            std::string::npos)
      << e;
}

// A bf16 pool of exactly one request's slots cannot hold a hit's copy next to its cached state:
// an idle engine admits the request as a miss (evicting the state) instead of reporting that it
// can never be admitted.
TEST(CacheAllocation, SingleRequestBf16PoolRunsAHitAsAMiss) {
  EngineConfig cfg = small_config(CacheMode::bf16, CacheStrategy::extra_buffer);
  cfg.cache.overlap_schedule = false;  // live + 1 tracking slot
  cfg.cache.active_slots = 2;
  cfg.cache.chunk_granularity = 4;
  cfg.cache.kv_tokens = 1000;
  Engine engine(cfg);
  std::vector<int32_t> b(12);
  for (int32_t i = 0; i < 12; ++i) b[i] = i + 1;
  const std::vector<int32_t> a(b.begin(), b.begin() + 8);  // b extends a
  engine.submit(RequestSpec{a, 1, 0.0, 0});
  engine.submit(RequestSpec{b, 1, 1.0, 1});
  engine.run();
  engine.check();
  ASSERT_EQ(engine.records().size(), 2u);
  EXPECT_EQ(engine.records()[1].cached_tokens, 0);  // ran as a miss
  EXPECT_EQ(engine.cache().counters().admissions, 2);
  EXPECT_EQ(engine.cache().tree().counters().state_evictions, 1);  // a's cached state made room
  EXPECT_EQ(engine.cache().counters().cow_fallbacks, 1);
  EXPECT_EQ(engine.cache().counters().cancelled_matches, 0);
}
