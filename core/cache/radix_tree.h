// The radix prefix tree of the cache model: SGLang's MambaRadixCache
// (python/sglang/srt/mem_cache/mamba_radix_cache.py), docs/cache_model.md.
//
// Each node holds the token ids of its edge (`key`), the KV of those tokens (modelled as the key
// length, see kv_pool.h), an optional state slot (`state`; a node without one is a *tombstone*:
// KV present, state absent), a full lock count, a state lock count, two access ticks, and its
// place in two LRU lists: the *full* list (every node but the root) and the *state* list (nodes
// that hold a state). Page size P (default 1) as SGLang's tree page: keys are compared page by
// page, so every edge is a whole number of pages, a match covers whole pages only (the key is
// floored to P, as SGLang page-aligns it), children are told apart by their first page, and a
// state may only be attached at a depth on the page grid (insert refuses another depth; check()
// verifies it): a state at depth d is the recurrence after exactly tokens [0, d), so attaching it
// to a node of another depth restores the wrong state (SGLang #34808).
//
// State slots belong to the pool that `states` manages: the active pool in single-pool (bf16)
// mode, the checkpoint pool in int8 mode; eviction returns them there.
//
// Invariants (check(), docs/cache_model.md): every key a whole number of pages; full lock >=
// state lock; a locked state implies a
// state; the locks taken on the node itself (own_locks) are at most its full lock and equal its
// state lock while it holds a state; full lock of a node >= the sum over its children; a leaf is
// never a tombstone; the root holds nothing, is always locked and is in no list; both lists are in
// access order (strictly decreasing ticks from the most recent end); the evictable and protected
// counters equal the sums over the nodes; when idle nothing is locked.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cache/eviction_policy.h"
#include "core/pools/kv_pool.h"
#include "core/pools/slot_allocator.h"

namespace statecheck {

struct LruLinks {
  int32_t prev = -1;  // towards the most recent end (head)
  int32_t next = -1;  // towards the least recent end (tail)
  bool in = false;
};

struct RadixNode {
  int32_t parent = -1;
  std::vector<int32_t> key;  // token ids of this edge; its KV is key.size() tokens
  int32_t state = kNoSlot;   // state slot, or kNoSlot (tombstone)
  int32_t full_lock = 0;
  int32_t state_lock = 0;  // == own_locks while the node holds a state; 0 for a tombstone
  int32_t own_locks = 0;   // lock() calls on this node itself (not through a descendant)
  int32_t num_children = 0;
  uint64_t full_tick = 0;   // last access in the full list's order
  uint64_t state_tick = 0;  // last access in the state list's order
  LruLinks full, stat;
  bool live = false;
};

// Result of match(): see RadixTree::match.
struct RadixMatch {
  int64_t hit_len = 0;         // depth of the deepest state-holding node on the path (tokens)
  int32_t hit_node = 0;        // that node (the root when none holds a state)
  int64_t matched_len = 0;     // tokens walked, including tombstones below the hit
  int64_t branching_len = -1;  // floor(matched / Cg) * Cg when matched > hit and that is > 0
};

// Result of insert(): see RadixTree::insert.
struct RadixInsert {
  int64_t prefix_len = 0;     // tokens of the key that were already in the tree
  bool state_exists = false;  // the end node already held a state; the caller frees its slot
  int64_t kv_freed = 0;       // caller's duplicate KV tokens returned to the KV pool
  int32_t node = 0;           // the node that ends at the key's last token
};

// Counters the tree keeps (docs/cache_model.md).
struct RadixCounters {
  int64_t matches = 0;
  int64_t full_evicted_nodes = 0;   // nodes deleted by evict_full (leaves and swept tombstones)
  int64_t full_evicted_tokens = 0;  // their KV tokens
  int64_t state_evictions = 0;      // states freed by evict_state (internal -> tombstone, or leaf)
  int64_t state_evicted_nodes = 0;  // nodes deleted during evict_state (evicted leaves + sweeps)
  int64_t tombstones_created = 0;   // by splits and by evicting the state of an internal node
  int64_t splits = 0;
};

class RadixTree {
 public:
  static constexpr int32_t kRoot = 0;

  // `kv`: the token KV pool (counts); `states`: the allocator cached states come from and return
  // to; `chunk_granularity` = Cg > 0 and `page_size` = P > 0, one a multiple of the other
  // (branching points are floored to max(Cg, P) = lcm(Cg, P)). Throws statecheck::Error
  // otherwise.
  RadixTree(KvPool& kv, SlotAllocator& states, int chunk_granularity, int page_size = 1);

  // The eviction policy (core/cache/eviction_policy.h), not owned; nullptr (the default) or an
  // lru policy: the tree's own LRU order, SGLang's. Any other policy picks the victim of
  // evict_full and evict_state among the candidates those functions would consider, and is told
  // of every state added, hit and removed. Set it before the first insert.
  void set_policy(EvictionPolicy* policy) { policy_ = policy; }
  EvictionPolicy* policy() const { return policy_; }

  // match(tokens[0, n)). The engine passes n = len - 1 (at least one token is always recomputed);
  // this function matches what it is given, floored to whole pages. Walks from the root; a partial
  // match inside an edge splits that node (matching mutates the tree). Returns the depth and node
  // of the deepest state-holding node on the path (the hit), the tokens walked and the branching
  // point floor(walked / Cg) * Cg when the walk went deeper than the hit (-1 when none or 0). LRU
  // refresh: the hit node and all its ancestors move to the most recent end of the full list (the
  // hit most recent; SGLang _match_post_processor); only the hit node moves in the state list
  // (docs/cache_model.md; SGLang also moves the hit's state-holding ancestors). Nodes walked
  // below the hit are not refreshed; a split on the way refreshes its child (see split). n == 0
  // returns the root, no refresh.
  // `every_node_has_state` (SGLang skip_mamba_match, KV-only matching): every node counts as
  // holding a state, so the hit is the whole walk; used only for the unbounded reference cache.
  RadixMatch match(const int32_t* tokens, int64_t n, bool every_node_has_state = false);

  // insert(tokens[0, n), state) with the caller holding KV for [0, n), of which [0,
  // prev_prefix_len) is already the tree's (the caller's locked prefix); n a multiple of the page
  // size (a state off the page grid would hang on a node of another depth). Walks/splits like
  // match, refreshing every node on the way in both lists; the caller's KV for tokens that turn out
  // to be in the tree already (beyond prev_prefix_len) is freed (kv_freed). Then: tokens left -> a
  // new leaf holding `state` takes them; else the end node is a tombstone -> it gets `state`; else
  // `state_exists` and the caller must free its slot. n must be > 0 and >= prev_prefix_len, `state`
  // a slot of `states`; throws statecheck::Error otherwise.
  RadixInsert insert(const int32_t* tokens, int64_t n, int32_t state, int64_t prev_prefix_len);

  // lock (SGLang inc_lock_ref): state lock on `node` only when it holds a state (0 -> 1 moves it
  // from evictable to protected); full lock on `node` and every ancestor up to the root
  // (exclusive). unlock reverses it; unlocking an unlocked node throws statecheck::Error. A lock
  // taken on a tombstone (possible only under KV-only matching, where a hit need not hold a state)
  // is counted on the node (own_locks): a state inserted there later starts with that many state
  // locks, so the unlock finds what it releases (SGLang's own description does not cover a lock on
  // a tombstone).
  void lock(int32_t node);
  void unlock(int32_t node);

  // evict_full: evicts least-recent unlocked leaves (KV and state) until at least `tokens` KV
  // tokens are free, deleting every ancestor that became a childless unlocked tombstone. Returns
  // the KV tokens freed (may be less when nothing more is evictable).
  int64_t evict_full(int64_t tokens);

  // evict_state: frees `count` states, least recent unlocked first (state list): an internal node
  // becomes a tombstone (KV stays), a leaf is evicted fully as in evict_full. Returns the number of
  // states freed.
  int32_t evict_state(int32_t count);

  // Frees every cached state and all KV of the tree and leaves only the root (a flush). Throws
  // when anything is locked.
  void reset();

  // Sizes (SGLang full_evictable_size etc.): KV tokens of unlocked / locked nodes, states of
  // state-unlocked / state-locked nodes.
  int64_t full_evictable() const { return full_evictable_; }
  int64_t full_protected() const { return full_protected_; }
  int32_t state_evictable() const { return state_evictable_; }
  int32_t state_protected() const { return state_protected_; }
  int64_t total_tokens() const { return full_evictable_ + full_protected_; }
  int32_t node_count() const { return live_nodes_; }  // including the root

  const RadixNode& node(int32_t id) const { return nodes_.at(static_cast<size_t>(id)); }
  const RadixCounters& counters() const { return counters_; }
  int chunk_granularity() const { return cg_; }
  int page_size() const { return page_; }

  // Appends the state slot of every node holding one (for ownership checks).
  void collect_state_slots(std::vector<std::pair<int32_t, int32_t>>& slot_node) const;

  // Checks every invariant listed at the top of this file; `idle`: no request holds a lock.
  // Throws statecheck::Error with a one-line description of the first violation.
  void check(bool idle) const;

  // Depth (tokens from the root) of `node`.
  int64_t depth(int32_t node) const;
  // KV tokens that evicting unlocked leaf `leaf` would free: its edge and those of the tombstone
  // ancestors it leaves childless, which the eviction sweeps with it (evict_leaf's rule).
  int64_t eviction_tokens(int32_t leaf) const;

 private:
  int32_t new_node();
  void delete_node(int32_t id);
  // Children by their first page, first[0, P): by the first token when P == 1.
  int32_t find_child(int32_t parent, const int32_t* first) const;
  void set_child(int32_t parent, const int32_t* first, int32_t child);
  void erase_child(int32_t parent, const int32_t* first);
  // Common prefix of a[0, na) and b[0, nb) in whole pages, tokens.
  int64_t common_pages(const int32_t* a, int64_t na, const int32_t* b, int64_t nb) const;
  int32_t split(int32_t child, int64_t p);
  // Evicts leaf x (KV + state), sweeps tombstone ancestors; returns KV tokens freed and sets
  // *survivor to the parent of the last deleted node.
  int64_t evict_leaf(int32_t x, int32_t* survivor, int64_t* nodes_deleted);
  // Whether node `id`, left with `children` children, is a tombstone a leaf eviction sweeps.
  bool swept_tombstone(int32_t id, int32_t children) const;

  // LRU lists (intrusive, head = most recent).
  struct List {
    LruLinks RadixNode::*links;
    int32_t head = -1, tail = -1;
    int64_t size = 0;
  };
  void list_push_front(List& l, int32_t id);
  void list_remove(List& l, int32_t id);
  void touch_full(int32_t id);
  void touch_state(int32_t id);
  int32_t full_lru_leaf_unlocked(int32_t from) const;  // from = -1: start at the tail
  int32_t state_lru_unlocked(int32_t from) const;
  // The policy-driven evictions (policy_ set and not lru).
  int64_t evict_full_policy(int64_t tokens);
  int32_t evict_state_policy(int32_t count);
  void evict_one_state(int32_t x);

  KvPool& kv_;
  SlotAllocator& states_;
  int cg_ = 64;
  int page_ = 1;
  std::vector<RadixNode> nodes_;
  std::vector<int32_t> free_ids_;
  std::unordered_map<uint64_t, int32_t> children_;  // P == 1: (parent, first token) -> child
  std::map<std::pair<int32_t, std::vector<int32_t>>, int32_t> paged_children_;  // P > 1
  List full_{&RadixNode::full};
  List state_{&RadixNode::stat};
  uint64_t tick_ = 0;
  int32_t live_nodes_ = 0;
  int64_t full_evictable_ = 0, full_protected_ = 0;
  int32_t state_evictable_ = 0, state_protected_ = 0;
  RadixCounters counters_;
  EvictionPolicy* policy_ = nullptr;
  std::vector<int32_t> candidates_;  // scratch of the policy-driven evictions
};

}  // namespace statecheck
