// Pieces the chunked prefill's fused kernel (chunk_kernel.cuh) and state pass (state_pass.cuh)
// share: a warp's part of the state tile [BV, 128] in mma accumulators (rows sm .. sm + 15,
// columns sn0 .. sn0 + 8 NTS, the m16n8 fp32 accumulator layout of mma_sync.cuh), read from and
// written to the pool slot, and a warp's output rows written as bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/common/mma_sync.cuh"
#include "kernels/common/vector_io.cuh"
#include "kernels/gated_delta/pool_params.h"

namespace statecheck::cuda {
namespace {

// acc[n] <- the state rows sm + g, sm + g + 8, columns sn0 + 8 n + 2 t, + 1 (g = lane / 4,
// t = lane % 4) of `state` ([rows][128], fp32 or bf16).
template <int NTS, typename StateT>
__device__ __forceinline__ void load_state_tile(float (&acc)[NTS][4], const StateT* state, int sm,
                                                int sn0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < NTS; ++n) {
    const int col = sn0 + n * 8 + 2 * t;
    load_vec<2>(state + (sm + g) * 128 + col, &acc[n][0]);
    load_vec<2>(state + (sm + g + 8) * 128 + col, &acc[n][2]);
  }
}

// The inverse of load_state_tile (bf16 rounds to nearest even).
template <int NTS, typename StateT>
__device__ __forceinline__ void store_state_tile(const float (&acc)[NTS][4], StateT* state, int sm,
                                                 int sn0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < NTS; ++n) {
    const int col = sn0 + n * 8 + 2 * t;
    store_vec<2>(state + (sm + g) * 128 + col, &acc[n][0]);
    store_vec<2>(state + (sm + g + 8) * 128 + col, &acc[n][2]);
  }
}

// The outputs of chunk rows rm .. rm + 15 below n (tokens c0 + row), value columns col0 ..
// col0 + 8 NT of head h, from the accumulators acc, as bf16 into o [T, HV, d_v].
template <int NT>
__device__ __forceinline__ void store_output_rows(const float (&acc)[NT][4], const PoolParams& p,
                                                  int c0, int n, int h, int rm, int col0,
                                                  int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = col0 + nt * 8 + 2 * t;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = rm + g + hr * 8;
      if (r < n)
        *reinterpret_cast<uint32_t*>(p.o + (static_cast<size_t>(c0 + r) * p.HV + h) * p.dv + col) =
            pack_bf16x2(acc[nt][2 * hr], acc[nt][2 * hr + 1]);
    }
  }
}

}  // namespace
}  // namespace statecheck::cuda
