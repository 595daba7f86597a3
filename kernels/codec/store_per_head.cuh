// store_per_head_kernel (CheckpointKernel::store_per_head): the store of any codec and geometry,
// one 512-thread block per head. Included by checkpoint_codec.cu only.
#pragma once

#include "kernels/codec/codec_common.cuh"
#include "kernels/codec/rounding.cuh"
#include "kernels/common/vector_io.cuh"

namespace statecheck::cuda {
namespace {

// Store: one block per (pair, layer, head) encodes a [d_v, d_k] head; extra blocks copy conv.
// Warp w holds rows w, w + 16, ... (up to MAXR rows) in registers; lane l holds key columns
// (c * 32 + l) * VEC + e. Column amax: per-warp maxima in shared memory, then one thread per
// column reduces them, forms the scale and publishes it.
template <typename ActiveT, Kind K, typename ScaleT, int VEC, int NCHUNK, int MAXR>
__global__ void __launch_bounds__(kWarps * 32) store_per_head_kernel(CodecParams p) {
  using ValueT = typename CkptValue<K>::T;
  constexpr int NCOL = VEC * NCHUNK;
  constexpr bool kScaled = K == Kind::int8 || K == Kind::fp8;
  __shared__ float part_amax[kScaled ? kWarps : 1][kScaled ? 256 : 1];
  __shared__ float col_scale[kScaled ? 256 : 1];
  __shared__ float col_inv[kScaled ? 256 : 1];
  __shared__ int bad;

  const Job job = decode_job(p.HV, p.conv_blocks, p.L);
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV) return conv_job(p, job, src_slot, dst_slot, p.HV);
  const int h = job.part;
  const size_t head = static_cast<size_t>(p.dv) * p.dk;
  const ActiveT* src =
      reinterpret_cast<const ActiveT*>(p.src_temporal) +
      ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * head;
  ValueT* dst = reinterpret_cast<ValueT*>(p.dst_temporal) +
                ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * head;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) bad = -1;
  __syncthreads();

  float x[MAXR][NCOL];
  float amax[NCOL];
#pragma unroll
  for (int i = 0; i < NCOL; ++i) amax[i] = 0.0f;
  int first_bad = -1;
#pragma unroll
  for (int r = 0; r < MAXR; ++r) {
    const int row = warp + r * kWarps;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c) {
      const int j0 = (c * 32 + lane) * VEC;
      float v[VEC];
      if (row < p.dv && j0 < p.dk) {
        load_vec<VEC>(src + static_cast<size_t>(row) * p.dk + j0, v);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        if (!isfinite(v[e]) && first_bad < 0) first_bad = row * p.dk + j0 + e;
        x[r][c * VEC + e] = v[e];
        amax[c * VEC + e] = fmaxf(amax[c * VEC + e], fabsf(v[e]));
      }
    }
  }
  if (first_bad >= 0) atomicMax(&bad, first_bad);  // any offender; the host names it
  if constexpr (kScaled) {
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int j = (c * 32 + lane) * VEC + e;
        if (j < p.dk) part_amax[warp][j] = amax[c * VEC + e];
      }
  }
  __syncthreads();
  if (bad >= 0) {
    if (threadIdx.x == 0 && p.error_info && atomicCAS(&p.error_info[0], 0, 1) == 0) {
      p.error_info[1] = job.layer;
      p.error_info[2] = h;
      p.error_info[3] = bad;
    }
    return;  // refuse: nothing is written for this head
  }
  if constexpr (kScaled) {
    constexpr float kCodeMax = K == Kind::int8 ? 127.0f : 448.0f;
    ScaleT* scales = reinterpret_cast<ScaleT*>(p.dst_scales) +
                     ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * p.dk;
    for (int j = threadIdx.x; j < p.dk; j += blockDim.x) {
      float m = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = fmaxf(m, part_amax[w][j]);
      const ScaleT s = from_float<ScaleT>(fmaxf(m, 1e-8f) / kCodeMax);
      scales[j] = s;
      col_scale[j] = to_float<ScaleT>(s);
      col_inv[j] = 1.0f / col_scale[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < MAXR; ++r) {
    const int row = warp + r * kWarps;
    if (row >= p.dv) break;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c) {
      const int j0 = (c * 32 + lane) * VEC;
      if (j0 >= p.dk) continue;
      ValueT out[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float v = x[r][c * VEC + e];
        if constexpr (kScaled) {
          const float inv = col_inv[j0 + e];
          out[e] = static_cast<ValueT>(encode_one<K>(v, col_scale[j0 + e], inv, fp8_bracket(inv)));
        } else if constexpr (K == Kind::fp8_raw) {
          out[e] = fp8_encode(v);
        } else {
          out[e] = from_float<ValueT>(v);
        }
      }
      ValueT* d = dst + static_cast<size_t>(row) * p.dk + j0;
      if constexpr (VEC == 4 && sizeof(ValueT) == 1) {
        uchar4 packed;
        packed.x = static_cast<unsigned char>(out[0]);
        packed.y = static_cast<unsigned char>(out[1]);
        packed.z = static_cast<unsigned char>(out[2]);
        packed.w = static_cast<unsigned char>(out[3]);
        *reinterpret_cast<uchar4*>(d) = packed;
      } else if constexpr (VEC == 4 && sizeof(ValueT) == 4) {
        *reinterpret_cast<float4*>(d) = make_float4(out[0], out[1], out[2], out[3]);
      } else if constexpr (VEC == 4 && sizeof(ValueT) == 2) {
        uint2 raw;
        raw.x = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&out[0])) |
                (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&out[1])) << 16);
        raw.y = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&out[2])) |
                (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&out[3])) << 16);
        *reinterpret_cast<uint2*>(d) = raw;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) d[e] = out[e];
      }
    }
  }
}

}  // namespace
}  // namespace statecheck::cuda
