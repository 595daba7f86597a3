#include "core/pools/payload.h"

#include "core/dtype/bf16.h"
#include "core/util/rng.h"

namespace statecheck {

uint64_t prefix_hash(const int32_t* tokens, size_t t) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  for (size_t i = 0; i < t; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 0x100000001b3ull;  // FNV prime
  }
  return mix_seed(h, t);
}

namespace {

// splitmix64 step: a fast, well-mixed counter-based generator.
inline uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from the top 24 bits (exactly representable in fp32).
inline float unit(uint64_t r) {
  return static_cast<float>(static_cast<int32_t>(r >> 40) - (1 << 23)) * 0x1.0p-23f;
}

}  // namespace

void reference_state(uint64_t h, const PayloadShape& shape, Dtype temporal_dtype, float* temporal,
                     uint16_t* conv) {
  const StateShape& s = shape.temporal;
  const size_t heads = static_cast<size_t>(s.layers) * s.heads;
  size_t e = 0;
  for (size_t lh = 0; lh < heads; ++lh) {
    for (int i = 0; i < s.dv; ++i) {
      for (int j = 0; j < s.dk; ++j, ++e) {
        // Column amplitude in [0.01, 0.1): a function of (h, head, j) only.
        const float amp =
            0.01f +
            0.09f * (0.5f + 0.5f * unit(splitmix(h ^ (lh * 4099 + j) * 0xD1B54A32D192ED03ull)));
        const float v = amp * unit(splitmix(h + e * 0x9E3779B97F4A7C15ull));
        temporal[e] = temporal_dtype == Dtype::bf16 ? round_to_bf16(v) : v;
      }
    }
  }
  for (size_t c = 0; c < shape.conv_elems; ++c)
    conv[c] = bf16_bits_from_float(0.5f * unit(splitmix(~h + c * 0xA0761D6478BD642Full)));
}

}  // namespace statecheck
