// OCP FP8 E4M3 ("e4m3fn"): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits, no infinities,
// NaN = S.1111.111, largest finite 448 = 1.75 * 2^8, smallest subnormal 2^-9.
//
// Source: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, section 5.1; the same encoding as
// PyTorch's torch.float8_e4m3fn and CUDA's __nv_fp8_e4m3.
#pragma once

#include <cstdint>

namespace statecheck {

// Largest finite E4M3 magnitude.
inline constexpr float kFp8E4m3Max = 448.0f;

// Decodes one E4M3 code to fp32 (exact). 0x7F and 0xFF decode to NaN.
float fp8_e4m3_to_float(uint8_t code);

// Encodes fp32 to E4M3 with round-to-nearest-even and saturation: finite values whose magnitude
// rounds above 448 become +-448 (code 0x7E / 0xFE). Infinities saturate to +-448 as well. NaN maps
// to 0x7F (callers reject non-finite states before encoding; see codec.h).
uint8_t fp8_e4m3_from_float(float x);

}  // namespace statecheck
