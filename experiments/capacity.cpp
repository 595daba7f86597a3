// Experiment `capacity`: the K-sweep of docs/cache_model.md (SGLang
// benchmark/bench_linear_attention/bench_int8_checkpoint_reuse.py), bf16 single pool vs int8
// checkpoint pool.
//
// Per K and mode, on a fresh engine: K distinct prefixes of 1000 tokens (the benchmark's
// --prefix-tokens 1000), WARM sends every prefix + an 8-token suffix, PROBE every prefix + a
// different 8-token suffix, one output token each, 8 in flight (closed loop). reuse_frac =
// sum(cached tokens) / sum(prompt tokens) over PROBE. Pools: --active-slots (256), --ckpt-slots
// (absent: 2A = 512), --strategy (extra_buffer); the KV pool gets the model's KV budget (correct
// accounting) so that only the state pools bind. K: --k-list, or the default grid of
// capacity_k_grid (experiments/cache_common.h), which reaches past the checkpoint pool. Each
// --policy (docs/cache_policies.md) runs the whole sweep; lru keeps the unprefixed groups and keys.
//
// What bounds reuse, from the mechanism: a PROBE hit needs the prefix's WARM state still cached.
// bf16 caches states in the active pool, which also holds 3 slots per in-flight request (live + 2
// tracking), so at most A - 8 * 3 = 232 states survive; WARM and PROBE visit the prefixes in the
// same order, so with K above that LRU evicts each state just before its PROBE (reuse ~ 0). int8
// caches up to C = 512 states in the checkpoint pool. knee_K: the largest swept K up to which
// reuse_frac stays >= half of its value at the smallest K.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/util/error.h"

#include <fmt/format.h>

#include "core/backend/serving_backend.h"
#include "core/memory/memory_budget.h"
#include "core/util/progress.h"
#include "core/workloads/workload.h"
#include "experiments/cache_common.h"
#include "experiments/experiment.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/host/serving_backend.h"
#include "kernels/working_state/ws_decode.h"
#endif

namespace statecheck {

namespace {

// The PROBE requests of one sweep point, as the cache model served them.
struct CapacityProbes {
  std::string mode;  // bf16 | int8
  int K = 0;
  std::vector<RequestRecord> probes;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double idx = p * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

// The serving shape of model `m` for the cost replay: its real per-slot state shape, the
// temporal and int8 scale dtypes of the options, 8 request slots.
[[maybe_unused]] ServingShape capacity_serving_shape(const ModelConfig& m, const StateDtypes& dt) {
  ServingShape s;
  s.layer = recurrence_shape(m);
  s.layers = m.linear_layer_count();
  s.conv_elems = static_cast<int64_t>(m.conv_dim_shard()) * (m.conv_width - 1);
  s.temporal = dt.temporal;
  s.checkpoint = parse_codec("int8", dt.scale);
  s.working.kind = WorkingStateKind::int8;
  s.working.bf16_scale = dt.scale == Dtype::bf16;
  s.parallel = 8;
  return s;
}

// What a hit and a miss cost on a serving backend (core/backend/serving_backend.h): for each
// sweep point the PROBE requests are replayed with the hit lengths the cache model decided
// (`cached_tokens`), an even sample of at most `max_samples` of them; latency per probe launched
// alone, throughput of the sample in batches of 8. The int8 points run twice: as the int8
// checkpoint pool (mode int8: a hit dequantizes into the fp32/bf16 active slot) and as an int8
// working state (mode int8-ws: the same cache decisions, states int8 between decode tokens, a hit
// the cached slot decoded into fp32 and its suffix prefilled as a miss is, the last token through
// the working-state decode; core/backend/serving_backend.h), whose GPU results are checked
// against the decode's CPU reference on one hit and one miss. Recorded under capacity/cuda with
// the summary keys capacity.cuda.*; hit_p50_ms and miss_p50_ms are over the bf16 and int8 modes,
// the int8-ws mode has its own (capacity.cuda.int8-ws.*).
[[maybe_unused]] void record_probe_costs(ServingBackend& backend, const ModelConfig& m,
                                         const std::vector<CapacityProbes>& points,
                                         bool working_state, size_t max_samples, H5Writer& file,
                                         Summary& summary) {
  std::vector<double> donate_ms, ws_donate_ms;
  for (int r = 0; r < 5; ++r) {
    donate_ms.push_back(backend.donate_ms(RestoreFrom::checkpoint_pool));
    if (working_state) ws_donate_ms.push_back(backend.donate_ms(RestoreFrom::working_pool));
  }
  const std::string gname = "capacity/cuda";
  file.group(gname);
  file.attr(gname, "device", backend.description());
  file.attr(gname, "work",
            std::string("linear-attention state work only: copy-on-write + chunked prefill of "
                        "the uncached tokens (chunked_prefill_pool; the recurrent kernel where "
                        "the chunked one does not take the shape), all linear layers, project "
                        "kernels"));
  file.write_scalar(gname + "/donate_ms", percentile(donate_ms, 0.5), "ms",
                    "median time of one int8 donate (checkpoint_store of one slot, all layers)");
  summary.set("capacity.cuda.donate_ms", percentile(donate_ms, 0.5));
  // The rest of the model, modelled: the FLOPs a prefill of the uncached tokens spends outside the
  // linear-attention recurrence (every active parameter once per token, per GPU, and the
  // full-attention layers' QK^T and PV over every earlier position), at the device's measured
  // matmul rate (docs/experiments.md, "capacity").
  const double tflops = backend.matmul_tflops();
  const double per_token = 2.0 * m.active_params() * 1e9 / std::max(1, m.tp);
  const double per_pair = model_flop_costs(m, StateDtypes{}).attention_per_pair;
  auto rest_ms = [&](const ServedRequest& r) {
    const double P = static_cast<double>(r.prompt_len), h = static_cast<double>(r.cached_tokens);
    const double flops = (P - h) * per_token + per_pair * (P * (P + 1) - h * (h + 1)) / 2;
    return flops / (tflops * 1e12) * 1e3;
  };
  file.write_scalar(
      gname + "/matmul_tflops", tflops, "TFLOP/s",
      "mma.sync bf16 rate of the device (kernels/common/mma_peak.h), measured in this "
      "run: the rate of the modelled rest of the model");
  file.attr(gname, "time_model",
            std::string("probe_total = measured linear-attention state work + modelled rest of "
                        "the model: (uncached tokens x 2 x active parameters / TP + "
                        "full-attention pairs x attention FLOPs per pair) / matmul_tflops"));
  summary.set("capacity.cuda.matmul_tflops", tflops);
  if (per_token == 0.0)
    fmt::print(
        "  note: the model's parameter count is not known, so the modelled rest of the model "
        "counts the full-attention pairs only\n");
  std::vector<double> all_hits, all_misses, all_hits_total, all_misses_total;
  std::vector<double> ws_hits, ws_misses, ws_hits_total, ws_misses_total;
  std::vector<CapacityProbes> runs;  // the points, then the int8 ones as int8-ws
  for (const auto& pt : points) runs.push_back(pt);
  for (const auto& pt : points)
    if (working_state && pt.mode == "int8") runs.push_back({"int8-ws", pt.K, pt.probes});
  fmt::print("capacity (cuda): {}\n  {:>5} {:>5} {:>7} {:>9} {:>9} {:>9} {:>12}\n",
             backend.description(), "mode", "K", "probes", "p50 ms", "p90 ms", "p99 ms",
             "probes/s");
  for (const auto& pt : runs) {
    const bool ws = pt.mode == "int8-ws";
    const RestoreFrom from = ws                  ? RestoreFrom::working_pool
                             : pt.mode == "int8" ? RestoreFrom::checkpoint_pool
                                                 : RestoreFrom::active_pool;
    std::vector<ServedRequest> sample;
    const size_t n = pt.probes.size(), take = std::min(n, max_samples);
    for (size_t i = 0; i < take; ++i) {
      const RequestRecord& r = pt.probes[i * n / take];
      sample.push_back({r.prompt_len, r.cached_tokens});
    }
    std::vector<double> lat, hit_lat, miss_lat, total;
    // int8-ws keeps its own hit and miss figures, apart from the bf16 / int8 aggregate.
    std::vector<double>& hits = ws ? ws_hits : all_hits;
    std::vector<double>& misses = ws ? ws_misses : all_misses;
    std::vector<double>& hits_total = ws ? ws_hits_total : all_hits_total;
    std::vector<double>& misses_total = ws ? ws_misses_total : all_misses_total;
    for (const auto& r : sample) {
      const double ms = backend.serve_ms(r, from);
      lat.push_back(ms);
      total.push_back(ms + rest_ms(r));
      (r.cached_tokens > 0 ? hit_lat : miss_lat).push_back(ms);
      (r.cached_tokens > 0 ? hits_total : misses_total).push_back(total.back());
    }
    const double total_ms = backend.serve_batches_ms(sample, from);
    const double rps = sample.size() / (total_ms * 1e-3);
    hits.insert(hits.end(), hit_lat.begin(), hit_lat.end());
    misses.insert(misses.end(), miss_lat.begin(), miss_lat.end());
    const std::string key = fmt::format("capacity.cuda.{}.K{}", pt.mode, pt.K);
    const std::string pg = fmt::format("{}/{}/K{}", gname, pt.mode, pt.K);
    file.write(pg + "/probe_latency_ms", lat, {lat.size()}, "ms",
               "per sampled PROBE request, launched alone");
    file.write_scalar(pg + "/throughput_rps", rps, "requests/s", "sampled probes in batches of 8");
    file.write_scalar(pg + "/hit_fraction",
                      sample.empty() ? 0.0 : double(hit_lat.size()) / sample.size(), "1",
                      "share of the sampled probes served from the cache");
    for (const auto& [name, p] :
         {std::pair<const char*, double>{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}}) {
      summary.set(key + ".probe_" + name + "_ms", percentile(lat, p));
      file.write_scalar(pg + "/probe_" + name + "_ms", percentile(lat, p), "ms",
                        "latency percentile of the probes");
    }
    summary.set(key + ".throughput_rps", rps);
    file.write(pg + "/probe_total_ms", total, {total.size()}, "ms",
               "per sampled PROBE: the measured state work plus the modelled rest of the model");
    summary.set(key + ".probe_total_p50_ms", percentile(total, 0.5));
    fmt::print("  {:>5} {:>5} {:>7} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.1f}\n", pt.mode, pt.K,
               sample.size(), percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99),
               rps);
  }
  const double hit = percentile(all_hits, 0.5), miss = percentile(all_misses, 0.5);
  summary.set("capacity.cuda.hit_p50_ms", hit);
  summary.set("capacity.cuda.miss_p50_ms", miss);
  summary.set("capacity.cuda.miss_over_hit", hit > 0 ? miss / hit : std::nan(""));
  file.write_scalar(gname + "/hit_p50_ms", hit, "ms",
                    "median latency of a probe served from the cache");
  file.write_scalar(gname + "/miss_p50_ms", miss, "ms",
                    "median latency of a probe recomputed from scratch");
  fmt::print("  hit p50 {:.3f} ms, miss p50 {:.3f} ms (x{:.1f}), donate {:.3f} ms\n", hit, miss,
             miss / hit, percentile(donate_ms, 0.5));
  const double hit_t = percentile(all_hits_total, 0.5), miss_t = percentile(all_misses_total, 0.5);
  summary.set("capacity.cuda.hit_total_p50_ms", hit_t);
  summary.set("capacity.cuda.miss_total_p50_ms", miss_t);
  summary.set("capacity.cuda.miss_over_hit_total", hit_t > 0 ? miss_t / hit_t : std::nan(""));
  file.write_scalar(gname + "/hit_total_p50_ms", hit_t, "ms",
                    "median of a hit's measured state work plus its modelled rest of the model");
  file.write_scalar(gname + "/miss_total_p50_ms", miss_t, "ms",
                    "median of a miss's measured state work plus its modelled rest of the model");
  fmt::print(
      "  with the rest of the model modelled ({:.2f} GFLOP per token, {:.0f} FLOP per attention "
      "pair, at the measured {:.1f} TFLOP/s): hit p50 {:.3f} ms, miss p50 {:.3f} ms (x{:.1f})\n",
      per_token / 1e9, per_pair, tflops, hit_t, miss_t, miss_t / hit_t);
  if (!working_state) {
    fmt::print(
        "  int8 working state: not run (the working-state decode does not take heads of d_k {}, "
        "d_v {})\n",
        m.head_k_dim, m.head_v_dim);
    return;
  }

  // The int8 working state: its own hit and miss figures, and the kernels against their CPU
  // reference on the first sampled hit and miss.
  const std::string wg = gname + "/int8-ws";
  file.write_scalar(wg + "/donate_ms", percentile(ws_donate_ms, 0.5), "ms",
                    "median time of one donate of an int8 working state (the working-slot copy of "
                    "one slot, all layers)");
  summary.set("capacity.cuda.int8-ws.donate_ms", percentile(ws_donate_ms, 0.5));
  const double wh = percentile(ws_hits, 0.5), wm = percentile(ws_misses, 0.5);
  const double wht = percentile(ws_hits_total, 0.5), wmt = percentile(ws_misses_total, 0.5);
  for (const auto& [name, v, what] :
       {std::tuple<const char*, double, const char*>{"hit_p50_ms", wh,
                                                     "median latency of a probe served from the "
                                                     "cache"},
        {"miss_p50_ms", wm, "median latency of a probe recomputed from scratch"},
        {"hit_total_p50_ms", wht, "median of a hit's state work plus the modelled rest"},
        {"miss_total_p50_ms", wmt, "median of a miss's state work plus the modelled rest"}}) {
    file.write_scalar(wg + "/" + name, v, "ms", what);
    summary.set(std::string("capacity.cuda.int8-ws.") + name, v);
  }
  summary.set("capacity.cuda.int8-ws.miss_over_hit", wh > 0 ? wm / wh : std::nan(""));
  WorkingStateCheck check;
  for (const bool want_hit : {true, false})
    for (const auto& pt : points) {
      if (pt.mode != "int8") continue;
      const auto it = std::find_if(pt.probes.begin(), pt.probes.end(), [&](const auto& r) {
        return (r.cached_tokens > 0) == want_hit;
      });
      if (it == pt.probes.end()) continue;
      const WorkingStateCheck c = backend.check_working_state({it->prompt_len, it->cached_tokens});
      check.compared += c.compared, check.differing += c.differing;
      break;
    }
  file.write_scalar(wg + "/reference_compared", static_cast<double>(check.compared), "elements",
                    "linear layer 0 of one hit and one miss: stored codes, scales and outputs "
                    "compared with the working-state decode's CPU reference (ws_decode_reference)");
  file.write_scalar(wg + "/reference_mismatches", static_cast<double>(check.differing), "elements",
                    "of those, the elements whose bits differ (0: the kernels agree bit for bit)");
  summary.set("capacity.cuda.int8-ws.reference_compared", static_cast<double>(check.compared));
  summary.set("capacity.cuda.int8-ws.reference_mismatches", static_cast<double>(check.differing));
  if (check.compared == 0)
    fmt::print("  note: no sampled int8 probe to check the working-state kernels on\n");
  fmt::print(
      "  int8 working state: hit p50 {:.3f} ms, miss p50 {:.3f} ms (x{:.1f}), donate {:.3f} ms; "
      "with the rest modelled {:.3f} / {:.3f} ms; against the CPU reference {} of {} elements "
      "differ\n",
      wh, wm, wm / wh, percentile(ws_donate_ms, 0.5), wht, wmt, check.differing, check.compared);
}

}  // namespace

void run_capacity(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  std::vector<CapacityProbes> gpu_points;  // --device cuda: the published sweep points
  const int parallel = 8;
  // KV budget of the model at these pool sizes (correct accounting), so that KV never binds.
  const StateDtypes dt = options_dtypes(o);
  const BudgetInputs bi = options_budget_inputs(o, true);
  const Budget budget = compute_budget(m, dt, bi);
  const int64_t kv_tokens = kv_tokens_for_pools(budget, m);
  const int ckpt_slots = options_cache_config(o, m, CacheMode::int8, kv_tokens).ckpt_slots;
  const std::vector<int> Ks = capacity_k_grid(o, ckpt_slots);

  const std::string g = "capacity";
  file.group(g);
  std::vector<int64_t> kk(Ks.begin(), Ks.end());
  file.write(g + "/K", kk, {kk.size()}, "prefixes", "distinct prefixes K of each sweep point");
  file.attr(g, "parallel", static_cast<int64_t>(parallel));
  file.attr(g, "prefix_tokens", static_cast<int64_t>(KSweepParams().prefix_min));
  file.attr(g, "suffix_tokens", static_cast<int64_t>(8));
  file.attr(g, "pool_contents", std::string(payload_mode_name(!o.no_payload)));
  std::vector<std::string> pnames;
  for (PolicyKind pk : o.policies) pnames.push_back(policy_name(pk));
  file.write_strings(g + "/policies", pnames,
                     "eviction policies run (lru: groups capacity/<mode>; others "
                     "capacity/<policy>/<mode>)");

  Progress progress("capacity sweep points", static_cast<long>(2 * Ks.size() * o.policies.size()));
  std::vector<double> ceiling(Ks.size()), prefix_frac(Ks.size());
  std::map<std::string, int> knees;                     // "<policy>.<mode>"
  std::map<std::string, std::vector<double>> reuse_of;  // "<policy>.<mode>" -> per K
  std::map<std::string, int> cacheable_of;              // mode -> states
  for (PolicyKind pk : o.policies) {
    const bool lru = pk == PolicyKind::lru;
    // lru keeps the keys and groups of a run without --policy; every other policy is prefixed.
    const std::string pkey = lru ? "" : std::string(policy_name(pk)) + ".";
    for (const char* mode : {"bf16", "int8"}) {
      EngineConfig ec = options_engine_config(o, m, parse_cache_mode(mode), kv_tokens);
      ec.cache.policy = pk;
      const std::string mg = lru ? g + "/" + mode : g + "/" + policy_name(pk) + "/" + mode;
      if (!lru) file.group(g + "/" + policy_name(pk));
      file.group(mg);
      write_cache_config(file, mg, ec.cache, ec.resolved_max_running(), ec.chunked_prefill);
      file.attr(mg, "policy", std::string(policy_name(pk)));
      std::vector<double> reuse, warm_reuse;
      std::vector<int64_t> hits, loads, evictions, quantizes, dup;
      for (size_t i = 0; i < Ks.size(); ++i) {
        KSweepParams p;
        p.K = Ks[i];
        p.parallel = parallel;
        p.seed = o.seed;
        const KSweepResult r = run_ksweep(ec, p);
        reuse.push_back(r.reuse_frac);
        warm_reuse.push_back(r.warm_reuse_frac);
        hits.push_back(r.probe_hits);
        loads.push_back(r.probe_cow_loads);
        evictions.push_back(r.tree.state_evictions + r.tree.full_evicted_nodes);
        quantizes.push_back(r.counters.quantizes);
        dup.push_back(r.counters.duplicate_states);
        ceiling[i] = r.cached_prefix_fraction;
        prefix_frac[i] = r.prefix_fraction;
        summary.set(fmt::format("capacity.{}{}.K{}.reuse_frac", pkey, mode, Ks[i]), r.reuse_frac);
        if (lru && o.device == Device::cuda && (Ks[i] == 128 || Ks[i] == 384 || Ks[i] == 640))
          gpu_points.push_back({mode, Ks[i], r.probe_records});
        progress.tick();
      }
      // knee: largest K up to which reuse stays >= half its value at the smallest K.
      int knee = 0;
      for (size_t i = 0; i < Ks.size() && reuse[i] >= 0.5 * reuse[0] && reuse[0] > 0; ++i)
        knee = Ks[i];
      knees[pkey + mode] = knee;
      reuse_of[pkey + mode] = reuse;
      summary.set(fmt::format("capacity.{}{}.knee_K", pkey, mode), knee);
      const std::vector<size_t> n{Ks.size()};
      file.write(mg + "/reuse_frac", reuse, n, "1",
                 "PROBE: sum(cached tokens) / sum(prompt tokens) per K");
      file.write(mg + "/warm_reuse_frac", warm_reuse, n, "1",
                 "WARM: sum(cached tokens) / sum(prompt tokens) per K");
      file.write(mg + "/probe_hits", hits, n, "requests",
                 "PROBE requests with a cached prefix, per K");
      file.write(mg + "/probe_cow_loads", loads, n, "loads",
                 "copy-on-write loads during PROBE, per K");
      file.write(mg + "/evictions", evictions, n, "evictions",
                 "state evictions + nodes evicted by evict_full, per K");
      file.write(mg + "/quantizes", quantizes, n, "quantizes",
                 "int8 donates over WARM + PROBE, per K");
      file.write(mg + "/duplicate_states", dup, n, "states",
                 "inserts that found the state cached, per K");
      file.write_scalar(mg + "/knee_K", knee, "prefixes",
                        "largest K with reuse_frac >= half its value at the smallest K (0: no "
                        "reuse even at the smallest K; the last K: beyond the sweep)");
      file.write_scalar(mg + "/knee_beyond_sweep", knee == Ks.back() ? 1 : 0, "1",
                        "1 when reuse holds up to the last K swept: the knee lies beyond it");
      const int cacheable =
          std::string(mode) == "bf16"
              ? std::max(0, ec.cache.active_slots - parallel * ec.cache.slots_per_request())
              : ec.cache.ckpt_slots;
      file.write_scalar(mg + "/cacheable_states", cacheable, "states",
                        "states the cache can hold with 8 requests in flight (bf16: A - 8 x slots "
                        "per request; int8: C)");
      cacheable_of[mode] = cacheable;
      if (lru) summary.set(fmt::format("capacity.{}.cacheable_states", mode), cacheable);
    }
  }
  file.write(g + "/prefix_fraction", prefix_frac, {Ks.size()}, "1",
             "sum(shared prefix) / sum(prompt) over PROBE, per K");
  file.write(g + "/cached_prefix_fraction", ceiling, {Ks.size()}, "1",
             "ceiling of reuse_frac: the WARM request's Cg-aligned tracked point when inside the "
             "prefix, over "
             "sum(prompt), PROBE, per K");
  summary.set("capacity.prefix_fraction", prefix_frac[0]);
  summary.set("capacity.cached_prefix_fraction", ceiling[0]);
  const bool has_lru = knees.count("bf16") > 0;
  if (has_lru)
    summary.set("capacity.knee_ratio",
                knees["bf16"] > 0 ? static_cast<double>(knees["int8"]) / knees["bf16"] : 0.0);
  std::string head = fmt::format("capacity: {:>5}", "K");
  for (PolicyKind pk : o.policies)
    for (const char* mode : {"bf16", "int8"})
      head += fmt::format(" {:>16}", fmt::format("{} {}", mode, policy_name(pk)));
  fmt::print("{}   (prefix fraction {:.3f}, cacheable {:.3f}; cacheable states bf16 {}, int8 {})\n",
             head, prefix_frac[0], ceiling[0], cacheable_of["bf16"], cacheable_of["int8"]);
  for (size_t i = 0; i < Ks.size(); ++i) {
    std::string row = fmt::format("capacity: {:>5}", Ks[i]);
    for (PolicyKind pk : o.policies) {
      const std::string pkey = pk == PolicyKind::lru ? "" : std::string(policy_name(pk)) + ".";
      for (const char* mode : {"bf16", "int8"})
        row += fmt::format(" {:>16.3f}", reuse_of[pkey + mode][i]);
    }
    fmt::print("{}\n", row);
  }
  for (PolicyKind pk : o.policies) {
    const std::string pkey = pk == PolicyKind::lru ? "" : std::string(policy_name(pk)) + ".";
    fmt::print("capacity: knee K ({}) bf16 {}, int8 {}\n", policy_name(pk),
               describe_knee(knees[pkey + "bf16"], Ks), describe_knee(knees[pkey + "int8"], Ks));
  }
  fmt::print("capacity: {} sweep points in {:.1f} s\n", 2 * Ks.size() * o.policies.size(),
             progress.elapsed());
  // Reference rows from the pools actually run: under lru a PROBE hits its prefix while K is at
  // most the states the cache holds (WARM and PROBE visit the prefixes in the same order, so
  // beyond that LRU evicts each state just before its PROBE).
  if (has_lru) {
    fmt::print("capacity: reference (lru, from the pools run: bf16 holds {} states, int8 {}):\n",
               cacheable_of["bf16"], cacheable_of["int8"]);
    for (const char* mode : {"bf16", "int8"})
      for (size_t i = 0; i < Ks.size(); ++i) {
        const bool fits = Ks[i] <= cacheable_of[mode];
        const double v = reuse_of[mode][i];
        const bool ok = fits ? v > 0.9 * ceiling[i] : v < 0.1;
        fmt::print("  {:4} {} K {:>5}: reuse {:.3f} {} (K {} {} cacheable states)\n",
                   ok ? "ok" : "note", mode, Ks[i], v,
                   fits ? fmt::format("> 0.9 x ceiling {:.3f}", ceiling[i]) : "< 0.1",
                   fits ? "<=" : ">", cacheable_of[mode]);
      }
  }
  for (const char* mode : {"bf16", "int8"})
    if (has_lru && knees[mode] == 0)
      fmt::print("capacity: {} reuses nothing even at K = {} (knee_K 0: no knee in the range{})\n",
                 mode, Ks[0],
                 std::string(mode) == "bf16" ? "; knee_ratio is then 0, not a comparison" : "");
  if (o.device == Device::cuda) {
#ifdef STATECHECK_HAVE_CUDA
    int64_t max_prompt = 1;
    for (const auto& pt : gpu_points)
      for (const auto& r : pt.probes) max_prompt = std::max(max_prompt, r.prompt_len);
    ServingShape shape = capacity_serving_shape(m, dt);
    const bool working_state = cuda::ws_decode_supports_head(shape.layer.dk, shape.layer.dv);
    if (!working_state) shape.working = WorkingStateFormat{};
    const std::unique_ptr<ServingBackend> backend =
        cuda::cuda_serving_backend(shape, max_prompt, o.seed);
    record_probe_costs(*backend, m, gpu_points, working_state, o.quick ? 16 : 64, file, summary);
#else
    fail("--device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#endif
  }
}

}  // namespace statecheck
