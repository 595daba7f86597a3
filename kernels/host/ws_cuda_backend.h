// The CUDA working-state recurrence backend (core/backend/recurrence_backend.h): the decode kernel
// over a working-state pool (kernels/working_state/ws_decode.h) on the current device, for the
// formats it runs (ws_decode_supports: int8, int8-sr, fp8_e4m3, fp8_e4m3-sr, bf16, bf16-sr; fp32 or
// bf16 scales).
//
// A LayerRun holds its states in slots 1 .. states of a one-layer pool in the format (codes
// [slots, HV, d_v, d_k], scales [slots, HV, d_k]; slot 0 reserved), zero until written.
// bind_at(layer, sequence) keys the stochastic roundings as the CPU working-state backend does
// (cpu_working_state_backend): key (seed, layer, head), counter (element, absolute token index,
// sequence), the same sequence for every state of the run; bind() is bind_at(0, 0).
// advance(state, t0, t1) is one ws_decode launch of one sequence over [t0, t1) with positions from
// t0; bf16 outputs are widened exactly to fp32. write() takes a state as already stored, as the
// CPU backend does: it is kept as given (host side) and the next advance starts from it
// (WsDecodeArgs::init_state), its first update stored in the format; read() returns it until
// then, and afterwards the stored state decoded. copy() is the working-slot copy kernel (or the
// written state). roundtrip() throws: a working-state pool has no separate checkpoint codec (a
// checkpoint is a slot copy). Every call completes before it returns; a non-finite state or output
// is refused by the kernel and reported as a statecheck::Error: the refused head keeps its stored
// state, the other heads of the launch are stored advanced, and a written state not yet advanced
// stays the one read() returns and the next advance starts from (so after a refusal from a
// written state, the whole written state is kept). The kernel and its CPU reference
// (ws_decode_reference) agree bit for bit; against the CPU working-state backend, whose fp32 step
// sums in another order, the stored states agree within the bounds of tests/gpu/test_ws_decode.cpp.
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend/recurrence_backend.h"
#include "core/working_state/format.h"

namespace statecheck::cuda {

// Needs a usable GPU; without one the first CUDA call throws statecheck::Error. Throws at once for
// a format without a kernel. `seed` keys the stochastic roundings.
std::unique_ptr<RecurrenceBackend> cuda_ws_backend(const WorkingStateFormat& format,
                                                   uint64_t seed = 0);

}  // namespace statecheck::cuda
