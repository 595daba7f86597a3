// Shared parts of the cache experiments (memory, capacity, firecount, replay): for their
// measurements, the pool and engine configuration from the options and the payload shape of a
// model; for their recorders, the HDF5 layout of the cache configuration and counters.
#pragma once

#include <string>

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
// sizes --active-slots and --ckpt-slots (0: 2A); without, the active pool comes from SGLang's ratio
// split and there is no checkpoint pool.
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

// Cache configuration from the options: --strategy, --active-slots, --ckpt-slots (0: 2A),
// --chunk-granularity, --track-interval, --no-payload, the state dtypes; `mode` (bf16 or int8,
// which each experiment sets itself) and `kv_tokens` as given. The values are those the command
// line checked (experiments/options.h); an experiment that sets a pool itself overrides it in the
// result.
CacheConfig options_cache_config(const Options& o, const ModelConfig& m, CacheMode mode,
                                 int64_t kv_tokens);

// Engine configuration: the cache above plus --chunked-prefill and --max-running.
EngineConfig options_engine_config(const Options& o, const ModelConfig& m, CacheMode mode,
                                   int64_t kv_tokens);

// ---- recording ----------------------------------------------------------------------------------

// "payload" or "bookkeeping": what the pools held in a run (written into every result file).
const char* payload_mode_name(bool payload);

// Writes the cache and tree counters as scalar datasets under `group` (units: count / tokens).
void write_cache_counters(H5Writer& file, const std::string& group, const CacheCounters& c,
                          const RadixCounters& t);

// Writes the cache configuration as attributes of `group`.
void write_cache_config(H5Writer& file, const std::string& group, const CacheConfig& c,
                        int max_running, int64_t chunked_prefill);

}  // namespace statecheck
