// The token KV pool of the full-attention layers (docs/cache_model.md), modelled as counts.
//
// SGLang's TokenToKVPoolAllocator hands out one KV index per token and the radix tree stores those
// indices per node. Which index a token gets never changes a caching decision (only how many are
// free does), so the model keeps counts: a radix node's KV is its key length, a running request's
// KV is the number of its tokens beyond the cached prefix it locked. Documented in README "Cache
// model".
#pragma once

#include <cstdint>

#include "core/util/error.h"

namespace statecheck {

class KvPool {
 public:
  // `tokens` = N_kv >= 0 token slots. Throws statecheck::Error when negative.
  explicit KvPool(int64_t tokens) : size_(tokens), free_(tokens) {
    if (tokens < 0) fail("KV pool: size must be >= 0, got {}", tokens);
  }

  int64_t size() const { return size_; }
  int64_t available() const { return free_; }

  // Takes n >= 0 token slots; false (nothing taken) when fewer than n are free.
  bool alloc(int64_t n) {
    if (n < 0) fail("KV pool: cannot allocate {} tokens", n);
    if (n > free_) return false;
    free_ -= n;
    return true;
  }

  // Returns n >= 0 token slots. Throws when that would exceed the pool size (a double free).
  void free(int64_t n) {
    if (n < 0 || free_ + n > size_)
      fail("KV pool: freeing {} tokens with {} of {} free (double free)", n, free_, size_);
    free_ += n;
  }

  void clear() { free_ = size_; }

 private:
  int64_t size_ = 0;
  int64_t free_ = 0;
};

}  // namespace statecheck
