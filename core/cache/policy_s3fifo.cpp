// s3fifo (Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023), adapted to
// the tree's candidate rule (docs/cache_policies.md):
// - every cached state is in one of two FIFO queues, S (small, new entries) or M (main), with a
//   hit counter capped at 3; a ghost queue G remembers the prefixes (token_prefix_hash of the
//   state's prefix) of entries evicted from S, at most as many as the state capacity;
// - a new state enters M when its prefix is in G (it was evicted too early), else S;
// - a victim is needed: from S while S holds at least 10% of the cached states (or M has no
//   candidate), else from M. From S the oldest *candidate* is taken: hit at least once -> moved
//   to M (counter reset), look again; else evicted, its prefix into G. From M the oldest
//   candidate: counter > 0 -> counter - 1 and back to M's head, look again; else evicted.
// The adaptation: the queues are walked over the candidates only (locked states and internal
// nodes the KV eviction may not take are skipped in place, keeping their queue position), and a
// state promoted on its first hit (the paper promotes on more than one access; a cached state's
// reuse is rarer than a web object's). Both evictions (KV leaves and states) use the same queues.
#include <deque>
#include <unordered_set>

#include "core/cache/eviction_policy.h"
#include "core/cache/radix_tree.h"

namespace statecheck {

namespace {

class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(const PolicyContext& ctx)
      : ghost_capacity_(std::max<int64_t>(1, ctx.state_capacity)) {}
  PolicyKind kind() const override { return PolicyKind::s3fifo; }

  void on_state_added(const RadixTree&, int32_t node, const int32_t* tokens,
                      int64_t depth) override {
    Meta& m = meta(node);
    m.hash = token_prefix_hash(tokens, depth);
    m.freq = 0;
    m.seq = ++seq_;
    m.live = true;
    auto g = ghost_.find(m.hash);
    if (g != ghost_.end()) {
      ghost_.erase(g);
      m.main = true;
      ++main_count_;
    } else {
      m.main = false;
      ++small_count_;
    }
  }

  void on_hit(const RadixTree&, int32_t node) override {
    Meta& m = meta(node);
    if (m.live && m.freq < 3) ++m.freq;
  }

  void on_state_removed(const RadixTree&, int32_t node) override {
    Meta& m = meta(node);
    if (!m.live) return;
    m.live = false;
    if (m.main) {
      --main_count_;
    } else {
      --small_count_;
      remember(m.hash);  // evicted from S: into the ghost queue
    }
  }

  size_t choose(const RadixTree&, const std::vector<int32_t>& candidates, EvictPool) override {
    for (;;) {
      const int64_t total = small_count_ + main_count_;
      const bool from_small = 10 * small_count_ >= total;
      size_t s = oldest(candidates, false), m = oldest(candidates, true);
      const size_t none = candidates.size();
      if (s == none && m == none) return 0;  // candidates without a state record: least recent
      if ((from_small && s != none) || m == none) {
        Meta& x = meta(candidates[s]);
        if (x.freq >= 1) {  // promote to M, look again
          x.main = true;
          x.freq = 0;
          x.seq = ++seq_;
          --small_count_;
          ++main_count_;
          continue;
        }
        return s;
      }
      Meta& x = meta(candidates[m]);
      if (x.freq > 0) {  // second chance in M
        --x.freq;
        x.seq = ++seq_;
        continue;
      }
      return m;
    }
  }

 private:
  struct Meta {
    uint64_t hash = 0;
    uint64_t seq = 0;  // queue position: smaller = older
    int freq = 0;
    bool main = false;
    bool live = false;
  };

  Meta& meta(int32_t node) {
    if (static_cast<size_t>(node) >= meta_.size()) meta_.resize(static_cast<size_t>(node) + 1);
    return meta_[static_cast<size_t>(node)];
  }

  // Index of the oldest live candidate in queue M (`main`) or S; candidates.size() when none.
  size_t oldest(const std::vector<int32_t>& candidates, bool main) {
    size_t best = candidates.size();
    uint64_t best_seq = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const Meta& x = meta(candidates[i]);
      if (!x.live || x.main != main) continue;
      if (best == candidates.size() || x.seq < best_seq) {
        best = i;
        best_seq = x.seq;
      }
    }
    return best;
  }

  void remember(uint64_t hash) {
    if (!ghost_.insert(hash).second) return;
    ghost_order_.push_back(hash);
    while (static_cast<int64_t>(ghost_order_.size()) > ghost_capacity_) {
      ghost_.erase(ghost_order_.front());
      ghost_order_.pop_front();
    }
  }

  int64_t ghost_capacity_;
  std::vector<Meta> meta_;  // [node id]
  std::unordered_set<uint64_t> ghost_;
  std::deque<uint64_t> ghost_order_;
  uint64_t seq_ = 0;
  int64_t small_count_ = 0, main_count_ = 0;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_s3fifo_policy(const PolicyContext& ctx) {
  return std::make_unique<S3FifoPolicy>(ctx);
}

}  // namespace statecheck
