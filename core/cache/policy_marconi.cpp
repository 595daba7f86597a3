// marconi (Pan et al., "Marconi: Prefix Caching for the Era of Hybrid LLMs", MLSys 2025, arXiv
// 2411.19379, section 4.2): among the candidates evict the lowest
//   score = recency_norm + alpha * flop_efficiency_norm,
// recency = the candidate's last-access tick in the list being evicted from (state list for
// state evictions, full list for KV evictions), flop_efficiency = (FLOPs of a prefill to the
// node's depth - FLOPs to its parent's depth) / (state bytes + the node's KV bytes): the compute a
// hit on this node saves beyond its parent, per byte it holds (FlopCosts). Both terms are
// min-max normalised to [0, 1] over the candidates (a constant term normalises to 0); ties go to
// the least recent candidate.
//
// alpha: with bootstrap (the default) alpha is 0 (LRU) until the first eviction; then the
// requests seen so far (the bootstrap window, at most the last kWindow of them) are replayed
// through a bare tree with the same pool sizes, once per alpha of kGrid, and the alpha with the
// most hit tokens is kept (ties: the smaller alpha), as the paper tunes alpha on a bootstrap
// window. The replay is the cache alone: match tokens[0, n - 1), lock the hit, take KV for the
// rest and one state slot (evicting with the candidate alpha), insert the whole prompt, unlock.
#include <algorithm>
#include <deque>

#include "core/cache/eviction_policy.h"
#include "core/cache/radix_tree.h"

namespace statecheck {

namespace {

constexpr size_t kWindow = 1000;
constexpr double kGrid[] = {0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0};

class MarconiPolicy final : public EvictionPolicy {
 public:
  MarconiPolicy(const PolicyContext& ctx, double alpha)
      : ctx_(ctx), alpha_(alpha < 0 ? 0.0 : alpha), bootstrap_(alpha < 0) {}
  PolicyKind kind() const override { return PolicyKind::marconi; }
  double alpha() const { return alpha_; }

  void on_request(int64_t, const int32_t* tokens, int64_t n) override {
    if (!bootstrap_ || tuned_) return;
    window_.emplace_back(tokens, tokens + n);
    if (window_.size() > kWindow) window_.pop_front();
  }

  size_t choose(const RadixTree& tree, const std::vector<int32_t>& candidates,
                EvictPool pool) override {
    if (bootstrap_ && !tuned_) tune();
    if (alpha_ == 0.0) return 0;  // recency alone: the least recent candidate
    const size_t n = candidates.size();
    rec_.resize(n);
    eff_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const RadixNode& x = tree.node(candidates[i]);
      rec_[i] = static_cast<double>(pool == EvictPool::state ? x.state_tick : x.full_tick);
      const int64_t d = tree.depth(candidates[i]);
      const int64_t len = static_cast<int64_t>(x.key.size());
      const double saved = ctx_.flops.prefill_flops(d) - ctx_.flops.prefill_flops(d - len);
      const double bytes = ctx_.flops.state_bytes + ctx_.flops.kv_bytes_per_token * len;
      eff_[i] = saved / bytes;
    }
    normalise(rec_);
    normalise(eff_);
    size_t best = 0;
    double best_score = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double s = rec_[i] + alpha_ * eff_[i];
      if (i == 0 || s < best_score) {
        best_score = s;
        best = i;
      }
    }
    return best;
  }

 private:
  static void normalise(std::vector<double>& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const double a = *lo, span = *hi - *lo;
    for (double& x : v) x = span > 0 ? (x - a) / span : 0.0;
  }

  // Hit tokens of the bootstrap window under a fixed alpha.
  int64_t replay_window(double alpha) const {
    KvPool kv(std::max<int64_t>(1, ctx_.kv_capacity));
    SlotAllocator states("marconi bootstrap states", std::max<int32_t>(1, ctx_.state_capacity));
    RadixTree tree(kv, states, ctx_.chunk_granularity);
    MarconiPolicy fixed(ctx_, alpha);
    tree.set_policy(&fixed);
    int64_t hits = 0;
    for (const auto& t : window_) {
      const int64_t n = static_cast<int64_t>(t.size());
      if (n < 2) continue;
      const RadixMatch m = tree.match(t.data(), n - 1);
      hits += m.hit_len;
      tree.lock(m.hit_node);
      const int64_t need = n - m.hit_len;
      if (kv.available() < need) tree.evict_full(need - kv.available());
      bool ok = kv.alloc(need);
      int32_t s = ok ? states.alloc() : kNoSlot;
      if (ok && s == kNoSlot) {
        tree.evict_state(1);
        s = states.alloc();
      }
      if (ok && s == kNoSlot) {
        kv.free(need);
        ok = false;
      }
      if (ok) {
        const RadixInsert ins = tree.insert(t.data(), n, s, m.hit_len);
        if (ins.state_exists) states.free(s);
      }
      tree.unlock(m.hit_node);
    }
    return hits;
  }

  void tune() {
    tuned_ = true;
    int64_t best_hits = -1;
    for (double a : kGrid) {
      const int64_t h = replay_window(a);
      if (h > best_hits) {
        best_hits = h;
        alpha_ = a;
      }
    }
    window_.clear();
  }

  PolicyContext ctx_;
  double alpha_ = 0.0;
  bool bootstrap_ = false;
  bool tuned_ = false;
  std::deque<std::vector<int32_t>> window_;
  std::vector<double> rec_, eff_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_marconi_policy(const PolicyContext& ctx, double alpha) {
  return std::make_unique<MarconiPolicy>(ctx, alpha);
}

}  // namespace statecheck
