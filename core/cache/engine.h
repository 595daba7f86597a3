// A request scheduler model of a serving engine around the state cache (docs/cache_model.md; SGLang
// managers/scheduler.py get_new_batch_prefill / PrefillAdder, schedule_batch.py prepare_for_extend
// / prepare_for_decode / retract_decode, scheduler_output_processor process_batch_result_*).
//
// Each scheduler iteration runs one forward batch, prefill first (SGLang's default):
//   prefill: the in-progress chunked request continues, then waiting requests are admitted first
//     come first served while the chunked-prefill token budget lasts: match (copy-on-write slot
//     taken), admission check (running < max_running, active slots, KV), lock, slot allocation,
//     copy-on-write load, KV allocation (evicting the least recent unlocked leaves), extra_buffer
//     tracking. A request whose prompt exceeds the budget is prefilled in chunks. After the
//     forward: chunk end -> cache_unfinished; prompt done -> first token; finished ->
//     cache_finished, else cache_unfinished (the prompt becomes matchable) and decode.
//   decode: every running request processes its last token (one KV token each; when the pool
//     cannot provide them the request with the fewest outputs and the longest prompt is retracted
//     first, as SGLang's retract_decode does), extra_buffer tracks at the track interval, finished
//     requests are cached.
//   otherwise simulated time jumps to the next arrival.
// The first waiting request that cannot be admitted blocks the queue (FCFS); its copy-on-write
// slot is given back. Only an idle engine whose active pool cannot hold that request's hit next to
// its cached state (a bf16 pool of one request's slots) admits it as a miss instead. KV admission
// reserves a request's whole remaining need (prompt extend + outputs), like SGLang's PrefillAdder
// with new_token_ratio = 1.
//
// Token ids: prompts come from the workload; generated tokens get unique negative ids (they never
// match anything), one per output token.
//
// Simulated time (seconds) follows the documented cost model below; it orders arrivals, admissions
// and finishes and so bounds concurrency. Deterministic: no randomness, ties broken by request id.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "core/cache/state_cache.h"

namespace statecheck {

// Time of one forward iteration, in seconds. Round planning figures for one TP-4 group of H200s
// serving a ~3B-active MoE hybrid model, not measurements: prefill is compute-bound at 50k tokens/s
// (20 us/token), a decode step costs 4 ms + 0.1 ms per running sequence. Only the order of events
// depends on them; hit rates and counters are functions of that order.
struct CostModel {
  double iteration_s = 0.004;       // fixed cost of every forward (launch, scheduling, sampling)
  double prefill_token_s = 2.0e-5;  // per prefill (extend) token
  double decode_seq_s = 1.0e-4;     // per sequence in a decode batch

  double prefill(int64_t tokens) const {
    return iteration_s + prefill_token_s * static_cast<double>(tokens);
  }
  double decode(int64_t seqs) const {
    return iteration_s + decode_seq_s * static_cast<double>(seqs);
  }
};

struct EngineConfig {
  CacheConfig cache;
  int max_running = 0;  // 0: A / SGLang _calculate_mamba_ratio (3, +2 or +1 extra_buffer)
  int64_t chunked_prefill =
      8192;  // token budget of one prefill batch (SGLang chunked_prefill_size)
  CostModel cost;
  bool check_invariants = false;  // check every invariant after every iteration (tests)

  // SGLang's running-request cap from the active pool: A / (3 + tracking slots).
  int resolved_max_running() const;
};

struct RequestSpec {
  std::vector<int32_t> prompt;  // token ids, non-empty
  int32_t output_len = 1;       // generated tokens (>= 1: the first comes with the prefill)
  double arrival = 0.0;         // seconds; earlier than the engine's clock means "now"
  int64_t tag = 0;              // caller's label (workload phase, trace line, ...)
};

// Outcome of one request, written when it finishes (or is aborted).
struct RequestRecord {
  int64_t id = -1;
  int64_t tag = 0;
  double arrival = 0.0;
  double admitted = -1.0;     // last admission
  double first_token = -1.0;  // end of its prefill
  double finished = -1.0;
  int64_t prompt_len = 0;
  int64_t cached_tokens = 0;  // hit length at its last admission (SGLang meta_info.cached_tokens)
  int32_t output_len = 0;
  int32_t retractions = 0;
  bool aborted = false;
};

class Engine {
 public:
  // Throws statecheck::Error on an invalid configuration (see CacheConfig::validate).
  explicit Engine(const EngineConfig& config);

  // Queues a request (arrival in the future, or now). Returns its id (0, 1, 2, ... in submission
  // order). Throws on an empty prompt or output_len < 1.
  int64_t submit(RequestSpec spec);

  // One scheduler iteration (prefill, else decode, else a jump to the next arrival). Returns false
  // when there is nothing left to do. Throws statecheck::Error when the head of the queue can never
  // be admitted (pools too small) or an invariant breaks (check_invariants).
  bool step();
  // step() until nothing is left.
  void run();

  // Aborts a pending, waiting or running request: its KV and slots are freed, nothing is cached.
  void abort(int64_t id);
  // Flushes the cache (SGLang flush_cache); refused with statecheck::Error while requests run.
  void flush();
  // Retracts the running request with the fewest outputs / longest prompt (SGLang retract_decode
  // order) back to the waiting queue; false when nothing is running.
  bool retract_one();

  // Called for every finished (or aborted) request, at the engine's current time; may submit.
  std::function<void(const RequestRecord&)> on_finish;
  // Optional: how an error message names a request, from its tag (the caller's label, e.g. a trace
  // line). Without it a request is named by its id and tag.
  std::function<std::string(int64_t tag)> describe_request;

  double now() const { return now_; }
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  int pending() const { return static_cast<int>(pending_.size()); }
  int max_running() const { return max_running_; }
  int64_t iterations() const { return iterations_; }
  int64_t retractions() const { return retractions_; }
  const std::vector<RequestRecord>& records() const { return records_; }
  StateCache& cache() { return cache_; }
  const StateCache& cache() const { return cache_; }
  const EngineConfig& config() const { return cfg_; }
  // Ids of running requests (admitted), in admission order.
  std::vector<int64_t> running_ids() const;

  // Every cache invariant plus the engine's own (reservations, queues). Throws statecheck::Error.
  void check() const;

 private:
  struct Req {
    int64_t id = -1;
    RequestSpec spec;
    std::vector<int32_t> tokens;  // prompt + generated so far
    int32_t generated = 0;
    int64_t fill_len = 0;      // tokens computed by prefill so far
    int64_t reserve_left = 0;  // KV tokens still reserved for this request
    bool decoding = false;
    CacheRequest c;
    RequestRecord rec;
  };
  struct PendingOrder {
    bool operator()(const std::pair<double, int64_t>& a,
                    const std::pair<double, int64_t>& b) const {
      return a > b;  // min-heap on (arrival, id)
    }
  };

  bool try_prefill();
  bool try_decode();
  void admit_arrivals();
  void finish(Req& r, bool aborted);
  void retract(Req& r);
  void append_output(Req& r);
  bool ensure_kv(Req& r, int64_t n);
  void remove_running(int64_t id);

  EngineConfig cfg_;
  StateCache cache_;
  int max_running_ = 0;
  double now_ = 0.0;
  int64_t iterations_ = 0;
  int64_t retractions_ = 0;
  int64_t reserved_ = 0;     // KV tokens reserved by admitted requests
  int64_t out_counter_ = 0;  // generated token ids: -(1 + out_counter_)
  int64_t chunked_ = -1;     // request in chunked prefill
  std::vector<std::unique_ptr<Req>> reqs_;
  std::priority_queue<std::pair<double, int64_t>, std::vector<std::pair<double, int64_t>>,
                      PendingOrder>
      pending_;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> running_;
  std::vector<RequestRecord> records_;
};

}  // namespace statecheck
