// The experiments this build knows, in the order `statecheck suite` runs them, with the options
// each reads; the notes for options an experiment does not read are derived from these
// declarations.
#include <algorithm>

#include <fmt/format.h>

#include "experiments/experiment.h"

namespace statecheck {

namespace {

std::vector<std::string> join(std::initializer_list<std::vector<std::string>> lists) {
  std::vector<std::string> all;
  for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
  return all;
}

bool contains(const std::vector<std::string>& list, const std::string& x) {
  return std::find(list.begin(), list.end(), x) != list.end();
}

std::vector<ExperimentEntry> make_registry() {
  using K = ExperimentKind;
  // codec, chain and bench take their scale dtype from --scale-dtype or, without it,
  // --temporal-dtype (Options::scale_dtype_or_default); the cache experiments read both for the
  // state pools.
  const std::vector<std::string> dtypes = {"temporal-dtype", "scale-dtype"};
  // The memory budget (options_dtypes, options_budget_inputs in experiments/cache_common.h).
  const std::vector<std::string> budget = {"temporal-dtype", "scale-dtype",  "conv-dtype",
                                           "gpu-mem-gib",    "mem-fraction", "weights-gib"};
  const std::vector<std::string> pools = {"active-slots", "ckpt-slots"};
  // The cache and engine configs of the experiments that run the engine (options_engine_config).
  const std::vector<std::string> engine = {"no-payload",      "chunk-granularity", "track-interval",
                                           "chunked-prefill", "max-running",       "page-size"};
  const char* replay_pools = "replay sizes its pools from the memory budget, at equal memory";

  // --seed draws the synthetic drives and workloads (every result file records it all the same),
  // --threads sets the CPU workers of codec, chain, reference and kl; memory has no quick protocol.
  ExperimentEntry codec{"codec",   "round-trip and decode error of each state codec",
                        run_codec, true,
                        true,      K::state_numerics};
  codec.reads = join(
      {{"seed", "threads", "quick", "drive", "states", "states-key", "inputs", "prefill", "decode"},
       dtypes});

  ExperimentEntry chain{
      "chain",   "state error after n chained checkpoints, with the no-contraction ablation",
      run_chain, true,
      true,      K::state_numerics};
  chain.reads = join({{"seed", "threads", "quick", "drive", "states", "states-key", "inputs",
                       "codec", "chain-tokens", "chain-layers"},
                      dtypes});

  ExperimentEntry memory{
      "memory",
      "bytes per state slot, pool totals and the KV-token budget (engine vs correct accounting)",
      run_memory,
      true,
      false,
      K::cache_model};
  memory.reads = join({pools, budget, {"compare-shipped"}});

  ExperimentEntry capacity{
      "capacity",
      "K-sweep: prefix reuse vs distinct prefixes, bf16 single pool vs int8 checkpoint pool",
      run_capacity,
      true,
      true,
      K::cache_model};
  capacity.reads = join({{"seed", "quick", "strategy", "policy", "k-list"}, pools, budget, engine});

  ExperimentEntry firecount{
      "firecount",
      "few-shot workload: dequantize loads under no_buffer vs extra_buffer (int8 mode)",
      run_firecount,
      true,
      false,
      K::cache_model};
  firecount.reads = join({{"seed", "quick"}, pools, budget, engine});
  firecount.sets_itself = {{"strategy", "firecount runs both no_buffer and extra_buffer"}};

  ExperimentEntry replay{
      "replay",
      "Mooncake trace through the pools: bf16 vs int8 at equal memory vs an unbounded cache",
      run_replay,
      true,
      false,
      K::cache_model};
  replay.reads = join({{"quick", "trace", "trace-bad-lines", "trace-max-tokens", "strategy",
                        "policy", "budget-sweep"},
                       budget,
                       engine});
  replay.sets_itself = {{"active-slots", replay_pools}, {"ckpt-slots", replay_pools}};

  ExperimentEntry kl{"kl",
                     "KL of a tiny trained LM's next-byte distribution after a state codec round "
                     "trip",
                     run_kl,
                     true,
                     true,
                     K::language_model};
  kl.reads = {"threads", "quick"};
  kl.refuses = {{"drive", "kl runs the tiny language model on its evaluation text"}};
  kl.own_model = true;

  ExperimentEntry inloop{"inloop",
                         "working state kept in bf16, int8 or fp8 between tokens: error along "
                         "time, tiny-model KL, decay sweep",
                         run_inloop,
                         true,
                         true,
                         K::state_numerics};
  inloop.reads = {"seed", "threads", "quick"};
  inloop.refuses = {
      {"drive", "inloop runs the drives seed-kda, init-kda, init-gdn and tinylm itself"}};

  ExperimentEntry bench{
      "bench",   "speed of the reference, codecs and kernels against measured copy bandwidth",
      run_bench, true,
      true,      K::state_numerics};
  // --drive inputs: bench --device cpu times the reference on the file's first layer.
  bench.reads = join({{"seed", "quick", "drive", "inputs", "bench-sections"}, dtypes});

  // Not in the suite: it needs an inputs file with reference tensors (docs/real_models.md).
  ExperimentEntry reference{"reference",
                            "fp64 and fp32 references on an inputs file, against its stored "
                            "reference outputs and final states",
                            run_reference,
                            false,
                            false,
                            K::state_numerics};
  reference.reads = {"threads", "drive", "inputs"};

  return {codec, chain, memory, capacity, firecount, replay, kl, inloop, bench, reference};
}

}  // namespace

const std::vector<ExperimentEntry>& experiment_registry() {
  static const std::vector<ExperimentEntry> registry = make_registry();
  return registry;
}

const ExperimentEntry* find_experiment(const std::string& name) {
  for (const ExperimentEntry& e : experiment_registry())
    if (e.name == name) return &e;
  return nullptr;
}

bool experiment_reads_option(const std::string& experiment, const std::string& option) {
  if (experiment == "suite") return true;  // passes every option on to its experiments
  if (!contains(experiment_option_names(), option)) return true;  // every experiment reads it
  const ExperimentEntry* e = find_experiment(experiment);
  return e && contains(e->reads, option);
}

std::vector<std::string> unread_option_notes(const std::string& experiment,
                                             const std::vector<std::string>& given) {
  // The readers of an option are named by kind, then in suite order.
  std::vector<const ExperimentEntry*> listed;
  for (const ExperimentEntry& e : experiment_registry()) listed.push_back(&e);
  std::stable_sort(
      listed.begin(), listed.end(),
      [](const ExperimentEntry* a, const ExperimentEntry* b) { return a->kind < b->kind; });
  const ExperimentEntry* self = find_experiment(experiment);
  std::vector<std::string> notes;
  for (const std::string& option : experiment_option_names()) {
    if (!contains(given, option) || experiment_reads_option(experiment, option)) continue;
    std::vector<std::string> readers;
    for (const ExperimentEntry* e : listed)
      if (contains(e->reads, option)) readers.push_back(e->name);
    std::string names;
    for (size_t i = 0; i < readers.size(); ++i)
      names += (i == 0 ? "" : i + 1 == readers.size() ? " and " : ", ") + readers[i];
    std::string how;
    if (self)
      for (const OptionNote& s : self->sets_itself)
        if (s.option == option) how = s.why + "; ";
    notes.push_back(
        fmt::format("--{} is not read by {} ({}it is read by {})", option, experiment, how, names));
  }
  return notes;
}

}  // namespace statecheck
