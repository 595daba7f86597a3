// The working-state decode kernel's CPU reference as a recurrence backend
// (core/backend/recurrence_backend.h): the same slots, bind_at keying, write / read / copy
// semantics as the CUDA working-state backend (kernels/host/ws_cuda_backend.h), but each advance
// runs ws_decode_reference (kernels/working_state/ws_decode_reference.h) on host arrays. Its
// states and outputs equal the kernel's bit for bit; `inloop --device cuda` runs both on the same
// inputs and counts the elements that differ.
//
// Inputs: q, k and v are rounded to bf16 (RNE) as the kernel reads them; outputs are bf16 widened
// exactly to fp32. A non-finite state or output is refused as the kernel refuses it: the state
// keeps its stored value and advance throws statecheck::Error naming the head and token.
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend/recurrence_backend.h"
#include "core/working_state/format.h"

namespace statecheck::cuda {

// Throws statecheck::Error at once for a format without a kernel (ws_decode_supports).
std::unique_ptr<RecurrenceBackend> ws_reference_backend(const WorkingStateFormat& format,
                                                        uint64_t seed = 0);

}  // namespace statecheck::cuda
