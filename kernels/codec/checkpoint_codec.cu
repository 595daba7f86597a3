#include "kernels/codec/checkpoint_codec.h"

#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/vector_io.cuh"

namespace statecheck::cuda {

namespace {

constexpr int kWarps = 16;                   // 512 threads per block
constexpr int kConvChunk = kWarps * 32 * 8;  // bf16 conv values per conv block (8 per thread)

enum class Kind { fp32, bf16, int8, fp8, fp8_raw };

Kind kind_of(const Codec& c) {
  switch (c.kind) {
    case CodecKind::fp32:
      return Kind::fp32;
    case CodecKind::bf16:
      return Kind::bf16;
    case CodecKind::int8:
      return Kind::int8;
    case CodecKind::fp8_e4m3:
      return Kind::fp8;
    case CodecKind::fp8_e4m3_raw:
      return Kind::fp8_raw;
  }
  return Kind::fp32;
}

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

__device__ __forceinline__ uint8_t fp8_encode(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// How close to a half-integer the product x * fl(1/s) may come before the exact quotient must
// decide: for amax-derived scales the product lies within 1.6e-5 of fl(x / s) (int8_code_fast),
// so unless it lies within kNearHalf = 2^-14 (6.1e-5) of a half-integer, both round to the same
// integer.
constexpr float kNearHalf = 6.103515625e-5f;

// The int8 code of the correctly rounded quotient x / s, by the IEEE division (the CPU codec's
// arithmetic): clamp(rint(x / s), -127, 127).
__device__ __forceinline__ int int8_code_exact(float x, float s) {
  return max(-127, min(127, static_cast<int>(rintf(__fdiv_rn(x, s)))));
}

// int8 code of x / s for an amax-derived scale, the cheap way: t = fma(x, inv, 1.5 * 2^23) rounds
// the exact product P = x * inv, once, to the nearest even integer k held in t's low mantissa bits
// (t's low byte is k in two's complement), and d = fma(x, inv, -k) is P - k rounded once. No clamp
// is needed: |x| <= amax and s = amax / 127 (fp32 division, then rounded to bf16 at most 2^-8
// relative) give |x / s| <= 127 / ((1 - 2^-24)(1 - 2^-8)) < 127.499, and |P - fl(x / s)| <=
// 2 * 2^-24 * |x / s| <= 1.6e-5, so |P| < 127.5 and |k| <= 127, as the clamp would leave it. The
// same bound makes k the rounding of the quotient unless P lies within kNearHalf of a
// half-integer (d's own rounding, 2^-25, is far inside the margin): `near_half` is set in that
// rare case (about one element in 8000) and the caller redoes the element with the division and
// the clamp. Four instructions per element, none on the conversion unit.
__device__ __forceinline__ uint32_t int8_code_fast(float x, float inv, bool& near_half) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float t = __fmaf_rn(x, inv, kMagic);
  const float d = __fmaf_rn(x, inv, -(t - kMagic));
  near_half |= fabsf(d) > 0.5f - kNearHalf;
  return static_cast<uint32_t>(__float_as_int(t));
}

// The two ends of a bracket around x / s, formed once per column: x * lo <= fl(x / s) <= x * hi
// for x >= 0 (reversed for x < 0), since lo = inv (1 - 2^-19) and hi = inv (1 + 2^-19) stay at
// least 2^-19 - 4 * 2^-24 (relative) away from 1 / s after the roundings of inv, of lo or hi, of
// the product and of the quotient.
struct Fp8Bracket {
  float lo, hi;
};
__device__ __forceinline__ Fp8Bracket fp8_bracket(float inv) {
  constexpr float d = 16.0f * 1.1920929e-7f;  // 2^-19
  return {inv * (1.0f - d), inv * (1.0f + d)};
}

// E4M3 codes of x0 / s0 (low byte) and x1 / s1 (high byte): both ends of each bracket are encoded
// by one paired conversion each, and where the two ends agree, E4M3 rounding (monotone, with
// saturation) gives the quotient the same code. `differ` is set otherwise (within 16 ulp of a
// rounding boundary) and the caller (encode_row) decides those elements with the division.
__device__ __forceinline__ uint32_t fp8_codes2(float x0, float x1, Fp8Bracket b0, Fp8Bracket b1,
                                               bool& differ) {
  const uint32_t lo =
      __nv_cvt_float2_to_fp8x2(make_float2(x0 * b0.lo, x1 * b1.lo), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi =
      __nv_cvt_float2_to_fp8x2(make_float2(x0 * b0.hi, x1 * b1.hi), __NV_SATFINITE, __NV_E4M3);
  differ |= lo != hi;
  return lo;
}

// The code (int8 or E4M3, K) of one element x / s, bit for bit as the CPU codec, with inv = 1 / s
// and br = fp8_bracket(inv): the cheap way (int8_code_fast; both bracket ends encoded alike), the
// division only where that cannot decide. Code k lands in the low byte.
template <Kind K>
__device__ __forceinline__ uint32_t encode_one(float x, float s, float inv, Fp8Bracket br) {
  if constexpr (K == Kind::int8) {
    bool near_half = false;
    const uint32_t q = int8_code_fast(x, inv, near_half);
    return near_half ? static_cast<uint32_t>(int8_code_exact(x, s)) : q;
  } else {
    const uint8_t lo = fp8_encode(x * br.lo), hi = fp8_encode(x * br.hi);
    return lo == hi ? lo : fp8_encode(__fdiv_rn(x, s));
  }
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

// Store: one block per (pair, layer, head) encodes a [d_v, d_k] head; extra blocks copy conv.
// Warp w holds rows w, w + 16, ... (up to MAXR rows) in registers; lane l holds key columns
// (c * 32 + l) * VEC + e. Column amax: per-warp maxima in shared memory, then one thread per
// column reduces them, forms the scale and publishes it.
template <typename ActiveT, Kind K, typename ScaleT, int VEC, int NCHUNK, int MAXR>
__global__ void __launch_bounds__(kWarps * 32) store_kernel(CodecParams p) {
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

// Load: one block per (pair, layer, head) decodes a head, elementwise; extra blocks copy conv.
template <typename ActiveT, Kind K, typename ScaleT>
__global__ void __launch_bounds__(kWarps * 32) load_kernel(CodecParams p) {
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

// ---- Fast paths for the serving shapes (d_k = 128 or 64 and the like)
// ----------------------------
//
// Both run 128-thread blocks, each on a slice of one head, so a launch has many short blocks that
// keep the memory system busy through their load / reduce / store phases and leave a small tail.

constexpr int kFastThreads = 128;
constexpr int kLoadPasses = 8;  // load: rows per thread

// IEEE max that returns NaN when either input is NaN (PTX max.NaN), so one column maximum both
// forms the scale and flags a non-finite column (Inf propagates through fmaxf anyway).
__device__ __forceinline__ float max_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// Codes (int8 or E4M3, K) of COLS consecutive elements of a row, x[e] / s[e] with inv[e] = 1 / s[e]
// and br[e] = fp8_bracket(inv[e]), bit for bit as the CPU codec: the cheap way first
// (int8_code_fast, fp8_codes2), with one flag for the row. Where the flag is set, each element is
// encoded again by encode_one, so only those the cheap way cannot decide take the division, each
// behind its own branch: bf16 inputs hit exact ties often (0.9-2.2% of 8-element int8 rows
// and 1.9-2.5% of fp8 rows on N(0, 0.06^2) states, against 0.04-0.09% for fp32 inputs), and a warp
// pays for every division any of its lanes executes. Code k lands in the low byte of q[e].
template <Kind K, int COLS>
__device__ __forceinline__ void encode_row(const float* x, const float* s, const float* inv,
                                           const Fp8Bracket* br, uint32_t* q) {
  static_assert(COLS % 2 == 0, "pairs of elements");
  bool undecided = false;
  if constexpr (K == Kind::int8) {
#pragma unroll
    for (int e = 0; e < COLS; ++e) q[e] = int8_code_fast(x[e], inv[e], undecided);
  } else {
#pragma unroll
    for (int e = 0; e < COLS; e += 2) {
      const uint32_t two = fp8_codes2(x[e], x[e + 1], br[e], br[e + 1], undecided);
      q[e] = two, q[e + 1] = two >> 8;
    }
  }
  if (__builtin_expect(undecided, 0)) {
#pragma unroll
    for (int e = 0; e < COLS; ++e) q[e] = encode_one<K>(x[e], s[e], inv[e], br[e]);
  }
}

// Packs the low bytes of four words into one (byte k from word k).
__device__ __forceinline__ uint32_t pack_low_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// COLS consecutive elements of an active row (fp32 or bf16) as fp32: 16-byte (fp32) or 8-byte
// (bf16) accesses of four elements (vector_io.cuh).
template <int COLS, typename ActiveT>
__device__ __forceinline__ void load_cols(const ActiveT* p, float* v) {
#pragma unroll
  for (int c = 0; c < COLS; c += 4) load_vec<4>(p + c, v + c);
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

// The scales, reciprocals and fp8 brackets of COLS consecutive columns from c0, read from the
// block's shared arrays (16-byte reads: c0 and COLS multiples of 4).
template <int COLS>
__device__ __forceinline__ void column_scales(const float* col_scale, const float* col_inv, int c0,
                                              float* s, float* inv, Fp8Bracket* br) {
#pragma unroll
  for (int e = 0; e < COLS; e += 4) {
    const float4 a = *reinterpret_cast<const float4*>(&col_scale[c0 + e]);
    const float4 b = *reinterpret_cast<const float4*>(&col_inv[c0 + e]);
    s[e] = a.x, s[e + 1] = a.y, s[e + 2] = a.z, s[e + 3] = a.w;
    inv[e] = b.x, inv[e + 1] = b.y, inv[e + 2] = b.z, inv[e + 3] = b.w;
  }
#pragma unroll
  for (int e = 0; e < COLS; ++e) br[e] = fp8_bracket(inv[e]);
}

// Store, int8 or fp8_e4m3 (K): one block per (part, layer, pair) in a 3-D grid (no index
// division), `part` being
// a (head, strip of 8 * COLS key columns) or a conv chunk. THREADS / 8 row groups: thread t holds
// columns COLS * (t % 8) .. + COLS - 1 of the strip for rows t / 8 + (THREADS / 8) r, r < ROWS,
// in registers (ROWS * THREADS / 8 == d_v exactly, no bounds checks). Column amax: own rows, then
// the lanes of the warp sharing the columns (shuffles), then the warps (shared memory); one thread
// per column forms the scale and its reciprocal once and publishes them. A strip containing a
// non-finite value writes nothing and records its position. Requires d_k % (8 * COLS) == 0.
template <typename ActiveT, typename ScaleT, Kind K, int THREADS, int ROWS, int COLS>
__global__ void __launch_bounds__(THREADS) store_scaled_strip_kernel(CodecParams p) {
  static_assert(K == Kind::int8 || K == Kind::fp8, "scaled codecs only");
  constexpr int kWarpsHere = THREADS / 32, kGroups = THREADS / 8, kStrip = 8 * COLS;
  constexpr float kCodeMax = K == Kind::int8 ? 127.0f : 448.0f;
  __shared__ __align__(16) float warp_amax[kWarpsHere][kStrip];  // read and written as float4
  __shared__ __align__(16) float col_scale[kStrip];
  __shared__ __align__(16) float col_inv[kStrip];
  __shared__ int worst;
  const int strips = p.dk / kStrip;
  const Job job = grid_job();
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV * strips) return conv_job(p, job, src_slot, dst_slot, p.HV * strips);
  const int h = job.part / strips;
  const int strip0 = (job.part - h * strips) * kStrip;
  const int c0 = COLS * (threadIdx.x & 7);  // first column of this thread within the strip
  const int j0 = strip0 + c0;
  const int row0 = threadIdx.x >> 3;
  const size_t head = static_cast<size_t>(p.dv) * p.dk;
  const ActiveT* src =
      reinterpret_cast<const ActiveT*>(p.src_temporal) +
      ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * head +
      static_cast<size_t>(row0) * p.dk + j0;
  int8_t* dst = reinterpret_cast<int8_t*>(p.dst_temporal) +
                ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * head +
                static_cast<size_t>(row0) * p.dk + j0;
  const int row_step = kGroups * p.dk;  // elements between a thread's rows
  if (threadIdx.x == 0) worst = -1;

  float x[ROWS][COLS];
  float m[COLS];
#pragma unroll
  for (int e = 0; e < COLS; ++e) m[e] = 0.0f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    load_cols<COLS>(src + r * row_step, x[r]);
#pragma unroll
    for (int e = 0; e < COLS; ++e) m[e] = max_nan(m[e], fabsf(x[r][e]));
  }
#pragma unroll
  for (int e = 0; e < COLS; ++e) {
    m[e] = max_nan(m[e], __shfl_xor_sync(0xFFFFFFFFu, m[e], 8));
    m[e] = max_nan(m[e], __shfl_xor_sync(0xFFFFFFFFu, m[e], 16));
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane < 8) {
#pragma unroll
    for (int e = 0; e < COLS; e += 4)
      *reinterpret_cast<float4*>(&warp_amax[warp][c0 + e]) =
          make_float4(m[e], m[e + 1], m[e + 2], m[e + 3]);
  }
  __syncthreads();
  bool finite = true;
  ScaleT sq{};
  if (threadIdx.x < kStrip) {  // one thread per column: the scale, once
    float c = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsHere; ++w) c = max_nan(c, warp_amax[w][threadIdx.x]);
    finite = isfinite(c);
    sq = from_float<ScaleT>(fmaxf(c, 1e-8f) / kCodeMax);
    col_scale[threadIdx.x] = to_float<ScaleT>(sq);
    col_inv[threadIdx.x] = 1.0f / col_scale[threadIdx.x];
  }
  if (!__syncthreads_and(finite)) {
    // Rare: name an offender (the host reports one) and refuse the strip.
    int first = -1;
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < COLS; ++e)
        if (first < 0 && !isfinite(x[r][e])) first = (row0 + kGroups * r) * p.dk + j0 + e;
    report_non_finite(p, job.layer, h, first, worst);
    return;
  }
  if (threadIdx.x < kStrip)
    reinterpret_cast<ScaleT*>(
        p.dst_scales)[((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) *
                          p.dk +
                      strip0 + threadIdx.x] = sq;
  float s[COLS], inv[COLS];
  Fp8Bracket br[COLS];
  column_scales<COLS>(col_scale, col_inv, c0, s, inv, br);
  // Quantize row by row (encode_row: the exact quotient only where the cheap way cannot decide).
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    uint32_t q[COLS];
    encode_row<K, COLS>(x[r], s, inv, br, q);
    if constexpr (COLS == 8) {
      *reinterpret_cast<uint2*>(dst + r * row_step) = make_uint2(
          pack_low_bytes(q[0], q[1], q[2], q[3]), pack_low_bytes(q[4], q[5], q[6], q[7]));
    } else {
      *reinterpret_cast<uint32_t*>(dst + r * row_step) = pack_low_bytes(q[0], q[1], q[2], q[3]);
    }
  }
}

// Eight consecutive bf16 values (one 16-byte word) as fp32, exactly.
__device__ __forceinline__ void bf16x8_to_float(const uint4& w, float* v) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}

// Running |x| maximum of four bf16 pairs (NaN wins, as max_nan; the maximum of bf16 values is
// exact in bf16).
__device__ __forceinline__ void amax_bf16x8(const uint4& w, __nv_bfloat162* m) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t a = words[i] & 0x7FFF7FFFu;  // |x| of both halves
    m[i] = __hmax2_nan(m[i], *reinterpret_cast<const __nv_bfloat162*>(&a));
  }
}

// Store of bf16 active states with 128 x 128 heads (the serving shape), int8 or fp8_e4m3 (K):
// one 128-thread block per (part, layer, pair) of a 3-D grid, part being a head or a conv chunk.
// One bulk copy brings the head's 32 KB into shared memory, so the loads are in flight without
// registers or per-element load instructions, and the block's fixed costs (indices, scales,
// barriers) are paid once per head. Thread t owns key columns 8 (t % 16) .. + 7 and rows t / 16 +
// 8 r (r < 16). Column amax on bf16 pairs, then lanes t and t ^ 16 (shuffle), then the 4 warps
// (shared memory); one thread per column forms the scale; then each thread quantizes its rows
// from shared memory and writes 8 codes per row (two rows per warp write: 256 contiguous bytes).
// Same results as store_scaled_strip_kernel, which serves the other bf16 shapes.
template <typename ScaleT, Kind K>
__global__ void __launch_bounds__(kFastThreads) store_staged_bf16_kernel(CodecParams p) {
  static_assert(K == Kind::int8 || K == Kind::fp8, "scaled codecs only");
  constexpr int kDim = 128, kRowGroups = kFastThreads / 16, kRows = kDim / kRowGroups;
  static_assert(kFastThreads == kDim, "one thread per key column forms the scales");
  constexpr float kCodeMax = K == Kind::int8 ? 127.0f : 448.0f;
  __shared__ __align__(128) uint4 tile[kDim * kDim / 8];  // the head, row i at tile[16 i ..]
  __shared__ __align__(16) uint32_t warp_amax[kFastThreads / 32][kDim / 2];  // bf16 pairs
  __shared__ __align__(16) float col_scale[kDim];
  __shared__ __align__(16) float col_inv[kDim];
  __shared__ uint64_t bar;
  __shared__ int worst;
  const Job job = grid_job();
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV) return conv_job(p, job, src_slot, dst_slot, p.HV);
  const int h = job.part;
  constexpr size_t kHead = static_cast<size_t>(kDim) * kDim;
  if (threadIdx.x == 0) {
    worst = -1;
    init_copy_barrier(&bar);
  }
  __syncthreads();
  if (threadIdx.x == 0)
    bulk_copy_to_shared(
        tile,
        reinterpret_cast<const __nv_bfloat16*>(p.src_temporal) +
            ((static_cast<size_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * kHead,
        kHead * 2, &bar);
  const int cg = threadIdx.x & 15, rg = threadIdx.x >> 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  wait_copy_barrier(&bar, 0);

  __nv_bfloat162 m[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] = __float2bfloat162_rn(0.0f);
#pragma unroll
  for (int r = 0; r < kRows; ++r) amax_bf16x8(tile[(rg + kRowGroups * r) * 16 + cg], m);
  uint32_t mw[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    mw[i] = *reinterpret_cast<const uint32_t*>(&m[i]);
    const uint32_t other = __shfl_xor_sync(0xFFFFFFFFu, mw[i], 16);
    const __nv_bfloat162 both = __hmax2_nan(m[i], *reinterpret_cast<const __nv_bfloat162*>(&other));
    mw[i] = *reinterpret_cast<const uint32_t*>(&both);
  }
  if (lane < 16)
    *reinterpret_cast<uint4*>(&warp_amax[warp][4 * cg]) = make_uint4(mw[0], mw[1], mw[2], mw[3]);
  __syncthreads();
  // One thread per column: the scale, once.
  const int col = threadIdx.x;
  float c = 0.0f;
#pragma unroll
  for (int w = 0; w < kFastThreads / 32; ++w)
    c = max_nan(c, __uint_as_float(((warp_amax[w][col >> 1] >> (16 * (col & 1))) & 0xFFFFu) << 16));
  const bool finite = isfinite(c);
  const ScaleT sq = from_float<ScaleT>(fmaxf(c, 1e-8f) / kCodeMax);
  col_scale[col] = to_float<ScaleT>(sq);
  col_inv[col] = 1.0f / col_scale[col];
  if (!__syncthreads_and(finite)) {
    // Rare: name an offender (the host reports one) and refuse the head.
    int first = -1;
    for (int r = 0; r < kRows && first < 0; ++r) {
      float v[8];
      bf16x8_to_float(tile[(rg + kRowGroups * r) * 16 + cg], v);
      for (int e = 0; e < 8; ++e)
        if (first < 0 && !isfinite(v[e])) first = (rg + kRowGroups * r) * kDim + 8 * cg + e;
    }
    report_non_finite(p, job.layer, h, first, worst);
    return;
  }
  reinterpret_cast<ScaleT*>(
      p.dst_scales)[((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * kDim +
                    col] = sq;
  float s[8], inv[8];
  Fp8Bracket br[8];
  column_scales<8>(col_scale, col_inv, 8 * cg, s, inv, br);
  int8_t* dst = reinterpret_cast<int8_t*>(p.dst_temporal) +
                ((static_cast<size_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * kHead +
                static_cast<size_t>(rg) * kDim + 8 * cg;
  // Quantize row by row (encode_row: the exact quotient only where the cheap way cannot decide).
#pragma unroll 4
  for (int r = 0; r < kRows; ++r) {
    float x[8];
    bf16x8_to_float(tile[(rg + kRowGroups * r) * 16 + cg], x);
    uint32_t q[8];
    encode_row<K, 8>(x, s, inv, br, q);
    *reinterpret_cast<uint2*>(dst + static_cast<size_t>(r) * kRowGroups * kDim) =
        make_uint2(pack_low_bytes(q[0], q[1], q[2], q[3]), pack_low_bytes(q[4], q[5], q[6], q[7]));
  }
}

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

// Slot copy (the fp32 codec on fp32 active states, the bf16 codec on bf16 ones): the checkpoint
// bytes are the active bytes, so store and load move 16-byte units unchanged. One block of
// kCopyThreads per (part, layer, pair) in a 3-D grid, `part` being a (head, run of
// kCopyUnits * kCopyThreads units) or a conv chunk; every thread issues its kCopyUnits loads
// (unit u0 + i * kCopyThreads, coalesced per warp) before its first store. The store (CHECK) also
// refuses a run holding a non-finite element (exponent bits all ones, ElemT fp32 or bf16): it
// writes nothing and records the run's largest per-thread first offender, as the other store
// kernels do. Requires d_v * d_k * sizeof(ElemT) % 16 == 0; the pools' 16-byte alignment is checked
// by the host.
// Two units per thread, 8 KiB per block. One or four units, a per-head loop that loads run r + 1
// before storing run r, a bulk copy through shared memory, and 6 blocks per SM instead of 8 were
// no faster on an H200 (results/gpu/2026-11-30_nvidia-h200_run12).
constexpr int kCopyThreads = 256;
constexpr int kCopyUnits = 2;  // 16-byte units per thread

// Index (0 .. 16 / sizeof(ElemT) - 1) of the first non-finite element of a 16-byte unit of ElemT
// values, or -1.
template <typename ElemT>
__device__ __forceinline__ int first_non_finite(const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(ElemT) == 4) {
      if ((w[i] & 0x7f800000u) == 0x7f800000u) return i;
    } else {
      if ((w[i] & 0x7f80u) == 0x7f80u) return 2 * i;
      if ((w[i] & 0x7f800000u) == 0x7f800000u) return 2 * i + 1;
    }
  }
  return -1;
}

template <typename ElemT, bool CHECK>
__global__ void __launch_bounds__(kCopyThreads) slot_copy_kernel(CodecParams p, int runs) {
  constexpr int kPerUnit = 16 / static_cast<int>(sizeof(ElemT));
  const Job job = grid_job();
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV * runs) return conv_job(p, job, src_slot, dst_slot, p.HV * runs);
  const int h = job.part / runs;
  const int64_t head_units = static_cast<int64_t>(p.dv) * p.dk / kPerUnit;
  const uint4* src =
      reinterpret_cast<const uint4*>(p.src_temporal) +
      ((static_cast<int64_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * head_units;
  uint4* dst = reinterpret_cast<uint4*>(p.dst_temporal) +
               ((static_cast<int64_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * head_units;
  const int64_t u0 =
      static_cast<int64_t>(job.part % runs) * kCopyUnits * kCopyThreads + threadIdx.x;
  uint4 v[kCopyUnits];
#pragma unroll
  for (int i = 0; i < kCopyUnits; ++i)
    if (u0 + i * kCopyThreads < head_units) v[i] = src[u0 + i * kCopyThreads];
  if constexpr (CHECK) {
    __shared__ int bad;
    int first_bad = -1;
#pragma unroll
    for (int i = 0; i < kCopyUnits; ++i) {
      const int64_t u = u0 + i * kCopyThreads;
      const int e = u < head_units ? first_non_finite<ElemT>(v[i]) : -1;
      if (e >= 0 && first_bad < 0) first_bad = static_cast<int>(u * kPerUnit + e);
    }
    if (threadIdx.x == 0) bad = -1;
    if (__syncthreads_or(first_bad >= 0)) {  // rare: the whole block takes this branch
      report_non_finite(p, job.layer, h, first_bad, bad);
      return;  // refuse: nothing is written for this run
    }
  }
#pragma unroll
  for (int i = 0; i < kCopyUnits; ++i)
    if (u0 + i * kCopyThreads < head_units) dst[u0 + i * kCopyThreads] = v[i];
}

// Whether a codec on an active dtype is a slot copy (checkpoint bytes = active bytes).
template <typename ActiveT, Kind K>
constexpr bool is_slot_copy() {
  return (K == Kind::fp32 && std::is_same_v<ActiveT, float>) ||
         (K == Kind::bf16 && std::is_same_v<ActiveT, __nv_bfloat16>);
}

// Launches slot_copy_kernel when the head is whole 16-byte units; returns false otherwise.
template <typename ActiveT, bool CHECK>
bool launch_slot_copy(const PoolGeometry& g, const CodecParams& p, int n, cudaStream_t stream) {
  const int64_t head_bytes = static_cast<int64_t>(g.dv) * g.dk * sizeof(ActiveT);
  if (head_bytes % 16 != 0) return false;
  constexpr int64_t kRunUnits = static_cast<int64_t>(kCopyUnits) * kCopyThreads;
  const int runs = static_cast<int>((head_bytes / 16 + kRunUnits - 1) / kRunUnits);
  const dim3 grid(static_cast<unsigned>(g.HV * runs + p.conv_blocks), static_cast<unsigned>(g.L),
                  static_cast<unsigned>(n));
  slot_copy_kernel<ActiveT, CHECK><<<grid, kCopyThreads, 0, stream>>>(p, runs);
  return true;
}

int conv_blocks_for(int64_t conv_elems) {
  return static_cast<int>((conv_elems + kConvChunk - 1) / kConvChunk);
}

CodecParams make_params(const PoolGeometry& g, const StatePoolView& src, const StatePoolView& dst,
                        const int32_t* src_ids, const int32_t* dst_ids, int32_t* error_info) {
  CodecParams p;
  p.L = g.L, p.HV = g.HV, p.dv = g.dv, p.dk = g.dk;
  p.conv_elems = (src.conv && dst.conv) ? g.conv_elems : 0;
  p.conv_blocks = conv_blocks_for(p.conv_elems);
  p.src_temporal = src.temporal, p.src_scales = src.scales, p.src_conv = src.conv,
  p.src_slots = src.slots_total;
  p.dst_temporal = dst.temporal, p.dst_scales = dst.scales, p.dst_conv = dst.conv,
  p.dst_slots = dst.slots_total;
  p.src_ids = src_ids, p.dst_ids = dst_ids;
  p.error_info = error_info;
  return p;
}

void check_geometry(const PoolGeometry& g, const Codec& c, const StatePoolView& ckpt,
                    const char* what) {
  if (g.L <= 0 || g.HV <= 0 || g.dv <= 0 || g.dk <= 0)
    fail("{}: pool geometry must be positive (L {}, HV {}, d_v {}, d_k {})", what, g.L, g.HV, g.dv,
         g.dk);
  if (g.dk > 256 || g.dv > 256)
    fail("{}: d_k and d_v up to 256 are supported (got {}, {})", what, g.dk, g.dv);
  if (g.L > 65535) fail("{}: at most 65535 layers per launch (got {})", what, g.L);
  if (c.has_scales() && !ckpt.scales)
    fail("{}: codec {} needs a scales buffer in the checkpoint pool", what, c.kind_name());
}

// The kernels move temporal values and scales in 8- and 16-byte accesses and bulk copies from
// each pool's base (cudaMalloc returns 256-byte aligned memory).
void check_alignment(const StatePoolView& v, const char* pool, const char* what) {
  for (const void* ptr : {v.temporal, v.scales})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      fail("{}: the {} pool's {} buffer is not 16-byte aligned", what, pool,
           ptr == v.temporal ? "temporal" : "scales");
}

template <typename ActiveT, Kind K, typename ScaleT, int VEC, int NCHUNK>
void launch_store_rows(const PoolGeometry& g, const CodecParams& p, int n, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n) * g.L * (g.HV + p.conv_blocks));
  if (g.dv <= 8 * kWarps)
    store_kernel<ActiveT, K, ScaleT, VEC, NCHUNK, 8><<<grid, kWarps * 32, 0, stream>>>(p);
  else
    store_kernel<ActiveT, K, ScaleT, VEC, NCHUNK, 16><<<grid, kWarps * 32, 0, stream>>>(p);
}

template <typename ActiveT, Kind K, typename ScaleT>
void launch_store_per_head(const PoolGeometry& g, const CodecParams& p, int n,
                           cudaStream_t stream) {
  if (g.dk % 4 == 0 && g.dk <= 128)
    launch_store_rows<ActiveT, K, ScaleT, 4, 1>(g, p, n, stream);
  else if (g.dk % 4 == 0)
    launch_store_rows<ActiveT, K, ScaleT, 4, 2>(g, p, n, stream);
  else if (g.dk <= 128)
    launch_store_rows<ActiveT, K, ScaleT, 1, 4>(g, p, n, stream);
  else
    launch_store_rows<ActiveT, K, ScaleT, 1, 8>(g, p, n, stream);
}

// int8 and fp8_e4m3: bf16 active states with 128 x 128 heads take the staged kernel; d_k % 32 ==
// 0 and d_v 128 or 256 the strip kernel; a slot copy with heads of whole 16-byte units the copy
// kernel; everything else the per-head kernel.
template <typename ActiveT, Kind K, typename ScaleT>
void launch_store(const PoolGeometry& g, const CodecParams& p, int n, cudaStream_t stream) {
  if constexpr (K == Kind::int8 || K == Kind::fp8) {
    if (std::is_same_v<ActiveT, __nv_bfloat16> && g.dk == 128 && g.dv == 128) {
      const dim3 grid(static_cast<unsigned>(g.HV + p.conv_blocks), static_cast<unsigned>(g.L),
                      static_cast<unsigned>(n));
      store_staged_bf16_kernel<ScaleT, K><<<grid, kFastThreads, 0, stream>>>(p);
      return;
    }
    // Columns per thread: fp32 active states take 8 (two 16-byte loads per row) where d_k
    // allows, bf16 ones 4 (one 8-byte load per row): the faster of the two on an H200 for each
    // (variant timings in results/gpu/). Rows per thread: 8, or 16 for d_v = 256.
    constexpr int kGroups = kFastThreads / 8;
    const int cols = sizeof(ActiveT) == 4 && g.dk % 64 == 0 ? 8 : 4;
    if (g.dk % (8 * cols) == 0 && (g.dv == 8 * kGroups || g.dv == 16 * kGroups)) {
      const dim3 grid(static_cast<unsigned>(g.HV * (g.dk / (8 * cols)) + p.conv_blocks),
                      static_cast<unsigned>(g.L), static_cast<unsigned>(n));
      if (cols == 8 && g.dv == 8 * kGroups)
        store_scaled_strip_kernel<ActiveT, ScaleT, K, kFastThreads, 8, 8>
            <<<grid, kFastThreads, 0, stream>>>(p);
      else if (cols == 8)
        store_scaled_strip_kernel<ActiveT, ScaleT, K, kFastThreads, 16, 8>
            <<<grid, kFastThreads, 0, stream>>>(p);
      else if (g.dv == 8 * kGroups)
        store_scaled_strip_kernel<ActiveT, ScaleT, K, kFastThreads, 8, 4>
            <<<grid, kFastThreads, 0, stream>>>(p);
      else
        store_scaled_strip_kernel<ActiveT, ScaleT, K, kFastThreads, 16, 4>
            <<<grid, kFastThreads, 0, stream>>>(p);
      return;
    }
  }
  if constexpr (is_slot_copy<ActiveT, K>()) {
    if (launch_slot_copy<ActiveT, true>(g, p, n, stream)) return;
  }
  launch_store_per_head<ActiveT, K, ScaleT>(g, p, n, stream);
}

// A slot copy with heads of whole 16-byte units: the copy kernel; otherwise d_k % 4 == 0 with
// d_k / 4 dividing 128: the row kernel; everything else: the per-head kernel.
template <typename ActiveT, Kind K, typename ScaleT>
void launch_load(const PoolGeometry& g, const CodecParams& p, int n, cudaStream_t s) {
  if constexpr (is_slot_copy<ActiveT, K>()) {
    if (launch_slot_copy<ActiveT, false>(g, p, n, s)) return;
  }
  if (g.dk % 4 == 0 && kFastThreads % (g.dk / 4) == 0) {
    const int rows_per_run = kFastThreads / (g.dk / 4) * kLoadPasses;
    const int runs = (g.dv + rows_per_run - 1) / rows_per_run;
    const dim3 grid(static_cast<unsigned>(g.HV * runs + p.conv_blocks), static_cast<unsigned>(g.L),
                    static_cast<unsigned>(n));
    load_rows_kernel<ActiveT, K, ScaleT><<<grid, kFastThreads, 0, s>>>(p, runs);
    return;
  }
  const dim3 grid(static_cast<unsigned>(n) * g.L * (g.HV + p.conv_blocks));
  load_kernel<ActiveT, K, ScaleT><<<grid, kWarps * 32, 0, s>>>(p);
}

template <typename T>
struct TypeTag {
  using type = T;
};
template <Kind K>
struct KindTag {
  static constexpr Kind value = K;
};

// Turns the runtime choices of a launch (active dtype, codec kind, scale dtype) into template
// arguments, in one place for store and load: calls f(TypeTag<ActiveT>, KindTag<K>,
// TypeTag<ScaleT>), with ScaleT float for the codecs without scales.
template <typename F>
void dispatch(Dtype active_dtype, const Codec& c, F&& f) {
  auto with_active = [&](auto active) {
    auto with_kind = [&](auto kind) {
      constexpr Kind K = decltype(kind)::value;
      if constexpr (K == Kind::int8 || K == Kind::fp8) {
        if (c.scale_dtype == Dtype::bf16) return f(active, kind, TypeTag<__nv_bfloat16>{});
      }
      return f(active, kind, TypeTag<float>{});
    };
    switch (kind_of(c)) {
      case Kind::fp32:
        return with_kind(KindTag<Kind::fp32>{});
      case Kind::bf16:
        return with_kind(KindTag<Kind::bf16>{});
      case Kind::int8:
        return with_kind(KindTag<Kind::int8>{});
      case Kind::fp8:
        return with_kind(KindTag<Kind::fp8>{});
      case Kind::fp8_raw:
        return with_kind(KindTag<Kind::fp8_raw>{});
    }
  };
  if (active_dtype == Dtype::fp32)
    with_active(TypeTag<float>{});
  else
    with_active(TypeTag<__nv_bfloat16>{});
}

}  // namespace

void checkpoint_store(const PoolGeometry& g, const StatePoolView& active, Dtype active_dtype,
                      const StatePoolView& ckpt, const Codec& codec, const int32_t* active_slots,
                      const int32_t* ckpt_slots, int n, int32_t* error_info, cudaStream_t stream) {
  check_geometry(g, codec, ckpt, "checkpoint_store");
  if (n <= 0) return;
  if (n > 65535) fail("checkpoint_store: at most 65535 slots per launch (got {})", n);
  if (!active.temporal || !ckpt.temporal || !active_slots || !ckpt_slots)
    fail("checkpoint_store: a required device pointer is null");
  check_alignment(active, "active", "checkpoint_store");
  check_alignment(ckpt, "checkpoint", "checkpoint_store");
  const CodecParams p = make_params(g, active, ckpt, active_slots, ckpt_slots, error_info);
  dispatch(active_dtype, codec, [&](auto active, auto kind, auto scale) {
    launch_store<typename decltype(active)::type, decltype(kind)::value,
                 typename decltype(scale)::type>(g, p, n, stream);
  });
  STATECHECK_CUDA_CHECK_LAUNCH("store_kernel");
}

void checkpoint_load(const PoolGeometry& g, const StatePoolView& ckpt, const Codec& codec,
                     const StatePoolView& active, Dtype active_dtype, const int32_t* ckpt_slots,
                     const int32_t* active_slots, int n, cudaStream_t stream) {
  check_geometry(g, codec, ckpt, "checkpoint_load");
  if (n <= 0) return;
  if (n > 65535) fail("checkpoint_load: at most 65535 slots per launch (got {})", n);
  if (!active.temporal || !ckpt.temporal || !active_slots || !ckpt_slots)
    fail("checkpoint_load: a required device pointer is null");
  check_alignment(active, "active", "checkpoint_load");
  check_alignment(ckpt, "checkpoint", "checkpoint_load");
  const CodecParams p = make_params(g, ckpt, active, ckpt_slots, active_slots, nullptr);
  dispatch(active_dtype, codec, [&](auto active, auto kind, auto scale) {
    launch_load<typename decltype(active)::type, decltype(kind)::value,
                typename decltype(scale)::type>(g, p, n, stream);
  });
  STATECHECK_CUDA_CHECK_LAUNCH("load_kernel");
}

void check_store_error(int32_t* error_info, const PoolGeometry& g, cudaStream_t stream) {
  if (!error_info) return;
  int32_t host[4] = {0, 0, 0, 0};
  STATECHECK_CUDA_CHECK(
      cudaMemcpyAsync(host, error_info, sizeof host, cudaMemcpyDeviceToHost, stream));
  STATECHECK_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host[0] == 0) return;
  STATECHECK_CUDA_CHECK(cudaMemsetAsync(error_info, 0, sizeof host, stream));
  fail(
      "non-finite state value at layer {}, head {}, index [{}, {}] (d_v row, d_k column): the "
      "checkpoint "
      "store refused it",
      host[1], host[2], host[3] / g.dk, host[3] % g.dk);
}

double checkpoint_store_bytes(const PoolGeometry& g, Dtype active_dtype, const Codec& c, int n) {
  const double elems = static_cast<double>(n) * g.L * g.HV * g.dv * g.dk;
  const double scales = static_cast<double>(n) * g.L * g.HV * g.dk * c.scale_bytes();
  const double conv = 2.0 * 2.0 * static_cast<double>(n) * g.L * g.conv_elems;
  return elems * (dtype_bytes(active_dtype) + c.value_bytes()) + scales + conv + 8.0 * n;
}

double checkpoint_store_read_bytes(const PoolGeometry& g, Dtype active_dtype, int n) {
  const double elems = static_cast<double>(n) * g.L * g.HV * g.dv * g.dk;
  return elems * dtype_bytes(active_dtype) + 2.0 * n * g.L * g.conv_elems + 8.0 * n;
}

double checkpoint_load_bytes(const PoolGeometry& g, Dtype active_dtype, const Codec& c, int n) {
  return checkpoint_store_bytes(g, active_dtype, c, n);  // the same bytes, the other way
}

double checkpoint_load_read_bytes(const PoolGeometry& g, Dtype active_dtype, const Codec& c,
                                  int n) {
  // The store's written bytes, and the slot lists, which either direction reads.
  return checkpoint_store_bytes(g, active_dtype, c, n) -
         checkpoint_store_read_bytes(g, active_dtype, n) + 8.0 * n;
}

}  // namespace statecheck::cuda
