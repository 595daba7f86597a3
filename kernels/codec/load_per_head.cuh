// load_per_head_kernel (CheckpointKernel::load_per_head): the load of any codec and geometry, one
// 512-thread block per head. Included by checkpoint_codec.cu only.
#pragma once

#include <cstring>

#include "kernels/codec/codec_common.cuh"

namespace statecheck::cuda {
namespace {

// Load: one block per (pair, layer, head) decodes a head, elementwise; extra blocks copy conv.
template <typename ActiveT, Kind K, typename ScaleT>
__global__ void __launch_bounds__(kWarps * 32) load_per_head_kernel(CodecParams p) {
  using ValueT = typename CkptValue<K>::T;
  constexpr bool kScaled = K == Kind::int8 || K == Kind::fp8;
  const Job job = decode_job(p.HV, p.conv_blocks, p.L);
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV) return conv_job(p, job, src_slot, dst_slot, p.HV);
  const int h = job.part;
  const size_t head = static_cast<size_t>(p.dv) * p.dk;
  const ValueT* src = reinterpret_cast<const ValueT*>(p.src_temporal) +
                      ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * head;
  ActiveT* dst = reinterpret_cast<ActiveT*>(p.dst_temporal) +
                 ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * head;
  const ScaleT* scales =
      kScaled ? reinterpret_cast<const ScaleT*>(p.src_scales) +
                    ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * p.dk
              : nullptr;
  const bool vec4 = p.dk % 4 == 0;
  const size_t step = static_cast<size_t>(blockDim.x) * (vec4 ? 4 : 1);
  for (size_t e0 = static_cast<size_t>(threadIdx.x) * (vec4 ? 4 : 1); e0 < head; e0 += step) {
    const int count = vec4 ? 4 : 1;
    ValueT in[4];
    if constexpr (sizeof(ValueT) == 1) {
      if (vec4) {
        const uchar4 c = *reinterpret_cast<const uchar4*>(src + e0);
        in[0] = static_cast<ValueT>(c.x), in[1] = static_cast<ValueT>(c.y);
        in[2] = static_cast<ValueT>(c.z), in[3] = static_cast<ValueT>(c.w);
      } else {
        in[0] = src[e0];
      }
    } else if constexpr (sizeof(ValueT) == 4) {
      if (vec4) {
        const float4 x = *reinterpret_cast<const float4*>(src + e0);
        in[0] = x.x, in[1] = x.y, in[2] = x.z, in[3] = x.w;
      } else {
        in[0] = src[e0];
      }
    } else {
      if (vec4) {
        const uint2 raw = *reinterpret_cast<const uint2*>(src + e0);
        std::memcpy(&in[0], &raw, 8);
      } else {
        in[0] = src[e0];
      }
    }
    float out[4];
    for (int e = 0; e < count; ++e) {
      const int j = static_cast<int>((e0 + e) % p.dk);
      if constexpr (K == Kind::int8) {
        out[e] = static_cast<float>(static_cast<int>(in[e])) * to_float<ScaleT>(scales[j]);
      } else if constexpr (K == Kind::fp8) {
        out[e] = fp8_decode(in[e]) * to_float<ScaleT>(scales[j]);
      } else if constexpr (K == Kind::fp8_raw) {
        out[e] = fp8_decode(in[e]);
      } else {
        out[e] = to_float<ValueT>(in[e]);
      }
    }
    if (vec4) {
      if constexpr (sizeof(ActiveT) == 4) {
        *reinterpret_cast<float4*>(dst + e0) = make_float4(out[0], out[1], out[2], out[3]);
      } else {
        const __nv_bfloat162 a = __floats2bfloat162_rn(out[0], out[1]);
        const __nv_bfloat162 b = __floats2bfloat162_rn(out[2], out[3]);
        uint2 raw;
        raw.x = *reinterpret_cast<const uint32_t*>(&a);
        raw.y = *reinterpret_cast<const uint32_t*>(&b);
        *reinterpret_cast<uint2*>(dst + e0) = raw;
      }
      continue;
    }
    for (int e = 0; e < count; ++e) dst[e0 + e] = from_float<ActiveT>(out[e]);
  }
}

}  // namespace
}  // namespace statecheck::cuda
