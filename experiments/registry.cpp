// The experiments this build knows, in the order `statecheck suite` runs them.
#include "experiments/experiment.h"

namespace statecheck {

const std::vector<ExperimentEntry>& experiment_registry() {
  static const std::vector<ExperimentEntry> registry = {
      {"codec", "round-trip and decode error of each state codec", run_codec, true, true},
      {"chain", "state error after n chained checkpoints, with the no-contraction ablation",
       run_chain, true, true},
      {"memory",
       "bytes per state slot, pool totals and the KV-token budget (engine vs correct accounting)",
       run_memory, true},
      {"capacity",
       "K-sweep: prefix reuse vs distinct prefixes, bf16 single pool vs int8 checkpoint pool",
       run_capacity, true, true},
      {"firecount",
       "few-shot workload: dequantize loads under no_buffer vs extra_buffer (int8 mode)",
       run_firecount, true},
      {"replay",
       "Mooncake trace through the pools: bf16 vs int8 at equal memory vs an unbounded cache",
       run_replay, true},
      {"kl", "KL of a tiny trained LM's next-byte distribution after a state codec round trip",
       run_kl, true, true},
      {"bench", "speed of the reference, codecs and kernels against measured copy bandwidth",
       run_bench, true, true},
  };
  return registry;
}

}  // namespace statecheck
