// load_rows_kernel (CheckpointKernel::load_rows): the load of any codec for d_k / 4 dividing 128,
// one block per run of rows with the scales in registers. Included by checkpoint_codec.cu only.
#pragma once

#include "kernels/codec/codec_common.cuh"
#include "kernels/common/vector_io.cuh"

namespace statecheck::cuda {
namespace {

constexpr int kLoadPasses = 8;  // load: rows per thread

// int8 code word to fp32 without the conversion unit: with u = code ^ 0x80 (0..255),
// float(0x4B000000 | u) = 2^23 + u exactly, and subtracting 2^23 + 128 leaves the code.
__device__ __forceinline__ float int8_byte_to_float(uint32_t flipped, int k) {
  return __uint_as_float(__byte_perm(flipped, 0x4B000000u, 0x7650 + k)) - 8388736.0f;
}

// Four checkpoint values of a row as fp32 (before the scale).
template <Kind K>
__device__ __forceinline__ void ckpt_values4(const typename CkptValue<K>::T* p, float* v) {
  if constexpr (K == Kind::int8) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p) ^ 0x80808080u;
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = int8_byte_to_float(w, k);
  } else if constexpr (K == Kind::fp8 || K == Kind::fp8_raw) {
    const uchar4 c = *reinterpret_cast<const uchar4*>(p);
    v[0] = fp8_decode(c.x), v[1] = fp8_decode(c.y), v[2] = fp8_decode(c.z), v[3] = fp8_decode(c.w);
  } else {
    load_vec<4>(p, v);
  }
}

// Load: one block per (part, layer, pair) in a 3-D grid, `part` being a (head, run of rows) or a
// conv chunk; 128 threads. With G = d_k / 4 lanes per
// row, thread t owns columns 4 (t % G) .. +3 (so its scales sit in registers) and rows
// t / G + (128 / G) r for r < kLoadPasses; all loads are issued before the first store.
// Requires d_k % 4 == 0 and d_k / 4 dividing 128.
template <typename ActiveT, Kind K, typename ScaleT>
__global__ void __launch_bounds__(kFastThreads) load_rows_kernel(CodecParams p, int runs) {
  using ValueT = typename CkptValue<K>::T;
  using RawT = typename CkptValue<K>::Raw4;
  constexpr bool kScaled = K == Kind::int8 || K == Kind::fp8;
  const Job job = grid_job();
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV * runs) return conv_job(p, job, src_slot, dst_slot, p.HV * runs);
  const int G = p.dk / 4, rows_per_pass = kFastThreads / G;
  const int h = job.part / runs;
  const int j0 = 4 * (threadIdx.x % G);
  const int row0 = (job.part % runs) * rows_per_pass * kLoadPasses + threadIdx.x / G;
  const size_t head = static_cast<size_t>(p.dv) * p.dk;
  const ValueT* src =
      reinterpret_cast<const ValueT*>(p.src_temporal) +
      ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * head + j0;
  ActiveT* dst = reinterpret_cast<ActiveT*>(p.dst_temporal) +
                 ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * head + j0;
  RawT raw[kLoadPasses];
#pragma unroll
  for (int r = 0; r < kLoadPasses; ++r) {
    const int row = row0 + r * rows_per_pass;
    if (row < p.dv) raw[r] = *reinterpret_cast<const RawT*>(src + static_cast<size_t>(row) * p.dk);
  }
  float s[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  if constexpr (kScaled) {
    const ScaleT* scales =
        reinterpret_cast<const ScaleT*>(p.src_scales) +
        ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * p.dk + j0;
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] = to_float<ScaleT>(scales[e]);
  }
#pragma unroll
  for (int r = 0; r < kLoadPasses; ++r) {
    const int row = row0 + r * rows_per_pass;
    if (row >= p.dv) continue;
    float v[4];
    ckpt_values4<K>(reinterpret_cast<const ValueT*>(&raw[r]), v);
    if constexpr (kScaled) {
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] *= s[e];
    }
    store_vec<4>(dst + static_cast<size_t>(row) * p.dk, v);
  }
}

}  // namespace
}  // namespace statecheck::cuda
