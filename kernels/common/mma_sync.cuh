// Warp-level tensor-core products from shared memory (mma.sync, fp32 accumulate; sm_80 and
// later, PTX ISA "Warp-level matrix multiply-accumulate instructions"), used by the chunked
// prefill kernels: bf16 m16n8k16 through warp_mma below, and tf32 m16n8k8 (mma_m16n8k8_tf32) for
// the fp32 triangular inverse. A warp computes a 16 x (8 NT) tile of D += A B with A [16, K] and
// B [K, 8 NT], fetching fragments with ldmatrix. Each operand lives in shared memory as bf16 in
// one of two row-major layouts, picked per call:
//   A: a_rows   A itself, [m][k] (row stride lda elements)
//      a_trans  its transpose, [k][m]
//   B: b_rows   B's transpose, [n][k]: the rows of the right factor of X Y^T
//      b_trans  B itself, [k][n]
// Row strides must keep every row 16-byte aligned and, to avoid bank conflicts, should be an odd
// multiple of 8 elements modulo 64 (8 + a multiple of 64: 72, 136; or 40). The accumulator
// fragment of an n-tile is acc[n][0..3] = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1] with
// g = lane / 4, t = lane % 4 (the PTX layout of the m16n8 fp32 accumulator).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/common/bulk_copy.cuh"

namespace statecheck::cuda {

template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A B for one m16n8k8 tile with tf32 operands (fp32 values rounded to 10-bit mantissas by
// to_tf32). Fragments: a[0] = A[g][t], a[1] = A[g + 8][t], a[2] = A[g][t + 4], a[3] = A[g + 8][t +
// 4]; b0 = B[t][g], b1 = B[t + 4][g]; d as for m16n8k16.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A fragment of rows m0 .. m0 + 15, columns k0 .. k0 + 15 of A.
template <bool A_TRANS>
__device__ __forceinline__ void load_a_fragment(uint32_t (&a)[4], const __nv_bfloat16* s, int ld,
                                                int m0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  if constexpr (A_TRANS)  // s = A^T [k][m]: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k
                          // 8-15), ...
    ldmatrix_x4<true>(a, s + (k0 + r + (mat >> 1) * 8) * ld + m0 + (mat & 1) * 8);
  else
    ldmatrix_x4<false>(a, s + (m0 + r + (mat & 1) * 8) * ld + k0 + (mat >> 1) * 8);
}

// The B fragments of two n-tiles (columns n0 .. n0 + 7 and n0 + 8 .. n0 + 15), rows k0 .. k0 + 15:
// b[0], b[1] for the first tile, b[2], b[3] for the second.
template <bool B_TRANS>
__device__ __forceinline__ void load_b_fragments(uint32_t (&b)[4], const __nv_bfloat16* s, int ld,
                                                 int n0, int k0, int lane) {
  const int mat = lane >> 3, r = lane & 7;
  if constexpr (B_TRANS)  // s = B [k][n]
    ldmatrix_x4<true>(b, s + (k0 + r + (mat & 1) * 8) * ld + n0 + (mat >> 1) * 8);
  else  // s = B^T [n][k]
    ldmatrix_x4<false>(b, s + (n0 + r + (mat >> 1) * 8) * ld + k0 + (mat & 1) * 8);
}

// acc[n] += A[m0 .. m0 + 15, 0 .. K) B[0 .. K, n0 + 8 n .. n0 + 8 n + 7] for n < NT (NT even).
template <int NT, int K, bool A_TRANS, bool B_TRANS>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], const __nv_bfloat16* a, int lda,
                                         int m0, const __nv_bfloat16* b, int ldb, int n0,
                                         int lane) {
  static_assert(NT % 2 == 0 && K % 16 == 0, "warp_mma: NT even, K a multiple of 16");
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    uint32_t af[4];
    load_a_fragment<A_TRANS>(af, a, lda, m0, k, lane);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf[4];
      load_b_fragments<B_TRANS>(bf, b, ldb, n0 + n * 8, k, lane);
      mma_m16n8k16(acc[n], af, bf[0], bf[1]);
      mma_m16n8k16(acc[n + 1], af, bf[2], bf[3]);
    }
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Stores a warp's 16 x (8 NT) accumulator tile at rows m0.., columns n0.. of a row-major bf16
// array (rounded to nearest even), each value multiplied by row_scale(row) first.
template <int NT, typename RowScale>
__device__ __forceinline__ void store_tile_bf16(const float (&acc)[NT][4], __nv_bfloat16* s, int ld,
                                                int m0, int n0, int lane, RowScale row_scale) {
  const int g = lane >> 2, t = lane & 3;
  const float f0 = row_scale(m0 + g), f1 = row_scale(m0 + g + 8);
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int col = n0 + n * 8 + 2 * t;
    *reinterpret_cast<uint32_t*>(s + (m0 + g) * ld + col) =
        pack_bf16x2(acc[n][0] * f0, acc[n][1] * f0);
    *reinterpret_cast<uint32_t*>(s + (m0 + g + 8) * ld + col) =
        pack_bf16x2(acc[n][2] * f1, acc[n][3] * f1);
  }
}

}  // namespace statecheck::cuda
