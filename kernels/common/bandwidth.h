// Device-memory ceilings measured in the same run as the benchmarks: read-only and write-only
// streams, next to the device-to-device copy of timing.h, and a mixed stream that moves the bytes
// of a given kernel in its own read : write proportion. A kernel that mostly writes (the
// checkpoint load: 1 byte read per 4 written) or mostly reads (the store) is bounded by these
// rates rather than by the copy rate, and a launch of tens of MB further by its ramp-up, tail and
// write-back, which the mixed stream of the same size pays too.
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

// The shape of a mixed stream: `groups` groups (a multiple of 256) of `reads` 16-byte loads
// folded (XOR) into one value, stored `writes` times. One of reads, writes is 1, the other >= 1.
struct MixedStream {
  size_t groups = 0;
  int reads = 1, writes = 1;
  size_t read_bytes() const { return groups * reads * 16; }
  size_t write_bytes() const { return groups * writes * 16; }
};

// The mixed stream closest to moving `read_bytes` and `write_bytes`: the larger over the smaller
// rounded to the nearest whole ratio (a codec launch's 3.7 : 1 with scales and conv becomes 4 : 1,
// so the stream moves up to ~10% more of the larger side), groups from the smaller side rounded
// down to a multiple of 256 (at least 256). Throws statecheck::Error when either is below 16 bytes
// or not finite, or the ratio is over 64.
MixedStream mixed_stream_for(double read_bytes, double write_bytes);

// Enqueues the stream on `stream`: thread t of block b (256 threads, one group each) loads
// src[(b * reads + j) * 256 + t] for j < reads and stores their XOR, with word x also XORed with
// o, to dst[(b * writes + o) * 256 + t] for o < writes, so every warp access is 512 contiguous
// bytes (uint4 units). src must hold read_bytes() and dst write_bytes(), both 16-byte aligned.
// Throws statecheck::Error for a malformed `m` (groups not a positive multiple of 256, reads or
// writes below 1, both above 1) and, through STATECHECK_CUDA_CHECK, for a failed launch.
void mixed_stream(const MixedStream& m, const void* src, void* dst, cudaStream_t stream);

}  // namespace statecheck::cuda
