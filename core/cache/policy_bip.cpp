// bip: bimodal insertion (Qureshi, Jaleel, Patt, Steely, Emer, "Adaptive Insertion Policies for
// High Performance Caching", ISCA 2007, section 3). A new state enters at the LRU end of the
// policy's own recency order (LIP) and at the MRU end only with probability epsilon = 1/32; a hit
// moves it to the MRU end. On a cyclic scan longer than the cache, LRU evicts every entry just
// before its reuse; BIP keeps most of the resident set and evicts the newcomers instead.
// Adaptation to the tree: the order is a per-node stamp (hits and MRU inserts take an increasing
// clock, LRU inserts a decreasing one below every stamp so far); the victim is the candidate with
// the smallest stamp, ties (nodes never seen) broken by the tree's LRU order (first candidate).
// Draws come from a 64-bit xorshift with a fixed seed: deterministic for a run.
#include <cstdint>
#include <unordered_map>

#include "core/cache/eviction_policy.h"

namespace statecheck {

namespace {

class BipPolicy final : public EvictionPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::bip; }
  void on_state_added(const RadixTree&, int32_t node, const int32_t*, int64_t) override {
    stamp_[node] = (next_random() % 32 == 0) ? ++high_ : --low_;
  }
  void on_hit(const RadixTree&, int32_t node) override { stamp_[node] = ++high_; }
  void on_state_removed(const RadixTree&, int32_t node) override { stamp_.erase(node); }
  size_t choose(const RadixTree&, const std::vector<int32_t>& candidates, EvictPool) override {
    size_t best = 0;
    int64_t best_stamp = stamp_of(candidates[0]);
    for (size_t i = 1; i < candidates.size(); ++i) {
      const int64_t s = stamp_of(candidates[i]);
      if (s < best_stamp) best = i, best_stamp = s;
    }
    return best;
  }

 private:
  int64_t stamp_of(int32_t node) const {
    const auto it = stamp_.find(node);
    return it == stamp_.end() ? INT64_MIN : it->second;
  }
  uint64_t next_random() {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_;
  }
  std::unordered_map<int32_t, int64_t> stamp_;
  int64_t high_ = 0, low_ = 0;
  uint64_t rng_ = 0x9e3779b97f4a7c15ull;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_bip_policy() {
  return std::make_unique<BipPolicy>();
}

}  // namespace statecheck
