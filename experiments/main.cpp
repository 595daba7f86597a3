// statecheck: the command line (spec experiments.md, "Common interface").
//
//   statecheck <experiment> [--model NAME|FILE.json] [--tp N] [--seed N] [--device cpu|cuda]
//                           [--drive NAME] [--states FILE] [--quick] [--out FILE.h5]
//                           [--summary FILE.json] [--threads N] [experiment options]
//
// Exit status: 0 success; 1 a threshold failed (suite); 2 bad input or a failed run, with a
// one-line reason on stderr.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <boost/program_options.hpp>

#include "core/io/interrupt_cleanup.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "experiments/experiment.h"

namespace po = boost::program_options;
using statecheck::Options;

namespace {

std::string usage_header() {
  std::string s = "usage: statecheck <experiment> [options]\n\nexperiments:\n";
  for (const auto& e : statecheck::experiment_registry())
    s += fmt::format("  {:<10} {}\n", e.name, e.description);
  s += fmt::format("  {:<10} {}\n", "suite",
                   "every experiment above, results/*.h5, summary.json, plots, threshold gate");
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered output: progress and partial results reach a log even if the run is killed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // An interrupted run removes its partial results and the folders it created for them.
  statecheck::install_interrupt_cleanup();
  Options o;
  std::string seed_text;
  std::string cmdline;
  for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
  o.command_line = cmdline;

  po::options_description common("common options");
  common.add_options()("help,h", "show this help")("model",
                                                   po::value(&o.model)->default_value(o.model),
                                                   "shipped model name or path to a config .json")(
      "tp", po::value(&o.tp)->default_value(0),
      "tensor-parallel degree (0: the model's default_tp)")(
      "seed", po::value(&seed_text)->default_value("0"),
      "seed of every random draw, an integer in [0, 2^64) (logged in results)")(
      "device", po::value(&o.device)->default_value("cpu"),
      "cpu | cuda (CUDA paths next to the CPU reference)")(
      "drive", po::value(&o.drive),
      "seed-kda | init-gdn | init-kda | states | tinylm (default: by model family; tinylm implies "
      "--model data/tinylm/config.json in codec and chain)")(
      "states", po::value(&o.states), "states file for --drive states (safetensors or HDF5)")(
      "quick", po::bool_switch(&o.quick), "CI-sized protocol (seconds on 2 cores)")(
      "out", po::value(&o.out), "result file (.h5); suite: result directory (default results)")(
      "summary", po::value(&o.summary), "write the flat summary JSON here")(
      "threads", po::value(&o.threads)->default_value(0),
      "worker threads (0: all hardware threads)");
  po::options_description numeric("numerical experiments");
  numeric.add_options()("codec", po::value(&o.codec)->default_value(o.codec),
                        "chain: codec of the checkpoints")(
      "prefill", po::value(&o.prefill)->default_value(0),
      "codec: prefill tokens (0: 512, quick 128)")(
      "decode", po::value(&o.decode)->default_value(0),
      "codec: decode steps after restore (0: 128, quick 32)")(
      "chain-tokens", po::value(&o.chain_tokens)->default_value(o.chain_tokens), "chain: tokens T")(
      "chain-layers", po::value(&o.chain_layers)->default_value(0),
      "chain: layers measured (0: all, quick 2)");
  po::options_description cache("cache experiments");
  cache.add_options()("active-slots", po::value(&o.active_slots)->default_value(o.active_slots),
                      "usable active-pool slots A")(
      "ckpt-slots", po::value(&o.ckpt_slots)->default_value(0),
      "usable checkpoint-pool slots C (0: 2 A)")("mode", po::value(&o.mode)->default_value(o.mode),
                                                 "bf16 (single pool) | int8 (checkpoint pool)")(
      "strategy", po::value(&o.strategy)->default_value(o.strategy), "no_buffer | extra_buffer")(
      "temporal-dtype", po::value(&o.temporal_dtype)->default_value(o.temporal_dtype),
      "fp32 | bf16")("scale-dtype", po::value(&o.scale_dtype),
                     "bf16 | fp32 (default: the temporal dtype)")(
      "conv-dtype", po::value(&o.conv_dtype)->default_value(o.conv_dtype), "bf16")(
      "gpu-mem-gib", po::value(&o.gpu_mem_gib)->default_value(o.gpu_mem_gib, "131.3 (141 GB)"),
      "device memory, GiB")(
      "mem-fraction", po::value(&o.mem_fraction)->default_value(o.mem_fraction),
      "mem_fraction_static")("weights-gib", po::value(&o.weights_gib)->default_value(-1.0),
                             "weights per GPU, GiB (<0: from params)")(
      "trace", po::value(&o.trace), "replay: Mooncake-format trace (default: the shipped one)")(
      "no-payload", po::bool_switch(&o.no_payload),
      "cache experiments: bookkeeping only, no state payloads")(
      "chunk-granularity", po::value(&o.chunk_granularity)->default_value(o.chunk_granularity),
      "state chunk granularity Cg, tokens (SGLang mamba_cache_chunk_size)")(
      "chunked-prefill", po::value(&o.chunked_prefill)->default_value(o.chunked_prefill),
      "token budget of one prefill batch (SGLang chunked_prefill_size)")(
      "track-interval", po::value(&o.track_interval)->default_value(o.track_interval),
      "extra_buffer decode track interval, tokens (SGLang mamba_track_interval)")(
      "max-running", po::value(&o.max_running)->default_value(0),
      "running-request cap (0: active slots / (3 + tracking slots), as SGLang)")(
      "trace-bad-lines", po::value(&o.trace_bad_lines)->default_value(o.trace_bad_lines),
      "replay: reject | skip malformed trace lines (each is reported with its line number)");
  po::options_description all;
  all.add(common).add(numeric).add(cache);
  all.add_options()("experiment", po::value(&o.experiment));
  po::positional_options_description pos;
  pos.add("experiment", 1);

  try {
    po::variables_map vm;
    // No abbreviations: "--ou x" is an unknown option, not --out.
    po::store(
        po::command_line_parser(argc, argv)
            .options(all)
            .positional(pos)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run(),
        vm);
    po::notify(vm);
    o.seed = statecheck::parse_seed(seed_text);
    if (vm.count("help")) {
      std::cout << usage_header() << "\n"
                << common << "\n"
                << numeric << "\n"
                << cache << std::endl;
      return 0;
    }
    if (o.experiment.empty()) {
      std::cerr << usage_header() << "\nstatecheck: no experiment given (see statecheck --help)"
                << std::endl;
      return 2;
    }
    if (vm.count("drive") && o.drive.empty()) statecheck::fail("--drive needs a name");
    if (vm.count("out") && o.out.empty()) statecheck::fail("--out needs a path");
    if (vm.count("summary") && o.summary.empty()) statecheck::fail("--summary needs a path");
    if (vm.count("scale-dtype") && o.scale_dtype.empty())
      statecheck::fail("--scale-dtype needs a dtype (bf16 or fp32)");
    o.model_given = !vm["model"].defaulted();
    statecheck::validate_options(o);
    if (!vm["mode"].defaulted())  // in the command-line contract; every cache experiment sets it
      std::cerr << "statecheck: note: --mode is not read by the shipped experiments (capacity and "
                   "replay run both modes, firecount int8)"
                << std::endl;
    // Options given to an experiment that does not read them (their values were still checked):
    // said, so that a run is not mistaken for one that used them.
    std::vector<std::string> given;
    for (const auto& [name, value] : vm)
      if (!value.defaulted()) given.push_back(name);
    for (const std::string& note : statecheck::unread_option_notes(o.experiment, given))
      std::cerr << "statecheck: note: " << note << std::endl;
    // --drive tinylm runs on the tiny model's own shapes: without --model it implies the shipped
    // tiny model's config (data/tinylm/config.json), which is also a statecheck model config; only
    // for the experiments that read --drive (and suite, which refuses the drive with its reason).
    if (o.drive == "tinylm" && vm["model"].defaulted() &&
        statecheck::experiment_reads_option(o.experiment, "drive"))
      o.model = statecheck::default_tinylm_config_path();
    return statecheck::run_experiment(o);
  } catch (const po::error& e) {
    std::cerr << "statecheck: " << statecheck::printable(e.what()) << " (see statecheck --help)"
              << std::endl;
    return 2;
  } catch (const statecheck::Error& e) {
    std::cerr << "statecheck: " << statecheck::printable(e.what()) << std::endl;
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "statecheck: out of memory running '" << o.experiment
              << "' (an input or option asks for more than this machine has)" << std::endl;
    return 2;
  } catch (const std::length_error&) {
    std::cerr << "statecheck: '" << o.experiment
              << "' was asked for an array larger than memory can address (check sizes in the "
                 "inputs and options)"
              << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "statecheck: " << statecheck::printable(e.what()) << std::endl;
    return 2;
  }
}
