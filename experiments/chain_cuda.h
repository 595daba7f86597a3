// `chain --device cuda`: the chained-checkpoint protocol through the CUDA paths
// (experiments/chain_cuda.cpp).
#pragma once

#include "core/codec/codec.h"
#include "core/drive/states_source.h"
#include "experiments/experiment.h"

namespace statecheck {

#ifdef STATECHECK_HAVE_CUDA
// Runs the chain protocol on the GPU (recurrence with gated_delta_pool, each checkpoint a
// checkpoint_store + checkpoint_load in place) for the first `layers` linear layers and records it
// under chain/cuda and the summary keys cuda.chain.*. Throws statecheck::Error without a GPU.
void run_chain_cuda(const ModelConfig& m, const StatesSource& source, const Codec& codec, int T,
                    int layers, double ablation_beta_factor, H5Writer& file, Summary& summary);
#endif

}  // namespace statecheck
