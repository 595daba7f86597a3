// GPU timing for benchmarks (STYLE.md habit 11, device METHOD.md): CUDA events around each
// repeat, the L2 cache flushed before every repeat (a memset of a buffer larger than L2), small
// launches captured once into a CUDA graph and timed as graph replays, medians reported.
#pragma once

#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/common/device.h"

namespace statecheck::cuda {

struct TimingStats {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int repeats = 0;
};

class GpuTimer {
 public:
  // flush_bytes: size of the scratch buffer written between repeats (>= 2x the L2 size).
  explicit GpuTimer(size_t flush_bytes = size_t(256) << 20);
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Times `launch` (which enqueues work on the given stream): one warm-up, then `repeats` timed
  // runs, each after an L2 flush. With use_graph the launch is captured once into a CUDA graph
  // and each repeat replays it. Throws statecheck::Error on any CUDA failure.
  TimingStats time(const std::function<void(cudaStream_t)>& launch, int repeats,
                   bool use_graph = true);

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  DeviceBuffer<uint8_t> flush_;
};

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second), median of
// `repeats` cudaMemcpyAsync of `bytes` bytes.
double measure_copy_gbps(GpuTimer& timer, size_t bytes, int repeats);

}  // namespace statecheck::cuda
