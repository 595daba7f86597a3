// Device-memory ceilings measured in the same run as the benchmarks: read-only and write-only
// streams, next to the device-to-device copy of timing.h. A kernel that mostly writes (the
// checkpoint load: 1 byte read per 4 written) or mostly reads (the store) is bounded by these
// one-directional rates rather than by the copy rate.
#pragma once

#include <cstddef>

#include "kernels/common/timing.h"

namespace statecheck::cuda {

// Enqueues a read of `bytes` bytes of `data` (16-byte loads, grid-stride; a per-block sum lands in
// `sink`, float[blocks], only in a case that never happens, so the loads stay) on `stream`.
// `data` must be 16-byte aligned; a tail of bytes % 16 is not read. Used for the read-only ceiling
// below and for the timer's L2 flush.
void read_stream(const void* data, size_t bytes, float* sink, int blocks, cudaStream_t stream);

// GB/s of a read-only stream over `bytes` (16-byte loads, a sum per block written at the end).
double measure_read_gbps(GpuTimer& timer, size_t bytes, int repeats);

// GB/s of a write-only stream of `bytes` (16-byte stores of a constant).
double measure_write_gbps(GpuTimer& timer, size_t bytes, int repeats);

}  // namespace statecheck::cuda
