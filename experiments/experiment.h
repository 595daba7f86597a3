// The statecheck experiments (docs/experiments.md): the registry, with the options each
// experiment reads, and one entry point per experiment. Each writes its datasets under a group
// named after itself into an open result file and adds its scalar metrics to a Summary. The
// options they take are typed and checked once by the command line (experiments/options.h); the
// entry points assume options that passed it, with --device cuda checked by
// require_cuda_if_asked.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/io/hdf5_file.h"
#include "core/io/paths.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "experiments/options.h"

namespace statecheck {

// Resolves the model named by the options (name or path, TP).
ModelConfig options_model(const Options& o);

// The states and layer inputs the numerical experiments read: --drive (default: by model family)
// and --states, the synthetic streams drawn from --seed, the tiny model from --model.
class StatesSource;
StatesSource options_states_source(const Options& o, const ModelConfig& m);

// The request trace replay reads: --trace, else the shipped one.
std::string trace_path(const Options& o);

// The files a run reads: --states, --trace and --model when it names a file (or a folder: its
// config.json).
std::vector<InputPath> run_inputs(const Options& o);

// Refuses, before any work, result paths that would destroy something: each of `outs` and the
// summary JSON (if any) passes check_output_file against the run's inputs, no two of them (or
// their partial files) are one file, and none lies inside the data directory, whose shipped files
// runs read without naming them. Throws statecheck::Error naming the option and path.
void check_run_outputs(const Options& o, const std::vector<std::string>& outs);

// Records the file of a file-backed drive at the root of a result file: attributes inputs_file and
// inputs_sha256 (drive 'inputs') or states_file and states_sha256 (drive 'states'), the digest
// over the file's bytes (core/io/sha256.h). Nothing for other drives. Throws when the file
// cannot be read.
void record_drive_file(const Options& o, H5Writer& file);

// Refuses a --drive whose gate kind does not match the model (check_drive_matches_model), for
// every experiment, including those that do not read the drive.
void check_drive_option(const Options& o, const ModelConfig& m);

using ExperimentFn = std::function<void(const Options&, const ModelConfig&, H5Writer&, Summary&)>;

// What an experiment measures: the numerics of one layer's state (codec, chain, bench), the cache
// model of a serving engine (memory, capacity, firecount, replay), or a language model's
// predictions (kl). Notes name the experiments that read an option by kind, then in suite order.
enum class ExperimentKind { state_numerics, cache_model, language_model };

// An option (long name without "--", one of experiment_option_names()) with a reason, one line
// without a final period.
struct OptionNote {
  std::string option;
  std::string why;
};

struct ExperimentEntry {
  std::string name;
  std::string description;
  ExperimentFn run;
  bool in_suite = true;
  bool cuda_path = false;  // accepts --device cuda (runs its CUDA path next to the CPU reference)
  ExperimentKind kind = ExperimentKind::state_numerics;
  // The options of experiment_option_names() it reads (those outside that list every experiment
  // reads). A given option it does not read gets a note (unread_option_notes).
  std::vector<std::string> reads = {};
  // Options it does not read because it sets them itself, with how; said in their notes.
  std::vector<OptionNote> sets_itself = {};
  // Options it refuses, with why: given on the command line they are an error ("kl: --drive
  // seed-kda does not apply (why)"); the suite runs it with their defaults.
  std::vector<OptionNote> refuses = {};
  // It runs a model of its own (kl: the tiny language model), not the serving model of --model:
  // the suite does not pass its --model on.
  bool own_model = false;
};

// Notes for the options given to `experiment` that it does not read (their values are still
// checked by the command line): one line each, without a prefix, e.g. "--trace is not read by
// memory (it is read by replay)", naming every experiment that reads the option (by kind, then in
// suite order) and, where the experiment sets the option itself, how; in the order of
// experiment_option_names(). `given`: the long names of the options given on the command line (not
// defaulted), without "--". Derived from the registry's declarations; `suite` passes every option
// on: no notes.
std::vector<std::string> unread_option_notes(const std::string& experiment,
                                             const std::vector<std::string>& given);

// Whether `experiment` reads the option `option` (long name, without "--"), by the registry's
// declarations: options outside experiment_option_names() are read by every experiment, an
// unknown experiment reads none of that list, and `suite` passes every option on.
bool experiment_reads_option(const std::string& experiment, const std::string& option);

// The registry entry named `name`, or null.
const ExperimentEntry* find_experiment(const std::string& name);

// Every experiment this build knows, in suite order.
const std::vector<ExperimentEntry>& experiment_registry();

// Individual experiments.
void run_codec(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
void run_chain(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
void run_bench(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
// statecheck's references on an inputs file against its stored reference tensors
// (experiments/reference.cpp); needs --drive inputs.
void run_reference(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
// Logit-level KL of the tiny language model after a state codec round trip (experiments/kl.cpp);
// ignores `m` and uses the tiny model (data/tinylm, or the tiny-model config given with --model).
void run_kl(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
// Working-state formats along time, in the tiny model and across decay (experiments/inloop.cpp).
void run_inloop(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
// Cache model experiments (docs/cache_model.md, docs/experiments.md): experiments/memory.cpp,
// capacity.cpp, firecount.cpp, replay.cpp.
void run_memory(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
void run_capacity(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
void run_firecount(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
void run_replay(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
#ifdef STATECHECK_HAVE_CUDA
// The CUDA half of `bench` (experiments/bench_gpu.cpp).
void gpu_bench(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
#endif

// Runs one experiment end to end: result file with run info, summary, threshold table.
// Returns the process exit code (suite: 1 when a threshold fails).
int run_experiment(const Options& o);
int run_suite(const Options& o);

// The options `suite` runs experiment `e` with, from its declarations: the suite's own, with
// --out set to `dir`/<name>.h5, --device cpu without a CUDA path, the options it refuses at their
// defaults and, for an experiment on its own model, no --model (kl: it runs the shipped tiny
// model, without --drive; the suite's serving model and drive are for the others).
Options suite_experiment_options(const Options& base, const ExperimentEntry& e,
                                 const std::string& dir);

// Prints the rows of the thresholds that apply to `summary` with their margin (distance from the
// limit relative to the limit, and on which side: "12% below the limit"); returns the
// number of failing rows. `gate`: the caller exits 1 on a failing row (suite); otherwise the
// header says that the table is for reference only (a single experiment, whose protocol may
// differ from the suite's the limits were set for).
int print_threshold_table(const Summary& summary, std::vector<ThresholdRow>& rows, bool gate);

// The margin of a checked row, as print_threshold_table prints it: "35% below the limit", "0.81%
// above the limit", "at the limit", or a note that a zero limit or a non-finite value has none.
std::string threshold_margin(const ThresholdRow& row);

// The suite's verdict, printed last: one table row per experiment with limits that apply to its
// summary (limits checked, how many hold, the row closest to its limit), then every failing row
// with its reason. `experiments`: (name, that experiment's summary) in suite order; `rows`:
// checked by check_thresholds. Returns the number of failing rows.
int print_threshold_verdict(const std::vector<std::pair<std::string, Summary>>& experiments,
                            const std::vector<ThresholdRow>& rows);

// Path of data/thresholds.json.
std::string thresholds_path();

}  // namespace statecheck
