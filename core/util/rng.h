// Seeded random numbers that are identical on every platform and standard library.
//
// std::normal_distribution and friends are implementation-defined; statecheck results must be
// reproducible from the seed recorded in each result file, so the draws are written out here on
// top of std::mt19937_64 (whose output sequence the C++ standard fixes).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace statecheck {

// Mixes several integers into one 64-bit seed (splitmix64 finaliser per word), so that a stream
// can be named by (seed, layer, purpose) and every stream is independent of how many others exist.
inline uint64_t mix_seed(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  auto mix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(a);
  h = mix(h ^ b);
  h = mix(h ^ c);
  h = mix(h ^ d);
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Standard normal by the Box-Muller transform (both values of a pair are used).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = 0.0;
    do {
      u1 = uniform();
    } while (u1 <= 0.0);
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * M_PI * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : engine_() % n; }

  uint64_t next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace statecheck
