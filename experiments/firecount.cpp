// Experiment `firecount`: the few-shot workload of spec cache.md section 6 in int8 checkpoint mode,
// no_buffer vs extra_buffer: how often a request's admission dequantizes a cached state (the
// "dequant fire count").
//
// Workload: one fixed few-shot prefix of 800 tokens + a distinct question of 60..120 tokens per
// request, 300 questions (quick: 100) sent 3 times in the same order, 8 generated tokens each, 8 in
// flight. Pools: --active-slots (256), --ckpt-slots (0: 2A); KV from the model's budget.
//
// Expected from the mechanism (spec cache.md section 3): under no_buffer states exist only at
// sequence and chunk ends, so after the second request splits the first leaf at the branch point
// every request walks into a tombstone and hits nothing (no dequantize); under extra_buffer the
// recorded branching point is tracked and cached by the next admitted requests, and every request
// after the first few hits it.
#include <fmt/format.h>

#include "core/memory/memory_budget.h"
#include "core/util/progress.h"
#include "core/workloads/workload.h"
#include "experiments/cache_common.h"
#include "experiments/experiment.h"

namespace statecheck {

void run_firecount(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  FewShotParams p;
  p.questions = o.quick ? 100 : 300;
  p.seed = o.seed;
  const StateDtypes dt = options_dtypes(o);
  const BudgetInputs bi = options_budget_inputs(o, true);
  const int64_t kv_tokens = kv_tokens_for_pools(compute_budget(m, dt, bi), m);
  // The first requests cannot hit: the first batch of `parallel` requests all miss, and the next
  // batch is admitted before any of them has cached the branching point.
  const int64_t warmup = 2 * p.parallel;

  const std::string g = "firecount";
  file.group(g);
  file.attr(g, "prefix_tokens", static_cast<int64_t>(p.prefix_len));
  file.attr(g, "question_tokens", fmt::format("{}..{}", p.question_min, p.question_max));
  file.attr(g, "questions", static_cast<int64_t>(p.questions));
  file.attr(g, "repeats", static_cast<int64_t>(p.repeats));
  file.attr(g, "output_tokens", static_cast<int64_t>(p.output_len));
  file.attr(g, "parallel", static_cast<int64_t>(p.parallel));
  file.attr(g, "warmup_requests", warmup);
  file.attr(g, "pool_contents", std::string(payload_mode_name(!o.no_payload)));
  Progress progress("firecount strategies", 2);
  for (const char* strategy : {"no_buffer", "extra_buffer"}) {
    Options os = o;
    os.mode = "int8";
    os.strategy = strategy;
    const EngineConfig ec = options_engine_config(os, m, kv_tokens);
    const FewShotResult r = run_fewshot(ec, p);
    const std::string sg = g + "/" + strategy;
    file.group(sg);
    write_cache_config(file, sg, ec.cache, ec.resolved_max_running(), ec.chunked_prefill);
    std::vector<int64_t> loads(r.cow_load.begin(), r.cow_load.end());
    const size_t n = r.cached.size();
    file.write(sg + "/cached_tokens", r.cached, {n}, "tokens",
               "cached tokens at admission, per request in send order");
    file.write(sg + "/dequant_load", loads, {n}, "1",
               "1 when the request's admission dequantized a cached state");
    write_cache_counters(file, sg + "/counters", r.counters, r.tree);
    int64_t after = 0;
    for (size_t i = static_cast<size_t>(warmup); i < n; ++i) after += loads[i];
    const double frac = static_cast<double>(r.dequant_loads) / static_cast<double>(r.requests);
    const double frac_after = n > static_cast<size_t>(warmup)
                                  ? static_cast<double>(after) / static_cast<double>(n - warmup)
                                  : 0.0;
    summary.set(fmt::format("firecount.{}.dequant_loads", strategy),
                static_cast<double>(r.dequant_loads));
    summary.set(fmt::format("firecount.{}.reuse_frac", strategy), r.reuse_frac);
    summary.set(fmt::format("firecount.{}.dequant_load_frac", strategy), frac);
    summary.set(fmt::format("firecount.{}.dequant_load_frac_after_warmup", strategy), frac_after);
    summary.set(fmt::format("firecount.{}.quantizes", strategy),
                static_cast<double>(r.counters.quantizes));
    summary.set(fmt::format("firecount.{}.wasted_quantizes", strategy),
                static_cast<double>(r.counters.wasted_quantizes));
    summary.set("firecount.requests", static_cast<double>(r.requests));
    fmt::print(
        "firecount: {:<12} {} requests, {} dequantize loads ({:.1f}%; {:.1f}% after the first {}), "
        "reuse_frac "
        "{:.3f}, {} quantizes ({} wasted)\n",
        strategy, r.requests, r.dequant_loads, 100.0 * frac, 100.0 * frac_after, warmup,
        r.reuse_frac, r.counters.quantizes, r.counters.wasted_quantizes);
    progress.tick();
  }
}

}  // namespace statecheck
