// lru-used (SGLang PR #31643, "Reset only the used mamba state on radix cache hit"): LRU order,
// but the state list is refreshed only for the state a request actually restores. The model's
// match already refreshes only the hit node in the state list; what changes is insert's walk,
// which under lru moves every existing state it passes to the most recent end and here leaves
// them where they are (a new state still enters at the most recent end). The victim is the least
// recent candidate, as under lru.
#include "core/cache/eviction_policy.h"

namespace statecheck {

namespace {

class LruUsedPolicy final : public EvictionPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::lru_used; }
  bool refresh_walked_states_on_insert() const override { return false; }
  size_t choose(const RadixTree&, const std::vector<int32_t>&, EvictPool) override { return 0; }
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lru_used_policy() {
  return std::make_unique<LruUsedPolicy>();
}

}  // namespace statecheck
