// The tensor-core ceiling of the chunked prefill kernels, measured: the rate at which the device
// runs mma.sync.m16n8k16 bf16 products with fp32 accumulation (the instruction those kernels
// use, kernels/common/mma_sync.cuh) from registers, with no memory traffic: every warp of a full
// grid issues kChains independent accumulation chains. The figure a kernel built on mma.sync can
// reach at best; wgmma (sm_90a's asynchronous warpgroup products) has a higher peak that
// mma.sync does not reach.
#pragma once

#include "kernels/common/timing.h"

namespace statecheck::cuda {

// TFLOP/s (a multiply-add counted as 2 FLOPs) of the register-only mma.sync bf16 loop, median of
// `repeats` timings with `timer`. Throws statecheck::Error on a CUDA failure.
double measure_mma_bf16_tflops(GpuTimer& timer, int repeats);

}  // namespace statecheck::cuda
