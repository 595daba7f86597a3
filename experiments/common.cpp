#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/drive/states_source.h"
#include "core/io/run_info.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "experiments/experiment.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/common/device.h"
#endif

namespace statecheck {

int Options::thread_count() const {
  return threads > 0 ? threads : default_threads();
}

std::string Options::scale_dtype_or_default() const {
  if (!scale_dtype.empty()) return scale_dtype;
  return temporal_dtype == "bf16" ? "bf16" : "fp32";
}

std::string Options::out_path() const {
  return out.empty() ? "results/" + experiment + ".h5" : out;
}

ModelConfig options_model(const Options& o) {
  return load_model(o.model, o.tp);
}

uint64_t parse_seed(const std::string& text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || text[0] < '0' || text[0] > '9' || r.ec != std::errc() || r.ptr != end)
    fail("--seed must be an integer in [0, 2^64), got '{}'", text);
  return v;
}

StatesSource options_states_source(const Options& o, const ModelConfig& m) {
  const DriveSpec drive = o.drive.empty() ? default_drive(m) : parse_drive(o.drive, o.states);
  return StatesSource::resolve(drive, o.seed, m,
                               drive.kind == DriveKind::tinylm ? tinylm_config_for(o.model) : "");
}

std::string trace_path(const Options& o) {
  return o.trace.empty() ? data_dir() + "/traces/mooncake_conversation_trace.jsonl" : o.trace;
}

std::vector<InputPath> run_inputs(const Options& o) {
  std::vector<InputPath> in;
  if (!o.states.empty()) in.push_back({"--states", o.states});
  if (!o.trace.empty()) in.push_back({"--trace", o.trace});
  std::error_code ec;
  if (std::filesystem::is_regular_file(o.model, ec)) in.push_back({"--model", o.model});
  return in;
}

void check_run_outputs(const Options& o, const std::vector<std::string>& outs) {
  std::vector<InputPath> inputs = run_inputs(o);
  std::vector<std::pair<std::string, std::string>> written;  // (option, path) with their partials
  for (const std::string& out : outs) written.push_back({"--out", out});
  if (!o.summary.empty()) written.push_back({"--summary", o.summary});
  for (const auto& [option, path] : written) check_output_file(option, path, inputs);
  // No two written files (results, summary, their partial files) may be one file.
  for (size_t a = 0; a < written.size(); ++a)
    for (size_t b = a + 1; b < written.size(); ++b)
      for (const std::string& pa : {written[a].second, written[a].second + ".partial"})
        for (const std::string& pb : {written[b].second, written[b].second + ".partial"})
          if (same_file(pa, pb))
            fail("{} {} and {} {} are one file ({}); give them different paths", written[a].first,
                 written[a].second, written[b].first, written[b].second, pa);
  // Nothing is written into the data directory: it holds the shipped models, thresholds, traces
  // and the tiny model, which runs read without naming them.
  const std::filesystem::path data = resolved_path(data_dir());
  for (const auto& [option, path] : written) {
    const std::filesystem::path r = resolved_path(path);
    const auto rel = r.lexically_relative(data);
    if (!rel.empty() && *rel.begin() != "..")
      fail("{} {}: is inside the data directory {} (shipped inputs); write results elsewhere",
           option, path, data.string());
  }
}

void check_drive_option(const Options& o, const ModelConfig& m) {
  if (!o.drive.empty()) check_drive_matches_model(parse_drive(o.drive, o.states), m);
}

namespace {

// The experiments that read an option and, among those that do not, the ones that set it
// themselves (and how).
struct OptionReaders {
  const char* option;
  std::vector<std::string> experiments;
  std::vector<std::string> set_itself = {};
  const char* how = "";
};

// Who reads what: codec and chain take the drive; the cache experiments read the memory budget
// (options_budget_inputs), the state dtypes (options_dtypes) and, those that run the engine,
// the cache and engine configs (options_cache_config, options_engine_config). codec, chain and
// bench take their scale dtype from --scale-dtype or, without it, --temporal-dtype
// (scale_dtype_or_default); kl runs its own codec list. --seed draws the synthetic drives and
// workloads (every result file records it all the same), --threads the CPU workers of codec,
// chain and kl; memory has no quick protocol. Options every experiment reads (--model, --tp,
// --out, --summary, --device) are not listed.
const std::vector<OptionReaders>& option_readers() {
  static const std::vector<OptionReaders> table = [] {
    const std::vector<std::string> dtypes = {"codec",    "chain",     "bench", "memory",
                                             "capacity", "firecount", "replay"};
    const std::vector<std::string> budget = {"memory", "capacity", "firecount", "replay"};
    const std::vector<std::string> engine = {"capacity", "firecount", "replay"};
    const char* replay_pools = "replay sizes its pools from the memory budget, at equal memory";
    return std::vector<OptionReaders>{
        {"seed", {"codec", "chain", "bench", "capacity", "firecount"}},
        {"threads", {"codec", "chain", "kl"}},
        {"quick", {"codec", "chain", "bench", "capacity", "firecount", "replay", "kl"}},
        {"drive", {"codec", "chain"}},
        {"states", {"codec", "chain"}},
        {"prefill", {"codec"}},
        {"decode", {"codec"}},
        {"codec", {"chain"}},
        {"chain-tokens", {"chain"}},
        {"chain-layers", {"chain"}},
        {"trace", {"replay"}},
        {"trace-bad-lines", {"replay"}},
        {"active-slots", {"memory", "capacity", "firecount"}, {"replay"}, replay_pools},
        {"ckpt-slots", {"memory", "capacity", "firecount"}, {"replay"}, replay_pools},
        {"strategy",
         {"capacity", "replay"},
         {"firecount"},
         "firecount runs both no_buffer and extra_buffer"},
        {"temporal-dtype", dtypes},
        {"scale-dtype", dtypes},
        {"conv-dtype", budget},
        {"gpu-mem-gib", budget},
        {"mem-fraction", budget},
        {"weights-gib", budget},
        {"no-payload", engine},
        {"chunk-granularity", engine},
        {"track-interval", engine},
        {"chunked-prefill", engine},
        {"max-running", engine}};
  }();
  return table;
}

bool contains(const std::vector<std::string>& list, const std::string& x) {
  return std::find(list.begin(), list.end(), x) != list.end();
}

}  // namespace

bool experiment_reads_option(const std::string& experiment, const std::string& option) {
  if (experiment == "suite") return true;  // passes every option on to its experiments
  for (const auto& r : option_readers())
    if (r.option == option) return contains(r.experiments, experiment);
  return true;  // not in the table: every experiment reads it
}

std::vector<std::string> unread_option_notes(const std::string& experiment,
                                             const std::vector<std::string>& given) {
  std::vector<std::string> notes;
  for (const auto& r : option_readers()) {
    if (!contains(given, r.option) || experiment_reads_option(experiment, r.option)) continue;
    std::string readers;
    for (size_t i = 0; i < r.experiments.size(); ++i)
      readers += (i == 0 ? "" : i + 1 == r.experiments.size() ? " and " : ", ") + r.experiments[i];
    const bool sets_it = contains(r.set_itself, experiment);
    notes.push_back(fmt::format("--{} is not read by {} ({}it is read by {})", r.option, experiment,
                                sets_it ? std::string(r.how) + "; " : std::string(), readers));
  }
  return notes;
}

std::string thresholds_path() {
  return data_dir() + "/thresholds.json";
}

int print_threshold_table(const Summary& summary, std::vector<ThresholdRow>& rows, bool gate) {
  check_thresholds(summary, rows);
  int failures = 0, shown = 0;
  for (const auto& r : rows) {
    if (!r.present) continue;
    if (shown++ == 0)
      fmt::print(gate ? "\nthresholds (data/thresholds.json):\n"
                      : "\nthresholds (data/thresholds.json; for reference, not a gate: only "
                        "`statecheck suite` exits 1 on a failing row):\n");
    // Margin: how far the value lies from the limit, relative to the limit, and on which side
    // (an upper bound passes below it, a lower bound above it); under 1% with two digits, so
    // that a row failing by a hair does not read "0%".
    std::string headroom = "(limit is 0 or value not finite: no margin)";
    if (r.limit != 0.0 && std::isfinite(r.value)) {
      const double pct = 100.0 * std::fabs(r.value - r.limit) / std::fabs(r.limit);
      const char* side = r.value < r.limit ? "below" : "above";
      headroom = r.value == r.limit ? std::string("at the limit")
                 : pct >= 1.0       ? fmt::format("{:>5.0f}% {} the limit", pct, side)
                                    : fmt::format("{:>5.2g}% {} the limit", pct, side);
    }
    fmt::print("  {:4} {:<52} {:>12.4g} {:2} {:<10.4g} {}\n", r.pass ? "ok" : "FAIL", r.key,
               r.value, r.op, r.limit, headroom);
    if (!r.pass) {
      ++failures;
      fmt::print("       reason for the limit: {}\n", r.reason);
    }
  }
  return failures;
}

namespace {

void print_summary(const Summary& s, const std::string& experiment) {
  fmt::print("\n{} summary:\n", experiment);
  for (const auto& [k, v] : s.values()) fmt::print("  {:<56} {:.6g}\n", k, v);
}

}  // namespace

void validate_options(const Options& o) {
  if (o.experiment == "kl" && !o.drive.empty())
    fail("kl: --drive {} does not apply (kl runs the tiny language model on its evaluation text)",
         o.drive);
  if (o.device != "cpu" && o.device != "cuda")
    fail("--device must be cpu or cuda, got '{}'", o.device);
  if (o.tp < 0) fail("--tp must be positive (0: the model's default), got {}", o.tp);
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
  if (o.ckpt_slots < 0 || o.ckpt_slots > kMaxPoolSlots)
    fail("--ckpt-slots must be in [0, {}] (0: twice the active slots), got {}", kMaxPoolSlots,
         o.ckpt_slots);
  if (o.ckpt_slots == 0 && 2 * static_cast<int64_t>(o.active_slots) > kMaxPoolSlots)
    fail("--ckpt-slots 0 means 2 x --active-slots = {}, above {}; give --ckpt-slots",
         2 * static_cast<int64_t>(o.active_slots), kMaxPoolSlots);
  if (!(o.gpu_mem_gib > 0) || !std::isfinite(o.gpu_mem_gib) || o.gpu_mem_gib > 1e6)
    fail("--gpu-mem-gib must be a positive number of GiB, got {}", o.gpu_mem_gib);
  if (!(o.mem_fraction > 0) || o.mem_fraction > 1)
    fail("--mem-fraction must be in (0, 1], got {}", o.mem_fraction);
  if (std::isnan(o.weights_gib) || std::isinf(o.weights_gib))
    fail("--weights-gib must be a number (< 0: from the model's parameter count), got {}",
         o.weights_gib);
  if (o.mode != "bf16" && o.mode != "int8") fail("--mode must be bf16 or int8, got '{}'", o.mode);
  if (o.strategy != "no_buffer" && o.strategy != "extra_buffer")
    fail("--strategy must be no_buffer or extra_buffer, got '{}'", o.strategy);
  if (o.temporal_dtype != "fp32" && o.temporal_dtype != "bf16")
    fail("--temporal-dtype must be fp32 or bf16, got '{}'", o.temporal_dtype);
  if (!o.scale_dtype.empty() && o.scale_dtype != "bf16" && o.scale_dtype != "fp32")
    fail("--scale-dtype must be bf16 or fp32, got '{}'", o.scale_dtype);
  if (o.conv_dtype != "bf16") fail("--conv-dtype must be bf16, got '{}'", o.conv_dtype);
  const Codec chain_codec =
      parse_codec(o.codec, parse_dtype(o.scale_dtype_or_default(), "scale dtype"));
  if (!o.scale_dtype.empty() && chain_codec.has_scales() &&
      chain_codec.scale_dtype != parse_dtype(o.scale_dtype, "scale dtype"))
    fail("--codec {} names a {} scale but --scale-dtype is {}; give one of them", o.codec,
         dtype_name(chain_codec.scale_dtype), o.scale_dtype);
  if (o.chunk_granularity < 1 || o.chunk_granularity > kMaxTokens)
    fail("--chunk-granularity must be in [1, {}], got {}", kMaxTokens, o.chunk_granularity);
  // Each chunk re-inserts the request's prefix into the tree (as the engine does), so the work of a
  // replay grows like prompt^2 / chunk: budgets below one state chunk make no sense.
  if (o.chunked_prefill < o.chunk_granularity)
    fail("--chunked-prefill must be >= the chunk granularity ({}), got {}", o.chunk_granularity,
         o.chunked_prefill);
  if (o.track_interval < 1) fail("--track-interval must be >= 1, got {}", o.track_interval);
  if (o.max_running < 0)
    fail("--max-running must be >= 0 (0: from the active pool), got {}", o.max_running);
  if (o.trace_bad_lines != "reject" && o.trace_bad_lines != "skip")
    fail("--trace-bad-lines must be reject or skip, got '{}'", o.trace_bad_lines);
  if (!o.drive.empty())
    parse_drive(o.drive, o.states);
  else if (!o.states.empty())
    fail("--states {} is given without --drive states", o.states);
  if (!o.states.empty()) check_input_file("--states", o.states);
  if (!o.trace.empty()) check_input_file("--trace", o.trace);
}

void check_device(const Options& o) {
  if (o.device != "cpu" && o.device != "cuda")
    fail("--device must be cpu or cuda, got '{}'", o.device);
  if (o.device != "cuda") return;
#ifdef STATECHECK_HAVE_CUDA
  std::string why;
  if (!cuda::device_available(&why)) fail("--device cuda: {}", why);
#else
  fail("--device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#endif
}

void require_cuda_if_asked(const Options& o, const ExperimentEntry& e) {
  if (o.device != "cuda") return;
  if (!e.cuda_path)
    fail("--device cuda: experiment '{}' has no CUDA path (it models the host side)", e.name);
  check_device(o);
}

int run_experiment(const Options& o) {
  if (o.experiment == "suite") return run_suite(o);
  const auto& reg = experiment_registry();
  auto it = std::find_if(reg.begin(), reg.end(),
                         [&](const ExperimentEntry& e) { return e.name == o.experiment; });
  if (it == reg.end()) fail("unknown experiment '{}'", o.experiment);
  require_cuda_if_asked(o, *it);
  const ModelConfig model = options_model(o);
  check_drive_option(o, model);
  check_run_outputs(o, {o.out_path()});
  auto rows = load_thresholds(thresholds_path());  // before the work: a bad file costs nothing
  H5Writer file(o.out_path());
  RunInfo::collect(o.command_line, o.seed, model.name).write_to(file);
  file.attr("/", "quick", static_cast<int64_t>(o.quick ? 1 : 0));
  file.attr("/", "tp", static_cast<int64_t>(model.tp));
  Summary summary;
  it->run(o, model, file, summary);
  file.close();
  print_summary(summary, o.experiment);
  print_threshold_table(summary, rows, false);
  // The summary first: if it cannot be written, the result file is not moved into place either.
  if (!o.summary.empty()) write_summary_json(o.summary, summary, &rows);
  file.commit();
  fmt::print("\nwrote {}{}\n", file.path(), o.summary.empty() ? "" : " and " + o.summary);
  return 0;
}

}  // namespace statecheck
