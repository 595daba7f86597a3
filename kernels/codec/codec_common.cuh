// Device pieces shared by the checkpoint codec kernels (checkpoint_codec.cu includes it and the
// kernel files, nothing else does): the launch parameters (CodecParams: pool pointers, slots per
// pool, the slot lists), the codec kinds and their checkpoint value types, the block-to-job maps,
// the conv-window copy and the refusal of a non-finite value. Layouts as in checkpoint_codec.h.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace statecheck::cuda {
namespace {

constexpr int kWarps = 16;                   // 512 threads per block
constexpr int kConvChunk = kWarps * 32 * 8;  // bf16 conv values per conv block (8 per thread)

enum class Kind { fp32, bf16, int8, fp8, fp8_raw };

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float fp8_decode(uint8_t c) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
  return __half2float(__half(h));
}

// Value bytes of one element in the checkpoint for a kind (T), and the raw bytes of four
// consecutive ones as one register-sized load (Raw4).
template <Kind K>
struct CkptValue;
template <>
struct CkptValue<Kind::fp32> {
  using T = float;
  using Raw4 = float4;
};
template <>
struct CkptValue<Kind::bf16> {
  using T = __nv_bfloat16;
  using Raw4 = uint2;
};
template <>
struct CkptValue<Kind::int8> {
  using T = int8_t;
  using Raw4 = uint32_t;
};
template <>
struct CkptValue<Kind::fp8> {
  using T = uint8_t;
  using Raw4 = uint32_t;
};
template <>
struct CkptValue<Kind::fp8_raw> {
  using T = uint8_t;
  using Raw4 = uint32_t;
};

struct Job {
  int pair, layer, part;  // part < HV: a head; else a conv chunk
};

// The job of a block of the fast kernels' 3-D grid: x = part, y = layer, z = pair.
__device__ __forceinline__ Job grid_job() {
  Job j;
  j.part = blockIdx.x, j.layer = blockIdx.y, j.pair = blockIdx.z;
  return j;
}

__device__ __forceinline__ Job decode_job(int HV, int conv_blocks, int L) {
  const int per_layer = HV + conv_blocks;
  const int item = blockIdx.x;
  Job j;
  j.pair = item / (L * per_layer);
  const int rest = item % (L * per_layer);
  j.layer = rest / per_layer;
  j.part = rest % per_layer;
  return j;
}

// Copies one chunk of the conv window (bf16) between pools; 16-byte copies when aligned.
__device__ void copy_conv_chunk(const uint16_t* src, uint16_t* dst, int64_t conv_elems, int chunk) {
  const int64_t begin = static_cast<int64_t>(chunk) * kConvChunk;
  const int64_t end = begin + kConvChunk < conv_elems ? begin + kConvChunk : conv_elems;
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(src + begin) | reinterpret_cast<uintptr_t>(dst + begin)) &
       15) == 0;
  if (aligned) {
    const int64_t vec_end = begin + ((end - begin) / 8) * 8;
    for (int64_t e = begin + threadIdx.x * 8; e < vec_end; e += blockDim.x * 8)
      *reinterpret_cast<uint4*>(dst + e) = *reinterpret_cast<const uint4*>(src + e);
    for (int64_t e = vec_end + threadIdx.x; e < end; e += blockDim.x) dst[e] = src[e];
  } else {
    for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) dst[e] = src[e];
  }
}

struct CodecParams {
  int L, HV, dv, dk;
  int64_t conv_elems;
  int conv_blocks;
  const void* src_temporal;
  const void* src_scales;
  const uint16_t* src_conv;
  int64_t src_slots;
  void* dst_temporal;
  void* dst_scales;
  uint16_t* dst_conv;
  int64_t dst_slots;
  const int32_t* src_ids;
  const int32_t* dst_ids;
  int32_t* error_info;
};

// The conv-window part of a store or load launch: blocks past the temporal parts of a layer (the
// first `first_conv_part` parts: heads, or heads x strips / runs) copy one chunk of the layer's
// conv window from the source slot to the destination slot, unchanged.
__device__ void conv_job(const CodecParams& p, const Job& job, int src_slot, int dst_slot,
                         int first_conv_part) {
  if (p.conv_elems <= 0) return;
  copy_conv_chunk(
      p.src_conv + (static_cast<int64_t>(job.layer) * p.src_slots + src_slot) * p.conv_elems,
      p.dst_conv + (static_cast<int64_t>(job.layer) * p.dst_slots + dst_slot) * p.conv_elems,
      p.conv_elems, job.part - first_conv_part);
}

// ---- Fast paths for the serving shapes (d_k = 128 or 64 and the like)
// ----------------------------
//
// Both run 128-thread blocks, each on a slice of one head, so a launch has many short blocks that
// keep the memory system busy through their load / reduce / store phases and leave a small tail.

constexpr int kFastThreads = 128;

// IEEE max that returns NaN when either input is NaN (PTX max.NaN), so one column maximum both
// forms the scale and flags a non-finite column (Inf propagates through fmaxf anyway).
__device__ __forceinline__ float max_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// Packs the low bytes of four words into one (byte k from word k).
__device__ __forceinline__ uint32_t pack_low_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// The refusal of a strip, run or head holding a non-finite value, by the whole block: each thread
// gives the index (i * d_k + j) of its first offender or -1; the largest lands in `worst` (block
// shared) and, once per launch, in p.error_info with the layer and head (check_store_error).
__device__ void report_non_finite(const CodecParams& p, int layer, int head, int first,
                                  int& worst) {
  if (first >= 0) atomicMax(&worst, first);
  __syncthreads();
  if (threadIdx.x == 0 && p.error_info && atomicCAS(&p.error_info[0], 0, 1) == 0) {
    p.error_info[1] = layer;
    p.error_info[2] = head;
    p.error_info[3] = worst;
  }
}

}  // namespace
}  // namespace statecheck::cuda
