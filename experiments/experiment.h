// The statecheck experiments: options shared by the command line, and one entry point per
// experiment (spec experiments.md). Each writes its datasets under a group named after itself
// into an open result file and adds its scalar metrics to a Summary.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/io/hdf5_file.h"
#include "core/io/paths.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"

namespace statecheck {

// The most slots --active-slots and --ckpt-slots may ask for, and the most the memory budget may
// give replay's bf16 and int8 pools: every slot is host memory in the cache model.
constexpr int kMaxPoolSlots = 1 << 22;

struct Options {
  std::string experiment;
  std::string model = "qwen3.5-35b-a3b";
  int tp = 0;  // 0: the model's default_tp
  uint64_t seed = 0;
  std::string device = "cpu";  // cpu | cuda
  std::string drive;           // empty: default_drive(model)
  std::string states;          // --states FILE (drive 'states')
  bool quick = false;
  std::string out;      // result file; empty: results/<experiment>.h5
  std::string summary;  // summary JSON; empty: none (suite: results/summary.json)
  int threads = 0;      // 0: hardware threads
  std::string command_line;
  bool model_given = false;  // --model was on the command line (not the default)

  // Numerical experiments.
  std::string codec = "int8";  // chain: the codec checkpoints go through
  int prefill = 0;             // codec: prefill tokens (0: 512, quick 128)
  int decode = 0;              // codec: decode steps after restore (0: 128, quick 32)
  int chain_tokens = 2048;     // chain: T
  int chain_layers = 0;        // chain: layers measured (0: all; quick: 2)

  // Cache experiments (spec experiments.md, "Common interface").
  int active_slots = 256;
  int ckpt_slots = 0;                     // 0: 2 * active
  std::string mode = "int8";              // bf16 | int8
  std::string strategy = "extra_buffer";  // no_buffer | extra_buffer
  std::string temporal_dtype = "fp32";
  std::string scale_dtype;  // empty: the temporal dtype (spec numerics.md section 3)
  std::string conv_dtype = "bf16";
  double gpu_mem_gib = 141e9 / 1073741824.0;  // an H200: 141 GB = 131.3 GiB
  double mem_fraction = 0.88;
  double weights_gib = -1.0;   // < 0: params_billion * 2 bytes / TP
  std::string trace;           // replay: Mooncake trace (default data/traces/...)
  bool no_payload = false;     // cache experiments: bookkeeping only, no state payloads
  int chunk_granularity = 64;  // Cg: state chunk granularity (SGLang mamba_cache_chunk_size)
  int chunked_prefill = 8192;  // token budget of one prefill batch (SGLang chunked_prefill_size)
  int track_interval = 256;    // extra_buffer decode track interval (SGLang mamba_track_interval)
  int max_running = 0;         // 0: active slots / (3 + tracking slots), as SGLang
  std::string trace_bad_lines = "reject";  // replay: reject | skip malformed trace lines

  // Resolved helpers.
  int thread_count() const;
  std::string scale_dtype_or_default() const;
  std::string out_path() const;  // out, or results/<experiment>.h5
};

// --seed's value: decimal digits only, below 2^64 (a leading '-' would wrap around in an unsigned
// parse). Throws statecheck::Error quoting the text otherwise.
uint64_t parse_seed(const std::string& text);

// Resolves the model named by the options (name or path, TP).
ModelConfig options_model(const Options& o);

// The states and layer inputs the numerical experiments read: --drive (default: by model family)
// and --states, the synthetic streams drawn from --seed, the tiny model from --model.
class StatesSource;
StatesSource options_states_source(const Options& o, const ModelConfig& m);

// The request trace replay reads: --trace, else the shipped one.
std::string trace_path(const Options& o);

// The files a run reads: --states, --trace and --model when it names a file.
std::vector<InputPath> run_inputs(const Options& o);

// Refuses, before any work, result paths that would destroy something: each of `outs` and the
// summary JSON (if any) passes check_output_file against the run's inputs, no two of them (or
// their partial files) are one file, and none lies inside the data directory, whose shipped files
// runs read without naming them. Throws statecheck::Error naming the option and path.
void check_run_outputs(const Options& o, const std::vector<std::string>& outs);

// Refuses a --drive whose gate kind does not match the model (check_drive_matches_model), for
// every experiment, including those that do not read the drive.
void check_drive_option(const Options& o, const ModelConfig& m);

using ExperimentFn = std::function<void(const Options&, const ModelConfig&, H5Writer&, Summary&)>;

struct ExperimentEntry {
  std::string name;
  std::string description;
  ExperimentFn run;
  bool in_suite = true;
  bool cuda_path = false;  // accepts --device cuda (runs its CUDA path next to the CPU reference)
};

// Checks every option value, also those the chosen experiment does not read (a typo must not pass
// silently); throws statecheck::Error naming the option.
void validate_options(const Options& o);

// Notes for the options given to `experiment` that it does not read (their values are still
// checked by validate_options): one line each, without a prefix, e.g. "--trace is not read by
// memory (it is read by replay)", naming every experiment that reads the option and, where the
// experiment sets the option itself, how. `given`: the long names of the options given on the
// command line (not defaulted), without "--". `suite` passes every option on: no notes. --mode
// has its own note in main (no shipped experiment reads it). Source of the table: the option
// reads in experiments/*.cpp (cache_common.cpp builds the budget, cache and engine configs).
std::vector<std::string> unread_option_notes(const std::string& experiment,
                                             const std::vector<std::string>& given);

// Whether `experiment` reads the option `option` (long name, without "--"), by the table behind
// unread_option_notes: options outside it are read by every experiment, and `suite` passes every
// option on.
bool experiment_reads_option(const std::string& experiment, const std::string& option);

// With --device cuda: fails unless the experiment has a CUDA path and a usable GPU is present
// (checked before any CPU work). The suite runs the experiments without one on the CPU.
void require_cuda_if_asked(const Options& o, const ExperimentEntry& e);

// For experiments with a CUDA path, called first: --device must be cpu or cuda, and cuda needs a
// CUDA build and a usable GPU. Throws statecheck::Error with the reason.
void check_device(const Options& o);

// Every experiment this build knows, in suite order.
const std::vector<ExperimentEntry>& experiment_registry();

// Individual experiments.
void run_codec(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
void run_chain(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
void run_bench(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
// Logit-level KL of the tiny language model after a state codec round trip (experiments/kl.cpp);
// ignores `m` and uses the tiny model (data/tinylm, or the tiny-model config given with --model).
void run_kl(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary);
// Cache model experiments (spec cache.md, experiments.md): experiments/memory.cpp, capacity.cpp,
// firecount.cpp, replay.cpp.
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

// The options `suite` runs experiment `e` with: the suite's own, with --out set to
// `dir`/<name>.h5, --device cpu for experiments without a CUDA path, and for kl no --drive and
// no --model (it runs the shipped tiny model; the suite's serving model and drive are for the
// others).
Options suite_experiment_options(const Options& base, const ExperimentEntry& e,
                                 const std::string& dir);

// Prints the rows of the thresholds that apply to `summary` with their margin (distance from the
// limit relative to the limit, and on which side: "12% below the limit"); returns the
// number of failing rows. `gate`: the caller exits 1 on a failing row (suite); otherwise the
// header says that the table is for reference only (a single experiment, whose protocol may
// differ from the suite's the limits were set for).
int print_threshold_table(const Summary& summary, std::vector<ThresholdRow>& rows, bool gate);

// Path of data/thresholds.json.
std::string thresholds_path();

}  // namespace statecheck
