// The offline bounds: policies that read the workload's future from its next-use index
// (core/cache/next_use_index.h), so they need the whole workload in advance and are bounds, not
// deployable policies (docs/cache_policies.md). "Now" is the largest engine request id matched so
// far (admission is first come first served, so ids arrive in order); a node's key is that of its
// state's prefix. Ties go to the least recent candidate (the first in the tree's order).
//
// belady (Belady 1966, "A study of replacement algorithms for a virtual-storage computer"): evict
// the candidate whose next use lies farthest in the future, never-used-again first. For unit-size
// state slots this is the optimum of the state pool; for KV leaves of different lengths it is the
// same rule, a heuristic there.
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

#include "core/cache/eviction_policy.h"
#include "core/cache/next_use_index.h"
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

  void on_state_added(const RadixTree&, int32_t node, const int32_t* tokens,
                      int64_t depth) override {
    if (static_cast<size_t>(node) >= keys_.size()) keys_.resize(static_cast<size_t>(node) + 1, 0);
    keys_[static_cast<size_t>(node)] = index_->key(tokens, depth);
  }

  size_t choose(const RadixTree&, const std::vector<int32_t>& candidates, EvictPool) override {
    size_t best = 0;
    int64_t best_score = std::numeric_limits<int64_t>::min();
    for (size_t i = 0; i < candidates.size(); ++i) {
      const size_t id = static_cast<size_t>(candidates[i]);
      const int64_t s = score_(*index_, id < keys_.size() ? keys_[id] : 0, now_);
      if (s > best_score) {
        best_score = s;
        best = i;
        if (s >= enough_) break;
      }
    }
    return best;
  }

 private:
  std::shared_ptr<const NextUseIndex> index_;
  Score score_;
  int64_t enough_;
  std::vector<uint64_t> keys_;  // [node id] -> next-use key of its state's prefix
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
