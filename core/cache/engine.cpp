#include "core/cache/engine.h"

#include <algorithm>

#include "core/util/error.h"

namespace statecheck {

int EngineConfig::resolved_max_running() const {
  if (max_running > 0) return max_running;
  // SGLang model_runner _calculate_mamba_ratio: 3 (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO)
  // + the extra_buffer tracking slots (2 with overlap scheduling, 1 without).
  const int ratio = 3 + cache.tracking_slots();
  return std::max(1, cache.active_slots / ratio);
}

Engine::Engine(const EngineConfig& config)
    : cfg_(config), cache_(config.cache), max_running_(config.resolved_max_running()) {
  if (cfg_.chunked_prefill < 1)
    fail("engine: chunked prefill size must be >= 1, got {}", cfg_.chunked_prefill);
  if (cfg_.chunked_prefill % cfg_.cache.state_grid() != 0)
    fail(
        "engine: chunked prefill size {} is not a multiple of the state grid {} (lcm of chunk "
        "granularity and page size)",
        cfg_.chunked_prefill, cfg_.cache.state_grid());
}

int64_t Engine::submit(RequestSpec spec) {
  if (spec.prompt.empty()) fail("engine: request {} has an empty prompt", reqs_.size());
  if (spec.output_len < 1)
    fail("engine: request {} asks for {} output tokens (>= 1)", reqs_.size(), spec.output_len);
  auto r = std::make_unique<Req>();
  r->id = static_cast<int64_t>(reqs_.size());
  spec.arrival = std::max(spec.arrival, now_);
  r->tokens = spec.prompt;
  r->c.id = r->id;
  r->rec.id = r->id;
  r->rec.tag = spec.tag;
  r->rec.arrival = spec.arrival;
  r->rec.prompt_len = static_cast<int64_t>(spec.prompt.size());
  r->spec = std::move(spec);
  r->spec.prompt.clear();  // kept in `tokens`
  r->spec.prompt.shrink_to_fit();
  pending_.emplace(r->rec.arrival, r->id);
  reqs_.push_back(std::move(r));
  return reqs_.back()->id;
}

void Engine::admit_arrivals() {
  while (!pending_.empty() && pending_.top().first <= now_) {
    const int64_t id = pending_.top().second;
    pending_.pop();
    if (!reqs_[id]->rec.aborted) waiting_.push_back(id);
  }
}

void Engine::append_output(Req& r) {
  r.tokens.push_back(static_cast<int32_t>(-1 - (out_counter_++ % 2000000000)));
  ++r.generated;
}

void Engine::remove_running(int64_t id) {
  auto it = std::find(running_.begin(), running_.end(), id);
  if (it != running_.end()) running_.erase(it);
  if (chunked_ == id) chunked_ = -1;
}

void Engine::finish(Req& r, bool aborted) {
  if (aborted)
    cache_.release(r.c);
  else
    cache_.cache_finished(r.c, r.tokens.data());
  reserved_ -= r.reserve_left;
  r.reserve_left = 0;
  r.decoding = false;
  remove_running(r.id);
  r.rec.finished = now_;
  r.rec.output_len = r.generated;
  r.rec.aborted = aborted;
  r.tokens.clear();
  r.tokens.shrink_to_fit();
  records_.push_back(r.rec);
  if (on_finish) on_finish(records_.back());
}

void Engine::retract(Req& r) {
  cache_.release(r.c);
  reserved_ -= r.reserve_left;
  r.reserve_left = 0;
  r.fill_len = 0;
  r.decoding = false;
  ++r.rec.retractions;
  ++retractions_;
  remove_running(r.id);
  waiting_.push_back(r.id);
}

bool Engine::retract_one() {
  // SGLang retract_decode: keep the requests with the most outputs (then the shortest prompts);
  // retract from the other end. Only decoding requests are retracted.
  Req* victim = nullptr;
  for (int64_t id : running_) {
    Req& r = *reqs_[id];
    if (!r.decoding) continue;
    if (!victim || r.generated < victim->generated ||
        (r.generated == victim->generated && r.tokens.size() >= victim->tokens.size()))
      victim = &r;
  }
  if (!victim) return false;
  retract(*victim);
  return true;
}

bool Engine::ensure_kv(Req& r, int64_t n) {
  while (!cache_.alloc_kv(r.c, n)) {
    if (!retract_one()) return false;
  }
  return true;
}

std::vector<int64_t> Engine::running_ids() const {
  return running_;
}

bool Engine::try_prefill() {
  struct Item {
    Req* r;
    int64_t ext;
  };
  std::vector<Item> batch;
  int64_t budget = cfg_.chunked_prefill;
  if (chunked_ >= 0) {
    Req& r = *reqs_[chunked_];
    const int64_t ext =
        std::min<int64_t>(static_cast<int64_t>(r.tokens.size()) - r.fill_len, budget);
    batch.push_back({&r, ext});
    budget -= ext;
  }
  while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < max_running_) {
    Req& r = *reqs_[waiting_.front()];
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    cache_.match(r.c, r.tokens.data(), n);
    int64_t extend = n - r.c.hit_len;
    int64_t need = extend + (r.spec.output_len - r.generated - 1);
    if (!cache_.can_admit(r.c, reserved_ + need)) {
      // An idle engine whose active pool cannot hold a hit's copy next to its cached state (a
      // bf16 pool of one request's slots) runs the request as a miss rather than never.
      const bool idle = running_.empty() && chunked_ < 0;
      if (!idle || r.c.hit_len == 0) {
        cache_.cancel(r.c);
        break;
      }
      cache_.degrade_to_miss(r.c);
      extend = n;
      need = extend + (r.spec.output_len - r.generated - 1);
      if (!cache_.can_admit(r.c, reserved_ + need)) break;
    }
    cache_.admit(r.c, r.tokens.data(), n);
    r.reserve_left = need;
    reserved_ += need;
    r.rec.admitted = now_;
    r.rec.cached_tokens = r.c.hit_len;
    r.fill_len = r.c.hit_len;
    const int64_t ext = std::min(extend, budget);
    batch.push_back({&r, ext});
    budget -= ext;
    waiting_.pop_front();
    running_.push_back(r.id);
  }
  if (batch.empty()) return false;
  int64_t total = 0;
  for (const Item& it : batch) {
    Req& r = *it.r;
    if (!ensure_kv(r, it.ext))
      fail("engine: KV pool of {} tokens cannot hold request {} ({} prompt tokens)",
           cache_.kv().size(), r.id, r.rec.prompt_len);
    r.reserve_left -= it.ext;
    reserved_ -= it.ext;
    cache_.prefill_track(r.c, r.tokens.data(), r.fill_len, it.ext);
    r.fill_len += it.ext;
    total += it.ext;
  }
  now_ += cfg_.cost.prefill(total);
  ++iterations_;
  for (const Item& it : batch) {
    Req& r = *it.r;
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    if (r.fill_len < n) {
      cache_.cache_unfinished(r.c, r.tokens.data(), r.fill_len);
      chunked_ = r.id;
      continue;
    }
    if (chunked_ == r.id) chunked_ = -1;
    append_output(r);
    r.rec.first_token = now_;
    if (r.generated >= r.spec.output_len) {
      finish(r, false);
    } else {
      cache_.cache_unfinished(r.c, r.tokens.data(), r.fill_len);
      r.decoding = true;
    }
  }
  return true;
}

bool Engine::try_decode() {
  std::vector<int64_t> ids;
  for (int64_t id : running_)
    if (reqs_[id]->decoding) ids.push_back(id);
  if (ids.empty()) return false;
  // SGLang check_decode_mem / retract_decode: one KV token per request must be available.
  while (static_cast<int64_t>(ids.size()) > 1 &&
         cache_.kv().available() + cache_.tree().full_evictable() <
             static_cast<int64_t>(ids.size())) {
    retract_one();
    ids.clear();
    for (int64_t id : running_)
      if (reqs_[id]->decoding) ids.push_back(id);
  }
  for (int64_t id : ids) {
    Req& r = *reqs_[id];
    if (!cache_.alloc_kv(r.c, 1))
      fail("engine: KV pool of {} tokens exhausted in decode", cache_.kv().size());
    r.reserve_left -= 1;
    reserved_ -= 1;
  }
  now_ += cfg_.cost.decode(static_cast<int64_t>(ids.size()));
  ++iterations_;
  for (int64_t id : ids) {
    Req& r = *reqs_[id];
    append_output(r);
    cache_.decode_track(r.c, r.tokens.data(), r.c.kv_len);
    if (r.generated >= r.spec.output_len) finish(r, false);
  }
  return true;
}

bool Engine::step() {
  admit_arrivals();
  bool progressed = try_prefill() || try_decode();
  if (!progressed) {
    if (!pending_.empty()) {
      now_ = std::max(now_, pending_.top().first);
      admit_arrivals();
      progressed = true;
    } else if (!waiting_.empty()) {
      const Req& r = *reqs_[waiting_.front()];
      const std::string who = describe_request
                                  ? describe_request(r.rec.tag)
                                  : fmt::format("request {} (tag {})", r.id, r.rec.tag);
      fail(
          "engine: {} ({} prompt tokens, {} outputs) can never be admitted: KV pool {} tokens, "
          "active pool {} slots, {} per request (pools too small)",
          who, r.rec.prompt_len, r.spec.output_len, cache_.kv().size(),
          cache_.active().allocator().size(), cache_.config().slots_per_request());
    }
  }
  if (progressed && cfg_.check_invariants) check();
  return progressed;
}

void Engine::run() {
  while (step()) {
  }
}

void Engine::abort(int64_t id) {
  if (id < 0 || id >= static_cast<int64_t>(reqs_.size())) fail("engine: no request {}", id);
  Req& r = *reqs_[id];
  if (r.rec.aborted || r.rec.finished >= 0) return;
  if (std::find(running_.begin(), running_.end(), id) != running_.end()) {
    finish(r, true);
    return;
  }
  auto w = std::find(waiting_.begin(), waiting_.end(), id);
  if (w != waiting_.end()) waiting_.erase(w);
  // A pending request is skipped when its arrival comes up.
  r.rec.aborted = true;
  r.rec.finished = now_;
  r.rec.output_len = r.generated;
  records_.push_back(r.rec);
  if (on_finish) on_finish(records_.back());
}

void Engine::flush() {
  if (!running_.empty())
    fail("engine: cannot flush the cache while {} requests run", running_.size());
  cache_.flush();
}

void Engine::check() const {
  std::vector<const CacheRequest*> held;
  int64_t reserved = 0;
  for (int64_t id : running_) {
    const Req& r = *reqs_[id];
    if (!r.c.admitted)
      fail("engine invariant: running request {} is not admitted in the cache", id);
    held.push_back(&r.c);
    reserved += r.reserve_left;
  }
  for (int64_t id : waiting_) {
    const Req& r = *reqs_[id];
    if (r.c.admitted || r.c.active != kNoSlot)
      fail("engine invariant: waiting request {} holds cache resources", id);
  }
  if (reserved != reserved_)
    fail("engine invariant: {} KV tokens reserved, {} summed over requests", reserved_, reserved);
  cache_.check(held);
}

}  // namespace statecheck
