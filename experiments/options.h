// The statecheck command line as a typed configuration (docs/experiments.md, "Common interface"):
// the option types with their defaults, and the one place that turns the command-line text into
// them and checks every value (parse_command_line). Experiments read the typed fields only; which
// experiment reads which option is declared with its registry entry (experiments/experiment.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cache/eviction_policy.h"
#include "core/cache/state_cache.h"
#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/dtype/dtype.h"
#include "core/workloads/mooncake_trace.h"

namespace statecheck {

// The most slots --active-slots and --ckpt-slots may ask for, and the most the memory budget may
// give replay's bf16 and int8 pools: every slot is host memory in the cache model.
constexpr int kMaxPoolSlots = 1 << 22;

// Where the experiments with a CUDA path run it: cpu (the CPU reference only) or cuda (the CUDA
// path next to the CPU reference).
enum class Device { cpu, cuda };

const char* device_name(Device d);       // "cpu" | "cuda"
const char* bad_lines_name(BadLines b);  // "reject" | "skip" (--trace-bad-lines)

struct Options {
  std::string experiment;  // an experiment of the registry, or "suite"
  std::string model = "qwen3.5-35b-a3b";
  bool model_given = false;  // --model was on the command line (not the default)
  int tp = 0;                // 0: the model's default_tp
  uint64_t seed = 0;
  Device device = Device::cpu;
  // --drive, with --states FILE for 'states' (DriveSpec::states_file) and --inputs FILE for
  // 'inputs' (DriveSpec::inputs_file); none: default_drive(model).
  std::optional<DriveSpec> drive;
  bool quick = false;
  // Result file; empty: results/runs/<experiment>-<run_stamp>.h5, so that a single run never
  // replaces a suite's results/<experiment>.h5 (suite: the result directory, default results).
  std::string out;
  // UTC time of the parse, YYYYMMDDTHHMMSSZ, with -2, -3, ... when a run of that experiment in
  // the same second already wrote results/runs/<experiment>-<stamp>.h5 (empty: the time of the
  // call).
  std::string run_stamp;
  std::string summary;  // summary JSON; empty: none (suite: <out>/summary.json)
  int threads = 0;      // 0: hardware threads; more than the hardware has: clamped, with a note
  // --verbose: also print every summary key and the whole threshold table.
  bool verbose = false;
  std::string command_line;

  // Numerical experiments.
  // chain: the codec checkpoints go through. Its scale dtype is the one --codec names
  // (int8_bf16_scale, ...) or else scale_dtype_or_default(), resolved when parsed.
  Codec codec{CodecKind::int8};
  int prefill = 0;          // codec: prefill tokens (0: 512, quick 128)
  int decode = 0;           // codec: decode steps after restore (0: 128, quick 32)
  int chain_tokens = 2048;  // chain: T
  int chain_layers = 0;     // chain: layers measured (0: all; quick: 2)
  // bench --device cuda: the kernel sections timed (codec, recurrence, ws, chunked); all by
  // default.
  bool bench_codec = true, bench_recurrence = true, bench_ws = true, bench_chunked = true;

  // Cache experiments (docs/experiments.md, "Common interface").
  int active_slots = 256;
  int ckpt_slots = -1;  // -1 (option absent): 2 * active; an explicit 0 is refused
  CacheStrategy strategy = CacheStrategy::extra_buffer;
  Dtype temporal_dtype = Dtype::fp32;  // fp32 | bf16
  std::optional<Dtype> scale_dtype;    // bf16 | fp32; none: the temporal dtype (docs/numerics.md)
  Dtype conv_dtype = Dtype::bf16;      // bf16
  double gpu_mem_gib = 141e9 / 1073741824.0;  // an H200: 141 GB = 131.3 GiB
  double mem_fraction = 0.88;
  double weights_gib = -1.0;   // < 0: from the asked model's parameter count
  std::string trace;           // replay: Mooncake trace (empty: the shipped one, trace_path)
  bool no_payload = false;     // cache experiments: bookkeeping only, no state payloads
  int chunk_granularity = 64;  // Cg: state chunk granularity (SGLang mamba_cache_chunk_size)
  int chunked_prefill = 8192;  // token budget of one prefill batch (SGLang chunked_prefill_size)
  int track_interval = 256;    // extra_buffer decode track interval (SGLang mamba_track_interval)
  int page_size = 1;           // P: the radix tree's page, tokens (SGLang page_size)
  int max_running = 0;         // 0: active slots / (3 + tracking slots), as SGLang
  BadLines trace_bad_lines = BadLines::reject;  // replay: malformed trace lines
  // memory: add the shipped models' rows (each at its default TP) after the asked model's
  bool compare_shipped = false;
  // capacity, replay: eviction policies run side by side (--policy, a comma list; lru first by
  // default). docs/cache_policies.md.
  std::vector<PolicyKind> policies{PolicyKind::lru};
  // capacity: the K grid (--k-list, comma list of positive K, increasing); empty: the default
  // grid of run_capacity, which reaches past the checkpoint pool.
  std::vector<int> k_list;
  // replay: --budget-sweep, the trace at a range of state-pool budgets for every policy and mode.
  bool budget_sweep = false;
  int64_t trace_max_tokens = kTraceDefaultMaxTotalTokens;  // replay: cap on prompt + output tokens

  // Resolved helpers.
  int thread_count() const;
  Dtype scale_dtype_or_default() const;  // scale_dtype, else the temporal dtype
  std::string out_path() const;          // out, or results/runs/<experiment>-<run_stamp>.h5
};

// A parsed command line.
struct CommandLine {
  Options options;
  bool help = false;  // --help: print command_line_help() and do nothing else
  // One line each (without a prefix) for the options given to an experiment that does not read
  // them (unread_option_notes), in the order of experiment_option_names().
  std::vector<std::string> notes;
};

// Parses `args` (args[0]: the program) with boost::program_options and converts and checks every
// value, also those the chosen experiment does not read (a typo must not pass silently). Without
// --help and with an experiment named it also refuses the options the experiment refuses
// (ExperimentEntry::refuses), collects the notes, and lets --drive tinylm imply the tiny model's
// config as --model for the experiments that read --drive. Throws
// boost::program_options::error for an unknown or malformed option (no abbreviations: "--ou x" is
// unknown) and statecheck::Error naming the option for a bad value. An experiment name is not
// checked here (run_experiment refuses unknown ones).
CommandLine parse_command_line(const std::vector<std::string>& args);

// The extension check of the result paths: a single experiment's --out is HDF5 (no extension, .h5
// or .hdf5), suite's --out a folder (not named .h5, .hdf5 or .json), --summary JSON (no extension
// or .json). Throws statecheck::Error naming the option, the path and the format.
void check_output_extensions(const Options& o);

// The usage line and the experiments of the registry, one line each.
std::string command_line_usage();
// command_line_usage() and every option with its default (--help).
std::string command_line_help();

// --k-list's value: a comma list of integers in [1, kMaxPoolSlots], strictly increasing; empty text
// gives an empty list. Throws statecheck::Error naming the entry and its index otherwise.
std::vector<int> parse_k_list(const std::string& text);

// --seed's value: decimal digits only, below 2^64 (a leading '-' would wrap around in an unsigned
// parse). Throws statecheck::Error quoting the text otherwise.
uint64_t parse_seed(const std::string& text);

// The one check of --device cuda, made by run_experiment and run_suite before any work: fails
// unless experiment `e` has a CUDA path, the build has the CUDA kernels and a usable GPU is present
// (probed once per process). Throws statecheck::Error with the reason. The suite runs the
// experiments without a CUDA path on the CPU.
struct ExperimentEntry;
void require_cuda_if_asked(const Options& o, const ExperimentEntry& e);

// The long names (without "--") of the options only some experiments read, in the order notes
// name them; every other option (--model, --tp, --device, --out, --summary) is read by every
// experiment. ExperimentEntry::reads, sets_itself and refuses name options of this list.
std::vector<std::string> experiment_option_names();

// Sets the option `option` of `o` back to its default, for the suite's options of an experiment
// that refuses it: --drive (no drive), --states (no drive, if it is 'states') or --trace (the
// shipped one), the options with no value by default (and --inputs, like --states). Throws
// statecheck::Error for another name.
void reset_option(Options& o, const std::string& option);

}  // namespace statecheck
