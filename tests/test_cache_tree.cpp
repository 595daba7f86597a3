// Radix tree of the cache model: hand-computed cases of match / split / insert / lock / evict_full
// / evict_state (docs/cache_model.md; SGLang mamba_radix_cache.py), and the slot allocator
// (section 1).
#include <gtest/gtest.h>

#include "core/cache/radix_tree.h"
#include "core/pools/slot_allocator.h"
#include "core/util/error.h"

using namespace statecheck;

namespace {

// A tree over a KV pool of 100 tokens and 10 state slots, Cg = 4. Inserting takes the caller's
// KV first (as a request would hold it).
struct Fixture {
  KvPool kv{100};
  SlotAllocator states{"test states", 10};
  RadixTree tree{kv, states, 4};

  RadixInsert insert(std::vector<int32_t> t, int64_t prev = 0) {
    EXPECT_TRUE(kv.alloc(static_cast<int64_t>(t.size()) - prev));
    const int32_t s = states.alloc();
    const RadixInsert r = tree.insert(t.data(), static_cast<int64_t>(t.size()), s, prev);
    if (r.state_exists) states.free(s);
    return r;
  }
  RadixMatch match(std::vector<int32_t> t) {
    return tree.match(t.data(), static_cast<int64_t>(t.size()));
  }
};

}  // namespace

TEST(CacheSlotAllocator, HandsOutSlotsOneToNFirstInFirstOut) {
  SlotAllocator a("pool", 3);
  EXPECT_EQ(a.alloc(), 1);
  EXPECT_EQ(a.alloc(), 2);
  a.free(1);
  EXPECT_EQ(a.alloc(), 3);
  EXPECT_EQ(a.alloc(), 1);        // freed slots go to the back
  EXPECT_EQ(a.alloc(), kNoSlot);  // exhausted: no slot, no throw
  EXPECT_EQ(a.available(), 0);
}

TEST(CacheSlotAllocator, DoubleFreeSlotZeroAndOutOfRangeAreErrors) {
  SlotAllocator a("checkpoint pool", 4);
  const int32_t s = a.alloc();
  a.free(s);
  try {
    a.free(s);
    FAIL() << "double free accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("double free of slot 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checkpoint pool"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.free(0), Error);
  EXPECT_THROW(a.free(5), Error);
  EXPECT_THROW(a.free(-1), Error);
  EXPECT_EQ(a.available(), 4);
}

TEST(CacheRadixTree, InsertSplitsAndFreesDuplicateKv) {
  Fixture f;
  RadixInsert a = f.insert({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(a.prefix_len, 0);
  EXPECT_FALSE(a.state_exists);
  EXPECT_EQ(f.tree.full_evictable(), 6);
  EXPECT_EQ(f.tree.state_evictable(), 1);
  // Shares [1, 2, 3]: the caller's 3 duplicate KV tokens are freed, the leaf is split.
  RadixInsert b = f.insert({1, 2, 3, 9, 9});
  EXPECT_EQ(b.prefix_len, 3);
  EXPECT_EQ(b.kv_freed, 3);
  EXPECT_EQ(f.kv.available(), 100 - 6 - 5 + 3);
  EXPECT_EQ(f.tree.total_tokens(), 8);
  EXPECT_EQ(f.tree.node_count(), 4);  // root, [1 2 3] (tombstone), [4 5 6], [9 9]
  EXPECT_EQ(f.tree.counters().tombstones_created, 1);
  const RadixNode& parent = f.tree.node(f.tree.node(a.node).parent);
  EXPECT_EQ(parent.key, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parent.state, kNoSlot);
  EXPECT_EQ(f.tree.node(a.node).key, (std::vector<int32_t>{4, 5, 6}));
  f.tree.check(true);
}

TEST(CacheRadixTree, MatchHitsDeepestStateAndRecordsBranchingPoint) {
  Fixture f;
  f.insert({1, 2, 3, 4, 5, 6});
  f.insert({1, 2, 3, 9, 9});
  // Walks the tombstone [1 2 3] and splits [9 9] after one token: nothing on the path holds a
  // state.
  RadixMatch m = f.match({1, 2, 3, 9});
  EXPECT_EQ(m.hit_len, 0);
  EXPECT_EQ(m.hit_node, RadixTree::kRoot);
  EXPECT_EQ(m.matched_len, 4);
  EXPECT_EQ(m.branching_len, 4);  // floor(4 / 4) * 4
  EXPECT_EQ(f.tree.node_count(), 5);
  // Through [4 5 6] (a state) and past its end: hit 6, walked 6, no branching.
  m = f.match({1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(m.hit_len, 6);
  EXPECT_EQ(m.matched_len, 6);
  EXPECT_EQ(m.branching_len, -1);
  // Walked 3 tokens below no state: floor(3 / 4) * 4 = 0 -> no branching point.
  m = f.match({1, 2, 3});
  EXPECT_EQ(m.hit_len, 0);
  EXPECT_EQ(m.branching_len, -1);
  f.tree.check(true);
}

TEST(CacheRadixTree, InsertIntoTombstoneGivesItTheStateElseReportsExisting) {
  Fixture f;
  f.insert({1, 2, 3, 4, 5, 6});
  f.insert({1, 2, 3, 9, 9});
  RadixInsert t = f.insert({1, 2, 3}, 0);
  EXPECT_FALSE(t.state_exists);
  EXPECT_EQ(t.kv_freed, 3);
  EXPECT_NE(f.tree.node(t.node).state, kNoSlot);
  RadixInsert again = f.insert({1, 2, 3}, 0);
  EXPECT_TRUE(again.state_exists);
  EXPECT_EQ(f.tree.state_evictable(), 3);
  EXPECT_EQ(f.match({1, 2, 3, 4}).hit_len, 3);
  f.tree.check(true);
  // An empty key is refused: the caller must not insert an empty node.
  EXPECT_THROW(f.tree.insert(nullptr, 0, 1, 0), Error);
}

TEST(CacheRadixTree, LockProtectsPathAndStateOfTheNodeOnly) {
  Fixture f;
  const RadixInsert a = f.insert({1, 2, 3, 4, 5, 6});
  f.insert({1, 2, 3, 9, 9});
  const int32_t parent = f.tree.node(a.node).parent;
  f.insert({1, 2, 3});  // parent gets a state
  f.tree.lock(a.node);
  EXPECT_EQ(f.tree.node(a.node).full_lock, 1);
  EXPECT_EQ(f.tree.node(a.node).state_lock, 1);
  EXPECT_EQ(f.tree.node(parent).full_lock, 1);
  EXPECT_EQ(f.tree.node(parent).state_lock, 0);  // state lock on the node only
  EXPECT_EQ(f.tree.full_protected(), 6);
  EXPECT_EQ(f.tree.full_evictable(), 2);
  EXPECT_EQ(f.tree.state_protected(), 1);
  EXPECT_EQ(f.tree.state_evictable(), 2);
  f.tree.check(false);
  EXPECT_THROW(f.tree.check(true), Error);  // locked while "idle"
  // evict_state takes the least recent unlocked state: the parent (internal) becomes a tombstone.
  f.match({1, 2, 3, 9, 9, 1});  // refreshes [9 9], hit node of this match
  EXPECT_EQ(f.tree.evict_state(1), 1);
  EXPECT_EQ(f.tree.node(parent).state, kNoSlot);
  EXPECT_EQ(f.tree.node_count(), 4);
  f.tree.unlock(a.node);
  EXPECT_THROW(f.tree.unlock(a.node), Error);
  f.tree.check(true);
}

TEST(CacheRadixTree, EvictFullTakesLeastRecentLeafAndSweepsTombstones) {
  Fixture f;
  const RadixInsert a = f.insert({1, 2, 3, 4, 5, 6});
  const RadixInsert b = f.insert({1, 2, 3, 9, 9});
  f.match({1, 2, 3, 4, 5, 6, 7});  // [4 5 6] more recent than [9 9]
  const int64_t free_before = f.kv.available();
  // Evicting 1 token takes the least recent leaf [9 9] (2 tokens); [1 2 3] keeps a child.
  EXPECT_EQ(f.tree.evict_full(1), 2);
  EXPECT_EQ(f.kv.available(), free_before + 2);
  EXPECT_EQ(f.states.available(), 9);
  EXPECT_FALSE(f.tree.node(b.node).live);
  // Evicting the rest: [4 5 6] goes, then its parent [1 2 3], a childless unlocked tombstone.
  EXPECT_EQ(f.tree.evict_full(1), 6);
  EXPECT_EQ(f.tree.node_count(), 1);
  EXPECT_EQ(f.kv.available(), 100);
  EXPECT_EQ(f.states.available(), 10);
  EXPECT_EQ(f.tree.counters().full_evicted_nodes, 3);
  (void)a;
  f.tree.check(true);
}

TEST(CacheRadixTree, EvictFullSkipsLockedLeaves) {
  Fixture f;
  const RadixInsert a = f.insert({1, 2, 3, 4});
  f.insert({7, 8});
  f.tree.lock(a.node);
  EXPECT_EQ(f.tree.evict_full(100), 2);  // only [7 8] is evictable
  EXPECT_EQ(f.tree.total_tokens(), 4);
  EXPECT_EQ(f.tree.evict_state(5), 0);  // the only state left is locked
  f.tree.unlock(a.node);
  EXPECT_EQ(f.tree.evict_state(5), 1);  // a leaf: evicted fully
  EXPECT_EQ(f.tree.node_count(), 1);
  f.tree.check(true);
}

TEST(CacheRadixTree, LruListsFollowAccessOrder) {
  Fixture f;
  const RadixInsert a = f.insert({1, 2});
  const RadixInsert b = f.insert({3, 4});
  const RadixInsert c = f.insert({5, 6});
  f.match({1, 2, 0});  // a most recent
  // State eviction order is now b, c, a.
  f.tree.evict_state(1);
  EXPECT_FALSE(f.tree.node(b.node).live);
  f.tree.evict_state(1);
  EXPECT_FALSE(f.tree.node(c.node).live);
  EXPECT_TRUE(f.tree.node(a.node).live);
  f.tree.check(true);
}

// SGLang _split_node re-inserts a child that holds a state at the most recent end of the state
// list. A match that splits [1 2 3 4 5 6] (hit: the root, no refresh) leaves it more recent than
// [7 8 9], inserted after it, so the state eviction takes [7 8 9].
TEST(CacheRadixTree, SplitMovesTheChildToTheRecentEndOfTheStateList) {
  Fixture f;
  const RadixInsert a = f.insert({1, 2, 3, 4, 5, 6});
  const RadixInsert b = f.insert({7, 8, 9});
  const RadixMatch m = f.match({1, 2, 3, 0});
  EXPECT_EQ(m.hit_node, RadixTree::kRoot);
  EXPECT_EQ(f.tree.counters().splits, 1);
  EXPECT_GT(f.tree.node(a.node).state_tick, f.tree.node(b.node).state_tick);
  EXPECT_EQ(f.tree.evict_state(1), 1);
  EXPECT_FALSE(f.tree.node(b.node).live);
  EXPECT_TRUE(f.tree.node(a.node).live);
  f.tree.check(true);
}

// Under KV-only matching a request can lock a tombstone (its hit need not hold a state). A state
// inserted there afterwards is protected by that lock, and the unlock releases it: the tree must
// not lose track of which lock protects what.
TEST(CacheRadixTree, LockOnATombstoneProtectsAStateInsertedThereLater) {
  Fixture f;
  const RadixInsert a = f.insert({1, 2, 3, 4, 5, 6});
  const RadixInsert b = f.insert({1, 2, 3, 9, 9});
  const int32_t t = f.tree.node(a.node).parent;  // [1 2 3], a tombstone made by the split
  ASSERT_EQ(f.tree.node(t).state, kNoSlot);
  f.tree.lock(t);
  EXPECT_EQ(f.tree.node(t).state_lock, 0);
  EXPECT_EQ(f.tree.node(t).own_locks, 1);
  EXPECT_EQ(f.tree.state_protected(), 0);
  const RadixInsert c = f.insert({1, 2, 3});  // the tombstone gets a state
  ASSERT_EQ(c.node, t);
  EXPECT_EQ(f.tree.node(t).state_lock, 1);
  EXPECT_EQ(f.tree.state_protected(), 1);
  EXPECT_EQ(f.tree.state_evictable(), 2);
  f.tree.check(false);
  EXPECT_EQ(f.tree.evict_state(3), 2);  // both leaves; the locked state stays
  EXPECT_FALSE(f.tree.node(a.node).live);
  EXPECT_FALSE(f.tree.node(b.node).live);
  EXPECT_NE(f.tree.node(t).state, kNoSlot);
  f.tree.unlock(t);
  EXPECT_EQ(f.tree.state_evictable(), 1);
  EXPECT_EQ(f.tree.state_protected(), 0);
  EXPECT_THROW(f.tree.unlock(t), Error);
  f.tree.check(true);
  EXPECT_EQ(f.tree.evict_state(1), 1);  // now a leaf: evicted fully
  EXPECT_EQ(f.tree.node_count(), 1);
  EXPECT_EQ(f.kv.available(), 100);
  EXPECT_EQ(f.states.available(), 10);
}

TEST(CacheRadixTree, ResetFreesEverythingAndRefusesLockedNodes) {
  Fixture f;
  const RadixInsert a = f.insert({1, 2, 3});
  f.insert({1, 2, 5, 6});
  f.tree.lock(a.node);
  EXPECT_THROW(f.tree.reset(), Error);
  f.tree.unlock(a.node);
  f.tree.reset();
  EXPECT_EQ(f.kv.available(), 100);
  EXPECT_EQ(f.states.available(), 10);
  EXPECT_EQ(f.tree.node_count(), 1);
  f.tree.check(true);
}
