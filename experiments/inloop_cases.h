// What experiment `inloop` (experiments/inloop.cpp) shares with its device part
// (experiments/inloop_device.cpp): the drives' layer cases, the log-spaced checkpoints, one
// backend's run over a case, and the device protocol's entry point.
#pragma once

#include <string>
#include <vector>

#include "core/backend/recurrence_backend.h"
#include "core/drive/drive.h"
#include "core/model/model_config.h"
#include "core/state/layer_inputs.h"
#include "experiments/experiment.h"

namespace statecheck::inloop {

// The synthetic drives keep at most this many value heads of the shape (the first ones, with
// their key heads).
constexpr int kMaxHeads = 8;

// One layer's inputs and starting state, the tokens run and the checkpoints.
struct LayerCase {
  RecurrenceShape shape;
  LayerInputs in;
  std::vector<float> S0;  // [HV, d_v, d_k]
  int layer = 0;
};

// A run of one backend over a layer case: states at the checkpoints, all outputs.
struct Trace {
  std::vector<std::vector<float>> states;  // [C][HV d_v d_k]
  std::vector<float> outputs;              // [T, HV, d_v]
};

// 1, 2, 3, 4, 6, 8, 12, ... up to and including T.
std::vector<int> log_checkpoints(int T);

// b's run over c from c.S0 (bind_at(c.layer, sequence 0)), read back at each checkpoint of cps.
Trace run_trace(const RecurrenceBackend& b, const LayerCase& c, const std::vector<int>& cps);

// `layers` layers of drive `kind` (seed-kda, init-kda, init-gdn) on model m, at most kMaxHeads
// value heads each, T tokens, from zero states.
std::vector<LayerCase> synthetic_cases(DriveKind kind, const ModelConfig& m, uint64_t seed,
                                       int layers, int T);

// Every linear-attention layer of the tiny model over the first T bytes of its held-out text
// (drive tinylm), from its starting states.
std::vector<LayerCase> tinylm_cases(const Options& o, int T);

// The model of --model when it has layers of gate `gate` (and is not the tiny model); otherwise
// the shipped model of that family (qwen3.5-35b-a3b for GDN, kimi-linear-48b-a3b for KDA).
ModelConfig family_model(const Options& o, GateKind gate);

// `inloop --device cuda` (experiments/inloop_device.cpp): every format with a decode kernel run
// on the GPU (kernels/host/ws_cuda_backend.h) and through the kernel's CPU reference
// (kernels/host/ws_reference_backend.h) over the drives' layer cases, the elements that differ
// counted (states at every checkpoint, all outputs), and the GPU run's distance from the CPU
// working-state backend of `inloop` and from the fp64 loop; into inloop/cuda and the summary
// keys inloop.cuda.*. Throws statecheck::Error in a build without CUDA or without a usable GPU.
void run_device(const Options& o, H5Writer& file, Summary& summary);

}  // namespace statecheck::inloop
