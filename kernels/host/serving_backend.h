// The CUDA serving backend (core/backend/serving_backend.h): the pools in device memory, hits
// through checkpoint_load (int8: dequantize; bf16: the slot copy), misses and suffixes through
// chunked_prefill_pool (the chunked prefill engines run; gated_delta_pool's recurrent prefill for
// shapes the chunked kernel does not take), donates through checkpoint_store, CUDA events around
// each timed piece of work on one stream.
#pragma once

#include <memory>

#include "core/backend/serving_backend.h"

namespace statecheck::cuda {

// Allocates the pools for `shape`, uploads a synthetic token stream of `gate`'s init drive drawn
// from `seed` long enough for `parallel` requests of `max_prompt` tokens, prefills the cached
// state over `max_prompt` tokens and donates it once (untimed warm-up). Needs a usable GPU (checked
// once by the command line); throws statecheck::Error on a CUDA failure.
std::unique_ptr<ServingBackend> cuda_serving_backend(const ServingShape& shape, int64_t max_prompt,
                                                     uint64_t seed);

}  // namespace statecheck::cuda
