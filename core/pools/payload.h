// State payloads of the cache model: what a pool slot holds when the pools carry real numbers
// (the default; `--no-payload` runs the same decisions on bookkeeping only).
//
// The model does not run the recurrence. The state of a sequence after its first t tokens is a
// deterministic function of those tokens: `reference_state(prefix_hash(tokens, t))`. Two requests
// that share a prefix therefore produce bit-identical states at that prefix, so a cache hit can be
// checked end to end: the state restored into a request's active slot must equal
// decode(encode(reference state of the hit prefix)) (int8 checkpoint mode) or the reference state
// itself (single-pool mode), bit for bit. A wrong slot, a state attached to the wrong node or a
// stale slot shows up as a mismatch.
//
// Payload shape: one slot holds temporal [L, HV, d_v, d_k] (fp32 values, rounded to bf16 when the
// temporal dtype is bf16) + conv [conv_elems] (bf16 bits). The experiments use one value head of
// the model ([1, 1, d_v, d_k] and that head's share of the conv channels) so that thousands of
// slots fit in host memory; pool sizes in bytes always come from the full model (core/memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype/dtype.h"
#include "core/state/state.h"

namespace statecheck {

struct PayloadShape {
  StateShape temporal{1, 1, 128, 128};  // [L, HV, d_v, d_k] stored per slot
  size_t conv_elems = 0;                // bf16 conv values per slot

  size_t temporal_elems() const { return temporal.size(); }
};

// 64-bit hash of tokens[0, t) (FNV-1a over the 32-bit token ids, then a splitmix finaliser).
// Equal prefixes give equal hashes; `t` <= tokens.size() (not checked in release builds).
uint64_t prefix_hash(const int32_t* tokens, size_t t);

// Writes the reference state of a prefix with hash `h` into `temporal` [shape.temporal.size()]
// and `conv` [shape.conv_elems]. Values are in [-0.1, 0.1) with a per-(layer, head, key-channel)
// amplitude (a column structure like real states, so the int8 per-channel scales differ); with
// `temporal_dtype` bf16 the temporal values are rounded to bf16 (round to nearest even); fp32 keeps
// them. Deterministic for h.
void reference_state(uint64_t h, const PayloadShape& shape, Dtype temporal_dtype, float* temporal,
                     uint16_t* conv);

}  // namespace statecheck
