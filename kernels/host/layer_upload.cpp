#include "kernels/host/layer_upload.h"

#include "core/dtype/bf16.h"

namespace statecheck::cuda {

DeviceLayerInputs upload_layer_inputs(const RecurrenceShape& shape, const LayerInputs& in) {
  in.check(shape);
  DeviceLayerInputs d;
  d.T = in.T;
  d.q = to_device(bf16_bits(in.q));
  d.k = to_device(bf16_bits(in.k));
  d.v = to_device(bf16_bits(in.v));
  d.g = to_device(in.g);
  d.beta = to_device(in.beta);
  return d;
}

GatedDeltaPoolArgs pool_args(const RecurrenceShape& s, Dtype state_dtype, void* state_pool,
                             int64_t pool_slots, const DeviceLayerInputs& in, int64_t t0,
                             int num_seqs, const int32_t* slot_ids, const int32_t* cu_seqlens,
                             uint16_t* o, int max_seq_len) {
  GatedDeltaPoolArgs a;
  a.num_seqs = num_seqs;
  a.H = s.H, a.HV = s.HV, a.dk = s.dk, a.dv = s.dv, a.gate = s.gate;
  a.qk_l2norm = s.qk_l2norm, a.scale = s.scale;
  a.state_dtype = state_dtype, a.state_pool = state_pool, a.pool_slots = pool_slots;
  a.slot_ids = slot_ids, a.cu_seqlens = cu_seqlens;
  const size_t t = static_cast<size_t>(t0);
  a.q = in.q.data() + t * s.H * s.dk;
  a.k = in.k.data() + t * s.H * s.dk;
  a.v = in.v.data() + t * s.HV * s.dv;
  a.g = in.g.data() + t * s.gate_width();
  a.beta = in.beta.data() + t * s.HV;
  a.o = o;
  a.max_seq_len = max_seq_len;
  return a;
}

}  // namespace statecheck::cuda
