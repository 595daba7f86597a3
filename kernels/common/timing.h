// GPU timing for benchmarks: CUDA events around each repeat, the L2 cache flushed before every
// repeat, small launches captured once into a CUDA graph and timed as graph replays, medians
// reported.
//
// What a repeat charges: the launch starts from a cold and clean L2, and every byte it writes
// reaches HBM inside the timed region. Before each repeat a flush *reads* a buffer of several
// times the L2 size (flushing with a memset would leave L2 full of someone else's dirty lines,
// and the launch would pay for writing up to an L2's worth of them back, which swamps launches of
// tens of microseconds: docs/kernel_notes.md). After the launch the same read flush runs again
// inside the timed region, forcing the launch's own dirty lines out (otherwise up to an L2's worth
// of its writes would go uncharged); the median time of that flush alone, timed the same way, is
// subtracted: reported time = median(launch + flush) - median(flush), both timed right after a
// flush. min_ms / max_ms are single repeats less that median, so for launches much
// shorter than the flush's jitter they can come out near zero or below.
#pragma once

#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/common/device.h"

namespace statecheck::cuda {

struct TimingStats {
  double median_ms = 0.0;  // the method above
  // The same launch timed the way Triton's do_bench does it: a memset of the flush buffer, then the
  // launch alone between the events. Reported next to median_ms so figures can be compared with
  // public ones; it charges each launch the flush's dirty lines and leaves the launch's own unpaid.
  double memset_flush_median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int repeats = 0;
};

class GpuTimer {
 public:
  // flush_bytes: size of the scratch buffer read between repeats (>= 2x the L2 size).
  explicit GpuTimer(size_t flush_bytes = size_t(256) << 20);
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Times `launch` (which enqueues work on the given stream): one warm-up, then `repeats` timed
  // runs, each between two L2 flushes, less the median time of a flush (see above). With use_graph
  // the launch is captured once into a CUDA graph and each repeat replays it. Throws
  // statecheck::Error on any CUDA failure.
  TimingStats time(const std::function<void(cudaStream_t)>& launch, int repeats,
                   bool use_graph = true);

 private:
  void flush();  // enqueues the L2 read flush on stream_

  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  DeviceBuffer<uint8_t> flush_;
  DeviceBuffer<float> flush_sink_;
};

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second), median of
// `repeats` cudaMemcpyAsync of `bytes` bytes.
double measure_copy_gbps(GpuTimer& timer, size_t bytes, int repeats);

}  // namespace statecheck::cuda
