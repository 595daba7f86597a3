// The CUDA device: availability (for tests that skip without a GPU) and owned device buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/common/cuda_check.h"

namespace statecheck::cuda {

// True when a CUDA device can be used; otherwise `why` (if given) says why not (no driver, no
// device, insufficient driver), in one line.
bool device_available(std::string* why = nullptr);

// One line describing device 0: name, SMs, memory, L2, compute capability, driver/runtime.
std::string device_description();

// How many blocks of `kernel` (a __global__ function) with `threads` threads and
// `dynamic_shared_bytes` of dynamic shared memory fit on the current device at once (blocks per
// SM from the occupancy calculator, times the SMs): the grid of a persistent kernel. Raises the
// kernel's dynamic shared-memory limit on the device to the request when it is above the current
// limit (48 KB by default) and never lowers it, so a launch with that much shared memory is
// allowed once this has returned non-zero; returns 0 when the device cannot give that much to one
// block. Cached per (device, kernel, threads, bytes): a launch pays one cudaGetDevice and a lookup.
// Throws statecheck::Error on any other CUDA failure (e.g. `kernel` is not a kernel).
int resident_blocks(const void* kernel, int threads, size_t dynamic_shared_bytes);

// An owned device allocation of n elements of T (cudaMalloc / cudaFree). Not copyable.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_, n_ = o.n_;
      o.ptr_ = nullptr, o.n_ = 0;
    }
    return *this;
  }

  void resize(size_t n) {
    release();
    if (n > 0) STATECHECK_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
    n_ = n;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(const std::vector<T>& host) {
    if (host.size() != n_) resize(host.size());
    if (n_) STATECHECK_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_) STATECHECK_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (e.g. 0xFF: NaN for fp32 and bf16 outputs before a kernel runs).
  void fill_bytes(int byte) {
    if (n_) STATECHECK_CUDA_CHECK(cudaMemset(ptr_, byte, bytes()));
  }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// Uploads a host vector into a new device buffer.
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> d;
  d.upload(host);
  return d;
}

}  // namespace statecheck::cuda
