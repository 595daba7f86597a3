#include "core/workloads/workload.h"

#include <unordered_map>

#include "core/util/error.h"
#include "core/util/rng.h"

namespace statecheck {

std::vector<int32_t> synthetic_tokens(uint64_t seed, uint64_t stream, int64_t n) {
  Rng rng(mix_seed(seed, stream, 0x70c3e5));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = kSyntheticTokenBase + static_cast<int32_t>(rng.below(150000));
  return t;
}

std::vector<RequestRecord> run_closed_loop(Engine& engine, const std::vector<RequestSpec>& requests,
                                           int parallel) {
  if (parallel < 1) fail("closed-loop client: parallel must be >= 1, got {}", parallel);
  std::vector<int64_t> ids;
  ids.reserve(requests.size());
  size_t next = 0;
  auto send = [&] {
    RequestSpec s = requests[next++];
    s.arrival = engine.now();
    ids.push_back(engine.submit(std::move(s)));
  };
  auto previous = engine.on_finish;
  engine.on_finish = [&](const RequestRecord&) {
    if (next < requests.size()) send();
  };
  while (next < requests.size() && next < static_cast<size_t>(parallel)) send();
  engine.run();
  engine.on_finish = previous;
  std::unordered_map<int64_t, size_t> index;
  for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
  std::vector<RequestRecord> out(ids.size());
  for (const auto& rec : engine.records()) {
    auto it = index.find(rec.id);
    if (it != index.end()) out[it->second] = rec;
  }
  return out;
}

KSweepResult run_ksweep(const EngineConfig& config, const KSweepParams& p) {
  if (p.K < 1 || p.prefix_min < 1 || p.prefix_max < p.prefix_min || p.suffix < 1)
    fail("K-sweep: bad parameters K={} prefix {}..{} suffix {}", p.K, p.prefix_min, p.prefix_max,
         p.suffix);
  Rng len_rng(mix_seed(p.seed, 0x6b5e, static_cast<uint64_t>(p.K)));
  std::vector<RequestSpec> warm(p.K), probe(p.K);
  std::vector<int64_t> prefix_len(p.K);
  for (int i = 0; i < p.K; ++i) {
    const int64_t len =
        p.prefix_min +
        static_cast<int64_t>(len_rng.below(static_cast<uint64_t>(p.prefix_max - p.prefix_min + 1)));
    prefix_len[i] = len;
    const std::vector<int32_t> prefix =
        synthetic_tokens(p.seed, 1000 + static_cast<uint64_t>(i), len);
    for (int phase = 0; phase < 2; ++phase) {
      RequestSpec& s = (phase == 0 ? warm : probe)[i];
      s.prompt = prefix;
      const std::vector<int32_t> suffix = synthetic_tokens(
          p.seed, (phase == 0 ? 7ull : 13ull) << 40 | static_cast<uint64_t>(i), p.suffix);
      s.prompt.insert(s.prompt.end(), suffix.begin(), suffix.end());
      s.output_len = 1;
      s.tag = phase;
    }
  }
  // belady, future-count: the next-use index of this workload, in submission order (WARM, then
  // PROBE).
  EngineConfig cfg = config;
  if (policy_is_offline(cfg.cache.policy) && !cfg.cache.next_use)
    cfg.cache.next_use = std::make_shared<NextUseIndex>(
        2 * static_cast<size_t>(p.K),
        [&](size_t i) {
          return i < static_cast<size_t>(p.K) ? warm[i].prompt : probe[i - p.K].prompt;
        },
        cfg.cache.chunk_granularity);
  Engine engine(cfg);
  KSweepResult res;
  res.K = p.K;
  const auto warm_rec = run_closed_loop(engine, warm, p.parallel);
  const int64_t cow_before = engine.cache().counters().cow_loads;
  const auto probe_rec = run_closed_loop(engine, probe, p.parallel);
  res.probe_cow_loads = engine.cache().counters().cow_loads - cow_before;
  int64_t cached = 0, prompt = 0, prefix = 0, ceiling = 0, wc = 0, wp = 0;
  const int64_t cg = config.cache.chunk_granularity;
  for (int i = 0; i < p.K; ++i) {
    const RequestRecord& r = probe_rec[i];
    cached += r.cached_tokens;
    prompt += r.prompt_len;
    prefix += prefix_len[i];
    const int64_t warm_point = static_cast<int64_t>(warm[i].prompt.size()) / cg * cg;
    ceiling += warm_point <= prefix_len[i] ? warm_point : 0;
    res.probe_hits += r.cached_tokens > 0 ? 1 : 0;
  }
  for (const auto& r : warm_rec) {
    wc += r.cached_tokens;
    wp += r.prompt_len;
  }
  res.reuse_frac = prompt > 0 ? static_cast<double>(cached) / prompt : 0.0;
  res.warm_reuse_frac = wp > 0 ? static_cast<double>(wc) / wp : 0.0;
  res.prefix_fraction = prompt > 0 ? static_cast<double>(prefix) / prompt : 0.0;
  res.cached_prefix_fraction = prompt > 0 ? static_cast<double>(ceiling) / prompt : 0.0;
  res.counters = engine.cache().counters();
  res.tree = engine.cache().tree().counters();
  res.probe_records = probe_rec;
  return res;
}

FewShotResult run_fewshot(const EngineConfig& config, const FewShotParams& p) {
  if (p.prefix_len < 1 || p.question_min < 1 || p.question_max < p.question_min ||
      p.questions < 1 || p.repeats < 1 || p.output_len < 1)
    fail("few-shot: bad parameters");
  Engine engine(config);
  const std::vector<int32_t> prefix = synthetic_tokens(p.seed, 0xf5, p.prefix_len);
  Rng len_rng(mix_seed(p.seed, 0xf5f5));
  std::vector<std::vector<int32_t>> questions(p.questions);
  for (int q = 0; q < p.questions; ++q) {
    const int64_t len = p.question_min + static_cast<int64_t>(len_rng.below(static_cast<uint64_t>(
                                             p.question_max - p.question_min + 1)));
    questions[q] = synthetic_tokens(p.seed, 5000 + static_cast<uint64_t>(q), len);
  }
  std::vector<RequestSpec> reqs;
  for (int rep = 0; rep < p.repeats; ++rep)
    for (int q = 0; q < p.questions; ++q) {
      RequestSpec s;
      s.prompt = prefix;
      s.prompt.insert(s.prompt.end(), questions[q].begin(), questions[q].end());
      s.output_len = p.output_len;
      s.tag = static_cast<int64_t>(rep) * p.questions + q;
      reqs.push_back(std::move(s));
    }
  // Which admissions loaded a state: a copy-on-write happens exactly when the hit length is > 0
  // (a hit is a state-holding node); counted from the cache counters as a cross-check below.
  const auto rec = run_closed_loop(engine, reqs, p.parallel);
  FewShotResult res;
  res.requests = static_cast<int64_t>(rec.size());
  int64_t cached = 0, prompt = 0, loads = 0;
  for (const auto& r : rec) {
    res.cached.push_back(r.cached_tokens);
    res.cow_load.push_back(r.cached_tokens > 0 ? 1 : 0);
    cached += r.cached_tokens;
    prompt += r.prompt_len;
    loads += r.cached_tokens > 0 ? 1 : 0;
  }
  res.counters = engine.cache().counters();
  res.tree = engine.cache().tree().counters();
  res.dequant_loads = res.counters.cow_loads;
  if (engine.retractions() == 0 && loads != res.dequant_loads)
    fail("few-shot: {} admissions with a hit but {} copy-on-write loads counted", loads,
         res.dequant_loads);
  res.reuse_frac = prompt > 0 ? static_cast<double>(cached) / prompt : 0.0;
  return res;
}

}  // namespace statecheck
