// The CUDA working-state recurrence backend (core/backend/recurrence_backend.h): the decode kernel
// over a working-state pool (kernels/working_state/ws_decode.h) on the current device, for the
// formats it runs (ws_decode_supports: int8, int8-sr, fp8_e4m3, fp8_e4m3-sr, bf16, bf16-sr; fp32 or
// bf16 scales).
//
// A LayerRun holds its states in slots 1 .. states of a one-layer pool in the format (codes
// [slots, HV, d_v, d_k], scales [slots, HV, d_k]; slot 0 reserved). advance(state, t0, t1) is one
// launch of one sequence over [t0, t1) with positions starting at t0 and the state index as the
// sequence index of the stochastic roundings, so a run matches the CPU reference
// (ws_decode_reference) fed the same tokens bit for bit; bf16 outputs are widened exactly to fp32.
// write() stores an fp32 state in the format on the host with the element codecs (the rounding
// of the format, drawn at token 0 of sequence `state`); read() decodes; copy() is the
// working-slot copy kernel. roundtrip() throws: a working-state pool has no separate checkpoint
// codec (a checkpoint is a slot copy). Every call completes before it returns. Non-finite states
// are refused by the kernel and reported as a statecheck::Error.
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend/recurrence_backend.h"
#include "core/working_state/format.h"

namespace statecheck::cuda {

// Needs a usable GPU; without one the first CUDA call throws statecheck::Error. Throws at once for
// a format without a kernel. `seed` and `layer` key the stochastic roundings.
std::unique_ptr<RecurrenceBackend> cuda_ws_backend(const WorkingStateFormat& format,
                                                   uint64_t seed = 0, int layer = 0);

}  // namespace statecheck::cuda
