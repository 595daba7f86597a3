#include "kernels/common/bandwidth.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

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

__global__ void __launch_bounds__(256)
    mixed_stream_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int reads,
                        int writes) {
  const size_t b = blockIdx.x, t = threadIdx.x;
  uint4 x = make_uint4(0, 0, 0, 0);
  for (int j = 0; j < reads; ++j) {
    const uint4 v = src[(b * reads + j) * 256 + t];
    x.x ^= v.x, x.y ^= v.y, x.z ^= v.z, x.w ^= v.w;
  }
  for (int o = 0; o < writes; ++o)
    dst[(b * writes + o) * 256 + t] = make_uint4(x.x ^ static_cast<uint32_t>(o), x.y, x.z, x.w);
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

MixedStream mixed_stream_for(double read_bytes, double write_bytes) {
  if (!(read_bytes >= 16) || !(write_bytes >= 16) || !std::isfinite(read_bytes) ||
      !std::isfinite(write_bytes))
    fail("mixed_stream_for: needs at least 16 bytes each way (read {}, write {})", read_bytes,
         write_bytes);
  const double small = std::min(read_bytes, write_bytes), large = std::max(read_bytes, write_bytes);
  const long ratio = std::lround(large / small);
  if (ratio > 64) fail("mixed_stream_for: read : write ratio {:.1f} is over 64", large / small);
  MixedStream m;
  (read_bytes >= write_bytes ? m.reads : m.writes) = static_cast<int>(ratio);
  m.groups = std::max<size_t>(256, static_cast<size_t>(small / 16) / 256 * 256);
  return m;
}

void mixed_stream(const MixedStream& m, const void* src, void* dst, cudaStream_t stream) {
  if (m.groups == 0 || m.groups % 256 != 0 || m.reads < 1 || m.writes < 1 ||
      (m.reads > 1 && m.writes > 1) || m.groups / 256 > 0x7FFFFFFFu)
    fail(
        "mixed_stream: groups {} must be a positive multiple of 256 (below 2^31 blocks), reads {} "
        "and writes {} at least 1 and one of them 1",
        m.groups, m.reads, m.writes);
  mixed_stream_kernel<<<static_cast<unsigned>(m.groups / 256), 256, 0, stream>>>(
      static_cast<const uint4*>(src), static_cast<uint4*>(dst), m.reads, m.writes);
  STATECHECK_CUDA_CHECK(cudaGetLastError());
}

}  // namespace statecheck::cuda
