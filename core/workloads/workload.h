// Synthetic workloads of the cache experiments (docs/cache_model.md) and the closed-loop
// client that drives them (SGLang benchmark/bench_linear_attention/bench_int8_checkpoint_reuse.py:
// a thread pool of `parallel` workers, each sending its next request when the previous returns).
#pragma once

#include <cstdint>
#include <vector>

#include "core/cache/engine.h"

namespace statecheck {

// Token ids of synthetic text: uniform in [kSyntheticTokenBase, kSyntheticTokenBase + 150000)
// (a 150k vocabulary; trace tokens and generated tokens use other ranges).
constexpr int32_t kSyntheticTokenBase = 1 << 28;
std::vector<int32_t> synthetic_tokens(uint64_t seed, uint64_t stream, int64_t n);

// Sends `requests` in order with at most `parallel` in flight: the first `parallel` at the engine's
// current time, each further one when a request finishes. Runs the engine until idle. Returns the
// records of these requests, in submission order. Throws on parallel < 1.
std::vector<RequestRecord> run_closed_loop(Engine& engine, const std::vector<RequestSpec>& requests,
                                           int parallel);

// K-sweep (capacity): K distinct prefixes of prefix_min..prefix_max tokens (uniform per prefix;
// the default is exactly 1000, the benchmark's --prefix-tokens),
// WARM: every prefix + an 8-token suffix, then PROBE: every prefix + a different 8-token suffix,
// one output token each, `parallel` in flight. reuse_frac = sum(cached) / sum(prompt) over PROBE.
struct KSweepParams {
  int K = 128;
  int prefix_min = 1000;
  int prefix_max = 1000;
  int suffix = 8;
  int parallel = 8;
  uint64_t seed = 0;
};

struct KSweepResult {
  int K = 0;
  double reuse_frac = 0.0;       // PROBE
  double warm_reuse_frac = 0.0;  // WARM (distinct prefixes: ~0 unless prefixes collide)
  double prefix_fraction = 0.0;  // sum(prefix) / sum(prompt) over PROBE
  // sum over PROBE of the WARM request's cacheable point (prefix + suffix floored to Cg, when that
  // lies inside the shared prefix; else 0) / sum(prompt): the reuse of an unbounded extra_buffer
  // cache, the ceiling of reuse_frac.
  double cached_prefix_fraction = 0.0;
  int64_t probe_hits = 0;                    // PROBE requests with a hit
  int64_t probe_cow_loads = 0;               // copy-on-write loads during PROBE
  CacheCounters counters;                    // whole run
  RadixCounters tree;                        // whole run
  std::vector<RequestRecord> probe_records;  // PROBE requests, in submission order
};

// Runs one K on a fresh engine built from `config` (under belady without an index, with the
// next-use index of this workload). Throws on bad parameters.
KSweepResult run_ksweep(const EngineConfig& config, const KSweepParams& p);

// Few-shot (dequant fire count): one fixed prefix of `prefix_len` tokens + a distinct question of
// question_min..question_max tokens per request, `questions` questions sent `repeats` times (same
// order), `output_len` generated tokens each, `parallel` in flight.
struct FewShotParams {
  int prefix_len = 800;
  int question_min = 60;
  int question_max = 120;
  int questions = 300;
  int repeats = 3;
  int output_len = 8;
  int parallel = 8;
  uint64_t seed = 0;
};

struct FewShotResult {
  int64_t requests = 0;
  int64_t dequant_loads = 0;      // copy-on-write loads (int8: dequantizes)
  double reuse_frac = 0.0;        // sum(cached) / sum(prompt) over all requests
  std::vector<int64_t> cached;    // cached tokens per request, in send order
  std::vector<uint8_t> cow_load;  // 1 when the request's admission loaded a state
  CacheCounters counters;
  RadixCounters tree;
};

FewShotResult run_fewshot(const EngineConfig& config, const FewShotParams& p);

}  // namespace statecheck
