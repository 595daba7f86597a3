// Experiment `replay`: a Mooncake-format request trace through the pools (docs/cache_model.md):
// bf16 single pool vs int8 checkpoint pool at equal memory vs an unbounded cache.
//
// Trace: --trace FILE (default data/traces/mooncake_conversation_trace.jsonl, 12,031 requests,
// ~145M prompt tokens over 59 minutes); --trace-bad-lines reject|skip. 512-token blocks become
// deterministic token ids (core/workloads/mooncake_trace.h); generated tokens get unique ids.
// Arrivals at the trace timestamps; concurrency bounded by the pools and the running cap; time by
// the engine's cost model. --quick replays the first 1,000 requests.
//
// Memory (core/memory): --model (qwen3.5-35b-a3b, TP 4), --gpu-mem-gib (141 GB), --mem-fraction,
// --weights-gib, --temporal-dtype (fp32). The bf16 run gets SGLang's split: the active pool A from
// mamba_full_memory_ratio = 0.9 (47% of the cache memory), the KV pool the rest (correct
// accounting). The int8 run gets the same KV pool and the same state bytes, split into an active
// pool A' and a checkpoint pool C = 2 A' (SGLang's default checkpoint size). --active-slots /
// --ckpt-slots are not used here.
//
// Two unbounded runs, both with pools larger than the trace can fill (bookkeeping only) and the
// bf16 run's running cap:
//   unbounded        the unbounded prefix cache: every cached prefix is restorable (SGLang's
//                    skip_mamba_match, KV-only matching; the whole sequence is cached, no_buffer
//                    insertion). Its hit rate is what the trace offers through the scheduler and
//                    must match the trace's own prefix reuse: the check of parser, token mapping
//                    and tree.
//   unbounded_engine the engine's own policy (--strategy, Cg) without a memory bound: what the
//                    caching policy can reach on this trace. Under extra_buffer a conversation's
//                    next turn shares only the previous prompt's full 512-token blocks, while the
//                    previous turn cached its state at its Cg-aligned prompt end inside the partial
//                    last block; the next turn therefore splits there, leaves a tombstone, hits an
//                    older state and only records the branching point for the turn after it.
//
// Reported per mode: token hit rate = sum(cached tokens) / sum(prompt tokens), state hits
// (admissions with a hit), the copy-on-write loads under their own name (int8 dequantizes, bf16
// slot copies, KV-only restores without a copy; load_counter_name), evictions (nodes evicted by
// evict_full + states evicted by evict_state), hit rate per minute of trace time, wall time. The
// trace's own prefix reuse (block and token granularity, infinite cache) is recomputed as a parser
// check, and a match+insert benchmark replays every prompt through a bare radix tree.
//
// --policy: every policy other than lru replays the four bounded modes again ("<policy>.<mode>");
// with belady each policy's gap to it is reported. --budget-sweep: the trace at a range of cache
// memories for every policy and both formats (budget_sweep below; docs/cache_policies.md).
//
// measure_replay loads the trace, sizes the pools, runs every mode and the benchmark
// (ReplayResult), printing the trace and the pool sizes as it starts; record_replay writes the
// result file's datasets and the summary and prints one line per mode and the benchmark's.
#include <chrono>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "core/cache/engine.h"
#include "core/memory/memory_budget.h"
#include "core/util/error.h"
#include "core/util/progress.h"
#include "core/workloads/mooncake_trace.h"
#include "experiments/cache_common.h"
#include "experiments/experiment.h"

namespace statecheck {

namespace {

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

// match + insert of every prompt through a bare radix tree with unbounded pools (no scheduler):
// the throughput of the tree itself. Returns tokens / s over prompt tokens.
double bench_match_insert(const std::vector<TraceRequest>& reqs, double* seconds, int64_t* tokens) {
  int64_t total = 0;
  for (const auto& r : reqs) total += r.input_length;
  KvPool kv(total + 1);
  SlotAllocator states("bench states", static_cast<int32_t>(reqs.size()) + 1);
  RadixTree tree(kv, states, 64);
  double spent = 0.0;
  for (const auto& r : reqs) {
    const std::vector<int32_t> t = trace_prompt_tokens(r);
    const auto t0 = std::chrono::steady_clock::now();
    const RadixMatch m = tree.match(t.data(), static_cast<int64_t>(t.size()) - 1);
    kv.alloc(static_cast<int64_t>(t.size()));
    const int32_t s = states.alloc();
    const RadixInsert ins = tree.insert(t.data(), static_cast<int64_t>(t.size()), s, 0);
    if (ins.state_exists) states.free(s);
    spent += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    (void)m;
  }
  *seconds = spent;
  *tokens = total;
  return spent > 0 ? static_cast<double>(total) / spent : 0.0;
}

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

// The match + insert benchmark (bench_match_insert).
struct MatchInsertBench {
  double seconds = 0.0;       // time in match + insert
  int64_t tokens = 0;         // prompt tokens
  double tokens_per_s = 0.0;  // tokens / seconds (0 when no time was measured)
};

struct ReplayResult {
  std::string trace;  // path of the trace file
  BadLines bad_lines = BadLines::reject;
  std::vector<TraceIssue> skipped;  // the first skipped lines of each kind (--trace-bad-lines skip)
  int64_t skipped_count = 0;        // malformed lines skipped in all
  int64_t requests = 0;             // replayed (quick: the first 1,000)
  int64_t prompt_tokens = 0;
  TraceReuse reuse;                 // the trace's own prefix reuse, infinite cache
  double cache_memory_bytes = 0.0;  // memory left for caches per GPU
  uint64_t state_memory_bytes = 0;  // state-pool memory of both bounded runs
  size_t minutes = 0;               // minutes of trace time (columns of hit_rate_per_minute)
  // bf16, int8, unbounded, unbounded_engine, state_bound_bf16, state_bound_int8.
  std::vector<ModeReplay> modes;
  MatchInsertBench bench;

  const ModeReplay& mode(const std::string& name) const {
    for (const ModeReplay& r : modes)
      if (r.run.mode == name) return r;
    fail("replay: no mode {}", name);
  }
};

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

// belady's next-use index of the trace: its prompts in submission order (engine ids = trace
// order, as replay_once submits them).
std::shared_ptr<const NextUseIndex> replay_next_use_index(const std::vector<TraceRequest>& reqs,
                                                          int granularity) {
  return std::make_shared<NextUseIndex>(
      reqs.size(), [&](size_t i) { return trace_prompt_tokens(reqs[i]); }, granularity);
}

// The engine configs of the six modes, in the order of ReplayResult::modes (see the file comment),
// for the trace `reqs` of `tokens` prompt + output tokens. Sets the memory fields of `res` and
// prints the pool sizes. Throws whatever replay_pools throws.
std::vector<std::pair<std::string, EngineConfig>> replay_modes(
    const Options& o, const ModelConfig& m, const std::vector<TraceRequest>& reqs, int64_t tokens,
    ReplayResult& res) {
  const StateDtypes dt = options_dtypes(o);
  const ReplayPools pools = replay_pools(o, m);
  const Budget& bf16_budget = pools.bf16;
  const int64_t A_bf16 = bf16_budget.active.slots;
  const Int8Split& split = pools.int8;
  const int64_t kv_tokens = bf16_budget.kv_tokens_correct;
  res.cache_memory_bytes = bf16_budget.rest_bytes;
  res.state_memory_bytes = split.budget;
  fmt::print(
      "replay: memory per GPU: {:.2f} GiB for caches; bf16: {} active slots ({:.2f} GiB); int8: {} "
      "active + {} "
      "checkpoint slots ({:.2f} GiB); KV {} tokens ({:.2f} GiB) in both\n",
      bf16_budget.rest_bytes / kGiB, A_bf16, bf16_budget.active.total.total() / kGiB, split.active,
      split.ckpt, split.bytes / kGiB, kv_tokens,
      kv_tokens * static_cast<double>(bf16_budget.kv_bytes_per_token) / kGiB);

  const EngineConfig bf16_cfg = replay_config(o, m, CacheMode::bf16, A_bf16, 0, kv_tokens);
  const EngineConfig int8_cfg =
      replay_config(o, m, CacheMode::int8, split.active, split.ckpt, kv_tokens);
  // Unbounded: every pool larger than the trace can fill; bookkeeping only; bf16's running cap.
  const int bf16_cap = bf16_cfg.resolved_max_running();
  int64_t max_states = 0;  // at most: one per prefill chunk, one after prefill, one at finish
  for (const auto& r : reqs) max_states += r.input_length / std::max(1, o.chunked_prefill) + 3;
  auto unbounded = [&](CacheStrategy strategy, bool kv_only) {
    EngineConfig c =
        replay_config(o, m, CacheMode::int8, int64_t{bf16_cap} * 3 + 8,
                      std::min<int64_t>(max_states, (int64_t{1} << 31) - 2), tokens + 1);
    c.cache.strategy = strategy;
    // The KV-only reference under no_buffer measures what the trace offers: on a page-1 tree
    // (no_buffer needs page 1, as in SGLang).
    if (strategy == CacheStrategy::no_buffer) c.cache.page_size = 1;
    c.cache.payload = false;
    c.max_running = bf16_cap;
    c.cache.kv_only_match = kv_only;
    return c;
  };
  // State-bound point: the PR benchmark's server set-up (--max-mamba-cache-size 256) with the
  // running cap fixed at 32 for both modes, so the state pools bind before the KV pool does. int8
  // gets the same state bytes: 32 x 3 active slots, the rest as checkpoint slots.
  const int sb_running = 32;
  const int64_t sb_active = 256;
  const Int8Split sb_split =
      int8_split_for_running(sb_active, int64_t{sb_running} * bf16_cfg.cache.slots_per_request(),
                             active_slot_bytes(m, dt), checkpoint_slot_bytes(m, dt));
  EngineConfig sb_bf16 = replay_config(o, m, CacheMode::bf16, sb_active, 0, kv_tokens);
  EngineConfig sb_int8 =
      replay_config(o, m, CacheMode::int8, sb_split.active, sb_split.ckpt, kv_tokens);
  sb_bf16.max_running = sb_int8.max_running = sb_running;
  std::vector<std::pair<std::string, EngineConfig>> modes = {
      {"bf16", bf16_cfg},
      {"int8", int8_cfg},
      {"unbounded", unbounded(CacheStrategy::no_buffer, true)},
      {"unbounded_engine", unbounded(o.strategy, false)},
      {"state_bound_bf16", sb_bf16},
      {"state_bound_int8", sb_int8}};
  for (auto& [name, c] : modes) c.cache.policy = PolicyKind::lru;
  // Every other --policy: the four bounded modes again under that policy, named
  // "<policy>.<mode>" (lru always runs: it is the engine's behaviour and the unbounded references
  // are policy-free).
  std::shared_ptr<const NextUseIndex> index;
  const std::vector<std::pair<std::string, EngineConfig>> bounded = {modes[0], modes[1], modes[4],
                                                                     modes[5]};
  for (PolicyKind pk : o.policies) {
    if (pk == PolicyKind::lru) continue;
    if (policy_is_offline(pk) && !index) index = replay_next_use_index(reqs, o.chunk_granularity);
    for (const auto& [name, c] : bounded) {
      EngineConfig pc = c;
      pc.cache.policy = pk;
      if (policy_is_offline(pk)) pc.cache.next_use = index;
      modes.emplace_back(fmt::format("{}.{}", policy_name(pk), name), pc);
    }
  }
  return modes;
}

// Loads the trace, sizes the pools, replays every mode and runs the benchmark, printing the trace
// and the pool sizes as it starts. Throws what load_replay_trace and replay_modes throw.
ReplayResult measure_replay(const Options& o, const ModelConfig& m) {
  ReplayResult res;
  res.trace = trace_path(o);
  res.bad_lines = o.trace_bad_lines;
  ReplayTrace trace = load_replay_trace(res.trace, o.trace_bad_lines, o.quick, o.trace_max_tokens);
  const std::vector<TraceRequest>& reqs = trace.requests;
  res.skipped = std::move(trace.skipped);
  res.skipped_count = trace.skipped_count;
  res.requests = static_cast<int64_t>(reqs.size());
  int64_t output_tokens = 0;
  for (const auto& r : reqs) {
    res.prompt_tokens += r.input_length;
    output_tokens += std::max(1, r.output_length);
  }
  res.reuse = trace_prefix_reuse(reqs);
  fmt::print(
      "replay: {} ({} requests, {} prompt tokens, {} output tokens, {} lines skipped); "
      "infinite-cache prefix "
      "reuse {:.2f}% of blocks, {:.2f}% of tokens\n",
      res.trace, reqs.size(), res.prompt_tokens, output_tokens, res.skipped_count,
      100.0 * res.reuse.block_fraction(), 100.0 * res.reuse.token_fraction());

  const auto modes = replay_modes(o, m, reqs, res.prompt_tokens + output_tokens, res);
  const double t_base = reqs.front().timestamp_ms;
  res.minutes = static_cast<size_t>((reqs.back().timestamp_ms - t_base) / 1000.0 / 60.0) + 1;
  for (const auto& [mode, cfg] : modes)
    res.modes.push_back(summarize_run(replay_once(mode, cfg, reqs, res.trace), reqs, res.minutes));

  // Match + insert benchmark (bookkeeping, one core).
  res.bench.tokens_per_s = bench_match_insert(reqs, &res.bench.seconds, &res.bench.tokens);
  return res;
}

void record_replay(const ReplayResult& r, H5Writer& file, Summary& summary) {
  const std::string g = "replay";
  file.group(g);
  file.attr(g, "trace", r.trace);
  file.attr(g, "requests", r.requests);
  file.attr(g, "skipped_lines", r.skipped_count);
  file.attr(g, "bad_lines_policy", std::string(bad_lines_name(r.bad_lines)));
  file.attr(g, "token_mapping",
            std::string("block hash h, position j -> token id h * 512 + j; outputs unique"));
  if (!r.skipped.empty()) {
    std::vector<std::string> lines;
    for (const auto& s : r.skipped) lines.push_back(fmt::format("line {}: {}", s.line, s.reason));
    file.write_strings(g + "/skipped_lines", lines,
                       "malformed trace lines skipped (--trace-bad-lines skip): the first of "
                       "each kind of reason; the attribute skipped_lines counts them all");
  }
  file.write_scalar(g + "/prompt_tokens", static_cast<double>(r.prompt_tokens), "tokens",
                    "prompt tokens replayed");
  file.write_scalar(g + "/trace_block_reuse", r.reuse.block_fraction(), "1",
                    "infinite cache, 512-token blocks: reused leading blocks / all blocks");
  file.write_scalar(
      g + "/trace_token_reuse", r.reuse.token_fraction(), "1",
      "infinite cache, tokens: longest shared prefix of tokens[0, len - 1) / all prompt tokens");
  file.write_scalar(g + "/cache_memory_gib", r.cache_memory_bytes / kGiB, "GiB",
                    "memory left for caches per GPU");
  file.write_scalar(g + "/state_memory_gib", r.state_memory_bytes / kGiB, "GiB",
                    "state-pool memory of both bounded runs");
  summary.set("replay.trace.block_reuse", r.reuse.block_fraction());
  summary.set("replay.trace.token_reuse", r.reuse.token_fraction());
  summary.set("replay.requests", static_cast<double>(r.requests));

  std::vector<double> curve;
  std::vector<std::string> names;
  for (const ModeReplay& mr : r.modes) {
    const ReplayRun& run = mr.run;
    names.push_back(run.mode);
    curve.insert(curve.end(), mr.hit_rate_per_minute.begin(), mr.hit_rate_per_minute.end());
    const std::string mg = g + "/" + run.mode;
    file.group(mg);
    write_cache_config(file, mg, run.config.cache, run.max_running, run.config.chunked_prefill);
    write_cache_counters(file, mg + "/counters", run.counters, run.tree);
    file.write_scalar(mg + "/token_hit_rate", mr.token_hit_rate, "1",
                      "sum(cached tokens) / sum(prompt tokens)");
    file.write_scalar(mg + "/wall_s", run.wall_s, "s", "wall time of this replay on one core");
    file.write_scalar(mg + "/simulated_s", run.sim_s, "s",
                      "simulated time at the last finish (cost model)");
    file.write_scalar(mg + "/ttft_p50_s", mr.ttft_p50_s, "s",
                      "median time to first token (cost model)");
    file.write_scalar(mg + "/peak_running", run.peak_running, "requests",
                      "most requests running at once");
    file.attr(mg, "kv_only_match", static_cast<int64_t>(run.config.cache.kv_only_match ? 1 : 0));
    file.write(mg + "/cached_tokens", mr.cached_tokens, {mr.cached_tokens.size()}, "tokens",
               "cached tokens per trace request");
    summary.set(fmt::format("replay.{}.token_hit_rate", run.mode), mr.token_hit_rate);
    summary.set(fmt::format("replay.{}.state_hits", run.mode),
                static_cast<double>(run.counters.state_hits));
    summary.set(fmt::format("replay.{}.dequant_loads", run.mode),
                static_cast<double>(mr.dequant_loads));
    // The same loads named for what they are (dequant_loads is kept for one release).
    summary.set(fmt::format("replay.{}.{}", run.mode, load_counter_name(run.config.cache)),
                static_cast<double>(mr.dequant_loads));
    summary.set(fmt::format("replay.{}.hit_tokens", run.mode),
                static_cast<double>(run.counters.hit_tokens));
    summary.set(fmt::format("replay.{}.evictions", run.mode), static_cast<double>(mr.evictions));
    summary.set(fmt::format("replay.{}.wall_s", run.mode), run.wall_s);
    fmt::print(
        "replay: {:<16} token hit rate {:.4f}, admissions with a cached prefix {} of {} ({} cached "
        "tokens), {} {}, evictions {} (full {} nodes, state {}), retractions {}, peak running {} "
        "(cap {}), simulated {:.0f} s, wall {:.1f} s [{}]\n",
        run.mode, mr.token_hit_rate, run.counters.state_hits, run.counters.admissions,
        run.counters.hit_tokens, load_counter_name(run.config.cache), mr.dequant_loads,
        mr.evictions, run.tree.full_evicted_nodes, run.tree.state_evictions, run.retractions,
        run.peak_running, run.max_running, run.sim_s, run.wall_s,
        payload_mode_name(run.config.cache.payload));
  }
  file.write_strings(g + "/modes", names, "modes, in the order of the rows of hit_rate_per_minute");
  file.write(
      g + "/hit_rate_per_minute", curve, {r.modes.size(), r.minutes}, "1",
      "[mode, minute of trace time]: token hit rate of the requests arriving in that minute");
  const double trace_reuse = r.reuse.token_fraction();
  const double unb = r.mode("unbounded").token_hit_rate;
  summary.set("replay.unbounded_over_trace_token_reuse", trace_reuse > 0 ? unb / trace_reuse : 0.0);
  summary.set("replay.unbounded_excess_over_trace_token_reuse", unb - trace_reuse);
  summary.set("replay.int8_minus_bf16.token_hit_rate",
              r.mode("int8").token_hit_rate - r.mode("bf16").token_hit_rate);
  summary.set(
      "replay.state_bound.int8_minus_bf16.token_hit_rate",
      r.mode("state_bound_int8").token_hit_rate - r.mode("state_bound_bf16").token_hit_rate);

  const MatchInsertBench& b = r.bench;
  const double unbounded_s = r.mode("unbounded").run.wall_s, bf16_s = r.mode("bf16").run.wall_s;
  file.write_scalar(g + "/bench_match_insert_tokens_per_s", b.tokens_per_s, "tokens/s",
                    "radix match + insert of every prompt (bare tree, unbounded pools), prompt "
                    "tokens per second");
  summary.set("replay.bench.match_insert_tokens_per_s", b.tokens_per_s);
  summary.set("replay.bench.unbounded_replay_s", unbounded_s);
  summary.set("replay.bench.bf16_replay_s", bf16_s);
  fmt::print(
      "replay: bench: match + insert of {} prompt tokens in {:.2f} s = {:.3g} tokens/s; whole "
      "unbounded replay "
      "(bookkeeping, scheduler included) {:.1f} s\n",
      b.tokens, b.seconds, b.tokens_per_s, unbounded_s);
}

}  // namespace

ReplayPools replay_pools(const Options& o, const ModelConfig& m) {
  const StateDtypes dt = options_dtypes(o);
  ReplayPools p;
  p.bf16 = compute_budget(m, dt, options_budget_inputs(o, false));  // A from the ratio split
  const int64_t A_bf16 = p.bf16.active.slots;
  p.int8 =
      int8_split_at_equal_memory(A_bf16, active_slot_bytes(m, dt), checkpoint_slot_bytes(m, dt));
  if (std::max(A_bf16, p.int8.ckpt) > kMaxPoolSlots)
    fail(
        "replay: model {} at TP {}: the memory budget ({:.2f} GiB for caches) gives {} active "
        "slots of {} bytes, {} checkpoint slots at equal memory; the cache model holds at most {} "
        "per pool (check the model's state shape, or lower --gpu-mem-gib)",
        m.name, m.tp, p.bf16.rest_bytes / kGiB, A_bf16, active_slot_bytes(m, dt).total(),
        p.int8.ckpt, kMaxPoolSlots);
  return p;
}

namespace {

// Each policy's gap to belady per bounded mode: (belady - policy) / belady token hit rate, the
// summary keys replay.<policy>.<mode>.gap_to_belady (lru: replay.<mode>.gap_to_belady).
void record_gaps(const ReplayResult& r, Summary& summary) {
  bool any = false;
  for (const char* base : {"bf16", "int8", "state_bound_bf16", "state_bound_int8"}) {
    const std::string bname = fmt::format("belady.{}", base);
    const ModeReplay* bel = nullptr;
    for (const ModeReplay& mr : r.modes)
      if (mr.run.mode == bname) bel = &mr;
    if (!bel) return;
    if (!any) fmt::print("replay: gap to belady = (belady - policy) / belady token hit rate:\n");
    any = true;
    std::string line = fmt::format("replay:   {:<17} belady {:.4f}", base, bel->token_hit_rate);
    for (const ModeReplay& mr : r.modes) {
      const std::string& name = mr.run.mode;
      const bool same_base = name == base || (name.size() > std::strlen(base) &&
                                              name.compare(name.size() - std::strlen(base),
                                                           std::string::npos, base) == 0 &&
                                              name[name.size() - std::strlen(base) - 1] == '.');
      if (!same_base || name == bname) continue;
      const double gap = bel->token_hit_rate > 0
                             ? (bel->token_hit_rate - mr.token_hit_rate) / bel->token_hit_rate
                             : 0.0;
      summary.set(fmt::format("replay.{}.gap_to_belady", name), gap);
      const std::string pol = name == base ? "lru" : name.substr(0, name.find('.'));
      line += fmt::format(", {} {:.1f}%", pol, 100.0 * gap);
    }
    fmt::print("{}\n", line);
  }
}

// replay --budget-sweep: the trace at cache memory f x the budget's, f in kSweep, for every
// --policy and both formats. At each f the bf16 single pool gets f x the active slots and f x the
// KV tokens of the full budget (SGLang's split scales with the memory), the int8 run the same KV
// and the same state bytes as int8_split_at_equal_memory; bookkeeping only. The KV pool is kept at
// least twice the largest request (prompt + outputs) so that every request can run; a point where
// that floor applies is marked. "KV binds" when evict_full freed nodes, "state binds" when
// evict_state freed states. Written under replay/budget_sweep, summary keys
// replay.sweep.f<f>.<policy>.<mode>.token_hit_rate.
void budget_sweep(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const double kSweep[] = {1.0 / 64, 1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 1.0};
  const ReplayTrace trace =
      load_replay_trace(trace_path(o), o.trace_bad_lines, o.quick, o.trace_max_tokens);
  const std::vector<TraceRequest>& reqs = trace.requests;
  const StateDtypes dt = options_dtypes(o);
  const ReplayPools full = replay_pools(o, m);
  int64_t largest = 1;
  for (const auto& r : reqs)
    largest = std::max<int64_t>(largest, r.input_length + std::max(1, r.output_length));
  std::shared_ptr<const NextUseIndex> index;
  for (PolicyKind pk : o.policies)
    if (policy_is_offline(pk) && !index) index = replay_next_use_index(reqs, o.chunk_granularity);
  const std::string g = "replay/budget_sweep";
  file.group(g);
  std::vector<double> fr(std::begin(kSweep), std::end(kSweep));
  file.write(g + "/memory_fraction", fr, {fr.size()}, "1",
             "cache memory as a fraction of the budget's (state pools and KV scaled together)");
  std::vector<std::string> pnames;
  for (PolicyKind pk : o.policies) pnames.push_back(policy_name(pk));
  file.write_strings(g + "/policies", pnames, "policies, rows of the hit-rate datasets");
  fmt::print("replay: budget sweep ({} requests, bookkeeping): f = cache memory / {:.2f} GiB\n",
             reqs.size(), full.bf16.rest_bytes / kGiB);
  fmt::print("replay: {:>8} {:>6} {:>6} {:>9} {:<5} {:>10} {:>10} {:>10}  {}\n", "f", "A", "C",
             "KV", "mode", "policy", "hit rate", "vs belady", "binds");
  for (const char* mode : {"bf16", "int8"}) {
    std::vector<double> hit(o.policies.size() * fr.size());
    std::vector<int64_t> kv_binds(fr.size()), state_binds(fr.size());
    for (size_t fi = 0; fi < fr.size(); ++fi) {
      const double f = fr[fi];
      const int64_t A = std::max<int64_t>(8, static_cast<int64_t>(f * full.bf16.active.slots));
      int64_t kv = static_cast<int64_t>(f * full.bf16.kv_tokens_correct);
      const bool floored = kv < 2 * largest;
      kv = std::max(kv, 2 * largest);
      const Int8Split split =
          int8_split_at_equal_memory(A, active_slot_bytes(m, dt), checkpoint_slot_bytes(m, dt));
      const bool int8 = std::string(mode) == "int8";
      double belady_rate = -1.0;
      std::vector<double> rates(o.policies.size());
      for (size_t pi = 0; pi < o.policies.size(); ++pi) {
        EngineConfig c = replay_config(o, m, int8 ? CacheMode::int8 : CacheMode::bf16,
                                       int8 ? split.active : A, int8 ? split.ckpt : 0, kv);
        c.cache.payload = false;
        c.cache.policy = o.policies[pi];
        if (policy_is_offline(o.policies[pi])) c.cache.next_use = index;
        const std::string name = fmt::format("sweep {} f={:.4f} {}", mode, f, pnames[pi]);
        const ModeReplay mr = summarize_run(
            replay_once(name, c, reqs, trace_path(o)), reqs,
            static_cast<size_t>((reqs.back().timestamp_ms - reqs.front().timestamp_ms) / 60000.0) +
                1);
        rates[pi] = mr.token_hit_rate;
        hit[pi * fr.size() + fi] = mr.token_hit_rate;
        if (o.policies[pi] == PolicyKind::belady) belady_rate = mr.token_hit_rate;
        if (o.policies[pi] == PolicyKind::lru) {
          kv_binds[fi] = mr.run.tree.full_evicted_nodes > 0 ? 1 : 0;
          state_binds[fi] = mr.run.tree.state_evictions > 0 ? 1 : 0;
        }
        summary.set(fmt::format("replay.sweep.f{:.4f}.{}.{}.token_hit_rate", f, pnames[pi], mode),
                    mr.token_hit_rate);
        const std::string binds = fmt::format(
            "{}{}{}", mr.run.tree.full_evicted_nodes > 0 ? "KV " : "",
            mr.run.tree.state_evictions > 0 ? "state" : "", floored ? " (KV floor)" : "");
        fmt::print("replay: {:>8.4f} {:>6} {:>6} {:>9} {:<5} {:>10} {:>10.4f} {:>10}  {}\n", f,
                   int8 ? split.active : A, int8 ? split.ckpt : 0, kv, mode, pnames[pi],
                   mr.token_hit_rate, "", binds);
      }
      if (belady_rate > 0) {
        double best = 0.0;
        std::string who;
        for (size_t pi = 0; pi < o.policies.size(); ++pi)
          if (!policy_is_offline(o.policies[pi]) && rates[pi] > best) {
            best = rates[pi];
            who = pnames[pi];
          }
        const double gap = (belady_rate - best) / belady_rate;
        summary.set(fmt::format("replay.sweep.f{:.4f}.{}.best_online_gap", f, mode), gap);
        fmt::print(
            "replay: {:>8.4f} {:>6} {:>6} {:>9} {:<5} best online {} at {:.1f}% below belady\n", f,
            "", "", "", mode, who, 100.0 * gap);
        for (size_t pi = 0; pi < o.policies.size(); ++pi)
          if (o.policies[pi] == PolicyKind::future_count) {
            // What knowing how often, but not when, each prefix is used again reaches.
            const double fc = (belady_rate - rates[pi]) / belady_rate;
            summary.set(fmt::format("replay.sweep.f{:.4f}.{}.future_count_gap", f, mode), fc);
            fmt::print(
                "replay: {:>8.4f} {:>6} {:>6} {:>9} {:<5} future-count at {:.1f}% below belady\n",
                f, "", "", "", mode, 100.0 * fc);
          }
      }
    }
    file.write(g + "/" + mode + "_token_hit_rate", hit, {o.policies.size(), fr.size()}, "1",
               "[policy, memory fraction]: token hit rate");
    file.write(g + "/" + mode + "_kv_binds", kv_binds, {fr.size()}, "1",
               "lru: 1 when the KV pool evicted (binds) at that memory fraction");
    file.write(g + "/" + mode + "_state_binds", state_binds, {fr.size()}, "1",
               "lru: 1 when the state pool evicted (binds) at that memory fraction");
  }
}

}  // namespace

void run_replay(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const ReplayResult r = measure_replay(o, m);
  record_replay(r, file, summary);
  record_gaps(r, summary);
  if (o.budget_sweep) budget_sweep(o, m, file, summary);
}

}  // namespace statecheck
