// The recurrence backend shared by the CUDA working-state backend (ws_cuda_backend.h) and the
// kernel's CPU reference backend (ws_reference_backend.h): a format, a seed, and a LayerRun type
// Run constructed as Run(shape, inputs, states, format, seed, layer, sequence). bind() is
// bind_at(layer 0, sequence 0); bind_at checks the place (layer 0 .. 65535, sequence >= 0), the
// number of states (>= 1) and the inputs (LayerInputs::check), else statecheck::Error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/backend/recurrence_backend.h"
#include "core/util/error.h"
#include "core/working_state/format.h"

namespace statecheck::cuda {

template <class Run>
class WsFormatBackend : public RecurrenceBackend {
 public:
  // `prefix` names the backend ("cuda-" + format); `threads` is max_threads().
  WsFormatBackend(const WorkingStateFormat& f, uint64_t seed, std::string prefix, int threads)
      : f_(f), seed_(seed), prefix_(std::move(prefix)), threads_(threads) {}
  std::string name() const override { return prefix_ + f_.name(); }
  int max_threads() const override { return threads_; }
  WorkingStateFormat working_state() const override { return f_; }
  std::unique_ptr<LayerRun> bind(const RecurrenceShape& shape, const LayerInputs& in,
                                 int states) const override {
    return bind_at(shape, in, states, 0, 0);
  }
  std::unique_ptr<LayerRun> bind_at(const RecurrenceShape& shape, const LayerInputs& in, int states,
                                    int layer, int sequence) const override {
    if (layer < 0 || layer >= 65536 || sequence < 0)
      fail("{}: layer {} (0 .. 65535) and sequence {} (>= 0) out of range", name(), layer,
           sequence);
    if (states < 1) fail("{}: a layer run needs at least one state, got {}", name(), states);
    in.check(shape);
    return std::make_unique<Run>(shape, in, states, f_, seed_, layer, sequence);
  }

 private:
  WorkingStateFormat f_;
  uint64_t seed_;
  std::string prefix_;
  int threads_;
};

}  // namespace statecheck::cuda
