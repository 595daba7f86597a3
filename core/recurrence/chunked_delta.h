// The chunked (UT-transform) form of the gated delta rule in fp64: the algorithm chunked prefill
// kernels run, written as plainly as the token loop of gated_delta.h so that a wrong kernel can be
// told apart from a wrong algorithm. docs/chunked_prefill.md derives it; sources: Yang, Kautz and
// Hatamizadeh, "Gated Delta Networks" (ICLR 2025) and Yang et al., "Parallelizing Linear
// Transformers with the Delta Rule over Sequence Length" (NeurIPS 2024, the WY/UT form).
//
// Per value head, chunk of n tokens r = 1..n starting from state S0 [d_v, d_k] (row i = value
// channel, column j = key channel), with q, k normalised as in the token loop (q carries the
// readout scale) and the cumulative log decay G_r[j] = sum_{s <= r} g_s[j] (GDN: the same for
// every j):
//   A[r, s] = beta_r sum_j k_r[j] k_s[j] exp(G_r[j] - G_s[j])            (s < r; 0 otherwise)
//   W[r, i] = beta_r (v_r[i] - sum_j S0[i, j] exp(G_r[j]) k_r[j])
//   (I + A) U = W                                                     (forward substitution)
//   o_r[i]  = sum_j S0[i, j] exp(G_r[j]) q_r[j] + sum_{s <= r} U[s, i] sum_j k_s[j] q_r[j]
//   exp(G_r[j] - G_s[j]) S_n[i, j] = S0[i, j] exp(G_n[j]) + sum_s U[s, i] k_s[j] exp(G_n[j] -
//   G_s[j])
// U's rows are exactly the token loop's beta_r (v_r - (S_{r-1} D_r) k_r), so the chunked form
// equals the token loop in exact arithmetic for every chunk size (chunk 1 is the token loop).
#pragma once

#include "core/state/layer_inputs.h"

namespace statecheck {

// One value head over tokens [t0, t1) in chunks of `chunk` tokens (the last chunk may be
// shorter): S_vk [d_v, d_k] fp64 updated in place; o_tv [t1 - t0, d_v] receives the outputs if not
// null. Same inputs and contract as gated_delta_head_fp64. Throws statecheck::Error if chunk < 1.
void gated_delta_head_chunked_fp64(const RecurrenceShape& shape, const LayerInputs& in, int head,
                                   int t0, int t1, int chunk, double* S_vk, double* o_tv);

// All heads of one layer: S_hvk [HV, d_v, d_k] in place; o_thv [t1 - t0, HV, d_v] if not null.
void gated_delta_layer_chunked_fp64(const RecurrenceShape& shape, const LayerInputs& in, int t0,
                                    int t1, int chunk, double* S_hvk, double* o_thv);

// FLOP model of the chunked form per value head and chunk of n tokens, counting a multiply-add as
// 2 FLOPs and every product as the dense matrix product a tensor-core kernel computes:
//   Q K^T and K K^T (2 n^2 d_k each), S0 K^T and S0 Q^T (2 n d_k d_v each), the triangular solve
//   (n^2 d_v), the intra-chunk readout (Q K^T) U (2 n^2 d_v) and the state update U^T K
//   (2 n d_k d_v): 4 n^2 d_k + 3 n^2 d_v + 6 n d_k d_v.
// Summed over the chunks of T tokens (the last one n = T mod chunk when that is not 0).
double chunked_delta_flops_per_head(long long T, int chunk, int dk, int dv);

}  // namespace statecheck
