#include "experiments/cache_common.h"

#include <algorithm>

#include "core/util/error.h"

namespace statecheck {

PayloadShape model_payload_shape(const ModelConfig& m) {
  PayloadShape s;
  s.temporal = StateShape{1, 1, m.head_v_dim, m.head_k_dim};
  s.conv_elems = static_cast<size_t>(m.conv_dim_shard() / std::max(1, m.value_heads_shard())) *
                 static_cast<size_t>(m.conv_width - 1);
  return s;
}

StateDtypes options_dtypes(const Options& o) {
  StateDtypes d;
  d.temporal = o.temporal_dtype;
  d.scale = o.scale_dtype_or_default();
  d.conv = o.conv_dtype;
  return d;
}

BudgetInputs options_budget_inputs(const Options& o, bool with_pools) {
  BudgetInputs bi;
  bi.gpu_mem_gib = o.gpu_mem_gib;
  bi.mem_fraction = o.mem_fraction;
  bi.weights_gib = o.weights_gib;
  if (with_pools) {
    bi.active_slots = o.active_slots;
    bi.ckpt_slots = o.ckpt_slots > 0 ? o.ckpt_slots : 2 * o.active_slots;
  }
  return bi;
}

int64_t kv_tokens_for_pools(const Budget& b, const ModelConfig& m) {
  if (b.kv_tokens_correct < 1)
    fail(
        "memory budget: model {} at TP {}: the state pools ({} active slots, {:.2f} GiB; {} "
        "checkpoint slots, {:.2f} GiB) leave no memory for the KV cache ({:.2f} GiB for caches, "
        "short by {:.2f} GiB); lower --active-slots / --ckpt-slots or raise --gpu-mem-gib",
        m.name, m.tp, b.active.slots, b.active.total.total() / kGiB, b.checkpoint.slots,
        b.checkpoint.total.total() / kGiB, b.rest_bytes / kGiB,
        std::max(0.0, static_cast<double>(b.active.total.total() + b.checkpoint.total.total()) -
                          b.rest_bytes) /
            kGiB);
  return b.kv_tokens_correct;
}

CacheConfig options_cache_config(const Options& o, const ModelConfig& m, CacheMode mode,
                                 int64_t kv_tokens) {
  const StateDtypes d = options_dtypes(o);
  CacheConfig c;
  c.mode = mode;
  c.strategy = o.strategy;
  c.active_slots = o.active_slots;
  c.ckpt_slots = o.ckpt_slots > 0 ? o.ckpt_slots : 2 * o.active_slots;
  c.kv_tokens = kv_tokens;
  c.chunk_granularity = o.chunk_granularity;
  c.track_interval = o.track_interval;
  c.page_size = o.page_size;
  c.payload = !o.no_payload;
  c.shape = model_payload_shape(m);
  c.temporal = d.temporal;
  c.scale = d.scale;
  c.policy = o.policies.empty() ? PolicyKind::lru : o.policies.front();
  c.flops = model_flop_costs(m, d);
  return c;
}

FlopCosts model_flop_costs(const ModelConfig& m, const StateDtypes& d) {
  FlopCosts f;
  f.dense_per_token = 2.0 * m.params_billion * 1e9 / std::max(1, m.tp);
  f.linear_per_token = 6.0 * m.linear_layer_count() * m.value_heads_shard() *
                       static_cast<double>(m.head_k_dim) * m.head_v_dim;
  const int head_dim = m.full_attention.kind == FullAttentionSpec::Kind::mha
                           ? m.full_attention.head_dim
                           : m.full_attention.kv_lora_rank + m.full_attention.rope_dim;
  f.attention_per_pair = 4.0 * m.full_layer_count() * m.kv_heads_shard() * head_dim;
  f.state_bytes = static_cast<double>(active_slot_bytes(m, d).total());
  f.kv_bytes_per_token = static_cast<double>(std::max<uint64_t>(1, kv_bytes_per_token(m, d)));
  return f;
}

std::vector<int> capacity_k_grid(const Options& o, int ckpt_slots) {
  if (!o.k_list.empty()) return o.k_list;
  int step = o.quick ? 128 : 32;
  const int target = std::max(768, (ckpt_slots * 5 + 3) / 4);
  const int max_points = o.quick ? 8 : 24;
  while ((target - 128) / step + 1 > max_points) step *= 2;
  const int last = 128 + (target - 128 + step - 1) / step * step;
  std::vector<int> ks;
  for (int k = 128; k <= last; k += step) ks.push_back(k);
  return ks;
}

std::string describe_knee(int knee, const std::vector<int>& Ks) {
  if (Ks.empty()) return "none";
  if (knee == 0) return fmt::format("none (no reuse at K = {})", Ks.front());
  if (knee == Ks.back()) return fmt::format("beyond the sweep (> {})", Ks.back());
  return fmt::format("{}", knee);
}

EngineConfig options_engine_config(const Options& o, const ModelConfig& m, CacheMode mode,
                                   int64_t kv_tokens) {
  EngineConfig e;
  e.cache = options_cache_config(o, m, mode, kv_tokens);
  e.chunked_prefill = o.chunked_prefill;
  e.max_running = o.max_running;
  return e;
}

const char* load_counter_name(const CacheConfig& c) {
  if (c.kv_only_match) return "restores_without_copy";
  return c.mode == CacheMode::int8 ? "dequantizes" : "slot_copies";
}

const char* payload_mode_name(bool payload) {
  return payload ? "payload" : "bookkeeping";
}

void write_cache_counters(H5Writer& f, const std::string& g, const CacheCounters& c,
                          const RadixCounters& t) {
  auto w = [&](const char* name, int64_t v, const char* units, const char* what) {
    f.write_scalar(g + "/" + name, static_cast<double>(v), units, what);
  };
  w("admissions", c.admissions, "requests", "requests admitted (a retracted request counts again)");
  w("prompt_tokens", c.prompt_tokens, "tokens", "prompt tokens of admitted requests");
  w("hit_tokens", c.hit_tokens, "tokens", "cached tokens reused at admission (hit length)");
  w("state_hits", c.state_hits, "requests", "admissions with a hit length > 0");
  w("cow_loads", c.cow_loads, "loads",
    "copy-on-write loads (bf16: slot copies, int8: dequantizes)");
  w("chunk_copies", c.chunk_copies, "copies",
    "no_buffer bf16: live state copied to a new slot at a chunk end");
  w("tracks", c.tracks, "copies", "extra_buffer: states copied into a tracking slot");
  w("quantizes", c.quantizes, "quantizes",
    "int8 donates (active slot quantized into a checkpoint slot)");
  w("wasted_quantizes", c.wasted_quantizes, "quantizes",
    "quantizes whose state already existed in the tree");
  w("inserted_states", c.inserted_states, "states", "states that entered the tree");
  w("duplicate_states", c.duplicate_states, "states",
    "inserts that found the state already cached");
  w("skipped_donations", c.skipped_donations, "states",
    "caching skipped because no slot could be had");
  w("empty_finishes", c.empty_finishes, "requests", "finished requests with nothing new to cache");
  w("alloc_failures", c.alloc_failures, "allocations",
    "slot or KV allocations that failed after evicting");
  w("cow_fallbacks", c.cow_fallbacks, "requests",
    "hits degraded to a miss (no active slot for the copy)");
  w("cancelled_matches", c.cancelled_matches, "requests",
    "matched requests not admitted (slot returned)");
  w("restore_checks", c.restore_checks, "states",
    "restored states compared bit for bit (payload mode)");
  w("matches", t.matches, "calls", "radix match calls (admissions and re-matches after inserts)");
  w("full_evicted_nodes", t.full_evicted_nodes, "nodes", "nodes deleted by evict_full");
  w("full_evicted_tokens", t.full_evicted_tokens, "tokens", "KV tokens freed by evict_full");
  w("state_evictions", t.state_evictions, "states", "states freed by evict_state");
  w("tombstones_created", t.tombstones_created, "nodes",
    "tombstones created by splits and state evictions");
  w("splits", t.splits, "nodes", "node splits");
}

void write_cache_config(H5Writer& f, const std::string& g, const CacheConfig& c, int max_running,
                        int64_t chunked_prefill) {
  f.attr(g, "mode", std::string(cache_mode_name(c.mode)));
  f.attr(g, "strategy", std::string(cache_strategy_name(c.strategy)));
  f.attr(g, "pool_contents", std::string(payload_mode_name(c.payload)));
  f.attr(g, "active_slots", static_cast<int64_t>(c.active_slots));
  f.attr(g, "ckpt_slots", static_cast<int64_t>(c.mode == CacheMode::int8 ? c.ckpt_slots : 0));
  f.attr(g, "kv_tokens", static_cast<int64_t>(c.kv_tokens));
  f.attr(g, "chunk_granularity", static_cast<int64_t>(c.chunk_granularity));
  f.attr(g, "track_interval", static_cast<int64_t>(c.track_interval));
  f.attr(g, "tracking_slots_per_request", static_cast<int64_t>(c.tracking_slots()));
  f.attr(g, "max_running", static_cast<int64_t>(max_running));
  f.attr(g, "chunked_prefill", static_cast<int64_t>(chunked_prefill));
  f.attr(g, "temporal_dtype", std::string(dtype_name(c.temporal)));
  f.attr(g, "scale_dtype", std::string(dtype_name(c.scale)));
}

}  // namespace statecheck
