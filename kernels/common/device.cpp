#include "kernels/common/device.h"

#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

namespace statecheck::cuda {

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    int driver = 0;
    // cudaDriverGetVersion gives 0 when no driver is installed (CUDA runtime API reference).
    if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
        driver == 0) {
      if (why) *why = "no CUDA driver is installed on this machine (no GPU to run on)";
    } else if (why) {
      *why = fmt::format("no usable CUDA driver/device ({})", cudaGetErrorString(e));
    }
    cudaGetLastError();  // clear the sticky error of the failed query
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device present";
    return false;
  }
  return true;
}

std::string device_description() {
  cudaDeviceProp p{};
  STATECHECK_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return fmt::format("{}, sm_{}{}, {} SMs, {:.1f} GiB, L2 {} MiB, driver {}.{}, runtime {}.{}",
                     p.name, p.major, p.minor, p.multiProcessorCount,
                     p.totalGlobalMem / 1073741824.0, p.l2CacheSize >> 20, driver / 1000,
                     (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
}

int resident_blocks(const void* kernel, int threads, size_t dynamic_shared_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, size_t>, int> known;
  int device = 0;
  STATECHECK_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, kernel, threads, dynamic_shared_bytes);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  int per_sm = 0, sms = 0;
  cudaFuncAttributes attributes{};
  STATECHECK_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  bool fits = true;
  if (dynamic_shared_bytes > static_cast<size_t>(attributes.maxDynamicSharedSizeBytes)) {
    // Raise the limit (never lower it: another launch of the kernel may need the larger one).
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(dynamic_shared_bytes));
    if (e == cudaErrorInvalidValue) {
      (void)cudaGetLastError();  // more than the device gives one block: not resident at all
      fits = false;
    } else {
      STATECHECK_CUDA_CHECK(e);
    }
  }
  if (fits)
    STATECHECK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads,
                                                                        dynamic_shared_bytes));
  STATECHECK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  known.emplace(key, per_sm * sms);
  return per_sm * sms;
}

}  // namespace statecheck::cuda
