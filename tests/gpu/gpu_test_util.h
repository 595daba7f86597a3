// Shared pieces of the GPU tests: skip without a device (with the reason), guarded device buffers
// (a sentinel region after every buffer catches out-of-bounds writes), host-side helpers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/common/device.h"

namespace statecheck::cuda::testing {

// Test fixture base: skips every test of the suite, visibly, when no CUDA device can be used.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!device_available(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
  }
};

// A device buffer of n elements followed by kGuard bytes of sentinel 0xA5.
template <typename T>
class Guarded {
 public:
  static constexpr size_t kGuard = 4096;
  explicit Guarded(const std::vector<T>& host)
      : n_(host.size()), buf_(host.size() * sizeof(T) + kGuard) {
    char* base = reinterpret_cast<char*>(buf_.data());
    if (n_)
      STATECHECK_CUDA_CHECK(cudaMemcpy(base, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    STATECHECK_CUDA_CHECK(cudaMemset(base + n_ * sizeof(T), 0xA5, kGuard));
  }
  T* data() { return reinterpret_cast<T*>(buf_.data()); }
  std::vector<T> download() const {
    std::vector<T> out(n_);
    if (n_)
      STATECHECK_CUDA_CHECK(
          cudaMemcpy(out.data(), buf_.data(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  // True when the sentinel after the buffer is untouched.
  bool guard_intact() const {
    std::vector<uint8_t> tail(kGuard);
    const char* base = reinterpret_cast<const char*>(buf_.data());
    STATECHECK_CUDA_CHECK(
        cudaMemcpy(tail.data(), base + n_ * sizeof(T), kGuard, cudaMemcpyDeviceToHost));
    for (uint8_t b : tail)
      if (b != 0xA5) return false;
    return true;
  }

 private:
  size_t n_;
  DeviceBuffer<uint8_t> buf_;
};

}  // namespace statecheck::cuda::testing
