// gdsf: GreedyDual-Size-Frequency (L. Cherkasova, "Improving WWW Proxies Performance with
// Greedy-Dual-Size-Frequency Caching Policy", HP Labs HPL-98-69, 1998; GreedyDual-Size: P. Cao and
// S. Irani, "Cost-Aware WWW Proxy Caching Algorithms", USITS 1997), adapted to the tree's candidate
// rule (docs/cache_policies.md). Each pool keeps its own clock L (starting at 0); a candidate x is
// ranked by
//     H(x) = L(x) + F(x) * V(x) / C(x),
// and the lowest H is evicted (ties: the least recent candidate, the first); L then rises to that
// H (never falls). L(x) is the pool's clock when x's state was cached or last hit: older entries
// lose to newer ones of the same worth, which is GreedyDual's aging.
//   V(x): the prompt tokens a later hit on x would lose if x went, tokens: x's depth less the
//         depth of its nearest ancestor holding a state (the root: 0), where such a request
//         falls back to. Evaluated when the candidates are ranked, because the ancestors gain and
//         lose states while x is cached (the cost of a web object is fixed; here it is not).
//   C(x): what evicting x frees: a KV leaf (EvictPool::kv) its KV tokens with the tombstones it
//         sweeps (RadixTree::eviction_tokens); a state (EvictPool::state) one slot.
//   F(x): 1 + the hits on x's state since it was cached.
// So a state whose ancestor state already serves most of its prefix (a conversation's later turn
// while the earlier turn's state is kept, or a leaf a few tokens below a branching point) goes
// before a state that alone serves a long prefix, and a state hit often stays longer. The tree
// calls choose() only when a pool is short; every invariant stays the tree's.
#include <limits>
#include <vector>

#include "core/cache/eviction_policy.h"
#include "core/cache/radix_tree.h"

namespace statecheck {

namespace {

class GdsfPolicy final : public EvictionPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::gdsf; }

  void on_state_added(const RadixTree&, int32_t node, const int32_t*, int64_t) override {
    Entry& e = entry(node);
    e.clock[0] = clock_[0];
    e.clock[1] = clock_[1];
    e.hits = 0;
  }
  void on_hit(const RadixTree&, int32_t node) override {
    Entry& e = entry(node);
    e.clock[0] = clock_[0];
    e.clock[1] = clock_[1];
    ++e.hits;
  }

  size_t choose(const RadixTree& tree, const std::vector<int32_t>& candidates,
                EvictPool pool) override {
    const int p = pool == EvictPool::kv ? 0 : 1;
    size_t best = 0;
    double best_h = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < candidates.size(); ++i) {
      const int32_t x = candidates[i];
      const Entry e =
          static_cast<size_t>(x) < entries_.size() ? entries_[static_cast<size_t>(x)] : Entry{};
      const double cost = pool == EvictPool::kv
                              ? static_cast<double>(std::max<int64_t>(1, tree.eviction_tokens(x)))
                              : 1.0;
      const double f = 1.0 + static_cast<double>(e.hits);
      const double h = e.clock[p] + f * static_cast<double>(tokens_lost(tree, x)) / cost;
      if (h < best_h) best = i, best_h = h;
    }
    clock_[p] = std::max(clock_[p], best_h);
    return best;
  }

 private:
  struct Entry {
    double clock[2] = {0.0, 0.0};  // the pools' clocks at the last access: [kv, state]
    int64_t hits = 0;              // hits since the state was cached
  };
  Entry& entry(int32_t node) {
    if (static_cast<size_t>(node) >= entries_.size())
      entries_.resize(static_cast<size_t>(node) + 1);
    return entries_[static_cast<size_t>(node)];
  }
  // V(x): the tokens between x and its nearest state-holding ancestor (file comment).
  static int64_t tokens_lost(const RadixTree& tree, int32_t x) {
    int64_t tokens = 0;
    for (int32_t a = x; a != RadixTree::kRoot; a = tree.node(a).parent) {
      if (a != x && tree.node(a).state != kNoSlot) break;
      tokens += static_cast<int64_t>(tree.node(a).key.size());
    }
    return tokens;
  }

  double clock_[2] = {0.0, 0.0};  // L of the KV and the state pool
  std::vector<Entry> entries_;    // [node id], reset when the node receives a state
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_gdsf_policy() {
  return std::make_unique<GdsfPolicy>();
}

}  // namespace statecheck
