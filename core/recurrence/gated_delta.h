// Reference implementations of the gated delta rule (GDN and KDA), per value head, state layout
// [HV, d_v, d_k] (row i = value channel, column j = key channel).
//
// Per token t and value head h (key head h / (HV / H)), spec numerics.md section 1:
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
// tokens (StateStorage::bf16), so codec error and kernel error can be measured apart.
#pragma once

#include <vector>

#include "core/model/model_config.h"

namespace statecheck {

struct RecurrenceShape {
  int H = 0;   // key heads (per shard)
  int HV = 0;  // value heads (per shard), HV % H == 0
  int dk = 0;
  int dv = 0;
  GateKind gate = GateKind::gdn;
  bool qk_l2norm = true;
  float scale = 0.0f;  // readout scale; 0 means d_k^-1/2

  float effective_scale() const;
  int group() const { return HV / H; }  // value heads per key head
  // Number of gate values per token: HV (GDN) or HV * d_k (KDA).
  int gate_width() const { return gate == GateKind::gdn ? HV : HV * dk; }
  // Shape of one layer of a model at its TP shard.
  static RecurrenceShape of_model(const ModelConfig& m);
};

// Inputs of one layer for T tokens, fp32 values (drives round q, k, v to bf16-representable
// values, as a serving engine feeds them). Row-major:
//   q, k [T, H, d_k]; v [T, HV, d_v]; g [T, HV] (GDN) or [T, HV, d_k] (KDA), log space;
//   beta [T, HV].
struct LayerInputs {
  int T = 0;
  std::vector<float> q, k, v, g, beta;

  // Allocates zeroed arrays for T tokens of `shape`.
  static LayerInputs zeros(const RecurrenceShape& shape, int T);
  // Checks array sizes against `shape`; throws statecheck::Error naming the array.
  void check(const RecurrenceShape& shape) const;
};

// fp64 ground truth for one value head over tokens [t0, t1): S_vk [d_v, d_k] is updated in place;
// if o_tv is not null it receives [t1 - t0, d_v] outputs.
void gated_delta_head_fp64(const RecurrenceShape& shape, const LayerInputs& in, int head, int t0,
                           int t1, double* S_vk, double* o_tv);

enum class StateStorage {
  fp32,  // state kept in fp32 between tokens
  bf16,  // state rounded to bf16 after every token (a decode kernel with a bf16 state pool);
         // o_t is read from the fp32 value before rounding
};

// fp32 reference (Eigen) for one value head over tokens [t0, t1); same contract as the fp64 loop.
void gated_delta_head_fp32(const RecurrenceShape& shape, const LayerInputs& in, int head, int t0,
                           int t1, float* S_vk, float* o_tv,
                           StateStorage storage = StateStorage::fp32);

// All heads of one layer: S_hvk [HV, d_v, d_k] in place; o [t1 - t0, HV, d_v] if not null.
void gated_delta_layer_fp32(const RecurrenceShape& shape, const LayerInputs& in, int t0, int t1,
                            float* S_hvk, float* o_thv, StateStorage storage = StateStorage::fp32);
void gated_delta_layer_fp64(const RecurrenceShape& shape, const LayerInputs& in, int t0, int t1,
                            double* S_hvk, double* o_thv);

// Flops the experiments count per value head and token: 6 * d_k * d_v (decay, S k, rank-1 update,
// readout: about three multiply-adds per state element).
inline double gated_delta_flops_per_head_token(int dk, int dv) {
  return 6.0 * dk * dv;
}

}  // namespace statecheck
