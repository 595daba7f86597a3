// Dense fp32 products of the tiny language model with a fixed summation order per output.
//
// Every output element is computed by the same sequence of fp32 operations whatever the number of
// rows, the tile it falls in, or the thread that computes it, so a forward pass over tokens
// [0, T) equals, bit for bit, one over [0, t) followed by one over [t, T) (tests/test_tinylm.cpp).
// A BLAS or Eigen product does not promise this: its blocking, and with it the order in which a
// dot product is summed, changes with the matrix sizes.
#pragma once

namespace statecheck {

// Y[t, n] = sum_k X[t, k] * W[n, k] (y = x W^T, the layout of a PyTorch nn.Linear weight).
//   X [T, K] row-major fp32; W [N, K] row-major fp32; Y [T, N] row-major fp32, overwritten (or
//   added to when `accumulate`: Y[t, n] = Y[t, n] + dot, one rounding).
// Order of one dot product: eight partial sums, lane l accumulating k = l, l + 8, l + 16, ...
// (k < 8 * floor(K / 8)) in increasing k, each step `s = s + x * w` rounded twice (no fused
// multiply-add: the project builds with -ffp-contract=off); the lanes reduced as
// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)); then the remaining K % 8 products added in
// increasing k. X, W and Y must not overlap. T, K, N >= 0.
void linear_fixed_order(const float* X, int T, int K, const float* W, int N, float* Y,
                        bool accumulate = false);

}  // namespace statecheck
