// `codec --device cuda`: the codec protocol through the CUDA paths (experiments/codec_cuda.cpp).
#pragma once

#include <vector>

#include "core/codec/codec.h"
#include "core/drive/states_source.h"
#include "experiments/experiment.h"

namespace statecheck {

#ifdef STATECHECK_HAVE_CUDA
// Runs the CUDA path of the codec protocol next to the CPU reference and records it under
// codec/cuda and the summary keys cuda.*. Throws statecheck::Error without a usable GPU.
void run_codec_cuda(const ModelConfig& m, const StatesSource& source, int Tp, int Td,
                    const std::vector<Codec>& codecs, H5Writer& file, Summary& summary);
#endif

}  // namespace statecheck
