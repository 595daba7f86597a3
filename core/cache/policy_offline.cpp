// The offline bounds: policies that read the workload's future from its next-use index
// (core/cache/next_use_index.h), so they need the whole workload in advance and are bounds, not
// deployable policies (docs/cache_policies.md). "Now" is the largest engine request id matched so
// far (admission is first come first served, so ids arrive in order). Ties go to the least recent
// candidate (the first in the tree's order).
//
// The prefix a candidate is scored by is what its eviction takes away. The state eviction of an
// internal node (EvictPool::state; it becomes a tombstone) takes the state: the key of its own
// prefix. Evicting a leaf (every KV victim, and a leaf among the state victims) takes its KV with
// its state, and every tombstone ancestor the leaf leaves childless: the tokens (s, depth] with s
// the depth of the ancestor that survives. A later request that walks into those tokens loses
// them (it finds no KV to branch from, so the engine checkpoints no state there), and every such
// request uses the shallowest grid prefix of the span, tokens[0, c0) with c0 the first multiple
// of Cg above s (the state's own prefix when no grid point lies in the span). A candidate is ranked
// first by its state's prefix, as Belady's rule has it, and among equals by that span prefix: of
// two states never used again, the leaf whose first tokens a later request needs goes last.
// Ranked by the state alone, a cyclic scan (K shared prefixes, each request adding a fresh block,
// so every leaf's state is dead and only its first tokens are reused) is evicted in LRU order and
// reuses nothing; ranked by the span alone, the bound lost up to 0.03 of hit rate on the
// conversation trace where the state pool binds (docs/cache_policies.md).
//
// belady (Belady 1966, "A study of replacement algorithms for a virtual-storage computer"): evict
// the candidate whose next use lies farthest in the future, never-used-again first. For unit-size
// state slots this is the optimum of the state pool; for KV leaves of different lengths it is the
// same rule, a heuristic there. A use that a deeper cached state would serve does not count
// (unshadowed_next_use below).
//
// future-count: evict the candidate whose prefix the rest of the workload uses the fewest times.
// It knows how often each cached prefix will be used again but not when: the A0 rule of Aho,
// Denning and Ullman ("Principles of optimal page replacement", J. ACM 18(1), 1971), the optimal
// online policy under the independent reference model (every request picks a prefix with a fixed
// probability regardless of the past), with the reuse counts of the workload as those
// probabilities. On such a workload no online policy is expected to beat it, and its distance to
// belady is what knowing the order of the future adds; where reuse comes in bursts, recency can.
#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "core/cache/eviction_policy.h"
#include "core/cache/next_use_index.h"
#include "core/cache/radix_tree.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

// The bookkeeping both bounds share; Score(index, key, now) ranks a candidate, the highest score
// is evicted, and `enough` ends the search early (no candidate can score higher).
template <PolicyKind K, class Score>
class OfflinePolicy final : public EvictionPolicy {
 public:
  OfflinePolicy(std::shared_ptr<const NextUseIndex> index, Score score, int64_t enough)
      : index_(std::move(index)), score_(score), enough_(enough) {}
  PolicyKind kind() const override { return K; }

  void on_request(int64_t id, const int32_t*, int64_t) override { now_ = std::max(now_, id); }

  void on_state_added(const RadixTree& tree, int32_t node, const int32_t* tokens,
                      int64_t depth) override {
    if (static_cast<size_t>(node) >= nodes_.size()) nodes_.resize(static_cast<size_t>(node) + 1);
    Prefix& p = nodes_[static_cast<size_t>(node)];
    p.depth = depth;
    p.epoch = ++epoch_;
    p.deeper.clear();
    index_->grid_keys(tokens, depth, p.grid);
    if (K != PolicyKind::belady) return;
    // Registered with its nearest state-holding ancestor, whose later uses it may shadow.
    if (Prefix* a = nearest_state_ancestor(tree, node)) {
      a->deeper.push_back({node, p.epoch});
      const size_t n = a->deeper.size();
      if (n >= 64 && (n & (n - 1)) == 0) keep_live(tree, a->deeper);  // bounded by live states
    }
  }

  void on_state_removed(const RadixTree& tree, int32_t node) override {
    if (static_cast<size_t>(node) >= nodes_.size()) return;
    Prefix& p = nodes_[static_cast<size_t>(node)];
    std::vector<uint64_t>().swap(p.grid);  // read only while the node holds a state
    if (K != PolicyKind::belady || p.deeper.empty()) return;
    // The states registered here are still below the next state-holding ancestor.
    keep_live(tree, p.deeper);
    if (Prefix* a = nearest_state_ancestor(tree, node))
      a->deeper.insert(a->deeper.end(), p.deeper.begin(), p.deeper.end());
    p.deeper.clear();
  }

  size_t choose(const RadixTree& tree, const std::vector<int32_t>& candidates,
                EvictPool pool) override {
    // Ranked by the state's own prefix, ties by the span's (file comment); the span's score is
    // looked up only for a tie or a candidate that may end the search.
    const auto span_score = [&](const std::pair<uint64_t, uint64_t>& k, int64_t own) {
      return k.first == k.second ? own : score_(*index_, k.second, now_);
    };
    size_t best = 0;
    std::pair<uint64_t, uint64_t> best_keys{0, 0};
    int64_t best_own = std::numeric_limits<int64_t>::min();
    std::optional<int64_t> best_span;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const std::pair<uint64_t, uint64_t> k = candidate_keys(tree, candidates[i], pool);
      const int64_t own = K == PolicyKind::belady && k.first == k.second && k.first != 0
                              ? unshadowed_next_use(tree, candidates[i], k.first)
                              : score_(*index_, k.first, now_);
      if (own < best_own) continue;
      if (own == best_own) {
        if (!best_span) best_span = span_score(best_keys, best_own);
        const int64_t span = span_score(k, own);
        if (span <= *best_span) continue;
        best_span = span;
      } else {
        best_own = own;
        best_span.reset();
      }
      best = i;
      best_keys = k;
      if (best_own >= enough_) {
        if (!best_span) best_span = span_score(best_keys, best_own);
        if (*best_span >= enough_) break;
      }
    }
    return best;
  }

 private:
  struct Prefix {
    int64_t depth = 0;           // the node's depth (tokens); fixed while it lives (a split
                                 // shortens its edge from above)
    std::vector<uint64_t> grid;  // next-use keys of its grid prefixes (NextUseIndex::grid_keys)
    uint64_t epoch = 0;          // which state of the node (a node id outlives its states)
    // belady: (node, epoch) of states below it that registered with it as their nearest
    // state-holding ancestor (when cached, or handed up when a state between them was removed);
    // entries whose state is gone are dropped when read.
    std::vector<std::pair<int32_t, uint64_t>> deeper;
  };

  // belady's next use of internal node x's state (key `key`): the first later request that uses
  // its prefix without also reaching a deeper cached state registered below it, because such a
  // request hits the deeper state and needs x's no more. A state that only ever serves as a
  // stepping stone to a deeper one (a conversation's earlier turn, once the later turn is cached)
  // is so never used again. The deeper states are taken as they are now (one of them may be
  // evicted before that request), and a state cached below x while x was a tombstone stays
  // registered higher up, not with x: a heuristic of the bound.
  int64_t unshadowed_next_use(const RadixTree& tree, int32_t x, uint64_t key) {
    std::vector<std::pair<int32_t, uint64_t>>& deeper = nodes_[static_cast<size_t>(x)].deeper;
    keep_live(tree, deeper);
    shadow_.clear();
    for (const auto& [y, epoch] : deeper) {
      const Prefix& py = nodes_[static_cast<size_t>(y)];
      if (!py.grid.empty() && py.grid.back() != key) shadow_.push_back({py.grid.back(), py.depth});
    }
    if (shadow_.empty()) return index_->next_use(key, now_);
    std::sort(shadow_.begin(), shadow_.end());
    shadow_.erase(std::unique(shadow_.begin(), shadow_.end()), shadow_.end());
    // Request j reaches state y when it uses y's prefix: its grid floor (the index's key) and, for
    // an off-grid state (no_buffer: chunk and sequence ends), at least y's depth in tokens. The
    // tokens between the floor and y are not compared: the test errs towards a hit on y.
    return index_->next_use_unless(
        key, now_,
        [&](int64_t j) {
          for (const auto& [ky, dy] : shadow_)
            if (index_->matchable(j) >= dy && index_->used_by(ky, j)) return true;
          return false;
        },
        kShadowTests);
  }
  static constexpr int kShadowTests = 32;  // later uses tested per candidate

  // The Prefix of the nearest ancestor of `node` that holds a state; nullptr when none does.
  Prefix* nearest_state_ancestor(const RadixTree& tree, int32_t node) {
    int32_t a = tree.node(node).parent;
    while (a != RadixTree::kRoot && tree.node(a).state == kNoSlot) a = tree.node(a).parent;
    if (a == RadixTree::kRoot || static_cast<size_t>(a) >= nodes_.size()) return nullptr;
    return &nodes_[static_cast<size_t>(a)];
  }

  // Drops the entries of `deeper` whose state is gone (freed, or the node id reused).
  void keep_live(const RadixTree& tree, std::vector<std::pair<int32_t, uint64_t>>& deeper) const {
    size_t kept = 0;
    for (const auto& [y, epoch] : deeper) {
      const RadixNode& n = tree.node(y);
      if (n.live && n.state != kNoSlot && nodes_[static_cast<size_t>(y)].epoch == epoch)
        deeper[kept++] = {y, epoch};
    }
    deeper.resize(kept);
  }

  // The keys candidate `id` is ranked by: its state's prefix, and the first grid prefix of the
  // span its eviction deletes (the same for an internal node's state; file comment).
  std::pair<uint64_t, uint64_t> candidate_keys(const RadixTree& tree, int32_t id,
                                               EvictPool pool) const {
    if (static_cast<size_t>(id) >= nodes_.size()) return {0, 0};
    const Prefix& p = nodes_[static_cast<size_t>(id)];
    const uint64_t own = p.grid.empty() ? 0 : p.grid.back();
    if (pool == EvictPool::state && tree.node(id).num_children > 0)
      return {own, own};                                   // a tombstone
    const int64_t s = p.depth - tree.eviction_tokens(id);  // depth of the ancestor that survives
    const size_t first = static_cast<size_t>(s / index_->granularity());
    return {own, first < p.grid.size() ? p.grid[first] : own};
  }

  std::shared_ptr<const NextUseIndex> index_;
  Score score_;
  int64_t enough_;
  std::vector<Prefix> nodes_;  // [node id], set when the node receives a state
  uint64_t epoch_ = 0;
  std::vector<std::pair<uint64_t, int64_t>> shadow_;  // scratch of unshadowed_next_use:
                                                      // (key, depth) of the deeper states
  int64_t now_ = -1;
};

template <PolicyKind K, class Score>
std::unique_ptr<EvictionPolicy> make_offline(const PolicyContext& ctx, Score score,
                                             int64_t enough) {
  if (!ctx.next_use)
    fail(
        "--policy {}: the bound needs the whole workload in advance (a next-use index), which "
        "this experiment does not provide",
        policy_name(K));
  return std::make_unique<OfflinePolicy<K, Score>>(ctx.next_use, score, enough);
}

}  // namespace

std::unique_ptr<EvictionPolicy> make_belady_policy(const PolicyContext& ctx) {
  // The later the next use, the higher the score; never used again is the most.
  const auto next_use = [](const NextUseIndex& index, uint64_t key, int64_t now) {
    return index.next_use(key, now);
  };
  return make_offline<PolicyKind::belady>(ctx, next_use, NextUseIndex::kNever);
}

std::unique_ptr<EvictionPolicy> make_future_count_policy(const PolicyContext& ctx) {
  // The fewer the later uses, the higher the score; none left is the most.
  const auto fewest_uses = [](const NextUseIndex& index, uint64_t key, int64_t now) {
    return -index.uses_after(key, now);
  };
  return make_offline<PolicyKind::future_count>(ctx, fewest_uses, 0);
}

}  // namespace statecheck
