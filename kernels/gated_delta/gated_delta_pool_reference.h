// CPU reference of the pool-indexed gated-delta kernel (gated_delta_pool.h): gather each listed
// slot's state from the pool, run the fp32 reference recurrence (core/recurrence/gated_delta.h)
// over the sequence's tokens, scatter the state back in the pool dtype (round to nearest even for
// bf16) and round the outputs to bf16. Same shapes and layouts as the kernel, host memory.
#pragma once

#include <cstdint>
#include <vector>

#include "core/recurrence/gated_delta.h"
#include "kernels/gated_delta/gated_delta_pool.h"

namespace statecheck::cuda {

struct HostPoolBatch {
  int H = 0, HV = 0, dk = 0, dv = 0;
  GateKind gate = GateKind::gdn;
  bool qk_l2norm = true;
  float scale = 0.0f;
  Dtype state_dtype = Dtype::fp32;
  std::vector<float> pool_fp32;     // [pool_slots, HV, d_v, d_k] when state_dtype == fp32
  std::vector<uint16_t> pool_bf16;  // [pool_slots, HV, d_v, d_k] bf16 bits when bf16
  std::vector<int32_t> slot_ids;    // [num_seqs]
  std::vector<int32_t> cu_seqlens;  // [num_seqs + 1]
  std::vector<uint16_t> q, k, v;    // bf16 bits
  std::vector<float> g, beta;
};

// The recurrence shape of a batch, and the inputs of its sequence n ([T_n] tokens of q, k, v as
// fp32 values of their bf16 bits, g, beta; layout of LayerInputs), as the reference feeds them to
// gated_delta_head_fp32. Throws statecheck::Error for n outside the batch.
RecurrenceShape pool_batch_shape(const HostPoolBatch& batch);
LayerInputs pool_batch_sequence_inputs(const HostPoolBatch& batch, int n);

// Runs the reference in place on batch.pool_*; returns o [total_T, HV, d_v] as bf16 bits.
// Throws statecheck::Error on inconsistent sizes or a slot id outside the pool.
std::vector<uint16_t> gated_delta_pool_reference(HostPoolBatch& batch);

}  // namespace statecheck::cuda
