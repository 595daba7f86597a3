// RadixTree::check: the invariants of the tree (docs/cache_model.md, "Invariants"), checked after
// every operation by the tests and, with EngineConfig::check_invariants, by the engine.
#include <vector>

#include "core/cache/radix_tree.h"
#include "core/util/error.h"

namespace statecheck {

void RadixTree::check(bool idle) const {
  const RadixNode& root = nodes_[kRoot];
  if (root.state != kNoSlot || root.full.in || root.stat.in || !root.key.empty())
    fail("radix invariant: the root holds a state, a key or is in an LRU list");
  if (root.full_lock != 1 || root.state_lock != 1) fail("radix invariant: the root is not locked");
  std::vector<int64_t> child_lock_sum(nodes_.size(), 0);
  std::vector<int32_t> child_count(nodes_.size(), 0);
  int64_t fe = 0, fp = 0;
  int32_t se = 0, sp = 0, live = 1, with_state = 0;
  for (size_t id = 1; id < nodes_.size(); ++id) {
    const RadixNode& n = nodes_[id];
    if (!n.live) continue;
    ++live;
    if (n.key.empty()) fail("radix invariant: node {} has an empty key", id);
    if (n.parent < 0 || !nodes_[n.parent].live)
      fail("radix invariant: node {} has no live parent", id);
    // Whole pages per key: every depth, and so every state, is on the page grid.
    if (n.key.size() % static_cast<size_t>(page_) != 0)
      fail("radix invariant: node {} has a key of {} tokens, not whole pages of {}", id,
           n.key.size(), page_);
    if (find_child(n.parent, n.key.data()) != static_cast<int32_t>(id))
      fail("radix invariant: node {} is not its parent's child for token {}", id, n.key[0]);
    if (n.state_lock < 0 || n.full_lock < n.state_lock)
      fail("radix invariant: node {} has full lock {} < state lock {}", id, n.full_lock,
           n.state_lock);
    if (n.state_lock > 0 && n.state == kNoSlot)
      fail("radix invariant: tombstone {} has a state lock", id);
    if (n.own_locks < 0 || n.own_locks > n.full_lock ||
        (n.state != kNoSlot && n.state_lock != n.own_locks))
      fail("radix invariant: node {} has {} locks of its own (full lock {}, state lock {})", id,
           n.own_locks, n.full_lock, n.state_lock);
    if (!n.full.in) fail("radix invariant: node {} is not in the full LRU list", id);
    if (n.stat.in != (n.state != kNoSlot))
      fail("radix invariant: node {} state-list membership {} but state slot {}", id, n.stat.in,
           n.state);
    child_lock_sum[n.parent] += n.full_lock;
    ++child_count[n.parent];
    const int64_t len = static_cast<int64_t>(n.key.size());
    (n.full_lock == 0 ? fe : fp) += len;
    if (n.state != kNoSlot) {
      ++with_state;
      (n.state_lock == 0 ? se : sp) += 1;
    }
    if (idle && (n.full_lock != 0 || n.state_lock != 0))
      fail("radix invariant: node {} is locked (full {}, state {}) while idle", id, n.full_lock,
           n.state_lock);
  }
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const RadixNode& n = nodes_[id];
    if (!n.live) continue;
    if (child_count[id] != n.num_children)
      fail("radix invariant: node {} counts {} children, has {}", id, n.num_children,
           child_count[id]);
    if (id != kRoot && n.num_children == 0 && n.state == kNoSlot)
      fail("radix invariant: leaf {} is a tombstone", id);
    if (id != kRoot && n.full_lock < child_lock_sum[id])
      fail("radix invariant: node {} full lock {} < its children's {}", id, n.full_lock,
           child_lock_sum[id]);
  }
  if (live != live_nodes_)
    fail("radix invariant: {} live nodes counted, {} recorded", live, live_nodes_);
  if (fe != full_evictable_ || fp != full_protected_)
    fail("radix invariant: full evictable/protected {}/{} recorded, {}/{} summed over the nodes",
         full_evictable_, full_protected_, fe, fp);
  if (se != state_evictable_ || sp != state_protected_)
    fail("radix invariant: state evictable/protected {}/{} recorded, {}/{} summed over the nodes",
         state_evictable_, state_protected_, se, sp);
  // Lists in access order, sizes and membership.
  auto walk = [&](const List& l, bool state_list, int64_t expect) {
    int64_t count = 0;
    uint64_t last = ~uint64_t{0};
    int32_t prev = -1;
    for (int32_t x = l.head; x >= 0; x = (nodes_[x].*l.links).next) {
      const RadixNode& n = nodes_[x];
      if (!n.live)
        fail("radix invariant: dead node {} in the {} list", x, state_list ? "state" : "full");
      if ((n.*l.links).prev != prev) fail("radix invariant: broken back link at node {}", x);
      const uint64_t t = state_list ? n.state_tick : n.full_tick;
      if (t >= last)
        fail("radix invariant: {} LRU list out of access order at node {} (tick {} after {})",
             state_list ? "state" : "full", x, t, last);
      last = t;
      prev = x;
      if (++count > expect) break;
    }
    if (count != expect || l.size != expect || l.tail != prev)
      fail("radix invariant: {} LRU list holds {} nodes, expected {}",
           state_list ? "state" : "full", count, expect);
  };
  walk(full_, false, live - 1);
  walk(state_, true, with_state);
}

}  // namespace statecheck
