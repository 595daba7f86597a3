// The CUDA recurrence backend (core/backend/recurrence_backend.h): the pool-indexed gated-delta
// kernel (kernels/gated_delta/gated_delta_pool.h) and the checkpoint codec kernels
// (kernels/codec/checkpoint_codec.h) on the current device.
//
// A LayerRun holds its states in slots 1 .. states of a one-layer fp32 state pool (slot 0 is the
// reserved slot, as in the engines' pools) and its inputs as bf16 q, k, v and fp32 g, beta
// (kernels/host/layer_upload.h). advance() is one kernel launch of one sequence over [t0, t1),
// with bf16 outputs widened exactly to fp32; roundtrip() is a donate (checkpoint_store) into a
// checkpoint slot and a copy-on-write (checkpoint_load) back into the same state slot, so the
// state is restored exactly as an engine restores it; write(), read() and copy() are plain
// copies. Every call completes before it returns.
#pragma once

#include <memory>

#include "core/backend/recurrence_backend.h"

namespace statecheck::cuda {

// Needs a usable GPU (the command line checks for one once, before any work:
// experiments/options.h); without one the first CUDA call throws statecheck::Error.
std::unique_ptr<RecurrenceBackend> cuda_backend();

}  // namespace statecheck::cuda
