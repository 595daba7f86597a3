// Eviction policies of the cache model: which cached entry goes when the tree must free space
// (docs/cache_policies.md).
//
// A policy never decides *when* space is needed: the radix tree (core/cache/radix_tree.h) asks
// it for a victim only where it would otherwise take the tail of an LRU list, and hands it the
// candidates the engine's rules allow, in LRU order (least recent first):
//   EvictPool::kv     unlocked leaves of the full list (evict_full: KV and state freed together);
//   EvictPool::state  state-unlocked nodes of the state list (evict_state; an internal node
//                     becomes a tombstone, a leaf is evicted fully).
// Locks, tombstones, leaf-only KV eviction and both LRU lists stay the tree's: a policy only
// picks an index into the candidate list, and keeps its own per-node bookkeeping from the events
// below. `lru` is the tree's own code path (SGLang's behaviour, bit for bit); every other policy
// goes through choose().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace statecheck {

class RadixTree;
class NextUseIndex;

enum class PolicyKind { lru, lru_used, marconi, s3fifo, belady, bip, future_count, gdsf };

// "lru" | "lru-used" | "marconi" | "s3fifo" | "belady" | "bip" | "future-count" | "gdsf".
const char* policy_name(PolicyKind p);
// Whether the policy reads the future (belady, future-count): it needs the workload's next-use
// index, is a bound rather than a deployable policy, and is never the "best online" policy.
bool policy_is_offline(PolicyKind p);
// Parses one name; statecheck::Error listing the valid names otherwise.
PolicyKind parse_policy(const std::string& s);
// Parses a comma list ("lru,s3fifo"): one or more names, no repeats; statecheck::Error naming the
// bad entry and its index otherwise.
std::vector<PolicyKind> parse_policy_list(const std::string& s);
// Every policy, in the order above.
std::vector<PolicyKind> all_policies();

enum class EvictPool { kv, state };

// The compute a prefix hit saves and the bytes a cached entry holds, for marconi's FLOP
// efficiency (Pan et al., MLSys 2025, arXiv 2411.19379, section 4.2). FLOPs of a prefill of d
// tokens: d * (dense_per_token + linear_per_token) + attention_per_pair * d * (d + 1) / 2, the
// last term the full-attention layers' QK^T and PV over every earlier position. Filled from the
// model config by the experiments (experiments/cache_common.h model_flop_costs).
struct FlopCosts {
  double dense_per_token = 0.0;     // FLOPs/token of the weight matmuls (2 x parameters)
  double linear_per_token = 0.0;    // FLOPs/token of the gated-delta state update, all layers
  double attention_per_pair = 0.0;  // FLOPs per (token, earlier position), all full layers
  double state_bytes = 1.0;         // bytes of one cached state slot
  double kv_bytes_per_token = 1.0;  // bytes of one token's KV
  // FLOPs of a prefill of `d` tokens from empty (formula above).
  double prefill_flops(int64_t d) const;
};

// What a policy is built from (StateCache fills it from CacheConfig).
struct PolicyContext {
  FlopCosts flops;
  int64_t kv_capacity = 0;     // KV pool tokens
  int32_t state_capacity = 0;  // slots cached states come from (bf16: A, int8: C)
  int chunk_granularity = 64;  // Cg
  // belady, future-count: the next-use index of the workload (required); others ignore it.
  std::shared_ptr<const NextUseIndex> next_use;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual PolicyKind kind() const = 0;

  // Whether insert's walk down existing nodes refreshes their states in the state list (SGLang
  // before PR #31643: yes; lru-used: no, a new state still enters at the most recent end).
  virtual bool refresh_walked_states_on_insert() const { return true; }

  // A request with engine id `id` (submission order) matches tokens[0, n) at admission.
  virtual void on_request(int64_t id, const int32_t* tokens, int64_t n) {
    (void)id, (void)tokens, (void)n;
  }
  // Node `node` received a state; tokens[0, depth) is its prefix (depth = the node's depth).
  virtual void on_state_added(const RadixTree& tree, int32_t node, const int32_t* tokens,
                              int64_t depth) {
    (void)tree, (void)node, (void)tokens, (void)depth;
  }
  // A match hit the state of `node`.
  virtual void on_hit(const RadixTree& tree, int32_t node) { (void)tree, (void)node; }
  // The state of `node` is about to be freed (eviction or flush).
  virtual void on_state_removed(const RadixTree& tree, int32_t node) { (void)tree, (void)node; }

  // Index of the victim among `candidates` (node ids, least recent first, never empty).
  virtual size_t choose(const RadixTree& tree, const std::vector<int32_t>& candidates,
                        EvictPool pool) = 0;
};

// The policy `kind` for a cache described by `ctx`. lru returns nullptr (the tree's own LRU code
// path). Throws statecheck::Error for an offline policy without a next-use index.
std::unique_ptr<EvictionPolicy> make_eviction_policy(PolicyKind kind, const PolicyContext& ctx);

// Factories of the individual policies (one file each).
std::unique_ptr<EvictionPolicy> make_lru_used_policy();
// alpha < 0: bootstrap (alpha 0 until the first eviction, then grid-searched); else fixed.
std::unique_ptr<EvictionPolicy> make_marconi_policy(const PolicyContext& ctx, double alpha);
std::unique_ptr<EvictionPolicy> make_s3fifo_policy(const PolicyContext& ctx);
std::unique_ptr<EvictionPolicy> make_belady_policy(const PolicyContext& ctx);
std::unique_ptr<EvictionPolicy> make_bip_policy();
std::unique_ptr<EvictionPolicy> make_future_count_policy(const PolicyContext& ctx);
std::unique_ptr<EvictionPolicy> make_gdsf_policy();

// 64-bit FNV-1a hash of tokens[0, n) (the prefix key of s3fifo's ghost queue and the next-use
// index).
uint64_t token_prefix_hash(const int32_t* tokens, int64_t n);

}  // namespace statecheck
