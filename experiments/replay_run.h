// One replay of a request trace through the engine, shared by the replay experiment
// (experiments/replay.cpp) and its budget sweep (experiments/replay_budget_sweep.cpp): the
// trace as replayed, the engine config of a mode, the run and what is reported of it, and the
// next-use index of the offline policies. Errors: statecheck::Error as each function states.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cache/engine.h"
#include "core/cache/next_use_index.h"
#include "core/workloads/mooncake_trace.h"
#include "experiments/experiment.h"

namespace statecheck {

// One mode's run of the trace: its engine config and per-request records (by trace index), the
// cache and tree counters, wall and simulated time (s), retractions and the running cap / peak.
struct ReplayRun {
  std::string mode;
  EngineConfig config;
  std::vector<RequestRecord> records;  // by trace index
  CacheCounters counters;
  RadixCounters tree;
  double wall_s = 0.0;
  double sim_s = 0.0;
  int64_t retractions = 0;
  int max_running = 0;
  int peak_running = 0;
};

// Replays `reqs` (arrival order) through a fresh engine of `cfg`, submitting what arrives
// within the next second of simulated time; `trace_path` names the trace in errors. `mode` names
// the run (progress, errors).
ReplayRun replay_once(const std::string& mode, const EngineConfig& cfg,
                      const std::vector<TraceRequest>& reqs, const std::string& trace_path);

// One mode's replay of the trace and what is reported of it.
struct ModeReplay {
  ReplayRun run;
  double token_hit_rate = 0.0;  // sum(cached tokens) / sum(prompt tokens)
  double ttft_p50_s = 0.0;      // median time to first token (cost model), s
  // The dequantize fire count (docs/cache_model.md): the copy-on-write loads, int8 dequantizes in
  // int8 mode and slot copies in bf16 mode.
  int64_t dequant_loads = 0;
  int64_t evictions = 0;               // nodes evicted by evict_full + states by evict_state
  std::vector<int64_t> cached_tokens;  // per trace request
  // Per minute of trace time: token hit rate of the requests arriving in it (0 without any).
  std::vector<double> hit_rate_per_minute;
};

// What is reported of a run: hit rates (overall and per minute of trace time), median TTFT,
// dequantize loads and evictions.
ModeReplay summarize_run(ReplayRun run, const std::vector<TraceRequest>& reqs, size_t minutes);

// The engine config of the options in `mode` with the pools replay sets itself: `active` slots
// and `ckpt` checkpoint slots (0: twice the active ones, as --ckpt-slots 0; bf16 mode has no
// checkpoint pool and ignores them).
EngineConfig replay_config(const Options& o, const ModelConfig& m, CacheMode mode, int64_t active,
                           int64_t ckpt, int64_t kv_tokens);

// The trace as replayed: its valid requests in arrival order (quick: the first 1,000) and the lines
// skipped. Prints the skipped lines kept (the first few of each kind), the count of each kind and
// a reordering. Throws statecheck::Error for a trace that cannot be read, is over
// --trace-max-tokens or has no valid request.
struct ReplayTrace {
  std::vector<TraceRequest> requests;
  std::vector<TraceIssue> skipped;
  int64_t skipped_count = 0;
};
ReplayTrace load_replay_trace(const std::string& path, BadLines bad_lines, bool quick,
                              int64_t max_tokens);

// The next-use index of the offline policies (belady, future-count) for the trace: its prompts in
// submission order (engine ids = trace order, as replay_once submits them).
std::shared_ptr<const NextUseIndex> replay_next_use_index(const std::vector<TraceRequest>& reqs,
                                                          int granularity);

// replay --budget-sweep (replay_budget_sweep.cpp; docs/cache_policies.md, "Budget sweep").
void replay_budget_sweep(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);

}  // namespace statecheck
