// fp32 FMA peak of one core (experiments/cpu_peak.h). The accumulators are independent chains so
// that the loop is bound by FMA throughput, not latency; `a` and `b` are run-time values so that
// no step can be folded away.
#include "experiments/cpu_peak.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace statecheck {

const char* fma_peak_isa() {
#if defined(__AVX512F__)
  return "avx512 fma";
#elif defined(__FMA__)
  return "avx2 fma";
#else
  return "scalar fma";
#endif
}

double fma_chains(int64_t iterations, float a, float b) {
  float acc[kFmaAccumulators] = {};
#if defined(__AVX512F__)
  constexpr int W = 16, V = kFmaAccumulators / W;
  __m512 r[V];
  for (int v = 0; v < V; ++v) r[v] = _mm512_setzero_ps();
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (int64_t i = 0; i < iterations; ++i)
    for (int v = 0; v < V; ++v) r[v] = _mm512_fmadd_ps(r[v], va, vb);
  for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc + v * W, r[v]);
#elif defined(__FMA__)
  constexpr int W = 8, V = kFmaAccumulators / W;
  __m256 r[V];
  for (int v = 0; v < V; ++v) r[v] = _mm256_setzero_ps();
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  for (int64_t i = 0; i < iterations; ++i)
    for (int v = 0; v < V; ++v) r[v] = _mm256_fmadd_ps(r[v], va, vb);
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc + v * W, r[v]);
#else
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kFmaAccumulators; ++j) acc[j] = std::fma(acc[j], a, b);
#endif
  double sum = 0;
  for (float x : acc) sum += x;
  return sum;
}

double measure_fma_peak_gflops(int repeats, double seconds) {
  using clock = std::chrono::steady_clock;
  // a just below 1 and a small b keep the accumulators finite and normal for any length.
  const float a = 1.0f - 1.0f / 1024, b = 1.0f / 1024;
  auto timed = [&](int64_t n) {
    const auto start = clock::now();
    volatile double sink = fma_chains(n, a, b);
    (void)sink;
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  // Size one run to about `seconds` from a short probe.
  int64_t n = 1 << 16;
  const double probe = std::max(timed(n), 1e-6);
  n = std::max<int64_t>(n, static_cast<int64_t>(n * seconds / probe));
  std::vector<double> gflops;
  for (int r = 0; r < repeats; ++r)
    gflops.push_back(2.0 * kFmaAccumulators * static_cast<double>(n) / timed(n) / 1e9);
  std::sort(gflops.begin(), gflops.end());
  return gflops[gflops.size() / 2];
}

}  // namespace statecheck
