// Experiment `capacity`: the K-sweep of spec cache.md section 6 (SGLang
// benchmark/bench_linear_attention/bench_int8_checkpoint_reuse.py), bf16 single pool vs int8
// checkpoint pool.
//
// Per K and mode, on a fresh engine: K distinct prefixes of 1000 tokens (the benchmark's
// --prefix-tokens 1000), WARM sends every prefix + an 8-token suffix, PROBE every prefix + a
// different 8-token suffix, one output token each, 8 in flight (closed loop). reuse_frac =
// sum(cached tokens) / sum(prompt tokens) over PROBE. Pools: --active-slots (256), --ckpt-slots (0:
// 2A = 512),
// --strategy (extra_buffer); the KV pool gets the model's KV budget (correct accounting) so that
// only the state pools bind.
//
// What bounds reuse, from the mechanism: a PROBE hit needs the prefix's WARM state still cached.
// bf16 caches states in the active pool, which also holds 3 slots per in-flight request (live + 2
// tracking), so at most A - 8 * 3 = 232 states survive; WARM and PROBE visit the prefixes in the
// same order, so with K above that LRU evicts each state just before its PROBE (reuse ~ 0). int8
// caches up to C = 512 states in the checkpoint pool. knee_K: the largest swept K up to which
// reuse_frac stays >= half of its value at the smallest K.
#include <algorithm>
#include <map>

#include "core/util/error.h"

#include <fmt/format.h>

#include "core/memory/memory_budget.h"
#include "core/util/progress.h"
#include "core/workloads/workload.h"
#include "experiments/cache_common.h"
#include "experiments/capacity_cuda.h"
#include "experiments/experiment.h"

namespace statecheck {

void run_capacity(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  std::vector<CapacityProbes> gpu_points;  // --device cuda: the published sweep points
  const std::vector<int> Ks =
      o.quick ? std::vector<int>{128, 256, 384, 512, 640, 768}
              : std::vector<int>{128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
                                 480, 512, 544, 576, 608, 640, 672, 704, 736, 768};
  const int parallel = 8;
  // KV budget of the model at these pool sizes (correct accounting), so that KV never binds.
  const StateDtypes dt = options_dtypes(o);
  const BudgetInputs bi = options_budget_inputs(o, true);
  const Budget budget = compute_budget(m, dt, bi);
  const int64_t kv_tokens = kv_tokens_for_pools(budget, m);

  const std::string g = "capacity";
  file.group(g);
  std::vector<int64_t> kk(Ks.begin(), Ks.end());
  file.write(g + "/K", kk, {kk.size()}, "prefixes", "distinct prefixes K of each sweep point");
  file.attr(g, "parallel", static_cast<int64_t>(parallel));
  file.attr(g, "prefix_tokens", static_cast<int64_t>(KSweepParams().prefix_min));
  file.attr(g, "suffix_tokens", static_cast<int64_t>(8));
  file.attr(g, "pool_contents", std::string(payload_mode_name(!o.no_payload)));

  Progress progress("capacity sweep points", static_cast<long>(2 * Ks.size()));
  std::vector<double> ceiling(Ks.size()), prefix_frac(Ks.size());
  std::map<std::string, int> knees;
  for (const char* mode : {"bf16", "int8"}) {
    const EngineConfig ec = options_engine_config(o, m, parse_cache_mode(mode), kv_tokens);
    const std::string mg = g + "/" + mode;
    file.group(mg);
    write_cache_config(file, mg, ec.cache, ec.resolved_max_running(), ec.chunked_prefill);
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
      summary.set(fmt::format("capacity.{}.K{}.reuse_frac", mode, Ks[i]), r.reuse_frac);
      if (o.device == Device::cuda && (Ks[i] == 128 || Ks[i] == 384 || Ks[i] == 640))
        gpu_points.push_back({mode, Ks[i], r.probe_records});
      progress.tick();
    }
    // knee: largest K up to which reuse stays >= half its value at the smallest K.
    int knee = 0;
    for (size_t i = 0; i < Ks.size() && reuse[i] >= 0.5 * reuse[0] && reuse[0] > 0; ++i)
      knee = Ks[i];
    knees[mode] = knee;
    summary.set(fmt::format("capacity.{}.knee_K", mode), knee);
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
                      "largest K with reuse_frac >= half its value at the smallest K (0: no reuse "
                      "even at the smallest K)");
    const int cacheable =
        std::string(mode) == "bf16"
            ? std::max(0, ec.cache.active_slots - parallel * ec.cache.slots_per_request())
            : ec.cache.ckpt_slots;
    file.write_scalar(mg + "/cacheable_states", cacheable, "states",
                      "states the cache can hold with 8 requests in flight (bf16: A - 8 x slots "
                      "per request; int8: C)");
    summary.set(fmt::format("capacity.{}.cacheable_states", mode), cacheable);
  }
  file.write(g + "/prefix_fraction", prefix_frac, {Ks.size()}, "1",
             "sum(shared prefix) / sum(prompt) over PROBE, per K");
  file.write(g + "/cached_prefix_fraction", ceiling, {Ks.size()}, "1",
             "ceiling of reuse_frac: the WARM request's Cg-aligned tracked point when inside the "
             "prefix, over "
             "sum(prompt), PROBE, per K");
  summary.set("capacity.prefix_fraction", prefix_frac[0]);
  summary.set("capacity.cached_prefix_fraction", ceiling[0]);
  summary.set("capacity.knee_ratio",
              knees["bf16"] > 0 ? static_cast<double>(knees["int8"]) / knees["bf16"] : 0.0);
  fmt::print(
      "capacity: {:>5} {:>10} {:>10}   (prefix fraction {:.3f}, cacheable {:.3f}; cacheable states "
      "bf16 {}, "
      "int8 {})\n",
      "K", "bf16", "int8", prefix_frac[0], ceiling[0],
      summary.get("capacity.bf16.cacheable_states"), summary.get("capacity.int8.cacheable_states"));
  for (size_t i = 0; i < Ks.size(); ++i)
    fmt::print("capacity: {:>5} {:>10.3f} {:>10.3f}\n", Ks[i],
               summary.get(fmt::format("capacity.bf16.K{}.reuse_frac", Ks[i])),
               summary.get(fmt::format("capacity.int8.K{}.reuse_frac", Ks[i])));
  fmt::print("capacity: knee K bf16 {}, int8 {} ({:.1f} s)\n", knees["bf16"], knees["int8"],
             progress.elapsed());
  for (const char* mode : {"bf16", "int8"})
    if (knees[mode] == 0)
      fmt::print("capacity: {} reuses nothing even at K = {} (knee_K 0: no knee in the range{})\n",
                 mode, Ks[0],
                 std::string(mode) == "bf16" ? "; knee_ratio is then 0, not a comparison" : "");
#ifdef STATECHECK_HAVE_CUDA
  if (o.device == Device::cuda) run_capacity_cuda(o, m, gpu_points, file, summary);
#endif
}

}  // namespace statecheck
