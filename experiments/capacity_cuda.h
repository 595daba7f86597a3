// `capacity --device cuda`: the GPU cost of the PROBE pass the cache model decided
// (experiments/capacity_cuda.cpp).
#pragma once

#include <string>
#include <vector>

#include "core/cache/engine.h"
#include "experiments/experiment.h"

namespace statecheck {

// The PROBE requests of one sweep point, as the cache model served them.
struct CapacityProbes {
  std::string mode;  // bf16 | int8
  int K = 0;
  std::vector<RequestRecord> probes;
};

#ifdef STATECHECK_HAVE_CUDA
// Replays the probes on the GPU with the model's real state shape and records latency percentiles
// and throughput under capacity/cuda and the summary keys capacity.cuda.*. Throws
// statecheck::Error without a usable GPU.
void run_capacity_cuda(const Options& o, const ModelConfig& m,
                       const std::vector<CapacityProbes>& points, H5Writer& file, Summary& summary);
#endif

}  // namespace statecheck
