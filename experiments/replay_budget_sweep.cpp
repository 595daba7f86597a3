// replay --budget-sweep (docs/cache_policies.md, "Budget sweep").
#include <algorithm>
#include <cstdint>
#include <fstream>

#include <fmt/format.h>

#include "core/memory/memory_budget.h"
#include "core/util/error.h"
#include "experiments/cache_common.h"
#include "experiments/replay_run.h"

namespace statecheck {
namespace {

// FNV-1a 64 (Fowler, Noll, Vo) of a file's bytes; the trace was read from it already.
uint64_t file_fnv1a64(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open trace file", path);
  uint64_t h = 14695981039346656037ull;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    for (std::streamsize i = 0; i < f.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace

// replay --budget-sweep: the trace at cache memory f x the budget's, f in kSweep, for every
// --policy and both formats. At each f the bf16 single pool gets f x the active slots and f x the
// KV tokens of the full budget (SGLang's split scales with the memory), the int8 run the same KV
// and the same state bytes as int8_split_at_equal_memory; bookkeeping only. The KV pool is kept at
// least twice the largest request (prompt + outputs) so that every request can run; a point where
// that floor applies is marked. "KV binds" when evict_full freed nodes, "state binds" when
// evict_state freed states. Written under replay/budget_sweep, summary keys
// replay.sweep.f<f>.<policy>.<mode>.token_hit_rate.
void replay_budget_sweep(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
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
  // The trace file's FNV-1a 64-bit hash, so that scripts/online_ceiling.py refuses a sweep of
  // another trace.
  file.write(g + "/trace_fnv1a64",
             std::vector<int64_t>{static_cast<int64_t>(file_fnv1a64(trace_path(o)))}, {1}, "1",
             "FNV-1a 64 of the trace file's bytes (two's complement)");
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
    std::vector<int64_t> kv_binds(fr.size()), state_binds(fr.size()), slots(fr.size()),
        kv_tokens(fr.size()), retractions(o.policies.size() * fr.size(), 0);
    std::vector<double> sojourn(o.policies.size() * fr.size(), 0.0);
    for (size_t fi = 0; fi < fr.size(); ++fi) {
      const double f = fr[fi];
      const int64_t A = std::max<int64_t>(8, static_cast<int64_t>(f * full.bf16.active.slots));
      int64_t kv = static_cast<int64_t>(f * full.bf16.kv_tokens_correct);
      const bool floored = kv < 2 * largest;
      kv = std::max(kv, 2 * largest);
      const Int8Split split =
          int8_split_at_equal_memory(A, active_slot_bytes(m, dt), checkpoint_slot_bytes(m, dt));
      const bool int8 = std::string(mode) == "int8";
      slots[fi] = int8 ? split.active + split.ckpt : A;
      kv_tokens[fi] = kv;
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
        for (const RequestRecord& r : mr.run.records)
          sojourn[pi * fr.size() + fi] =
              std::max(sojourn[pi * fr.size() + fi], r.finished - r.arrival);
        retractions[pi * fr.size() + fi] = mr.run.retractions;
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
        // The best online policy (the first in the list on a tie, also when none hits); no gap
        // without one.
        double best = -1.0;
        std::string who;
        for (size_t pi = 0; pi < o.policies.size(); ++pi)
          if (!policy_is_offline(o.policies[pi]) && rates[pi] > best) {
            best = rates[pi];
            who = pnames[pi];
          }
        if (!who.empty()) {
          const double gap = (belady_rate - best) / belady_rate;
          summary.set(fmt::format("replay.sweep.f{:.4f}.{}.best_online_gap", f, mode), gap);
          fmt::print(
              "replay: {:>8.4f} {:>6} {:>6} {:>9} {:<5} best online {} at {:.1f}% below belady\n",
              f, "", "", "", mode, who, 100.0 * gap);
        }
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
    // What scripts/online_ceiling.py needs to bound every online policy at each point.
    file.write(g + "/" + mode + "_state_slots", slots, {fr.size()}, "1",
               "state slots of all pools (bf16: A; int8: active + checkpoint)");
    file.write(g + "/" + mode + "_kv_tokens", kv_tokens, {fr.size()}, "tokens", "KV pool size");
    file.write(g + "/" + mode + "_max_sojourn", sojourn, {o.policies.size(), fr.size()}, "s",
               "[policy, memory fraction]: longest arrival-to-finish time of a request");
    file.write(g + "/" + mode + "_retractions", retractions, {o.policies.size(), fr.size()}, "1",
               "[policy, memory fraction]: retractions");
  }
}

}  // namespace statecheck
