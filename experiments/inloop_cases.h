// What experiment `inloop` (experiments/inloop.cpp) shares with its device part
// (experiments/inloop_device.cpp): the drives' layer cases, the log-spaced checkpoints, one
// backend's run over a case, and the device protocol's entry point.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/recurrence_backend.h"
#include "core/drive/drive.h"
#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/state/layer_inputs.h"
#include "core/working_state/format.h"
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

// The backend of one working-state format (the seam: a CUDA factory gives device backends).
using FormatBackendFactory =
    std::function<std::unique_ptr<RecurrenceBackend>(const WorkingStateFormat&)>;

// The q-quantile of v by nearest rank (NaN for an empty v).
double percentile(std::vector<double> v, double q);

// The index of the format of kind k in formats; statecheck::Error if it is not there.
int format_index(const std::vector<WorkingStateFormat>& formats, WorkingStateKind k);

// The tiny language model over the first N bytes of its held-out text (N = 4096; quick 512) from
// a zero state, once with the plain fp32 recurrence and once with each format in every layer
// (experiments/inloop_kl.cpp): per position KL(p_fp32 || p_format) in nats and top-1 agreement,
// their mean, p99 (nearest rank), max, growth (second half over first half) and per position bin
// (the log-spaced checkpoints).
struct KlResult {
  int N = 0;
  std::vector<int> bins;                                // bin edges: positions [bins[i-1], bins[i])
  std::vector<double> mean, p99, maxv, top1, growth;    // [F]
  std::vector<std::vector<double>> mean_bin, top1_bin;  // [F][B]
  double bytes_dv = 0;                                  // d_v of the tiny model's heads
};

KlResult measure_kl(const Options& o, const std::vector<WorkingStateFormat>& formats,
                    const FormatBackendFactory& factory, int threads);

// Writes inloop/tinylm_kl, the summary keys inloop.tinylm_kl.* and inloop.verdict.*, and prints
// the table and the verdict: the cheapest format (bytes per element of the tiny model's heads)
// whose mean KL is at or below the bf16 working state's, and whether int8 RNE diverges (growth
// above 2 or top-1 agreement below 0.9).
void record_kl(const KlResult& r, const std::vector<WorkingStateFormat>& formats, H5Writer& file,
               Summary& summary);

// `inloop --device cuda` (experiments/inloop_device.cpp): every format with a decode kernel run
// on the GPU (kernels/host/ws_cuda_backend.h) and through the kernel's CPU reference
// (kernels/host/ws_reference_backend.h) over the drives' layer cases, the elements that differ
// counted (states at every checkpoint, all outputs), and the GPU run's distance from the CPU
// working-state backend of `inloop` and from the fp64 loop; into inloop/cuda and the summary
// keys inloop.cuda.*. Throws statecheck::Error in a build without CUDA or without a usable GPU.
void run_device(const Options& o, H5Writer& file, Summary& summary);

}  // namespace statecheck::inloop
