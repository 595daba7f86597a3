// One layer's recurrence inputs on the device, and the kernel arguments built from them: the one
// place where host LayerInputs become the bf16 / fp32 device arrays the pool kernel reads
// (kernels/gated_delta/gated_delta_pool.h) and where GatedDeltaPoolArgs are filled.
#pragma once

#include <cstdint>

#include "core/state/layer_inputs.h"
#include "kernels/common/device.h"
#include "kernels/gated_delta/gated_delta_pool.h"

namespace statecheck::cuda {

// Device copies of LayerInputs for T tokens: q, k [T, H, d_k] and v [T, HV, d_v] as bf16 bits
// (rounded to nearest even; the drives already hold bf16-representable values, so this is exact
// for them), g [T, gate_width] and beta [T, HV] fp32.
struct DeviceLayerInputs {
  int T = 0;
  DeviceBuffer<uint16_t> q, k, v;
  DeviceBuffer<float> g, beta;
};

// Uploads `in` (checked against `shape` with LayerInputs::check). Throws statecheck::Error on a
// CUDA failure.
DeviceLayerInputs upload_layer_inputs(const RecurrenceShape& shape, const LayerInputs& in);

// Arguments of one gated_delta_pool launch of `shape` over `state_pool` ([pool_slots, HV, d_v,
// d_k] in `state_dtype`), for sequences whose packed tokens start at token `t0` of `in`:
// slot_ids / cu_seqlens (device, num_seqs and num_seqs + 1 entries), outputs o (device bf16 or
// null), max_seq_len the launch's longest sequence (a hint; 0: unknown).
GatedDeltaPoolArgs pool_args(const RecurrenceShape& shape, Dtype state_dtype, void* state_pool,
                             int64_t pool_slots, const DeviceLayerInputs& in, int64_t t0,
                             int num_seqs, const int32_t* slot_ids, const int32_t* cu_seqlens,
                             uint16_t* o, int max_seq_len);

}  // namespace statecheck::cuda
