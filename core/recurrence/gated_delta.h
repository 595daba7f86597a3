// Reference implementations of the gated delta rule (GDN and KDA), per value head, state layout
// [HV, d_v, d_k] (row i = value channel, column j = key channel).
//
// Per token t and value head h (key head h / (HV / H)), docs/numerics.md, "The recurrence":
//   q, k <- q / ||q||, k / ||k||     over d_k, when qk_l2norm (||x|| = sqrt(sum x^2 + 1e-6), the
//                                    epsilon of flash-linear-attention's l2norm)
//   S  <- S * exp(g_t)               GDN: scalar g_t[h]; KDA: column j scaled by exp(g_t[h, j])
//   u   = S k                        [d_v]
//   S  <- S + beta_t (v_t - u) k^T
//   o_t = S (scale * q)              [d_v], scale = d_k^-1/2 by default
// Gates are log-space decays (g <= 0), beta in (0, 1). Cross-checked for semantics against
// flash-linear-attention fla/ops/gated_delta_rule/naive.py and fla/ops/kda/naive.py (which keep the
// transposed layout [d_k, d_v]).
//
// Two references: an fp64 scalar loop (ground truth for tests) and an fp32 Eigen implementation
// (the "fp32 reference" of the experiments). The fp32 one can emulate a bf16 state stored between
// tokens (Dtype::bf16), so codec error and kernel error can be measured apart.
#pragma once

#include "core/dtype/dtype.h"
#include "core/state/layer_inputs.h"

namespace statecheck {

// fp64 ground truth for one value head over tokens [t0, t1): S_vk [d_v, d_k] is updated in place;
// if o_tv is not null it receives [t1 - t0, d_v] outputs.
void gated_delta_head_fp64(const RecurrenceShape& shape, const LayerInputs& in, int head, int t0,
                           int t1, double* S_vk, double* o_tv);

// fp32 reference (Eigen) for one value head over tokens [t0, t1); same contract as the fp64 loop.
// `storage`: how the state is kept between tokens: Dtype::fp32 (as computed) or Dtype::bf16
// (rounded to bf16 after every token, as a decode kernel with a bf16 state pool keeps it; o_t is
// read from the fp32 value before rounding). Other dtypes are an Error.
void gated_delta_head_fp32(const RecurrenceShape& shape, const LayerInputs& in, int head, int t0,
                           int t1, float* S_vk, float* o_tv, Dtype storage = Dtype::fp32);

// All heads of one layer: S_hvk [HV, d_v, d_k] in place; o [t1 - t0, HV, d_v] if not null.
void gated_delta_layer_fp32(const RecurrenceShape& shape, const LayerInputs& in, int t0, int t1,
                            float* S_hvk, float* o_thv, Dtype storage = Dtype::fp32);
void gated_delta_layer_fp64(const RecurrenceShape& shape, const LayerInputs& in, int t0, int t1,
                            double* S_hvk, double* o_thv);

// Flops the experiments count per value head and token: 6 * d_k * d_v (decay, S k, rank-1 update,
// readout: about three multiply-adds per state element).
inline double gated_delta_flops_per_head_token(int dk, int dv) {
  return 6.0 * dk * dv;
}

}  // namespace statecheck
