// The linear-attention state cache of a serving engine: SGLang's MambaRadixCache with its pools
// and request-level hooks (docs/cache_model.md sections 1-4; SGLang
// python/sglang/srt/mem_cache/mamba_radix_cache.py cache_unfinished_req / cache_finished_req /
// _match_post_processor, memory_pool.py HybridReqToTokenPool, mamba_checkpoint_pool.py, and the
// scheduler's extra_buffer tracking in managers/schedule_batch.py
// _mamba_radix_cache_v2_req_prepare_for_extend and the decode track at mamba_track_interval).
//
// Modes: bf16 (single pool: cached states are active-pool slots; a hit copies the slot) and int8
// (cached states live in the checkpoint pool; caching a state *donates* = quantizes an active slot
// into a new checkpoint slot; a hit is a copy-on-write that dequantizes it into a fresh active
// slot). Strategies: no_buffer and extra_buffer (section 3). The engine (core/cache/engine.h)
// drives the hooks; tests drive them directly.
//
// Where the model differs from SGLang on purpose (each also in README "Cache model"):
// - a finished extra_buffer request with nothing tracked inserts nothing and quantizes nothing
//   (SGLang inserts an empty key and, in int8 mode, quantizes an untracked slot);
// - donating when no checkpoint / state slot can be had (every cached state locked) skips the
//   donation and counts it (SGLang asserts "Can not alloc int8 mamba checkpoint slot");
// - a request matched (copy-on-write slot taken) but not admitted gives the slot back;
// - in int8 mode no cached state is evicted to make room in the active pool (evicting a
//   checkpoint frees no active slot; SGLang's alloc_req_slots would evict uselessly).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/eviction_policy.h"
#include "core/cache/next_use_index.h"
#include "core/cache/radix_tree.h"
#include "core/pools/kv_pool.h"
#include "core/pools/state_pool.h"

namespace statecheck {

enum class CacheMode { bf16, int8 };
enum class CacheStrategy { no_buffer, extra_buffer };

const char* cache_mode_name(CacheMode m);          // "bf16" | "int8"
const char* cache_strategy_name(CacheStrategy s);  // "no_buffer" | "extra_buffer"
CacheMode parse_cache_mode(const std::string& s);  // Error listing the valid names
CacheStrategy parse_cache_strategy(const std::string& s);

struct CacheConfig {
  CacheMode mode = CacheMode::int8;
  CacheStrategy strategy = CacheStrategy::extra_buffer;
  int32_t active_slots = 256;    // A
  int32_t ckpt_slots = 512;      // C (int8 mode; ignored in bf16 mode)
  int64_t kv_tokens = 1 << 20;   // N_kv
  int chunk_granularity = 64;    // Cg (SGLang mamba_cache_chunk_size = max(64, page size))
  int track_interval = 256;      // decode track interval (SGLang mamba_track_interval)
  int page_size = 1;             // P: the radix tree's page (SGLang page_size; under DCP the tree
                                 // page is page_size x dcp_size while Cg stays)
  bool overlap_schedule = true;  // extra_buffer: 2 tracking slots (ping-pong), else 1
  bool payload = true;           // real state payloads (false: bookkeeping only)
  PayloadShape shape;            // per-slot payload shape
  Dtype temporal = Dtype::fp32;  // active temporal dtype: fp32 or bf16
  Dtype scale = Dtype::fp32;     // int8 scale dtype: bf16 or fp32
  // KV-only matching (SGLang skip_mamba_match): every cached prefix counts as restorable, the hit
  // is the whole walk and no state is copied (a load is still counted). Only for the unbounded
  // reference cache of the replay experiment, which measures what the trace offers; never a mode
  // of the engine model. Its pools must never need an eviction (statecheck::Error if they do).
  bool kv_only_match = false;
  // Eviction policy (docs/cache_policies.md): lru is the engine's own order. marconi reads
  // `flops`; belady and future-count need `next_use`, the next-use index of the workload in
  // submission order (engine request ids), and is refused without it.
  PolicyKind policy = PolicyKind::lru;
  double marconi_alpha = -1.0;  // marconi: < 0 bootstraps alpha (the default), else fixed
  FlopCosts flops;
  std::shared_ptr<const NextUseIndex> next_use;

  int tracking_slots() const {
    return strategy == CacheStrategy::extra_buffer ? (overlap_schedule ? 2 : 1) : 0;
  }
  // Active slots a request holds while running: its live slot + tracking slots.
  int slots_per_request() const { return 1 + tracking_slots(); }
  // The grid cached states sit on: lcm(Cg, P) = max(Cg, P) (one divides the other).
  int state_grid() const { return chunk_granularity > page_size ? chunk_granularity : page_size; }
  // Throws statecheck::Error naming the field on a non-positive size or granularity, Cg and P
  // not dividing one another (SGLang asserts it), P > 1 under no_buffer (SGLang requires page 1
  // there: it caches the live state at any length), or a track interval that is not a multiple
  // of state_grid() (SGLang asserts a multiple of the page; a decode track between grid points
  // could not be attached to a node).
  void validate() const;
};

// Counters of docs/cache_model.md (plus the tree's own, see RadixCounters).
struct CacheCounters {
  int64_t admissions = 0;         // requests admitted (a retracted request counts again)
  int64_t prompt_tokens = 0;      // prompt tokens of admitted requests
  int64_t hit_tokens = 0;         // cached tokens reused at admission (the hit length)
  int64_t state_hits = 0;         // admissions with a hit length > 0
  int64_t cow_loads = 0;          // copy-on-write loads: bf16 slot copies or int8 dequantizes
  int64_t chunk_copies = 0;       // no_buffer bf16: live state copied to a new slot at a chunk end
  int64_t tracks = 0;             // extra_buffer: states copied into a tracking slot
  int64_t quantizes = 0;          // int8 donates (store_from_active)
  int64_t wasted_quantizes = 0;   // quantizes whose state already existed in the tree
  int64_t inserted_states = 0;    // states that entered the tree
  int64_t duplicate_states = 0;   // inserts that found the state already there
  int64_t skipped_donations = 0;  // caching skipped: no slot could be had (all states locked)
  int64_t empty_finishes = 0;     // finished requests with nothing (new) to cache
  int64_t alloc_failures = 0;     // slot allocations that failed after evicting
  int64_t cow_fallbacks = 0;      // hits degraded to a miss: no active slot for the copy
  int64_t cancelled_matches = 0;  // matched requests not admitted (copy-on-write slot returned)
  int64_t restore_checks = 0;     // payload mode: restored states compared bit for bit
};

// The cache-side record of one request. Token positions are counts from the sequence start.
struct CacheRequest {
  int64_t id = -1;
  int32_t active = kNoSlot;                        // live state slot (SGLang mamba_pool_idx)
  std::array<int32_t, 2> track{kNoSlot, kNoSlot};  // extra_buffer ping-pong tracking slots
  int next_track = 0;                              // SGLang mamba_next_track_idx
  int64_t last_track_len = -1;                     // SGLang mamba_last_track_seqlen (-1: none)
  int64_t branching_len = -1;                      // SGLang mamba_branching_seqlen (-1: none)
  int64_t hit_len = 0;                             // cached tokens at admission
  int32_t hit_node = RadixTree::kRoot;             // matched node (locked while admitted)
  int32_t cow_src = kNoSlot;                       // state slot to copy from at admission
  int64_t protected_len = 0;                       // SGLang cache_protected_len (tree-owned prefix)
  int32_t last_node = RadixTree::kRoot;            // locked node (SGLang req.last_node)
  bool admitted = false;
  int64_t kv_len = 0;  // tokens with KV; owns [protected_len, kv_len)

  int64_t kv_owned() const { return kv_len - protected_len; }
};

class StateCache {
 public:
  explicit StateCache(const CacheConfig& config);

  const CacheConfig& config() const { return cfg_; }
  RadixTree& tree() { return tree_; }
  const RadixTree& tree() const { return tree_; }
  KvPool& kv() { return kv_; }
  const KvPool& kv() const { return kv_; }
  ActivePool& active() { return active_; }
  const ActivePool& active() const { return active_; }
  CheckpointPool& checkpoint() { return ckpt_; }
  const CheckpointPool& checkpoint() const { return ckpt_; }
  const CacheCounters& counters() const { return counters_; }
  // The eviction policy in use; nullptr for lru (the tree's own order).
  const EvictionPolicy* policy() const { return policy_.get(); }
  // The allocator cached states come from: the active pool (bf16) or the checkpoint pool (int8).
  SlotAllocator& cached_state_allocator();

  // ---- admission (SGLang init_next_round_input + PrefillAdder + alloc_req_slots) -------------
  // 1. match: matches tokens[0, n - 1) of a waiting request and, when the hit node holds a state,
  //    takes an active slot for the copy-on-write (bf16: evicting one state when none is free,
  //    with the hit node locked meanwhile; none -> the hit degrades to a miss). Records hit,
  //    branching point and copy-on-write source in `r`. n >= 1.
  void match(CacheRequest& r, const int32_t* tokens, int64_t n);
  // 2. Whether r could be admitted with `kv_tokens` more KV tokens: active slots (bf16: free +
  //    evictable states, the hit's own state excluded) and KV (free + evictable, the hit path
  //    excluded). Does not change anything.
  bool can_admit(const CacheRequest& r, int64_t kv_tokens) const;
  // 3a. admit: locks the hit node, takes the live and tracking slots (bf16: evicting states
  //     first when short), loads the hit state into the live slot (copy-on-write: bf16 copy or
  //     int8 dequantize, counted; payload mode checks it bit for bit against the reference) or
  //     clears it, and counts the admission. `prompt_len` is counted as prompt tokens. Throws
  //     statecheck::Error when a slot cannot be had (call can_admit first) or a restore differs.
  void admit(CacheRequest& r, const int32_t* tokens, int64_t prompt_len);
  // 3b. cancel: a matched request that is not admitted gives its copy-on-write slot back (its hit
  //     and branching point are cleared; it is matched again before its next admission).
  void cancel(CacheRequest& r);
  // 3c. degrade_to_miss: the same for a request about to be admitted without its hit (counted in
  //     cow_fallbacks, not cancelled_matches): an idle engine whose active pool cannot hold the
  //     hit's copy next to its cached state.
  void degrade_to_miss(CacheRequest& r);

  // KV for `n` more tokens of r (evicting the least recent unlocked leaves when short); false and
  // nothing taken when the pool cannot provide them.
  bool alloc_kv(CacheRequest& r, int64_t n);

  // ---- prefill / decode -----------------------------------------------------------------------
  // extra_buffer tracking decision for a prefill chunk [prefix_len, prefix_len + extend_len):
  // page size 1: when extend_len >= Cg, track the state at prefix_len + floor(extend_len / Cg) *
  // Cg (the kernel's h snapshots lie every Cg tokens from the chunk start), or at the recorded
  // branching point when it lies strictly inside the chunk on the Cg grid. Page size P > 1
  // (SGLang #34808 and #39115): track at the last point of the absolute grid G = lcm(Cg, P)
  // inside the chunk, d = floor((prefix_len + extend_len) / G) * G, only when d > prefix_len and
  // (d - prefix_len) % Cg == 0 (an h snapshot exists there), or at the branching point when it is
  // such a point. Returns the tracked length or -1. No-op for no_buffer.
  int64_t prefill_track(CacheRequest& r, const int32_t* tokens, int64_t prefix_len,
                        int64_t extend_len);
  // extra_buffer decode: after processing token `seq_len` (the committed length), track the state
  // when seq_len % track_interval == 0. No-op for no_buffer.
  void decode_track(CacheRequest& r, const int32_t* tokens, int64_t seq_len);

  // SGLang cache_unfinished_req at a chunk end / after prefill, with `fill_len` tokens computed:
  // no_buffer copies (bf16) or quantizes (int8) the live state and inserts it at fill_len;
  // extra_buffer donates the tracking slot at the last tracked length (nothing when none). Then
  // re-matches, moves the lock to the new node and extends the protected prefix.
  void cache_unfinished(CacheRequest& r, const int32_t* tokens, int64_t fill_len);
  // SGLang cache_finished_req: caches the live state at the committed length (no_buffer) or the
  // last tracked state (extra_buffer), frees KV beyond the cached length, frees the request's
  // slots and unlocks. Nothing tracked (or nothing new) -> no insert.
  void cache_finished(CacheRequest& r, const int32_t* tokens);
  // Abort / retraction: frees the request's KV and slots and unlocks, caching nothing.
  void release(CacheRequest& r);

  // Flush: requires that no request holds anything; frees every cached state and all tree KV.
  void flush();

  // ---- invariants (docs/cache_model.md) ---------------------------------------------------
  // Checks the tree invariants, the pool equations
  //   KV: free + evictable + protected + held by requests == N_kv
  //   bf16: active free + cached evictable + cached protected + held by requests == A
  //   int8: active free + held by requests == A; checkpoint free + evictable + protected == C
  // and slot ownership: every slot of every pool has exactly one owner (free list, a tree node or
  // a request); a violation names the leaked or double-owned slots and their owners. `requests`:
  // every request holding resources (admitted); idle = none. Throws statecheck::Error.
  void check(const std::vector<const CacheRequest*>& requests) const;

 private:
  // The tree's evict_state / evict_full, refused under KV-only matching (an unbounded cache).
  void refuse_eviction_if_kv_only(const char* what) const;
  int32_t evict_states(int32_t count);
  int64_t evict_kv(int64_t tokens);
  int32_t alloc_active_evicting();       // bf16: evicts one state when empty
  int32_t alloc_cached_slot_evicting();  // slot for a new cached state (either pool)
  void free_request_slots(CacheRequest& r, int32_t keep);
  void write_live_reference(int32_t slot, const int32_t* tokens, int64_t len);
  void verify_restore(const CacheRequest& r, const int32_t* tokens) const;
  void insert_and_relock(CacheRequest& r, const int32_t* tokens, int64_t cache_len, int32_t state);
  void account_insert(const RadixInsert& ins, int32_t state);

  CacheConfig cfg_;
  KvPool kv_;
  ActivePool active_;
  CheckpointPool ckpt_;
  RadixTree tree_;
  std::unique_ptr<EvictionPolicy> policy_;
  CacheCounters counters_;
};

}  // namespace statecheck
