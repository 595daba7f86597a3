// Error handling for CUDA runtime calls: every call is checked and a failure becomes a
// statecheck::Error naming the call site and the CUDA error string.
#pragma once

#include <string>

#include <cuda_runtime.h>

#include "core/util/error.h"

namespace statecheck::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file,
                                          int line) {
  fail("CUDA error at {}:{} in {}: {} ({})", file, line, what, cudaGetErrorString(e),
       static_cast<int>(e));
}

}  // namespace statecheck::cuda

// Checks a CUDA runtime call; throws statecheck::Error on failure.
#define STATECHECK_CUDA_CHECK(expr)                                                          \
  do {                                                                                       \
    const cudaError_t statecheck_cuda_err_ = (expr);                                         \
    if (statecheck_cuda_err_ != cudaSuccess)                                                 \
      ::statecheck::cuda::throw_cuda_error(statecheck_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// Checks the last kernel launch (launch-configuration errors); throws on failure.
#define STATECHECK_CUDA_CHECK_LAUNCH(what) STATECHECK_CUDA_CHECK(cudaGetLastError())
