// The one parser and checker of the command line (experiments/options.h).
#include "experiments/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <sstream>
#include <system_error>
#include <typeinfo>
#include <utility>

#include <fmt/format.h>
#include <boost/program_options.hpp>

#include "core/io/paths.h"
#include "core/tinylm/tinylm.h"
#include "core/util/comma_list.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "experiments/experiment.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/common/device.h"
#endif

namespace po = boost::program_options;

namespace statecheck {

const char* device_name(Device d) {
  return d == Device::cuda ? "cuda" : "cpu";
}

const char* bad_lines_name(BadLines b) {
  return b == BadLines::skip ? "skip" : "reject";
}

int Options::thread_count() const {
  return threads > 0 ? threads : default_threads();
}

Dtype Options::scale_dtype_or_default() const {
  return scale_dtype.value_or(temporal_dtype);
}

namespace {
std::string utc_stamp() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// The UTC stamp of now, with "-2", "-3", ... appended while results/runs/<experiment>-<stamp>.h5
// (or its .partial) exists, so that two runs in the same second do not replace one another.
std::string unused_run_stamp(const std::string& experiment) {
  const std::string now = utc_stamp();
  std::string stamp = now;
  for (int n = 2; n < 1000; ++n) {
    const std::string path = "results/runs/" + experiment + "-" + stamp + ".h5";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && !std::filesystem::exists(path + ".partial", ec))
      break;
    stamp = now + "-" + std::to_string(n);
  }
  return stamp;
}

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}
}  // namespace

std::string Options::out_path() const {
  if (!out.empty()) return out;
  return "results/runs/" + experiment + "-" + (run_stamp.empty() ? utc_stamp() : run_stamp) + ".h5";
}

void check_output_extensions(const Options& o) {
  if (!o.out.empty()) {
    const std::string ext = lower_extension(o.out);
    if (o.experiment == "suite") {
      if (ext == ".h5" || ext == ".hdf5" || ext == ".json")
        fail("--out {}: suite writes a folder of result files, not one {} file; give a folder",
             o.out, ext);
    } else if (!ext.empty() && ext != ".h5" && ext != ".hdf5") {
      fail("--out {}: {} writes an HDF5 result file, and '{}' names another format; use .h5", o.out,
           o.experiment, ext);
    }
  }
  if (!o.summary.empty()) {
    const std::string ext = lower_extension(o.summary);
    if (!ext.empty() && ext != ".json")
      fail("--summary {}: the summary is JSON, and '{}' names another format; use .json", o.summary,
           ext);
  }
}

uint64_t parse_seed(const std::string& text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || text[0] < '0' || text[0] > '9' || r.ec != std::errc() || r.ptr != end)
    fail("--seed must be an integer in [0, 2^64), got '{}'", text);
  return v;
}

std::vector<std::string> experiment_option_names() {
  return {"seed",           "threads",         "quick",           "drive",
          "states",         "states-key",      "inputs",          "prefill",
          "decode",         "codec",           "chain-tokens",    "chain-layers",
          "bench-sections", "trace",           "trace-bad-lines", "trace-max-tokens",
          "active-slots",   "ckpt-slots",      "strategy",        "temporal-dtype",
          "scale-dtype",    "conv-dtype",      "gpu-mem-gib",     "mem-fraction",
          "weights-gib",    "compare-shipped", "no-payload",      "chunk-granularity",
          "track-interval", "chunked-prefill", "max-running",     "policy",
          "k-list",         "budget-sweep",    "page-size"};
}

void reset_option(Options& o, const std::string& option) {
  const bool states_drive = o.drive && o.drive->kind == DriveKind::states;
  const bool inputs_drive = o.drive && o.drive->kind == DriveKind::inputs;
  if (option == "drive" || (option == "states" && states_drive) ||
      (option == "inputs" && inputs_drive))
    o.drive.reset();
  else if (option == "trace")
    o.trace.clear();
  else if (option != "states" && option != "inputs")
    fail(
        "reset_option: --{} has a value by default; only --drive, --states, --inputs and --trace "
        "reset",
        option);
}

void require_cuda_if_asked(const Options& o, const ExperimentEntry& e) {
  if (o.device != Device::cuda) return;
  if (!e.cuda_path)
    fail("--device cuda: experiment '{}' has no CUDA path (it models the host side)", e.name);
#ifdef STATECHECK_HAVE_CUDA
  // Probed once: the suite asks for each of its experiments with a CUDA path.
  static const std::optional<std::string> unusable = []() -> std::optional<std::string> {
    std::string why;
    if (cuda::device_available(&why)) return std::nullopt;
    return why;
  }();
  if (unusable) fail("--device cuda: {}", *unusable);
#else
  fail("--device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#endif
}

namespace {

// The text of the options that are converted after parsing, with their defaults as the command
// line shows them.
struct OptionText {
  std::string seed = "0";
  std::string device = "cpu";
  std::string drive;
  std::string states;
  std::string states_key;
  std::string inputs;
  std::string codec = "int8";
  std::string strategy = "extra_buffer";
  std::string temporal_dtype = "fp32";
  std::string scale_dtype;
  std::string conv_dtype = "bf16";
  std::string trace_bad_lines = "reject";
  std::string policy = "lru";
  std::string k_list;
  std::string bench_sections = "codec,recurrence,ws,chunked";
};

struct OptionGroups {
  po::options_description common{"common options"};
  po::options_description numeric{"numerical experiments"};
  po::options_description cache{"cache experiments"};
};

// Declares every option of the command line, bound to `o` (numbers, switches, paths) and `t`
// (text converted by resolve_typed).
void describe_options(OptionGroups& d, Options& o, OptionText& t) {
  auto common = d.common.add_options();
  common("help,h", "show this help");
  common("model", po::value(&o.model)->default_value(o.model),
         "shipped model name (any case), a config .json (statecheck or Hugging Face) or a model "
         "folder holding config.json");
  common("tp", po::value(&o.tp)->default_value(0),
         "tensor-parallel degree (0: the model's default_tp)");
  common("seed", po::value(&t.seed)->default_value(t.seed),
         "seed of every random draw, an integer in [0, 2^64) (logged in results)");
  common("device", po::value(&t.device)->default_value(t.device),
         "cpu | cuda (CUDA paths next to the CPU reference)");
  common(
      "drive", po::value(&t.drive),
      "seed-kda | init-gdn | init-kda | states | tinylm | inputs (default: by model family; tinylm "
      "implies --model data/tinylm/config.json in codec and chain)");
  common("states", po::value(&t.states),
         "states file for --drive states (safetensors or HDF5): one tensor [L, HV, d_v, d_k] or "
         "[L, N, HV, d_v, d_k] named 'state' (or the only one), or one tensor per layer");
  common("states-key", po::value(&t.states_key),
         "--drive states: the tensor to read, or a per-layer pattern with {i} for the layer "
         "index, e.g. 'layers.{i}.ssm_state' (default: 'state', the only tensor, or the one "
         "pattern naming a tensor per linear-attention layer)");
  common("inputs", po::value(&t.inputs),
         "recurrence inputs file for --drive inputs (safetensors or HDF5, docs/real_models.md)");
  common("quick", po::bool_switch(&o.quick), "CI-sized protocol (seconds on 2 cores)");
  common("out", po::value(&o.out),
         "result file (.h5; default results/runs/<experiment>-<UTC time>.h5); suite: result "
         "directory (default results)");
  common("summary", po::value(&o.summary), "write the flat summary JSON here");
  common("threads", po::value(&o.threads)->default_value(0),
         "worker threads (0: all hardware threads)");
  common("verbose", po::bool_switch(&o.verbose),
         "also print every summary key and the whole threshold table");

  auto numeric = d.numeric.add_options();
  numeric("codec", po::value(&t.codec)->default_value(t.codec), "chain: codec of the checkpoints");
  numeric("prefill", po::value(&o.prefill)->default_value(0),
          "codec: prefill tokens (0: 512, quick 128)");
  numeric("decode", po::value(&o.decode)->default_value(0),
          "codec: decode steps after restore (0: 128, quick 32)");
  numeric("chain-tokens", po::value(&o.chain_tokens)->default_value(o.chain_tokens),
          "chain: tokens T");
  numeric("bench-sections", po::value(&t.bench_sections)->default_value(t.bench_sections),
          "bench --device cuda: comma list of the kernel sections timed (codec: checkpoint "
          "store and load; recurrence: fp32 / bf16 state decode and prefill; ws: working-state "
          "decode; chunked: chunked prefill next to the recurrent one)");
  numeric("chain-layers", po::value(&o.chain_layers)->default_value(0),
          "chain: layers measured (0: all, quick 2)");

  auto cache = d.cache.add_options();
  cache("active-slots", po::value(&o.active_slots)->default_value(o.active_slots),
        "usable active-pool slots A");
  cache("ckpt-slots", po::value(&o.ckpt_slots),
        "usable checkpoint-pool slots C >= 1 (default: 2 A)");
  cache("strategy", po::value(&t.strategy)->default_value(t.strategy), "no_buffer | extra_buffer");
  cache("temporal-dtype", po::value(&t.temporal_dtype)->default_value(t.temporal_dtype),
        "fp32 | bf16");
  cache("scale-dtype", po::value(&t.scale_dtype), "bf16 | fp32 (default: the temporal dtype)");
  cache("conv-dtype", po::value(&t.conv_dtype)->default_value(t.conv_dtype), "bf16");
  cache("gpu-mem-gib", po::value(&o.gpu_mem_gib)->default_value(o.gpu_mem_gib, "131.3 (141 GB)"),
        "device memory, GiB");
  cache("mem-fraction", po::value(&o.mem_fraction)->default_value(o.mem_fraction),
        "mem_fraction_static");
  cache("weights-gib", po::value(&o.weights_gib)->default_value(-1.0),
        "weights per GPU of the asked model, GiB (<0: from its parameter count)");
  cache("compare-shipped", po::bool_switch(&o.compare_shipped),
        "memory: add every shipped model (at its default TP) to the table and plot");
  cache("trace", po::value(&o.trace), "replay: Mooncake-format trace (default: the shipped one)");
  cache("no-payload", po::bool_switch(&o.no_payload),
        "cache experiments: bookkeeping only, no state payloads");
  cache("chunk-granularity", po::value(&o.chunk_granularity)->default_value(o.chunk_granularity),
        "state chunk granularity Cg, tokens (SGLang mamba_cache_chunk_size)");
  cache("chunked-prefill", po::value(&o.chunked_prefill)->default_value(o.chunked_prefill),
        "token budget of one prefill batch (SGLang chunked_prefill_size)");
  cache("track-interval", po::value(&o.track_interval)->default_value(o.track_interval),
        "extra_buffer decode track interval, tokens (SGLang mamba_track_interval)");
  cache("page-size", po::value(&o.page_size)->default_value(o.page_size),
        "radix tree page P, tokens (SGLang page_size; > 1 needs extra_buffer)");
  cache("max-running", po::value(&o.max_running)->default_value(0),
        "running-request cap (0: active slots / (3 + tracking slots), as SGLang)");
  cache("trace-bad-lines", po::value(&t.trace_bad_lines)->default_value(t.trace_bad_lines),
        "replay: reject | skip malformed trace lines (each is reported with its line number)");
  cache("policy", po::value(&t.policy)->default_value(t.policy),
        "capacity, replay: eviction policy lru | lru-used | marconi | s3fifo | bip | gdsf | "
        "belady | future-count, or a comma list run side by side (docs/cache_policies.md)");
  cache("k-list", po::value(&t.k_list),
        "capacity: comma list of K (default: 128..768 step 32, extended past the checkpoint pool)");
  cache("budget-sweep", po::bool_switch(&o.budget_sweep),
        "replay: hit rate against the cache memory (state pools and KV scaled together), per "
        "policy and mode");
  cache("trace-max-tokens", po::value(&o.trace_max_tokens)->default_value(o.trace_max_tokens),
        "replay: most prompt + output tokens a trace may hold (2^30 fits 24 GiB)");
}

// The value named `text` among `names`; otherwise "--<option> must be a or b, got '<text>'".
template <class T>
T choose(const char* option, const std::string& text,
         std::initializer_list<std::pair<const char*, T>> names) {
  std::string list;
  size_t i = 0;
  for (const auto& [name, value] : names) {
    if (text == name) return value;
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(name);
    ++i;
  }
  fail("--{} must be {}, got '{}'", option, list, text);
}

}  // namespace

std::vector<int> parse_k_list(const std::string& text) {
  std::vector<int> ks;
  if (text.empty()) return ks;
  const std::vector<std::string> items = comma_items(text);
  for (size_t index = 0; index < items.size(); ++index) {
    const std::string& item = items[index];
    int v = 0;
    const auto r = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || r.ec != std::errc() || r.ptr != item.data() + item.size() || v < 1 ||
        v > kMaxPoolSlots)
      fail("--k-list: entry {} ('{}') of '{}' must be an integer in [1, {}]", index, item, text,
           kMaxPoolSlots);
    if (!ks.empty() && v <= ks.back())
      fail("--k-list: entry {} ({}) of '{}' must be larger than the one before ({})", index, v,
           text, ks.back());
    ks.push_back(v);
  }
  return ks;
}

namespace {

// The typed options from their text; a bad text is refused naming its option.
void resolve_typed(const OptionText& t, bool drive_given, Options& o) {
  o.device = choose<Device>("device", t.device, {{"cpu", Device::cpu}, {"cuda", Device::cuda}});
  o.strategy = choose<CacheStrategy>(
      "strategy", t.strategy,
      {{"no_buffer", CacheStrategy::no_buffer}, {"extra_buffer", CacheStrategy::extra_buffer}});
  o.temporal_dtype = choose<Dtype>("temporal-dtype", t.temporal_dtype,
                                   {{"fp32", Dtype::fp32}, {"bf16", Dtype::bf16}});
  if (!t.scale_dtype.empty())
    o.scale_dtype =
        choose<Dtype>("scale-dtype", t.scale_dtype, {{"bf16", Dtype::bf16}, {"fp32", Dtype::fp32}});
  o.conv_dtype = choose<Dtype>("conv-dtype", t.conv_dtype, {{"bf16", Dtype::bf16}});
  // --codec int8 takes the scale dtype of the options; int8_fp32_scale names its own, which an
  // explicit --scale-dtype must then agree with.
  o.codec = parse_codec(t.codec, o.scale_dtype_or_default());
  if (o.scale_dtype && o.codec.has_scales() && o.codec.scale_dtype != *o.scale_dtype)
    fail("--codec {} names a {} scale but --scale-dtype is {}; give one of them", t.codec,
         dtype_name(o.codec.scale_dtype), t.scale_dtype);
  o.trace_bad_lines = choose<BadLines>("trace-bad-lines", t.trace_bad_lines,
                                       {{"reject", BadLines::reject}, {"skip", BadLines::skip}});
  o.policies = parse_policy_list(t.policy);
  o.k_list = parse_k_list(t.k_list);
  o.bench_codec = o.bench_recurrence = o.bench_ws = o.bench_chunked = false;
  for (const std::string& name : comma_items(t.bench_sections)) {
    if (name == "codec")
      o.bench_codec = true;
    else if (name == "recurrence")
      o.bench_recurrence = true;
    else if (name == "ws")
      o.bench_ws = true;
    else if (name == "chunked")
      o.bench_chunked = true;
    else if (name.empty())
      fail("--bench-sections '{}': an empty section name", t.bench_sections);
    else
      fail("--bench-sections: '{}' is not a section (codec, recurrence, ws, chunked)", name);
  }
  if (drive_given)
    o.drive = parse_drive(t.drive, t.states, t.inputs);
  else if (!t.states.empty())
    fail("--states {} is given without --drive states", t.states);
  if (!t.states_key.empty()) {
    if (!o.drive || o.drive->kind != DriveKind::states)
      fail("--states-key {} is given without --drive states", t.states_key);
    const size_t at = t.states_key.find("{i}");
    if (at != std::string::npos && t.states_key.find("{i}", at + 1) != std::string::npos)
      fail("--states-key {}: the pattern may hold '{{i}}' once", t.states_key);
    o.drive->states_key = t.states_key;
  }
  if (!t.inputs.empty() && (!o.drive || o.drive->kind != DriveKind::inputs))
    fail("--inputs {} is given without --drive inputs", t.inputs);
}

// The range an integer option must be in, as check_values enforces it ("" for another option).
std::string integer_option_range(const std::string& option) {
  const std::map<std::string, std::string> ranges = {
      {"tp", "[0, 2147483647] (0: the model's default)"},
      {"threads", "[0, 4096]"},
      {"prefill", "[0, 1048576]"},
      {"decode", "[0, 1048576]"},
      {"chain-tokens", "[128, 1048576], a multiple of 128"},
      {"chain-layers", "[0, 2147483647]"},
      {"active-slots", fmt::format("[1, {}]", kMaxPoolSlots)},
      {"ckpt-slots", fmt::format("[0, {}]", kMaxPoolSlots)},
      {"chunk-granularity", "[1, 1048576]"},
      {"chunked-prefill", "[1, 2147483647], a multiple of the state grid"},
      {"track-interval", "[1, 2147483647], a multiple of the state grid"},
      {"page-size", "[1, 1048576]"},
      {"max-running", "[0, 2147483647]"},
      {"trace-max-tokens", "[1, 2^40]"}};
  const auto it = ranges.find(option);
  return it == ranges.end() ? "" : it->second;
}

// The ranges of the numbers and the input files.
void check_values(const Options& o) {
  if (o.tp < 0) fail("--tp must be 0 (the model's default) or a positive GPU count, got {}", o.tp);
  if (o.threads < 0 || o.threads > 4096) fail("--threads must be in [0, 4096], got {}", o.threads);
  constexpr int kMaxTokens = 1 << 20;
  if (o.prefill < 0 || o.prefill > kMaxTokens)
    fail("--prefill must be in [0, {}] tokens (0: the protocol's default), got {}", kMaxTokens,
         o.prefill);
  if (o.decode < 0 || o.decode > kMaxTokens)
    fail("--decode must be in [0, {}] steps (0: the protocol's default), got {}", kMaxTokens,
         o.decode);
  if (o.chain_tokens < 128 || o.chain_tokens > kMaxTokens || o.chain_tokens % 128 != 0)
    fail("--chain-tokens must be a multiple of 128 (n goes up to 128) in [128, {}], got {}",
         kMaxTokens, o.chain_tokens);
  if (o.chain_layers < 0)
    fail("--chain-layers must be >= 0 (0: all layers), got {}", o.chain_layers);
  if (o.active_slots < 1 || o.active_slots > kMaxPoolSlots)
    fail("--active-slots must be in [1, {}], got {}", kMaxPoolSlots, o.active_slots);
  if (o.ckpt_slots != -1 && (o.ckpt_slots < 1 || o.ckpt_slots > kMaxPoolSlots))
    fail("--ckpt-slots must be in [1, {}] (absent: twice the active slots), got {}", kMaxPoolSlots,
         o.ckpt_slots);
  if (o.ckpt_slots == -1 && 2 * static_cast<int64_t>(o.active_slots) > kMaxPoolSlots)
    fail("--ckpt-slots absent means 2 x --active-slots = {}, above {}; give --ckpt-slots",
         2 * static_cast<int64_t>(o.active_slots), kMaxPoolSlots);
  if (!(o.gpu_mem_gib > 0) || !std::isfinite(o.gpu_mem_gib) || o.gpu_mem_gib > 1e6)
    fail("--gpu-mem-gib must be a positive number of GiB, got {}", o.gpu_mem_gib);
  if (!(o.mem_fraction > 0) || o.mem_fraction > 1)
    fail("--mem-fraction must be in (0, 1], got {}", o.mem_fraction);
  if (std::isnan(o.weights_gib) || std::isinf(o.weights_gib))
    fail("--weights-gib must be a number (< 0: from the model's parameter count), got {}",
         o.weights_gib);
  if (o.chunk_granularity < 1 || o.chunk_granularity > kMaxTokens)
    fail("--chunk-granularity must be in [1, {}], got {}", kMaxTokens, o.chunk_granularity);
  // Each chunk re-inserts the request's prefix into the tree (as the engine does), so the work of a
  // replay grows like prompt^2 / chunk: budgets below one state chunk make no sense.
  if (o.page_size < 1 || o.page_size > kMaxTokens)
    fail("--page-size must be in [1, {}], got {}", kMaxTokens, o.page_size);
  // The grid of cached states, as the engine sets it up: SGLang takes mamba_cache_chunk_size =
  // max(chunk, page) and asserts that one divides the other; the states sit on their lcm.
  const int grid = std::max(o.chunk_granularity, o.page_size);
  if (grid % o.chunk_granularity != 0 || grid % o.page_size != 0)
    fail("--chunk-granularity {} and --page-size {} must divide one another", o.chunk_granularity,
         o.page_size);
  if (o.page_size > 1 && o.strategy == CacheStrategy::no_buffer)
    fail(
        "--page-size {} needs --strategy extra_buffer (no_buffer caches at any length; the engine "
        "requires page size 1 there)",
        o.page_size);
  if (o.chunked_prefill < grid || o.chunked_prefill % grid != 0)
    fail(
        "--chunked-prefill must be a positive multiple of the state grid {} (lcm of "
        "--chunk-granularity and --page-size), got {}",
        grid, o.chunked_prefill);
  if (o.track_interval < 1 || o.track_interval % grid != 0)
    fail(
        "--track-interval must be a positive multiple of the state grid {} (lcm of "
        "--chunk-granularity and --page-size), got {}",
        grid, o.track_interval);
  if (o.trace_max_tokens < 1 || o.trace_max_tokens > (int64_t{1} << 40))
    fail("--trace-max-tokens must be in [1, 2^40 = {}], got {}", int64_t{1} << 40,
         o.trace_max_tokens);
  if (o.max_running < 0)
    fail("--max-running must be >= 0 (0: from the active pool), got {}", o.max_running);
  if (o.drive && o.drive->kind == DriveKind::states)
    check_input_file("--states", o.drive->states_file);
  if (o.drive && o.drive->kind == DriveKind::inputs)
    check_input_file("--inputs", o.drive->inputs_file);
  if (!o.trace.empty()) check_input_file("--trace", o.trace);
}

}  // namespace

std::string command_line_usage() {
  std::string s = "usage: statecheck <experiment> [options]\n\nexperiments:\n";
  for (const auto& e : experiment_registry())
    s += fmt::format("  {:<10} {}\n", e.name, e.description);
  s += fmt::format("  {:<10} {}\n", "suite",
                   "every experiment above, results/*.h5, summary.json, plots, threshold gate");
  return s;
}

std::string command_line_help() {
  Options o;
  OptionText t;
  OptionGroups d;
  describe_options(d, o, t);
  std::ostringstream s;
  s << command_line_usage() << "\n" << d.common << "\n" << d.numeric << "\n" << d.cache;
  return s.str();
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine cl;
  Options& o = cl.options;
  for (size_t i = 0; i < args.size(); ++i) o.command_line += (i ? " " : "") + args[i];
  OptionText t;
  OptionGroups d;
  describe_options(d, o, t);
  po::options_description all;
  all.add(d.common).add(d.numeric).add(d.cache);
  all.add_options()("experiment", po::value(&o.experiment));
  po::positional_options_description pos;
  pos.add("experiment", 1);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  // No abbreviations: "--ou x" is an unknown option, not --out.
  const po::parsed_options parsed =
      po::command_line_parser(static_cast<int>(argv.size()), argv.data())
          .options(all)
          .positional(pos)
          .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
          .run();
  po::variables_map vm;
  try {
    po::store(parsed, vm);
  } catch (const po::invalid_option_value& e) {
    // A number that is no integer of its type (or beyond it): named with the range it must be in.
    const std::string name = e.get_option_name();
    const std::string key = name.rfind("--", 0) == 0 ? name.substr(2) : name;
    const std::string range = integer_option_range(key);
    if (range.empty()) throw;
    std::string given;
    for (const po::option& opt : parsed.options)
      if (opt.string_key == key && !opt.value.empty()) given = opt.value.front();
    fail("--{} must be an integer in {}, got '{}'", key, range, given);
  }
  po::notify(vm);
  o.seed = parse_seed(t.seed);
  if (vm.count("help")) {
    cl.help = true;
    return cl;
  }
  if (o.experiment.empty()) return cl;
  if (vm.count("drive") && t.drive.empty()) fail("--drive needs a name");
  if (vm.count("states-key") && t.states_key.empty()) fail("--states-key needs a name or pattern");
  if (vm.count("inputs") && t.inputs.empty()) fail("--inputs needs a path");
  if (vm.count("out") && o.out.empty()) fail("--out needs a path");
  if (vm.count("summary") && o.summary.empty()) fail("--summary needs a path");
  if (vm.count("ckpt-slots") && o.ckpt_slots == 0)
    fail(
        "--ckpt-slots 0: the int8 mode needs a checkpoint pool of at least 1 slot (leave the "
        "option out for twice --active-slots)");
  if (vm.count("ckpt-slots") && o.ckpt_slots < 1)
    fail("--ckpt-slots must be in [1, {}] (absent: twice the active slots), got {}", kMaxPoolSlots,
         o.ckpt_slots);
  if (vm.count("scale-dtype") && t.scale_dtype.empty())
    fail("--scale-dtype needs a dtype (bf16 or fp32)");
  // Any other text option given empty: refused rather than read as its default.
  for (const auto& [name, value] : vm)
    if (!value.defaulted() && value.value().type() == typeid(std::string) &&
        value.as<std::string>().empty())
      fail("--{} needs a value, got an empty one", name);
  o.model_given = !vm["model"].defaulted();
  std::vector<std::string> given;
  for (const auto& [name, value] : vm)
    if (!value.defaulted()) given.push_back(name);
  if (const ExperimentEntry* e = find_experiment(o.experiment)) {
    std::map<std::string, std::string> text;  // option -> its value as given
    for (const po::option& opt : parsed.options)
      if (!opt.value.empty()) text[opt.string_key] = opt.value.front();
    for (const OptionNote& r : e->refuses)
      if (std::find(given.begin(), given.end(), r.option) != given.end())
        fail("{}: --{} {} does not apply ({})", e->name, r.option, text[r.option], r.why);
  }
  resolve_typed(t, vm.count("drive") != 0, o);
  check_values(o);
  check_output_extensions(o);
  o.run_stamp = unused_run_stamp(o.experiment);
  // Options given to an experiment that does not read them (their values were still checked):
  // said, so that a run is not mistaken for one that used them.
  cl.notes = unread_option_notes(o.experiment, given);
  // More workers than hardware threads only add contention: clamped, and said.
  if (o.threads > default_threads()) {
    cl.notes.push_back(
        fmt::format("--threads {} is more than the {} hardware threads of this machine; using {}",
                    o.threads, default_threads(), default_threads()));
    o.threads = default_threads();
  }
  // --drive tinylm runs on the tiny model's own shapes: without --model it implies the shipped
  // tiny model's config (data/tinylm/config.json), which is also a statecheck model config; only
  // for the experiments that read --drive (and suite, which refuses the drive with its reason).
  if (o.drive && o.drive->kind == DriveKind::tinylm && !o.model_given &&
      experiment_reads_option(o.experiment, "drive"))
    o.model = default_tinylm_config_path();
  return cl;
}

}  // namespace statecheck
