#include "core/cache/state_cache.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/dtype/bf16.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

// Active slots SGLang's alloc_req_slots keeps free per admitted request before allocating
// (common.py MAMBA_STATE_PER_REQ_PREFIX_CACHE = 3: the live slot + 2 ping-pong slots), in both
// strategies; the state-eviction target of admission in single-pool mode.
constexpr int32_t kAdmissionSlotCharge = 3;

}  // namespace

const char* cache_mode_name(CacheMode m) {
  return m == CacheMode::bf16 ? "bf16" : "int8";
}

const char* cache_strategy_name(CacheStrategy s) {
  return s == CacheStrategy::no_buffer ? "no_buffer" : "extra_buffer";
}

CacheMode parse_cache_mode(const std::string& s) {
  if (s == "bf16") return CacheMode::bf16;
  if (s == "int8") return CacheMode::int8;
  fail("--mode: unknown cache mode '{}' (expected bf16 or int8)", s);
}

CacheStrategy parse_cache_strategy(const std::string& s) {
  if (s == "no_buffer") return CacheStrategy::no_buffer;
  if (s == "extra_buffer") return CacheStrategy::extra_buffer;
  fail("--strategy: unknown caching strategy '{}' (expected no_buffer or extra_buffer)", s);
}

void CacheConfig::validate() const {
  if (active_slots < 1) fail("cache config: active slots must be >= 1, got {}", active_slots);
  if (mode == CacheMode::int8 && ckpt_slots < 1)
    fail("cache config: checkpoint slots must be >= 1, got {}", ckpt_slots);
  if (kv_tokens < 1) fail("cache config: KV tokens must be >= 1, got {}", kv_tokens);
  if (chunk_granularity < 1)
    fail("cache config: chunk granularity must be >= 1, got {}", chunk_granularity);
  if (track_interval < 1) fail("cache config: track interval must be >= 1, got {}", track_interval);
  if (page_size < 1) fail("cache config: page size must be >= 1, got {}", page_size);
  if (state_grid() % chunk_granularity != 0 || state_grid() % page_size != 0)
    fail("cache config: chunk granularity {} and page size {} must divide one another",
         chunk_granularity, page_size);
  if (page_size > 1 && strategy == CacheStrategy::no_buffer)
    fail(
        "cache config: page size {} needs extra_buffer (no_buffer caches at any length; SGLang "
        "requires page size 1 there)",
        page_size);
  if (track_interval % state_grid() != 0)
    fail(
        "cache config: track interval {} is not a multiple of the state grid {} (lcm of chunk "
        "granularity and page size)",
        track_interval, state_grid());
  if (kv_only_match && payload)
    fail("cache config: KV-only matching restores no state; use it without payloads");
  if (payload && (shape.temporal.layers < 1 || shape.temporal.heads < 1 || shape.temporal.dv < 1 ||
                  shape.temporal.dk < 1))
    fail("cache config: payload shape must be positive");
}

StateCache::StateCache(const CacheConfig& config)
    : cfg_((config.validate(), config)),
      kv_(config.kv_tokens),
      active_(config.active_slots, config.shape, config.temporal, config.payload),
      ckpt_(config.mode == CacheMode::int8 ? config.ckpt_slots : 0, config.shape, config.scale,
            config.payload),
      tree_(kv_, config.mode == CacheMode::int8 ? ckpt_.allocator() : active_.allocator(),
            config.chunk_granularity, config.page_size) {
  PolicyContext ctx;
  ctx.flops = cfg_.flops;
  ctx.kv_capacity = cfg_.kv_tokens;
  ctx.state_capacity = cfg_.mode == CacheMode::int8 ? cfg_.ckpt_slots : cfg_.active_slots;
  ctx.chunk_granularity = cfg_.chunk_granularity;
  ctx.next_use = cfg_.next_use;
  policy_ = cfg_.policy == PolicyKind::marconi ? make_marconi_policy(ctx, cfg_.marconi_alpha)
                                               : make_eviction_policy(cfg_.policy, ctx);
  tree_.set_policy(policy_.get());
}

SlotAllocator& StateCache::cached_state_allocator() {
  return cfg_.mode == CacheMode::int8 ? ckpt_.allocator() : active_.allocator();
}

// ---- slot helpers -------------------------------------------------------------------------------

// KV-only matching models an unbounded cache (replay's reference): a hit there may lock a
// tombstone, and an eviction below it would leave a locked tombstone leaf. Its pools are sized so
// that nothing is ever evicted; one that is too small is refused here.
void StateCache::refuse_eviction_if_kv_only(const char* what) const {
  if (cfg_.kv_only_match)
    fail(
        "cache: KV-only matching models an unbounded cache, but the {} is full and would have to "
        "evict (size its pools beyond what the workload fills)",
        what);
}

int32_t StateCache::evict_states(int32_t count) {
  refuse_eviction_if_kv_only(cfg_.mode == CacheMode::int8 ? "checkpoint pool" : "active pool");
  return tree_.evict_state(count);
}

int64_t StateCache::evict_kv(int64_t tokens) {
  refuse_eviction_if_kv_only("KV pool");
  return tree_.evict_full(tokens);
}

int32_t StateCache::alloc_active_evicting() {
  int32_t s = active_.allocator().alloc();
  if (s == kNoSlot && cfg_.mode == CacheMode::bf16) {
    evict_states(1);
    s = active_.allocator().alloc();
  }
  if (s == kNoSlot) ++counters_.alloc_failures;
  return s;
}

int32_t StateCache::alloc_cached_slot_evicting() {
  if (cfg_.mode == CacheMode::bf16) return alloc_active_evicting();
  int32_t s = ckpt_.allocator().alloc();
  if (s == kNoSlot) {
    evict_states(1);
    s = ckpt_.allocator().alloc();
  }
  if (s == kNoSlot) ++counters_.alloc_failures;
  return s;
}

void StateCache::free_request_slots(CacheRequest& r, int32_t keep) {
  if (r.active != kNoSlot && r.active != keep) active_.allocator().free(r.active);
  r.active = kNoSlot;
  for (auto& t : r.track) {
    if (t != kNoSlot && t != keep) active_.allocator().free(t);
    t = kNoSlot;
  }
}

void StateCache::write_live_reference(int32_t slot, const int32_t* tokens, int64_t len) {
  if (cfg_.payload) active_.write_reference(slot, prefix_hash(tokens, static_cast<size_t>(len)));
}

void StateCache::verify_restore(const CacheRequest& r, const int32_t* tokens) const {
  if (!cfg_.payload) return;
  const PayloadShape& ps = cfg_.shape;
  std::vector<float> expect(ps.temporal_elems());
  std::vector<uint16_t> conv(ps.conv_elems);
  reference_state(prefix_hash(tokens, static_cast<size_t>(r.hit_len)), ps, cfg_.temporal,
                  expect.data(), conv.data());
  if (cfg_.mode == CacheMode::int8) {
    const Codec& c = ckpt_.codec();
    const StateShape& s = ps.temporal;
    std::vector<float> back(s.head_size());
    for (size_t head = 0; head < static_cast<size_t>(s.layers) * s.heads; ++head) {
      float* h = expect.data() + head * s.head_size();
      roundtrip_head(c, h, s.dv, s.dk, back.data());
      for (size_t e = 0; e < s.head_size(); ++e)
        h[e] = cfg_.temporal == Dtype::bf16 ? round_to_bf16(back[e]) : back[e];
    }
  }
  const float* got = active_.temporal(r.active);
  if (std::memcmp(got, expect.data(), expect.size() * sizeof(float)) != 0 ||
      std::memcmp(active_.conv(r.active), conv.data(), conv.size() * sizeof(uint16_t)) != 0) {
    size_t e = 0;
    while (e < expect.size() && std::memcmp(&got[e], &expect[e], sizeof(float)) == 0) ++e;
    fail(
        "cache restore: request {} restored {} tokens into active slot {} but element {} is {} "
        "instead of {} "
        "({} of the donated state)",
        r.id, r.hit_len, r.active, e, e < expect.size() ? got[e] : 0.0f,
        e < expect.size() ? expect[e] : 0.0f,
        cfg_.mode == CacheMode::int8 ? "decode(encode())" : "a copy");
  }
}

// ---- admission ----------------------------------------------------------------------------------

void StateCache::match(CacheRequest& r, const int32_t* tokens, int64_t n) {
  if (n < 1) fail("cache match: request {} has no tokens", r.id);
  if (r.admitted) fail("cache match: request {} is already admitted", r.id);
  if (policy_) policy_->on_request(r.id, tokens, n);
  const RadixMatch m = tree_.match(tokens, n - 1, cfg_.kv_only_match);
  r.hit_len = m.hit_len;
  r.hit_node = m.hit_node;
  r.branching_len = m.branching_len;
  r.cow_src = kNoSlot;
  if (m.hit_node == RadixTree::kRoot || cfg_.kv_only_match) return;
  if (r.active == kNoSlot) {
    int32_t s = active_.allocator().alloc();
    if (s == kNoSlot && cfg_.mode == CacheMode::bf16) {
      tree_.lock(m.hit_node);  // the evict must not reclaim the state we copy from
      evict_states(1);
      s = active_.allocator().alloc();
      tree_.unlock(m.hit_node);
    }
    if (s == kNoSlot) {  // degrade to a miss (SGLang _no_mamba_match_result)
      ++counters_.alloc_failures;
      ++counters_.cow_fallbacks;
      r.hit_len = 0;
      r.hit_node = RadixTree::kRoot;
      r.branching_len = -1;
      return;
    }
    r.active = s;
  }
  r.cow_src = tree_.node(m.hit_node).state;
}

bool StateCache::can_admit(const CacheRequest& r, int64_t kv_tokens) const {
  const int32_t need = cfg_.slots_per_request() - (r.active != kNoSlot ? 1 : 0);
  int64_t slots = active_.allocator().available();
  int64_t path_unlocked = 0;
  for (int32_t x = r.hit_node; x != RadixTree::kRoot; x = tree_.node(x).parent)
    if (tree_.node(x).full_lock == 0)
      path_unlocked += static_cast<int64_t>(tree_.node(x).key.size());
  if (cfg_.mode == CacheMode::bf16) {
    const RadixNode& h = tree_.node(r.hit_node);
    slots += tree_.state_evictable() - ((h.state != kNoSlot && h.state_lock == 0) ? 1 : 0);
  }
  if (slots < need) return false;
  return kv_.available() + tree_.full_evictable() - path_unlocked >= kv_tokens;
}

void StateCache::admit(CacheRequest& r, const int32_t* tokens, int64_t prompt_len) {
  tree_.lock(r.hit_node);
  r.last_node = r.hit_node;
  r.protected_len = r.hit_len;
  r.kv_len = r.hit_len;
  r.last_track_len = -1;
  r.next_track = 0;
  const int32_t need = cfg_.slots_per_request() - (r.active != kNoSlot ? 1 : 0);
  if (cfg_.mode == CacheMode::bf16 && active_.allocator().available() < kAdmissionSlotCharge)
    evict_states(kAdmissionSlotCharge - active_.allocator().available());
  if (active_.allocator().available() < need) {
    tree_.unlock(r.hit_node);
    r.last_node = RadixTree::kRoot;
    ++counters_.alloc_failures;
    fail(
        "cannot allocate state slot: request {} needs {} active slots, {} free (active pool of {})",
        r.id, need, active_.allocator().available(), active_.allocator().size());
  }
  if (r.active == kNoSlot) r.active = active_.allocator().alloc();
  for (int i = 0; i < cfg_.tracking_slots(); ++i) r.track[i] = active_.allocator().alloc();
  if (r.cow_src != kNoSlot) {
    if (cfg_.mode == CacheMode::bf16)
      active_.copy(r.cow_src, r.active);
    else
      ckpt_.load_to_active(r.cow_src, active_, r.active);
    ++counters_.cow_loads;
    if (cfg_.payload) {
      verify_restore(r, tokens);
      ++counters_.restore_checks;
    }
  } else {
    active_.clear_slot(r.active);
    if (cfg_.kv_only_match && r.hit_len > 0)
      ++counters_.cow_loads;  // a state restored from elsewhere
  }
  r.cow_src = kNoSlot;
  r.admitted = true;
  ++counters_.admissions;
  counters_.prompt_tokens += prompt_len;
  counters_.hit_tokens += r.hit_len;
  if (r.hit_len > 0) ++counters_.state_hits;
}

void StateCache::cancel(CacheRequest& r) {
  if (r.admitted) fail("cache cancel: request {} is admitted (use release)", r.id);
  if (r.active != kNoSlot) active_.allocator().free(r.active);
  r.active = kNoSlot;
  r.cow_src = kNoSlot;
  r.hit_len = 0;
  r.hit_node = RadixTree::kRoot;
  r.branching_len = -1;
  ++counters_.cancelled_matches;
}

void StateCache::degrade_to_miss(CacheRequest& r) {
  cancel(r);
  --counters_.cancelled_matches;
  ++counters_.cow_fallbacks;
}

bool StateCache::alloc_kv(CacheRequest& r, int64_t n) {
  if (kv_.available() < n) evict_kv(n - kv_.available());
  if (!kv_.alloc(n)) {
    ++counters_.alloc_failures;
    return false;
  }
  r.kv_len += n;
  return true;
}

// ---- tracking -----------------------------------------------------------------------------------

namespace {
inline int other_track(int idx, int n) {
  return n == 2 ? 1 - idx : 0;
}
}  // namespace

int64_t StateCache::prefill_track(CacheRequest& r, const int32_t* tokens, int64_t prefix_len,
                                  int64_t extend_len) {
  if (cfg_.strategy != CacheStrategy::extra_buffer || extend_len < cfg_.chunk_granularity)
    return -1;
  const int64_t cg = cfg_.chunk_granularity;
  int64_t len = prefix_len + extend_len / cg * cg;
  if (cfg_.page_size > 1) {
    // The absolute grid of lcm(Cg, P), where an h snapshot exists (SGLang #39115).
    const int64_t grid = cfg_.state_grid();
    len = (prefix_len + extend_len) / grid * grid;
    if (len <= prefix_len || (len - prefix_len) % cg != 0) len = -1;
    if (r.branching_len > prefix_len && r.branching_len < prefix_len + extend_len &&
        r.branching_len % grid == 0 && (r.branching_len - prefix_len) % cg == 0)
      len = r.branching_len;
    if (len < 0) return -1;
  } else if (r.branching_len > prefix_len && r.branching_len < prefix_len + extend_len &&
             (r.branching_len - prefix_len) % cg == 0) {
    len = r.branching_len;
  }
  const int32_t slot = r.track[r.next_track];
  write_live_reference(slot, tokens, len);
  r.next_track = other_track(r.next_track, cfg_.tracking_slots());
  r.last_track_len = len;
  ++counters_.tracks;
  return len;
}

void StateCache::decode_track(CacheRequest& r, const int32_t* tokens, int64_t seq_len) {
  if (cfg_.strategy != CacheStrategy::extra_buffer || seq_len % cfg_.track_interval != 0) return;
  const int32_t slot = r.track[r.next_track];
  write_live_reference(slot, tokens, seq_len);
  r.next_track = other_track(r.next_track, cfg_.tracking_slots());
  r.last_track_len = seq_len;
  ++counters_.tracks;
}

// ---- caching ------------------------------------------------------------------------------------

// After tree_.insert: a state that was already cached gives its slot back (in int8 mode the
// quantize was wasted, docs/cache_model.md "insert"); otherwise the state entered the tree.
void StateCache::account_insert(const RadixInsert& ins, int32_t state) {
  if (ins.state_exists) {
    cached_state_allocator().free(state);
    ++counters_.duplicate_states;
    if (cfg_.mode == CacheMode::int8) ++counters_.wasted_quantizes;
  } else {
    ++counters_.inserted_states;
  }
}

void StateCache::insert_and_relock(CacheRequest& r, const int32_t* tokens, int64_t cache_len,
                                   int32_t state) {
  const RadixInsert ins = tree_.insert(tokens, cache_len, state, r.protected_len);
  account_insert(ins, state);
  // The tree now owns the KV of [protected_len, cache_len); re-match to lock the new end.
  const RadixMatch m = tree_.match(tokens, cache_len, cfg_.kv_only_match);
  if (m.hit_len != cache_len)
    fail("cache insert: request {} inserted {} tokens but the re-match hits {}", r.id, cache_len,
         m.hit_len);
  tree_.unlock(r.last_node);
  tree_.lock(m.hit_node);
  r.last_node = m.hit_node;
  r.protected_len = cache_len;
}

void StateCache::cache_unfinished(CacheRequest& r, const int32_t* tokens, int64_t fill_len) {
  if (!r.admitted) fail("cache_unfinished: request {} is not admitted", r.id);
  if (fill_len > r.kv_len)
    fail("cache_unfinished: request {} caches {} tokens but has KV for {}", r.id, fill_len,
         r.kv_len);
  if (cfg_.strategy == CacheStrategy::no_buffer) {
    if (fill_len <= r.protected_len) return;
    const int32_t slot = alloc_cached_slot_evicting();
    if (slot == kNoSlot) {
      ++counters_.skipped_donations;
      return;
    }
    write_live_reference(r.active, tokens, fill_len);
    if (cfg_.mode == CacheMode::bf16) {
      active_.copy(r.active, slot);
      ++counters_.chunk_copies;
    } else {
      ckpt_.store_from_active(active_, r.active, slot);
      ++counters_.quantizes;
    }
    insert_and_relock(r, tokens, fill_len, slot);
    return;
  }
  // extra_buffer: donate the last tracked state.
  if (r.last_track_len < 0) return;
  const int64_t cache_len = r.last_track_len;
  if (cache_len <= r.protected_len) {
    r.last_track_len = -1;
    return;
  }
  const int keep = other_track(r.next_track, cfg_.tracking_slots());
  const int32_t donated = r.track[keep];
  int32_t state = kNoSlot;
  if (cfg_.mode == CacheMode::bf16) {
    const int32_t fresh = alloc_active_evicting();
    if (fresh == kNoSlot) {
      ++counters_.skipped_donations;
      return;
    }
    r.track[keep] = fresh;  // SGLang donate_mamba_ping_pong_slot
    state = donated;
  } else {
    state = alloc_cached_slot_evicting();
    if (state == kNoSlot) {
      ++counters_.skipped_donations;
      return;
    }
    ckpt_.store_from_active(active_, donated, state);
    ++counters_.quantizes;
  }
  insert_and_relock(r, tokens, cache_len, state);
  r.last_track_len = -1;
}

void StateCache::cache_finished(CacheRequest& r, const int32_t* tokens) {
  if (!r.admitted) fail("cache_finished: request {} is not admitted", r.id);
  const int64_t committed = r.kv_len;
  const int64_t cache_len =
      cfg_.strategy == CacheStrategy::no_buffer ? committed : r.last_track_len;
  if (cache_len <= r.protected_len) {  // nothing tracked, or nothing beyond the cached prefix
    ++counters_.empty_finishes;
    release(r);  // finish without an insert
    return;
  }
  kv_.free(committed - cache_len);
  r.kv_len = cache_len;
  int32_t src = kNoSlot;  // active slot that holds the state at cache_len
  if (cfg_.strategy == CacheStrategy::no_buffer) {
    src = r.active;
    write_live_reference(src, tokens, cache_len);
  } else {
    src = r.track[other_track(r.next_track, cfg_.tracking_slots())];
  }
  int32_t state = kNoSlot;
  if (cfg_.mode == CacheMode::bf16) {
    state = src;  // the active slot itself is donated to the tree
  } else {
    state = alloc_cached_slot_evicting();
    if (state == kNoSlot) {
      ++counters_.skipped_donations;
      release(r);  // finish without an insert
      return;
    }
    ckpt_.store_from_active(active_, src, state);
    ++counters_.quantizes;
  }
  const RadixInsert ins = tree_.insert(tokens, cache_len, state, r.protected_len);
  r.kv_len = r.protected_len;  // the tree took (or freed) [protected_len, cache_len)
  account_insert(ins, state);
  // bf16: the donated active slot now belongs to the tree (or was just freed as a duplicate).
  free_request_slots(r, cfg_.mode == CacheMode::bf16 ? state : kNoSlot);
  tree_.unlock(r.last_node);
  r.last_node = RadixTree::kRoot;
  r.admitted = false;
}

void StateCache::release(CacheRequest& r) {
  if (!r.admitted) {
    cancel(r);
    return;
  }
  kv_.free(r.kv_len - r.protected_len);
  r.kv_len = r.protected_len;
  free_request_slots(r, kNoSlot);
  tree_.unlock(r.last_node);
  r.last_node = RadixTree::kRoot;
  r.admitted = false;
}

void StateCache::flush() {
  tree_.reset();
  if (active_.allocator().available() != active_.allocator().size())
    fail("cache flush: {} active slots are still held by requests",
         active_.allocator().size() - active_.allocator().available());
  if (kv_.available() != kv_.size())
    fail("cache flush: {} KV tokens are still held by requests", kv_.size() - kv_.available());
}

// ---- invariants ---------------------------------------------------------------------------------

namespace {

struct Ownership {
  std::string pool;
  std::vector<std::vector<std::string>> owners;  // [slot] -> owners

  Ownership(std::string name, int32_t size)
      : pool(std::move(name)), owners(static_cast<size_t>(size) + 1) {}

  void add(int32_t slot, const std::string& who) {
    if (slot < 1 || slot >= static_cast<int32_t>(owners.size()))
      fail("cache invariant: {} slot {} (held by {}) is outside 1..{}", pool, slot, who,
           owners.size() - 1);
    owners[slot].push_back(who);
  }

  void check() const {
    std::string leaked, doubled;
    int nl = 0, nd = 0;
    for (size_t s = 1; s < owners.size(); ++s) {
      if (owners[s].empty()) {
        if (nl++ < 10) leaked += fmt::format("{}{}", leaked.empty() ? "" : ", ", s);
      } else if (owners[s].size() > 1 && nd++ < 10) {
        std::string who;
        for (const auto& o : owners[s]) who += (who.empty() ? "" : " + ") + o;
        doubled += fmt::format("{}{} ({})", doubled.empty() ? "" : ", ", s, who);
      }
    }
    if (nl || nd)
      fail("cache invariant: {}: {} leaked slot(s) [{}{}], {} double-owned slot(s) [{}{}]", pool,
           nl, leaked, nl > 10 ? ", ..." : "", nd, doubled, nd > 10 ? ", ..." : "");
  }
};

}  // namespace

void StateCache::check(const std::vector<const CacheRequest*>& requests) const {
  tree_.check(requests.empty());
  int64_t held_kv = 0;
  int64_t held_slots = 0;
  Ownership act("active pool", active_.allocator().size());
  Ownership ck("checkpoint pool", ckpt_.allocator().size());
  for (int32_t s = 1; s <= active_.allocator().size(); ++s)
    if (active_.allocator().is_free(s)) act.add(s, "free list");
  for (int32_t s = 1; s <= ckpt_.allocator().size(); ++s)
    if (ckpt_.allocator().is_free(s)) ck.add(s, "free list");
  for (const CacheRequest* r : requests) {
    if (r->kv_owned() < 0)
      fail("cache invariant: request {} owns {} KV tokens", r->id, r->kv_owned());
    held_kv += r->kv_owned();
    if (r->active != kNoSlot) {
      act.add(r->active, fmt::format("request {} live", r->id));
      ++held_slots;
    }
    for (size_t i = 0; i < r->track.size(); ++i)
      if (r->track[i] != kNoSlot) {
        act.add(r->track[i], fmt::format("request {} track {}", r->id, i));
        ++held_slots;
      }
  }
  std::vector<std::pair<int32_t, int32_t>> cached;
  tree_.collect_state_slots(cached);
  for (const auto& [slot, node] : cached)
    (cfg_.mode == CacheMode::int8 ? ck : act).add(slot, fmt::format("node {}", node));
  act.check();
  ck.check();
  if (kv_.available() + tree_.full_evictable() + tree_.full_protected() + held_kv != kv_.size())
    fail(
        "cache invariant: KV free {} + evictable {} + protected {} + held by requests {} != pool "
        "size {}",
        kv_.available(), tree_.full_evictable(), tree_.full_protected(), held_kv, kv_.size());
  const int64_t a_free = active_.allocator().available();
  const int64_t cached_e = tree_.state_evictable(), cached_p = tree_.state_protected();
  if (cfg_.mode == CacheMode::bf16) {
    if (a_free + cached_e + cached_p + held_slots != active_.allocator().size())
      fail(
          "cache invariant: active free {} + cached evictable {} + cached protected {} + held by "
          "requests {} != A = {}",
          a_free, cached_e, cached_p, held_slots, active_.allocator().size());
  } else {
    if (a_free + held_slots != active_.allocator().size())
      fail("cache invariant: active free {} + held by requests {} != A = {}", a_free, held_slots,
           active_.allocator().size());
    if (ckpt_.allocator().available() + cached_e + cached_p != ckpt_.allocator().size())
      fail("cache invariant: checkpoint free {} + evictable {} + protected {} != C = {}",
           ckpt_.allocator().available(), cached_e, cached_p, ckpt_.allocator().size());
  }
}

}  // namespace statecheck
