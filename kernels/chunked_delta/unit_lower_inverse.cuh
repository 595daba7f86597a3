// The UT transform of the chunked prefill (chunk_kernel.cuh, step 3): the inverse of the unit
// lower-triangular I + A of one 64-token chunk, by a block of at least 8 warps, in shared memory.
// Source of the block form: the 16 x 16 blocks of flash-linear-attention's solve_tril, and the
// identity (I + A) T = I read block row by block row (docs/chunked_prefill.md).
#pragma once

#include <cstdint>

#include "kernels/common/mma_sync.cuh"

namespace statecheck::cuda {
namespace {

// The 16 x 16 blocks of T = (I + A)^-1 for unit lower-triangular I + A, A strictly lower in `A`
// [64][LD] fp32 (row stride LD floats), into `T` [64][LD] (blocks on and below the diagonal; the
// diagonal blocks' upper parts are written as zeros, the blocks above them are not touched).
// Diagonal blocks by forward substitution in fp32 (warp w < 4: block w, lane l < 16: column l).
// Then block row i = 1, 2, 3 after one another, T_i,0..i-1 = -T_ii (A_i,0..i-1 T_0..i-1,0..i-1), on
// tensor cores with tf32 operands (warp w < 2 i: the 8 columns 8 w ..; rows of T above a column's
// diagonal are zero, so its product starts there). Every thread calls after_diagonal() after the
// barrier that ends the diagonal blocks (work that needs the block's earlier writes to shared
// memory done and touches neither A nor T). Ends with a barrier.
template <int LD, typename AfterDiagonal>
__device__ void invert_unit_lower(const float* A, float* T, int warp, int lane,
                                  AfterDiagonal after_diagonal) {
  if (warp < 4 && lane < 16) {
    const int b = warp * 16;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float acc = r == lane ? 1.0f : 0.0f;
#pragma unroll
      for (int c = 0; c < r; ++c) acc = __fmaf_rn(-A[(b + r) * LD + b + c], x[c], acc);
      x[r] = acc;
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) T[(b + r) * LD + b + lane] = x[r];
  }
  __syncthreads();
  after_diagonal();
  const int g = lane >> 2, t = lane & 3;
  for (int i = 1; i < 4; ++i) {
    const int r0 = 16 * i, n0 = warp * 8;
    if (n0 < r0) {
      float m[4] = {};
      for (int k0 = n0; k0 < r0; k0 += 8) {
        const uint32_t a[4] = {
            to_tf32(A[(r0 + g) * LD + k0 + t]), to_tf32(A[(r0 + g + 8) * LD + k0 + t]),
            to_tf32(A[(r0 + g) * LD + k0 + t + 4]), to_tf32(A[(r0 + g + 8) * LD + k0 + t + 4])};
        mma_m16n8k8_tf32(m, a, to_tf32(T[(k0 + t) * LD + n0 + g]),
                         to_tf32(T[(k0 + t + 4) * LD + n0 + g]));
      }
      float* out0 = T + (r0 + g) * LD + n0 + 2 * t;
      float* out1 = out0 + 8 * LD;
      out0[0] = m[0], out0[1] = m[1], out1[0] = m[2], out1[1] = m[3];
      __syncwarp();
      float o[4] = {};
#pragma unroll
      for (int k0 = 0; k0 < 16; k0 += 8) {
        const uint32_t a[4] = {to_tf32(T[(r0 + g) * LD + r0 + k0 + t]),
                               to_tf32(T[(r0 + g + 8) * LD + r0 + k0 + t]),
                               to_tf32(T[(r0 + g) * LD + r0 + k0 + t + 4]),
                               to_tf32(T[(r0 + g + 8) * LD + r0 + k0 + t + 4])};
        mma_m16n8k8_tf32(o, a, to_tf32(T[(r0 + k0 + t) * LD + n0 + g]),
                         to_tf32(T[(r0 + k0 + t + 4) * LD + n0 + g]));
      }
      __syncwarp();
      out0[0] = -o[0], out0[1] = -o[1], out1[0] = -o[2], out1[1] = -o[3];
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace statecheck::cuda
