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
// memories for every policy and both formats (replay_budget_sweep.cpp; docs/cache_policies.md).
//
// measure_replay loads the trace, sizes the pools, runs every mode and the benchmark
// (ReplayResult), printing the trace and the pool sizes as it starts; record_replay writes the
// result file's datasets and the summary and prints one line per mode and the benchmark's.
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "core/cache/engine.h"
#include "core/memory/memory_budget.h"
#include "core/util/error.h"
#include "core/workloads/mooncake_trace.h"
#include "experiments/cache_common.h"
#include "experiments/experiment.h"
#include "experiments/replay_run.h"

namespace statecheck {

namespace {

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

}  // namespace

void run_replay(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  const ReplayResult r = measure_replay(o, m);
  record_replay(r, file, summary);
  record_gaps(r, summary);
  if (o.budget_sweep) replay_budget_sweep(o, m, file, summary);
}

}  // namespace statecheck
