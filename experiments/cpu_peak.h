// The arithmetic ceiling of one CPU core, measured in the same run as the figures it is compared
// with (bench --device cpu, docs/experiments.md "bench"): single-precision fused multiply-add
// throughput with enough independent accumulators to hide the FMA latency, at the widest vector
// width this build's target (-march, CMake STATECHECK_HOST_ARCH) compiles to.
#pragma once

#include <cstdint>

namespace statecheck {

// Independent fp32 accumulators the peak loop keeps in registers: 12 vectors of 8 (AVX2) or 6
// of 16 (AVX-512) or 96 scalars, enough for two FMA pipes of 4-cycle latency (8 chains) with room.
constexpr int kFmaAccumulators = 96;

// The vector instructions the peak loop was compiled to: "avx512 fma", "avx2 fma" or "scalar fma"
// (std::fma, one lane per instruction where the target has no vector FMA).
const char* fma_peak_isa();

// Runs `iterations` steps of acc[j] = fma(acc[j], a, b) for j < kFmaAccumulators from acc[j] = 0
// and returns the sum over j of acc[j] (in fp64, so that the caller can check the arithmetic and
// the compiler cannot drop the loop). Work: 2 kFmaAccumulators iterations flops (one FMA = 2).
// a = 1, b = 1 gives kFmaAccumulators * iterations exactly (below 2^24 per accumulator).
double fma_chains(int64_t iterations, float a, float b);

// Peak fp32 GFLOP/s of the calling thread's core: the median over `repeats` runs (after one
// warm-up) of fma_chains, each about `seconds` long, flops / time / 1e9. No error cases.
double measure_fma_peak_gflops(int repeats, double seconds);

}  // namespace statecheck
