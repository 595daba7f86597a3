#include "kernels/gated_delta/gated_delta_pool_reference.h"

#include "core/dtype/bf16.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"

namespace statecheck::cuda {

RecurrenceShape pool_batch_shape(const HostPoolBatch& b) {
  RecurrenceShape s;
  s.H = b.H, s.HV = b.HV, s.dk = b.dk, s.dv = b.dv, s.gate = b.gate, s.qk_l2norm = b.qk_l2norm,
  s.scale = b.scale;
  return s;
}

LayerInputs pool_batch_sequence_inputs(const HostPoolBatch& b, int n) {
  if (n < 0 || n + 1 >= static_cast<int>(b.cu_seqlens.size()))
    fail("reference: sequence {} outside the batch of {}", n,
         static_cast<int>(b.cu_seqlens.size()) - 1);
  const RecurrenceShape s = pool_batch_shape(b);
  const int gw = s.gate_width();
  const int t0 = b.cu_seqlens[n], T = b.cu_seqlens[n + 1] - t0;
  LayerInputs in = LayerInputs::zeros(s, T);
  for (int t = 0; t < T; ++t) {
    for (size_t e = 0; e < static_cast<size_t>(b.H) * b.dk; ++e) {
      in.q[t * b.H * b.dk + e] =
          float_from_bf16_bits(b.q[(static_cast<size_t>(t0) + t) * b.H * b.dk + e]);
      in.k[t * b.H * b.dk + e] =
          float_from_bf16_bits(b.k[(static_cast<size_t>(t0) + t) * b.H * b.dk + e]);
    }
    for (size_t e = 0; e < static_cast<size_t>(b.HV) * b.dv; ++e)
      in.v[t * b.HV * b.dv + e] =
          float_from_bf16_bits(b.v[(static_cast<size_t>(t0) + t) * b.HV * b.dv + e]);
    for (int e = 0; e < gw; ++e)
      in.g[static_cast<size_t>(t) * gw + e] = b.g[(static_cast<size_t>(t0) + t) * gw + e];
    for (int e = 0; e < b.HV; ++e)
      in.beta[static_cast<size_t>(t) * b.HV + e] = b.beta[(static_cast<size_t>(t0) + t) * b.HV + e];
  }
  return in;
}

std::vector<uint16_t> gated_delta_pool_reference(HostPoolBatch& b) {
  const int num_seqs = static_cast<int>(b.slot_ids.size());
  if (static_cast<int>(b.cu_seqlens.size()) != num_seqs + 1)
    fail("reference: cu_seqlens needs num_seqs + 1 entries");
  const int total_T = b.cu_seqlens.back();
  const size_t head = static_cast<size_t>(b.dv) * b.dk;
  const size_t slot_size = head * b.HV;
  const size_t pool_elems = b.state_dtype == Dtype::fp32 ? b.pool_fp32.size() : b.pool_bf16.size();
  const int64_t pool_slots = static_cast<int64_t>(pool_elems / slot_size);
  const RecurrenceShape s = pool_batch_shape(b);
  std::vector<uint16_t> o(static_cast<size_t>(total_T) * b.HV * b.dv, 0);
  std::vector<float> state(head), out;
  for (int n = 0; n < num_seqs; ++n) {
    const int slot = b.slot_ids[n];
    if (slot < 0 || slot >= pool_slots)
      fail("reference: slot id {} outside the pool of {} slots", slot, pool_slots);
    const int t0 = b.cu_seqlens[n], T = b.cu_seqlens[n + 1] - t0;
    const LayerInputs in = pool_batch_sequence_inputs(b, n);
    out.assign(static_cast<size_t>(T) * b.dv, 0.0f);
    for (int h = 0; h < b.HV; ++h) {
      const size_t base = static_cast<size_t>(slot) * slot_size + h * head;
      for (size_t e = 0; e < head; ++e)
        state[e] = b.state_dtype == Dtype::fp32 ? b.pool_fp32[base + e]
                                                : float_from_bf16_bits(b.pool_bf16[base + e]);
      gated_delta_head_fp32(s, in, h, 0, T, state.data(), out.data());
      for (size_t e = 0; e < head; ++e) {
        if (b.state_dtype == Dtype::fp32)
          b.pool_fp32[base + e] = state[e];
        else
          b.pool_bf16[base + e] = bf16_bits_from_float(state[e]);
      }
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < b.dv; ++i)
          o[((static_cast<size_t>(t0) + t) * b.HV + h) * b.dv + i] =
              bf16_bits_from_float(out[static_cast<size_t>(t) * b.dv + i]);
    }
  }
  return o;
}

}  // namespace statecheck::cuda
