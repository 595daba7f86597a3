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

#include <cmath>
#include <cstdint>

#include "core/dtype/dtype.h"
#include "core/state/layer_inputs.h"
#include "core/working_state/format.h"

namespace statecheck {

// The epsilon of the q / k L2 normalisation: x / sqrt(sum x^2 + eps) (flash-linear-attention's
// and transformers' l2norm).
constexpr double kQkL2NormEps = 1e-6;

// The norms one token's q and k rows (d_k fp32 values each) are divided by in the fp64 loop:
// sqrt(sum x^2 + kQkL2NormEps), summed in fp64 in index order; both 1 when `l2norm` is false.
struct QkNorms {
  double q = 1.0, k = 1.0;
};
inline QkNorms qk_norms_fp64(const float* q, const float* k, int dk, bool l2norm) {
  QkNorms n;
  if (!l2norm) return n;
  double sq = 0.0, sk = 0.0;
  for (int j = 0; j < dk; ++j) {
    sq += static_cast<double>(q[j]) * q[j];
    sk += static_cast<double>(k[j]) * k[j];
  }
  n.q = std::sqrt(sq + kQkL2NormEps);
  n.k = std::sqrt(sk + kQkL2NormEps);
  return n;
}

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

// A working-state run (docs/working_state.md): after every token's fp32 (or fp64) update the
// state is stored in `format` and the next token reads it back; the output of the token is read
// from the update before storage. `seed`, `layer` and `sequence` key the stochastic roundings
// (core/working_state/philox.h: key (seed, layer, head), counter (element, token, sequence));
// the token index is the absolute position t of the bound inputs.
struct WorkingStateRun {
  WorkingStateFormat format;
  uint64_t seed = 0;
  int layer = 0;
  int sequence = 0;
};

// The fp32 reference with a working-state format, one value head over tokens [t0, t1): S_vk
// [d_v, d_k] holds the stored state (decoded, as the next token reads it) and is updated in place;
// e_vk [d_v, d_k] is the error-feedback residual carried between tokens (read and written for
// int8-ef and int8-ef-int4, ignored and may be null otherwise; start from zeros); o_tv as above.
// Per token: the step of gated_delta_head_fp32 (the same operations in the same order), the
// output, then ws_store_head (core/working_state/column_store.h). Format fp32 is bit for bit
// gated_delta_head_fp32 with Dtype::fp32 storage, format bf16 with Dtype::bf16. A non-finite
// state before storage is a statecheck::Error naming layer, head and token.
void gated_delta_head_fp32_ws(const RecurrenceShape& shape, const LayerInputs& in, int head, int t0,
                              int t1, float* S_vk, float* e_vk, float* o_tv,
                              const WorkingStateRun& ws);

// The fp64 loop with a working-state format: the step in fp64; for any format but fp32 the state
// is rounded to fp32 after the step, stored through the same fp32 encode (ws_store_head) and
// widened back, so the fp32 and fp64 implementations differ only by their steps. Format fp32
// keeps the fp64 state unrounded (the plain fp64 loop, the ground truth). e_vk as above (fp32).
void gated_delta_head_fp64_ws(const RecurrenceShape& shape, const LayerInputs& in, int head, int t0,
                              int t1, double* S_vk, float* e_vk, double* o_tv,
                              const WorkingStateRun& ws);

// All heads of one layer: S_hvk and e_hvk [HV, d_v, d_k], o [t1 - t0, HV, d_v] if not null.
void gated_delta_layer_fp32_ws(const RecurrenceShape& shape, const LayerInputs& in, int t0, int t1,
                               float* S_hvk, float* e_hvk, float* o_thv, const WorkingStateRun& ws);
void gated_delta_layer_fp64_ws(const RecurrenceShape& shape, const LayerInputs& in, int t0, int t1,
                               double* S_hvk, float* e_hvk, double* o_thv,
                               const WorkingStateRun& ws);

// Flops the experiments count per value head and token: 6 * d_k * d_v (decay, S k, rank-1 update,
// readout: about three multiply-adds per state element).
inline double gated_delta_flops_per_head_token(int dk, int dv) {
  return 6.0 * dk * dv;
}

}  // namespace statecheck
