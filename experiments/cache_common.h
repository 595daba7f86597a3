// Shared parts of the cache experiments (memory, capacity, firecount, replay): for their
// measurements, the pool and engine configuration from the options and the payload shape of a
// model; for their recorders, the HDF5 layout of the cache configuration and counters.
#pragma once

#include <string>
#include <vector>

#include "core/cache/engine.h"
#include "core/io/hdf5_file.h"
#include "core/memory/memory_budget.h"
#include "core/model/model_config.h"
#include "experiments/experiment.h"

namespace statecheck {

// ---- measurement: configuration from the options ----------------------------------------------

// One value head of the model per slot: temporal [1, 1, d_v, d_k] and that head's share of the
// conv channels (conv_dim_shard / HV_shard) x (W - 1). See core/pools/payload.h.
PayloadShape model_payload_shape(const ModelConfig& m);

// State dtypes from --temporal-dtype, --scale-dtype (default: the temporal dtype), --conv-dtype;
// the KV cache in bf16.
StateDtypes options_dtypes(const Options& o);

// Budget inputs from --gpu-mem-gib, --mem-fraction, --weights-gib and, with `with_pools`, the pool
// sizes --active-slots and --ckpt-slots (absent: 2A); without, the active pool comes from SGLang's
// ratio split and there is no checkpoint pool.
BudgetInputs options_budget_inputs(const Options& o, bool with_pools);

// The KV-token budget capacity and firecount run with: b.kv_tokens_correct (state pools, slot 0
// and the checkpoint pool subtracted). Throws statecheck::Error naming the pool sizes, their GiB
// and the memory for caches when the pools leave no KV token.
int64_t kv_tokens_for_pools(const Budget& b, const ModelConfig& m);

// replay's pools at equal memory (experiments/replay.cpp): the bf16 single pool from SGLang's
// ratio split of the memory budget, and the int8 active + checkpoint pools in the same state bytes.
// Throws statecheck::Error naming the model and the slot counts when either is above
// kMaxPoolSlots, and whatever compute_budget throws.
struct ReplayPools {
  Budget bf16;
  Int8Split int8;
};
ReplayPools replay_pools(const Options& o, const ModelConfig& m);

// Cache configuration from the options: --strategy, --active-slots, --ckpt-slots (absent: 2A),
// --chunk-granularity, --track-interval, --no-payload, the state dtypes; `mode` (bf16 or int8,
// which each experiment sets itself) and `kv_tokens` as given. The values are those the command
// line checked (experiments/options.h); an experiment that sets a pool itself overrides it in the
// result.
CacheConfig options_cache_config(const Options& o, const ModelConfig& m, CacheMode mode,
                                 int64_t kv_tokens);

// marconi's FLOP and byte model of `m` (core/cache/eviction_policy.h FlopCosts), per GPU at the
// model's TP: dense = 2 x params_billion x 1e9 / TP FLOPs per token (every weight once; for a
// mixture of experts this counts all experts, an upper bound, since the config gives no active
// count); linear = 6 x L_lin x HV_shard x d_k x d_v per token (decay, k^T S, the rank-1 update and
// the q read of the gated delta rule); attention = 4 x L_full x KV heads per GPU x head_dim per
// (token, earlier position) (QK^T and PV; query heads are not in the config, so one per KV head,
// a lower bound); state bytes = one active slot, KV bytes per token from the memory budget.
FlopCosts model_flop_costs(const ModelConfig& m, const StateDtypes& d);

// The K grid of capacity: --k-list when given; else every `step` from 128 (step 32, quick 128)
// up to the larger of 768 and 1.25 x the checkpoint pool rounded up to the step, so that the
// sweep always reaches past the checkpoint pool (the step grows with the pool so that a sweep
// has at most about 24 points, quick 8).
std::vector<int> capacity_k_grid(const Options& o, int ckpt_slots);

// The knee of a capacity sweep as the user reads it: "K" when inside the grid, "beyond the sweep
// (> last K)" when reuse holds up to the grid's last K, "none (no reuse at K = first)" for 0.
std::string describe_knee(int knee, const std::vector<int>& Ks);

// Engine configuration: the cache above plus --chunked-prefill and --max-running.
EngineConfig options_engine_config(const Options& o, const ModelConfig& m, CacheMode mode,
                                   int64_t kv_tokens);

// ---- recording ----------------------------------------------------------------------------------

// What the copy-on-write loads of a cache configured by `c` are, as a counter name:
// "dequantizes" (int8 checkpoint pool), "slot_copies" (bf16 single pool) or
// "restores_without_copy" (KV-only matching: a state counted as restored, nothing copied).
const char* load_counter_name(const CacheConfig& c);

// "payload" or "bookkeeping": what the pools held in a run (written into every result file).
const char* payload_mode_name(bool payload);

// Writes the cache and tree counters as scalar datasets under `group` (units: count / tokens).
void write_cache_counters(H5Writer& file, const std::string& group, const CacheCounters& c,
                          const RadixCounters& t);

// Writes the cache configuration as attributes of `group`.
void write_cache_config(H5Writer& file, const std::string& group, const CacheConfig& c,
                        int max_running, int64_t chunked_prefill);

}  // namespace statecheck
