// belady (Belady 1966, "A study of replacement algorithms for a virtual-storage computer"): evict
// the candidate whose next use lies farthest in the future, never-used-again first, from the
// workload's next-use index (core/cache/next_use_index.h). "Now" is the largest engine request id
// matched so far (admission is first come first served, so ids arrive in order). Ties go to the
// least recent candidate. For unit-size state slots this is the optimum of the state pool; for KV
// leaves of different lengths it is the same rule, a heuristic there (docs/cache_policies.md).
#include <algorithm>

#include "core/cache/eviction_policy.h"
#include "core/cache/next_use_index.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

class BeladyPolicy final : public EvictionPolicy {
 public:
  explicit BeladyPolicy(std::shared_ptr<const NextUseIndex> index) : index_(std::move(index)) {}
  PolicyKind kind() const override { return PolicyKind::belady; }

  void on_request(int64_t id, const int32_t*, int64_t) override { now_ = std::max(now_, id); }

  void on_state_added(const RadixTree&, int32_t node, const int32_t* tokens,
                      int64_t depth) override {
    if (static_cast<size_t>(node) >= keys_.size()) keys_.resize(static_cast<size_t>(node) + 1, 0);
    keys_[static_cast<size_t>(node)] = index_->key(tokens, depth);
  }

  size_t choose(const RadixTree&, const std::vector<int32_t>& candidates, EvictPool) override {
    size_t best = 0;
    int64_t best_use = -1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const size_t id = static_cast<size_t>(candidates[i]);
      const uint64_t k = id < keys_.size() ? keys_[id] : 0;
      const int64_t use = index_->next_use(k, now_);
      if (use > best_use) {
        best_use = use;
        best = i;
        if (use == NextUseIndex::kNever) break;
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

std::unique_ptr<EvictionPolicy> make_belady_policy(const PolicyContext& ctx) {
  if (!ctx.next_use)
    fail(
        "--policy belady: the offline bound needs the whole workload in advance (a next-use "
        "index), which this experiment does not provide");
  return std::make_unique<BeladyPolicy>(ctx.next_use);
}

}  // namespace statecheck
