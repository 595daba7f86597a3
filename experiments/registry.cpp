// The experiments this build knows, in the order `statecheck suite` runs them.
#include "experiments/experiment.h"

namespace statecheck {

const std::vector<ExperimentEntry>& experiment_registry() {
  static const std::vector<ExperimentEntry> registry = {
      {"codec", "round-trip and decode error of each state codec", run_codec, true},
      {"chain", "state error after n chained checkpoints, with the no-contraction ablation", run_chain, true},
      {"bench", "speed of the reference, codecs and kernels against measured copy bandwidth", run_bench, true},
  };
  return registry;
}

}  // namespace statecheck
