// bfloat16: the upper 16 bits of an IEEE-754 binary32, rounded to nearest, ties to even.
//
// Used for bf16 states, bf16 codec scales, bf16 q/k/v and the bf16 conv state. Matches the
// rounding of PyTorch's `tensor.to(torch.bfloat16)` and of CUDA's __float2bfloat16_rn.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace statecheck {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// fp32 -> bf16 bits, round to nearest even. Overflow rounds to +-Inf as IEEE requires; NaN stays
// NaN (quiet bit set, sign kept).
inline uint16_t bf16_bits_from_float(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

inline float float_from_bf16_bits(uint16_t b) {
  return float_from_bits(static_cast<uint32_t>(b) << 16);
}

// fp32 value rounded to the nearest bf16 value (returned as fp32, exactly representable in bf16).
inline float round_to_bf16(float f) {
  return float_from_bf16_bits(bf16_bits_from_float(f));
}

// Each value of `a` as bf16 bits (round to nearest even), e.g. q, k, v for a bf16 kernel input.
inline std::vector<uint16_t> bf16_bits(const std::vector<float>& a) {
  std::vector<uint16_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = bf16_bits_from_float(a[i]);
  return out;
}

}  // namespace statecheck
