// A recurrence backend: where the gated delta rule of one layer runs and where its states live.
// The numerical protocols (codec, chain, kl) are written once over this interface and run on
// every backend through the same code: the fp32 reference (Eigen), the fp64 loop, and the CUDA
// pool kernels (kernels/host/cuda_backend.h). Adding a backend is adding one class.
//
// A LayerRun binds one layer's inputs (a device backend uploads them once) and holds a small set
// of states, addressed by index, in the backend's own storage (host arrays, or slots of a device
// state pool). The protocol moves states in and out only where it measures.
//
// Shapes: states S_hvk [HV, d_v, d_k] fp32 row-major (docs/numerics.md, "State layout"); outputs
// o_thv [t1 - t0, HV, d_v] fp32 (a backend whose kernels write bf16 outputs widens them exactly);
// inputs as in core/state/layer_inputs.h. Semantics of one token: docs/numerics.md, "The gated
// delta rule"; of a codec round trip: docs/codecs.md.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/codec/codec.h"
#include "core/recurrence/gated_delta.h"
#include "core/state/layer_inputs.h"
#include "core/working_state/format.h"

namespace statecheck {

class LayerRun {
 public:
  virtual ~LayerRun() = default;

  // States held: indices 0 .. states() - 1, each zero until written.
  virtual int states() const = 0;
  // S[state] <- S_hvk (host, [HV, d_v, d_k] fp32).
  virtual void write(int state, const float* S_hvk) = 0;
  // S_hvk <- S[state]. A backend that keeps states at a higher precision (fp64) rounds to fp32.
  virtual void read(int state, float* S_hvk) const = 0;
  // S[dst] <- S[src], bit for bit.
  virtual void copy(int dst, int src) = 0;
  // Runs tokens [t0, t1) of the bound inputs on S[state] in place; o_thv (host, may be null)
  // receives [t1 - t0, HV, d_v]. 0 <= t0 <= t1 <= T, else statecheck::Error.
  virtual void advance(int state, int t0, int t1, float* o_thv) = 0;
  // S[state] <- decode(encode(S[state])) through `codec`, every head of layer `layer` (the layer
  // index only names the place of a non-finite value in the Error it throws).
  virtual void roundtrip(int state, const Codec& codec, int layer) = 0;
};

class RecurrenceBackend {
 public:
  virtual ~RecurrenceBackend() = default;

  // "cpu-fp32", "cpu-fp64", "cuda".
  virtual std::string name() const = 0;
  // How many host threads are worth driving distinct LayerRuns of this backend at once (1 for a
  // device backend, whose runs share one device; calls from more threads are still correct).
  virtual int max_threads() const = 0;
  // Binds the inputs of one layer of `shape` (checked with LayerInputs::check) with `states`
  // zeroed states. The backend keeps what it needs of `in`; `in` may go away afterwards.
  virtual std::unique_ptr<LayerRun> bind(const RecurrenceShape& shape, const LayerInputs& in,
                                         int states) const = 0;
  // The working-state format its states are kept in between tokens (docs/working_state.md):
  // fp32 for the plain backends. A backend with another format keys its stochastic roundings by
  // the place given to bind_at.
  virtual WorkingStateFormat working_state() const { return {}; }
  // bind() for layer `layer` of sequence `sequence` of the run (the Philox key and counter of the
  // working-state roundings); backends whose format draws no random numbers ignore the place.
  virtual std::unique_ptr<LayerRun> bind_at(const RecurrenceShape& shape, const LayerInputs& in,
                                            int states, int layer, int sequence) const {
    (void)layer, (void)sequence;
    return bind(shape, in, states);
  }
};

// The fp32 reference (core/recurrence/gated_delta.h) with states kept in `storage` (fp32, or bf16
// rounded after every token) and the CPU codecs (core/codec/codec.h).
std::unique_ptr<RecurrenceBackend> cpu_fp32_backend(Dtype storage = Dtype::fp32);
// The fp64 loop (ground truth) with fp64 states; write() widens, read() rounds to fp32, and a
// codec round trip runs the CPU codec on the state rounded to fp32.
std::unique_ptr<RecurrenceBackend> cpu_fp64_backend();

// A working-state backend on the CPU (docs/working_state.md): the fp32 reference (or, with
// `fp64`, the fp64 loop) whose states are stored in `format` after every token
// (gated_delta_layer_fp32_ws / _fp64_ws), keyed by `seed` and the place of bind_at (bind: layer
// 0, sequence 0). Each state carries its error-feedback residual (zero after write(); copied by
// copy()); write() takes a state as already stored, read() returns the stored state decoded;
// roundtrip runs the CPU codec on it. Format fp32 is cpu_fp32_backend() (or cpu_fp64_backend())
// bit for bit.
std::unique_ptr<RecurrenceBackend> cpu_working_state_backend(WorkingStateFormat format,
                                                             uint64_t seed, bool fp64 = false);

// One layer's recurrence over all T tokens of `in` from S_hvk [HV, d_v, d_k] (updated in place),
// writing o [T, HV, d_v]: the seam through which a model (core/tinylm) runs its layers. `layer`
// is the layer's index in the model (it keys a working-state format's roundings).
using LayerRecurrenceFn = std::function<void(int layer, const RecurrenceShape& shape,
                                             const LayerInputs& in, float* S_hvk, float* o_thv)>;

// That function on `backend` (bind_at one state at (layer, sequence 0), write, advance over
// [0, T), read back). The backend must outlive the function.
LayerRecurrenceFn layer_recurrence(const RecurrenceBackend& backend);

}  // namespace statecheck
