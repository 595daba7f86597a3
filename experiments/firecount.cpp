// Experiment `firecount`: the few-shot workload of docs/cache_model.md in int8 checkpoint mode,
// no_buffer vs extra_buffer: how often a request's admission dequantizes a cached state (the
// "dequant fire count").
//
// Workload: one fixed few-shot prefix of 800 tokens + a distinct question of 60..120 tokens per
// request, 300 questions (quick: 100) sent 3 times in the same order, 8 generated tokens each, 8 in
// flight. Pools: --active-slots (256), --ckpt-slots (absent: 2A); KV from the model's budget.
//
// Expected from the mechanism (docs/cache_model.md, the caching strategies): under no_buffer states
// exist only at sequence and chunk ends, so after the second request splits the first leaf at the
// branch point every request walks into a tombstone and hits nothing (no dequantize); under
// extra_buffer the recorded branching point is tracked and cached by the next admitted requests,
// and every request after the first few hits it.
//
// measure_firecount runs the workload under both strategies (FirecountResult); record_firecount
// writes the result file's datasets and the summary and prints one line per strategy.
#include <fmt/format.h>

#include "core/memory/memory_budget.h"
#include "core/util/progress.h"
#include "core/workloads/workload.h"
#include "experiments/cache_common.h"
#include "experiments/experiment.h"

namespace statecheck {

namespace {

// One strategy's run of the workload.
struct StrategyFires {
  EngineConfig config;  // int8 mode, the strategy, the pools of the options
  FewShotResult run;
  double dequant_load_frac = 0.0;  // dequantize loads / requests
  // The same over the requests after the first `warmup` (0 when there are none).
  double dequant_load_frac_after_warmup = 0.0;
};

struct FirecountResult {
  FewShotParams workload;
  // The first requests cannot hit: the first batch of `parallel` requests all miss, and the next
  // batch is admitted before any of them has cached the branching point.
  int64_t warmup = 0;
  bool payload = true;                    // the pools held state payloads (not bookkeeping only)
  std::vector<StrategyFires> strategies;  // no_buffer, extra_buffer
};

// Throws statecheck::Error when the pools leave no KV token (kv_tokens_for_pools).
FirecountResult measure_firecount(const Options& o, const ModelConfig& m) {
  FirecountResult r;
  FewShotParams& p = r.workload;
  p.questions = o.quick ? 100 : 300;
  p.seed = o.seed;
  const StateDtypes dt = options_dtypes(o);
  const BudgetInputs bi = options_budget_inputs(o, true);
  const int64_t kv_tokens = kv_tokens_for_pools(compute_budget(m, dt, bi), m);
  r.warmup = 2 * p.parallel;
  r.payload = !o.no_payload;
  Progress progress("firecount strategies", 2);
  for (CacheStrategy strategy : {CacheStrategy::no_buffer, CacheStrategy::extra_buffer}) {
    StrategyFires s;
    s.config = options_engine_config(o, m, CacheMode::int8, kv_tokens);
    s.config.cache.strategy = strategy;
    s.run = run_fewshot(s.config, p);
    const size_t n = s.run.cached.size();
    int64_t after = 0;
    for (size_t i = static_cast<size_t>(r.warmup); i < n; ++i) after += s.run.cow_load[i];
    s.dequant_load_frac =
        static_cast<double>(s.run.dequant_loads) / static_cast<double>(s.run.requests);
    s.dequant_load_frac_after_warmup =
        n > static_cast<size_t>(r.warmup)
            ? static_cast<double>(after) / static_cast<double>(n - r.warmup)
            : 0.0;
    r.strategies.push_back(std::move(s));
    progress.tick();
  }
  return r;
}

void record_firecount(const FirecountResult& r, H5Writer& file, Summary& summary) {
  const FewShotParams& p = r.workload;
  const int64_t warmup = r.warmup;
  const std::string g = "firecount";
  file.group(g);
  file.attr(g, "prefix_tokens", static_cast<int64_t>(p.prefix_len));
  file.attr(g, "question_tokens", fmt::format("{}..{}", p.question_min, p.question_max));
  file.attr(g, "questions", static_cast<int64_t>(p.questions));
  file.attr(g, "repeats", static_cast<int64_t>(p.repeats));
  file.attr(g, "output_tokens", static_cast<int64_t>(p.output_len));
  file.attr(g, "parallel", static_cast<int64_t>(p.parallel));
  file.attr(g, "warmup_requests", warmup);
  file.attr(g, "pool_contents", std::string(payload_mode_name(r.payload)));
  for (const StrategyFires& s : r.strategies) {
    const EngineConfig& ec = s.config;
    const FewShotResult& fr = s.run;
    const std::string strategy = cache_strategy_name(ec.cache.strategy);
    const std::string sg = g + "/" + strategy;
    file.group(sg);
    write_cache_config(file, sg, ec.cache, ec.resolved_max_running(), ec.chunked_prefill);
    const std::vector<int64_t> loads(fr.cow_load.begin(), fr.cow_load.end());
    const size_t n = fr.cached.size();
    file.write(sg + "/cached_tokens", fr.cached, {n}, "tokens",
               "cached tokens at admission, per request in send order");
    file.write(sg + "/dequant_load", loads, {n}, "1",
               "1 when the request's admission dequantized a cached state");
    write_cache_counters(file, sg + "/counters", fr.counters, fr.tree);
    const double frac = s.dequant_load_frac, frac_after = s.dequant_load_frac_after_warmup;
    summary.set(fmt::format("firecount.{}.dequant_loads", strategy),
                static_cast<double>(fr.dequant_loads));
    summary.set(fmt::format("firecount.{}.reuse_frac", strategy), fr.reuse_frac);
    summary.set(fmt::format("firecount.{}.dequant_load_frac", strategy), frac);
    summary.set(fmt::format("firecount.{}.dequant_load_frac_after_warmup", strategy), frac_after);
    summary.set(fmt::format("firecount.{}.quantizes", strategy),
                static_cast<double>(fr.counters.quantizes));
    summary.set(fmt::format("firecount.{}.wasted_quantizes", strategy),
                static_cast<double>(fr.counters.wasted_quantizes));
    summary.set("firecount.requests", static_cast<double>(fr.requests));
    fmt::print(
        "firecount: {:<12} {} requests, {} dequantize loads ({:.1f}%; {:.1f}% after the first {}), "
        "reuse_frac "
        "{:.3f}, {} quantizes ({} wasted)\n",
        strategy, fr.requests, fr.dequant_loads, 100.0 * frac, 100.0 * frac_after, warmup,
        fr.reuse_frac, fr.counters.quantizes, fr.counters.wasted_quantizes);
  }
}

}  // namespace

void run_firecount(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  record_firecount(measure_firecount(o, m), file, summary);
}

}  // namespace statecheck
