// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel random
// numbers: as easy as 1, 2, 3" (SC'11), as cuRAND and PyTorch use it, and the keying of the
// working-state stochastic roundings (docs/working_state.md, "Random numbers").
//
// Header-only and free of the standard library beyond <cstdint>, so .cu files include it and a
// kernel draws the same words as the CPU reference for the same (key, counter). Checked against
// the known-answer vectors of Random123 (tests/kat_vectors; tests/test_philox.cpp).
#pragma once

#include <cstdint>

#include "core/working_state/host_device.h"

namespace statecheck {

struct Philox4x32Key {
  uint32_t k0, k1;
};

struct Philox4x32Counter {
  uint32_t c0, c1, c2, c3;
};

// The four 32-bit words of Philox4x32 with 10 rounds at `counter` under `key`.
// One round, with M0 = 0xD2511F53, M1 = 0xCD9E8D57 and (hi, lo) the 64-bit product's halves:
//   (hi0, lo0) = M0 * c0;  (hi1, lo1) = M1 * c2
//   c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
// and the key advances by the Weyl constants (0x9E3779B9, 0xBB67AE85) between rounds.
WS_HD Philox4x32Counter philox4x32_10(Philox4x32Counter c, Philox4x32Key k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k.k0 += kW0;
      k.k1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c.c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = Philox4x32Counter{hi1 ^ c.c1 ^ k.k0, lo1, hi0 ^ c.c3 ^ k.k1, lo0};
  }
  return c;
}

// Word `i` (0..3) of a Philox4x32 output.
WS_HD uint32_t philox_word(const Philox4x32Counter& out, uint32_t i) {
  return i == 0 ? out.c0 : i == 1 ? out.c1 : i == 2 ? out.c2 : out.c3;
}

// The key of the stochastic roundings of one (layer, value head) of a run with `seed`:
//   key = (seed & 0xFFFFFFFF, (seed >> 32) ^ (layer << 16) ^ head)
// layer and head are indices >= 0 (head below 2^16 keeps the two fields apart).
WS_HD Philox4x32Key rounding_key(uint64_t seed, uint32_t layer, uint32_t head) {
  return Philox4x32Key{static_cast<uint32_t>(seed & 0xFFFFFFFFu),
                       static_cast<uint32_t>(seed >> 32) ^ (layer << 16) ^ head};
}

// The counter of element `element` (i * d_k + j for state entry S[i, j] of a [d_v, d_k] head) at
// absolute token position `token` of sequence `sequence` (its index in the run, not its slot):
//   counter = (element / 4, token, sequence, 0); the word used is element % 4.
WS_HD Philox4x32Counter rounding_counter(uint32_t element, uint32_t token, uint32_t sequence) {
  return Philox4x32Counter{element / 4u, token, sequence, 0u};
}

// The 32-bit word that rounds element `element` at (token, sequence) under `key`. A kernel that
// handles four consecutive elements (element % 4 == 0..3) calls philox4x32_10 once and uses all
// four words; this form recomputes the block per element and gives the same word.
WS_HD uint32_t rounding_word(Philox4x32Key key, uint32_t element, uint32_t token,
                             uint32_t sequence) {
  return philox_word(philox4x32_10(rounding_counter(element, token, sequence), key), element % 4u);
}

// A uniform draw u in [0, 1) from a rounding word: u = (r >> 8) * 2^-24, exact in fp32.
WS_HD float rounding_uniform(uint32_t r) {
  return static_cast<float>(r >> 8) * 5.9604644775390625e-8f;  // 2^-24
}

}  // namespace statecheck
