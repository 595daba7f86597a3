// The shape of one gated-delta layer's recurrence and its per-token inputs (docs/numerics.md,
// "The recurrence"). A model's shape at its TP shard: recurrence_shape() in
// core/model/model_config.h.
#pragma once

#include <vector>

#include "core/state/gate.h"

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

}  // namespace statecheck
