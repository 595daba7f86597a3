#include "experiments/replay_run.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/util/error.h"
#include "core/util/progress.h"
#include "experiments/cache_common.h"

namespace statecheck {

ReplayRun replay_once(const std::string& mode, const EngineConfig& cfg,
                      const std::vector<TraceRequest>& reqs, const std::string& trace_path) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  ReplayRun run;
  run.mode = mode;
  run.config = cfg;
  Engine engine(cfg);
  run.max_running = engine.max_running();
  run.records.resize(reqs.size());
  engine.on_finish = [&](const RequestRecord& r) { run.records[static_cast<size_t>(r.tag)] = r; };
  engine.describe_request = [&](int64_t tag) {
    return fmt::format("the request of {} line {} ({} mode)", trace_path,
                       reqs[static_cast<size_t>(tag)].line, mode);
  };
  Progress progress("replay " + mode + " requests", static_cast<long>(reqs.size()));
  size_t next = 0;
  const double t_base = reqs.empty() ? 0.0 : reqs.front().timestamp_ms;
  auto arrival = [&](size_t i) { return (reqs[i].timestamp_ms - t_base) / 1000.0; };
  for (;;) {
    // Submit what arrives within the next second of simulated time (prompts are built lazily).
    while (next < reqs.size() && (arrival(next) <= engine.now() + 1.0 || engine.pending() == 0)) {
      RequestSpec s;
      s.prompt = trace_prompt_tokens(reqs[next]);
      s.output_len = std::max(1, reqs[next].output_length);
      s.arrival = arrival(next);
      s.tag = static_cast<int64_t>(next);
      engine.submit(std::move(s));
      ++next;
      if (engine.pending() > 0 && arrival(next - 1) > engine.now() + 1.0) break;
    }
    const int64_t done_before = static_cast<int64_t>(engine.records().size());
    if (!engine.step() && next >= reqs.size()) break;
    run.peak_running = std::max(run.peak_running, engine.running());
    const int64_t done = static_cast<int64_t>(engine.records().size()) - done_before;
    if (done > 0) progress.tick(done);
  }
  run.counters = engine.cache().counters();
  run.tree = engine.cache().tree().counters();
  run.retractions = engine.retractions();
  run.sim_s = engine.now();
  run.wall_s = std::chrono::duration<double>(clock::now() - t0).count();
  return run;
}

// What is reported of a run: hit rates (overall and per minute of trace time), median TTFT,
// dequantize loads and evictions.
ModeReplay summarize_run(ReplayRun run, const std::vector<TraceRequest>& reqs, size_t minutes) {
  ModeReplay m;
  const double minute = 60.0;
  const double t_base = reqs.front().timestamp_ms;
  std::vector<double> hit(minutes, 0.0), prompt(minutes, 0.0);
  int64_t cached = 0, pt = 0;
  std::vector<double> ttft;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestRecord& r = run.records[i];
    const size_t b = static_cast<size_t>((reqs[i].timestamp_ms - t_base) / 1000.0 / minute);
    hit[b] += static_cast<double>(r.cached_tokens);
    prompt[b] += static_cast<double>(r.prompt_len);
    cached += r.cached_tokens;
    pt += r.prompt_len;
    ttft.push_back(r.first_token - r.arrival);
  }
  m.hit_rate_per_minute.resize(minutes);
  for (size_t b = 0; b < minutes; ++b)
    m.hit_rate_per_minute[b] = prompt[b] > 0 ? hit[b] / prompt[b] : 0.0;
  std::sort(ttft.begin(), ttft.end());
  m.ttft_p50_s = ttft[ttft.size() / 2];
  m.token_hit_rate = pt > 0 ? static_cast<double>(cached) / static_cast<double>(pt) : 0.0;
  m.dequant_loads = run.counters.cow_loads;
  m.evictions = run.tree.full_evicted_nodes + run.tree.state_evictions;
  m.cached_tokens.resize(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) m.cached_tokens[i] = run.records[i].cached_tokens;
  m.run = std::move(run);
  return m;
}

// The engine config of the options in `mode` with the pools replay sets itself: `active` slots
// and `ckpt` checkpoint slots (0: twice the active ones, as --ckpt-slots 0; bf16 mode has no
// checkpoint pool and ignores them).
EngineConfig replay_config(const Options& o, const ModelConfig& m, CacheMode mode, int64_t active,
                           int64_t ckpt, int64_t kv_tokens) {
  EngineConfig c = options_engine_config(o, m, mode, kv_tokens);
  c.cache.active_slots = static_cast<int32_t>(active);
  c.cache.ckpt_slots = static_cast<int32_t>(ckpt > 0 ? ckpt : 2 * active);
  return c;
}

ReplayTrace load_replay_trace(const std::string& path, BadLines bad_lines, bool quick,
                              int64_t max_tokens) {
  Trace trace = load_mooncake_trace(path, bad_lines, max_tokens);
  for (const TraceIssue& s : trace.skipped)
    fmt::print("replay: skipped {}:{}: {}\n", path, s.line, printable(s.reason));
  for (const auto& [kind, k] : trace.skipped_by_kind)
    if (k.count > static_cast<int64_t>(k.first_lines.size()))
      fmt::print("replay: ... {} lines skipped for {} in all\n", k.count, kind);
  if (trace.reordered)
    fmt::print("replay: timestamps were not in order; requests sorted by timestamp\n");
  if (trace.requests.empty()) fail("{}: no valid requests", path);
  ReplayTrace t{std::move(trace.requests), std::move(trace.skipped), trace.skipped_count};
  const size_t quick_n = 1000;
  if (quick && t.requests.size() > quick_n) t.requests.resize(quick_n);
  return t;
}

// The next-use index of the offline policies (belady, future-count) for the trace: its prompts in
// submission order (engine ids = trace order, as replay_once submits them).
std::shared_ptr<const NextUseIndex> replay_next_use_index(const std::vector<TraceRequest>& reqs,
                                                          int granularity) {
  return std::make_shared<NextUseIndex>(
      reqs.size(), [&](size_t i) { return trace_prompt_tokens(reqs[i]); }, granularity);
}

}  // namespace statecheck
