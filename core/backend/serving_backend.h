// A serving backend: a model's state pools on a device, and what a cache hit, a miss and a donate
// cost there. `capacity` replays the requests its cache model decided through this interface
// (docs/experiments.md, "capacity"); the CUDA implementation is kernels/host/serving_backend.h.
//
// Pools have the model's real per-slot shape: active [L, slots, HV, d_v, d_k] in the temporal
// dtype, checkpoint values + scales of the checkpoint codec, bf16 conv windows, and a working-state
// pool (codes [L, slots, HV, d_v, d_k] + scales [L, slots, HV, d_k] of the working format, e.g.
// int8) for the mode whose states stay compressed between tokens (docs/working_state.md). Slot 0
// is reserved; slots 1 .. parallel hold requests; one more slot holds the cached state of the
// single-pool (bf16) mode and of the working-state mode; checkpoint slot 1 holds the cached state
// of the checkpoint-pool (int8) mode. The token stream is one synthetic stream of the model
// family's init drive. Only the linear-attention state work is timed: a hit is a copy-on-write of
// the cached state into the request's slot and the recurrence over the uncached suffix, all linear
// layers; a miss is the recurrence over the whole prompt, all linear layers. Times are
// milliseconds of device time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/codec/codec.h"
#include "core/state/layer_inputs.h"
#include "core/working_state/format.h"

namespace statecheck {

struct ServingShape {
  RecurrenceShape layer;         // one linear layer at its TP shard
  int layers = 0;                // L: linear-attention layers
  int64_t conv_elems = 0;        // bf16 conv values per layer and slot
  Dtype temporal = Dtype::fp32;  // active pool dtype: fp32 or bf16
  Codec checkpoint;              // the checkpoint pool's codec (int8 with its scale dtype)
  // The working-state pool's format (int8 with its scale dtype); fp32: no working-state mode
  // (nothing allocated; serving from working_pool is an Error).
  WorkingStateFormat working;
  int parallel = 8;  // request slots
};

// One request as the cache model served it.
struct ServedRequest {
  int64_t prompt_len = 0;
  int64_t cached_tokens = 0;  // > 0: a hit of that many tokens
};

// Where a hit's state comes from.
enum class RestoreFrom {
  checkpoint_pool,  // int8 mode: dequantize from the checkpoint pool (copy-on-write)
  active_pool,      // bf16 single-pool mode: copy the cached active slot
  // Working-state mode: the pool keeps states in the working format between decode tokens. A
  // miss prefills all but the last token with the chunked kernel into an fp32 scratch slot and
  // runs the last token through the working-state decode from that state, which stores it in the
  // format; a hit does the same with its suffix, from the cached slot decoded into the scratch
  // (the format's decode, as a checkpoint load).
  working_pool,
};

// The working-state mode of one request checked against the kernel's CPU reference: how many
// elements were compared (stored codes, scales and outputs of linear layer 0) and how many differ
// in any bit.
struct WorkingStateCheck {
  int64_t compared = 0;
  int64_t differing = 0;
};

class ServingBackend {
 public:
  virtual ~ServingBackend() = default;
  virtual std::string description() const = 0;
  // One donate of the cached state (all layers), timed: into the checkpoint pool (checkpoint_pool:
  // the int8 store) or the working-state pool's cached slot (working_pool: the slot copy). The
  // single-pool mode donates nothing (its cached state stays in its active slot): an Error.
  virtual double donate_ms(RestoreFrom into) = 0;
  // One request launched alone: restore (on a hit) and the recurrence over the uncached tokens.
  virtual double serve_ms(const ServedRequest& r, RestoreFrom from) = 0;
  // `requests` in batches of `parallel` (one varlen launch per layer and batch), timed as a whole.
  virtual double serve_batches_ms(const std::vector<ServedRequest>& requests, RestoreFrom from) = 0;
  // Serves `r` alone in the working-state mode (as serve_ms) and compares, for linear layer 0, the
  // request's stored codes, scales and outputs with the working-state decode's CPU reference run
  // from the same starting state (the cached slot's codes on a hit, the chunked prefill's fp32
  // state on a miss) over the same tokens. Untimed.
  virtual WorkingStateCheck check_working_state(const ServedRequest& r) = 0;
  // The device's matrix-product rate in TFLOP/s, measured (once) on the device itself: the rate
  // the prefill time model of capacity charges the rest of the model at (docs/experiments.md).
  virtual double matmul_tflops() = 0;
};

}  // namespace statecheck
