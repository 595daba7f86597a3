// The codecs' roundings on the GPU, bit for bit those of core/codec (docs/codecs.md): the int8
// code of x / s and the E4M3 code of x / s, formed the cheap way (a fused multiply-add with a
// magic number; paired bracket conversions) with the proofs that say when the cheap way decides,
// and the IEEE division where it does not. Included by the checkpoint codec's store kernels and by
// the working-state decode (ws_decode_chunks.cuh).
#pragma once

#include "kernels/codec/codec_common.cuh"

namespace statecheck::cuda {
namespace {

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
// rounding boundary) and the caller (encode_row, encode_chunk_or_divide) decides those elements
// with the division.
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

// Codes (int8 or E4M3, K) of COLS consecutive elements of a row, x[e] / s[e] with inv[e] = 1 / s[e]
// and br[e] = fp8_bracket(inv[e]), bit for bit as the CPU codec: the cheap way first
// (int8_code_fast, fp8_codes2), with one flag for the row. Where the flag is set, each element is
// encoded again by encode_one, so only those the cheap way cannot decide take the division, each
// behind its own branch: bf16 inputs hit exact ties far more often than fp32 ones (the rates:
// docs/kernel_notes.md), and a warp pays for every division any of its lanes executes. Code k
// lands in the low byte of q[e].
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

// The same codes, for the fp32 values of a working-state step (ws_decode_chunks.cuh), where the
// cheap way rarely fails to decide (about 1.2e-4 of the elements for int8): the cheap way with
// each column's bracket formed where it is used, one flag for the chunk, and where the flag is
// set every element of the chunk again by the division (the code the cheap way gives wherever it
// decides). Recomputing the whole chunk, rather than each element behind its own test as
// encode_row does, keeps the per-element tests out of the cheap path: the compiler would
// otherwise keep the COLS flags of the first pass live (two bit operations per element). Code k
// lands in the low byte of q[e].
template <Kind K, int COLS>
__device__ __forceinline__ void encode_chunk_or_divide(const float* x, const float* s,
                                                       const float* inv, uint32_t* q) {
  static_assert(COLS % 2 == 0, "pairs of elements");
  bool undecided = false;
#pragma unroll
  for (int e = 0; e < COLS; e += 2) {
    if constexpr (K == Kind::int8) {
      q[e] = int8_code_fast(x[e], inv[e], undecided);
      q[e + 1] = int8_code_fast(x[e + 1], inv[e + 1], undecided);
    } else {
      const uint32_t two =
          fp8_codes2(x[e], x[e + 1], fp8_bracket(inv[e]), fp8_bracket(inv[e + 1]), undecided);
      q[e] = two, q[e + 1] = two >> 8;
    }
  }
  if (__builtin_expect(undecided, 0)) {
#pragma unroll
    for (int e = 0; e < COLS; ++e) {
      if constexpr (K == Kind::int8)
        q[e] = static_cast<uint32_t>(int8_code_exact(x[e], s[e]));
      else
        q[e] = fp8_encode(__fdiv_rn(x[e], s[e]));
    }
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

}  // namespace
}  // namespace statecheck::cuda
