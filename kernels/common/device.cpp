#include "kernels/common/device.h"

#include <fmt/format.h>

namespace statecheck::cuda {

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = fmt::format("no usable CUDA driver/device ({})", cudaGetErrorString(e));
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

}  // namespace statecheck::cuda
