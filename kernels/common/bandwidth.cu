#include "kernels/common/bandwidth.h"

namespace statecheck::cuda {

namespace {

__global__ void read_stream_kernel(const float4* __restrict__ in, size_t n, float* out) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 v = in[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.678f) out[blockIdx.x] = acc;  // keeps the loads; practically never stores
}

__global__ void write_stream_kernel(float4* __restrict__ out, size_t n) {
  const float4 v = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = v;
}

int stream_blocks() {
  int sms = 0;
  STATECHECK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms * 8;
}

}  // namespace

void read_stream(const void* data, size_t bytes, float* sink, int blocks, cudaStream_t stream) {
  read_stream_kernel<<<blocks, 256, 0, stream>>>(static_cast<const float4*>(data), bytes / 16,
                                                 sink);
  STATECHECK_CUDA_CHECK(cudaGetLastError());
}

double measure_read_gbps(GpuTimer& timer, size_t bytes, int repeats) {
  DeviceBuffer<uint8_t> buf(bytes);
  DeviceBuffer<float> sink(stream_blocks());
  STATECHECK_CUDA_CHECK(cudaMemset(buf.data(), 0, bytes));
  const size_t n = bytes / 16;
  const TimingStats t = timer.time(
      [&](cudaStream_t s) { read_stream(buf.data(), n * 16, sink.data(), stream_blocks(), s); },
      repeats);
  return static_cast<double>(n * 16) / (t.median_ms * 1e-3) / 1e9;
}

double measure_write_gbps(GpuTimer& timer, size_t bytes, int repeats) {
  DeviceBuffer<uint8_t> buf(bytes);
  const size_t n = bytes / 16;
  const TimingStats t = timer.time(
      [&](cudaStream_t s) {
        write_stream_kernel<<<stream_blocks(), 256, 0, s>>>(reinterpret_cast<float4*>(buf.data()),
                                                            n);
      },
      repeats);
  return static_cast<double>(n * 16) / (t.median_ms * 1e-3) / 1e9;
}

}  // namespace statecheck::cuda
