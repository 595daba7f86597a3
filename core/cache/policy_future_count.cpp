// future-count: evict the candidate whose prefix the rest of the workload uses the fewest times,
// from the workload's next-use index (core/cache/next_use_index.h); ties go to the least recent
// candidate. It knows how often each cached prefix will be used again but not when, so it is the
// A0 rule of Aho, Denning and Ullman ("Principles of optimal page replacement", J. ACM 18(1),
// 1971): under the independent reference model, where every request picks a prefix with a fixed
// probability regardless of the past, keeping the most probable prefixes is the optimal online
// policy, and the reuse counts are those probabilities measured on the workload itself. On such a
// workload no online policy is expected to beat it, and its distance to belady is what knowing
// the order of the future adds. Offline (it reads the future), reported beside belady as a
// second bound, never as the best online policy (docs/cache_policies.md).
#include <algorithm>

#include "core/cache/eviction_policy.h"
#include "core/cache/next_use_index.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

class FutureCountPolicy final : public EvictionPolicy {
 public:
  explicit FutureCountPolicy(std::shared_ptr<const NextUseIndex> index)
      : index_(std::move(index)) {}
  PolicyKind kind() const override { return PolicyKind::future_count; }

  void on_request(int64_t id, const int32_t*, int64_t) override { now_ = std::max(now_, id); }

  void on_state_added(const RadixTree&, int32_t node, const int32_t* tokens,
                      int64_t depth) override {
    if (static_cast<size_t>(node) >= keys_.size()) keys_.resize(static_cast<size_t>(node) + 1, 0);
    keys_[static_cast<size_t>(node)] = index_->key(tokens, depth);
  }

  size_t choose(const RadixTree&, const std::vector<int32_t>& candidates, EvictPool) override {
    size_t best = 0;
    int64_t fewest = -1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const size_t id = static_cast<size_t>(candidates[i]);
      const uint64_t k = id < keys_.size() ? keys_[id] : 0;
      const int64_t uses = index_->uses_after(k, now_);
      if (fewest < 0 || uses < fewest) {
        fewest = uses;
        best = i;
        if (uses == 0) break;
      }
    }
    return best;
  }

 private:
  std::shared_ptr<const NextUseIndex> index_;
  std::vector<uint64_t> keys_;  // [node id] -> next-use key of its state's prefix
  int64_t now_ = -1;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_future_count_policy(const PolicyContext& ctx) {
  if (!ctx.next_use)
    fail(
        "--policy future-count: the bound needs the whole workload in advance (a next-use index), "
        "which this experiment does not provide");
  return std::make_unique<FutureCountPolicy>(ctx.next_use);
}

}  // namespace statecheck
