#include "kernels/common/timing.h"

#include "kernels/common/bandwidth.h"

#include <algorithm>

namespace statecheck::cuda {

namespace {

constexpr int kFlushBlocks = 1024;

}  // namespace

GpuTimer::GpuTimer(size_t flush_bytes) : flush_(flush_bytes), flush_sink_(kFlushBlocks) {
  STATECHECK_CUDA_CHECK(cudaMemset(flush_.data(), 0, flush_.bytes()));
  STATECHECK_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  STATECHECK_CUDA_CHECK(cudaEventCreate(&start_));
  STATECHECK_CUDA_CHECK(cudaEventCreate(&stop_));
}

GpuTimer::~GpuTimer() {
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (stream_) cudaStreamDestroy(stream_);
}

void GpuTimer::flush() {
  // Reading evicts whatever L2 held (writing dirty lines back now) and leaves it full of clean
  // lines that later kernels drop for free.
  read_stream(flush_.data(), flush_.bytes(), flush_sink_.data(), kFlushBlocks, stream_);
}

TimingStats GpuTimer::time(const std::function<void(cudaStream_t)>& launch, int repeats,
                           bool use_graph) {
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  if (use_graph) {
    STATECHECK_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    launch(stream_);
    STATECHECK_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    STATECHECK_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  }
  auto run = [&] {
    if (use_graph)
      STATECHECK_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    else
      launch(stream_);
  };
  run();  // warm-up
  STATECHECK_CUDA_CHECK(cudaStreamSynchronize(stream_));
  auto between_events = [&](auto&& body) {
    STATECHECK_CUDA_CHECK(cudaEventRecord(start_, stream_));
    body();
    STATECHECK_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    STATECHECK_CUDA_CHECK(cudaEventSynchronize(stop_));
    float t = 0;
    STATECHECK_CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_));
    return static_cast<double>(t);
  };
  auto timed = [&](bool with_launch) {
    flush();
    return between_events([&] {
      if (with_launch) run();
      flush();  // writes the launch's dirty lines back to HBM inside the timed region
    });
  };
  auto timed_memset = [&](int r) {
    STATECHECK_CUDA_CHECK(cudaMemsetAsync(flush_.data(), r & 0xFF, flush_.bytes(), stream_));
    return between_events(run);
  };
  std::vector<double> with, alone, memset_flush;
  for (int r = 0; r < repeats; ++r) {
    with.push_back(timed(true));
    alone.push_back(timed(false));
    memset_flush.push_back(timed_memset(r));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double flush_ms = median(alone);
  std::vector<double> ms;
  for (double t : with) ms.push_back(t - flush_ms);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  std::sort(ms.begin(), ms.end());
  TimingStats s;
  s.repeats = repeats;
  s.median_ms = ms[ms.size() / 2];
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  s.memset_flush_median_ms = median(memset_flush);
  return s;
}

double measure_copy_gbps(GpuTimer& timer, size_t bytes, int repeats) {
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  STATECHECK_CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
  const TimingStats t = timer.time(
      [&](cudaStream_t s) {
        STATECHECK_CUDA_CHECK(
            cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s));
      },
      repeats, false);
  return 2.0 * static_cast<double>(bytes) / (t.median_ms * 1e-3) / 1e9;
}

}  // namespace statecheck::cuda
