// `statecheck suite`: every experiment the build supports, one result file each
// (results/<experiment>.h5), one merged summary (results/summary.json), the plots
// (results/plots/*.png, scripts/plot.py) and the regression gate against data/thresholds.json:
// exit 1, with the failing rows printed, when a limit breaks. Each experiment prints its own
// compact table; the verdict (per experiment, then the failing rows) comes last. The summary keys
// go to the summary file and, with --verbose, to stdout with the whole threshold table.
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "core/io/paths.h"
#include "core/io/run_info.h"
#include "core/memory/memory_budget.h"
#include "core/util/error.h"
#include "core/workloads/mooncake_trace.h"
#include "experiments/cache_common.h"
#include "experiments/experiment.h"
#include "experiments/report_table.h"
#include "experiments/summary_keys.h"

extern char** environ;

namespace statecheck {

namespace {

// Draws the plots with Debian's python3 (matplotlib + h5py). A missing interpreter or module is
// reported, never hidden; it does not fail the suite (the numbers are in the HDF5 files).
void make_plots(const std::string& dir, const std::string& summary_path) {
  if (const char* off = std::getenv("STATECHECK_NO_PLOTS"); off && *off) {
    fmt::print("plots: skipped (STATECHECK_NO_PLOTS is set)\n");
    return;
  }
  const std::string script = std::string(STATECHECK_SOURCE_DIR) + "/scripts/plot.py";
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  // Arguments are passed as a vector (no shell), so any directory name is safe.
  std::vector<std::string> args = {python, script};
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".h5") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  args.insert(args.end(), files.begin(), files.end());
  args.push_back(summary_path);  // for the one-page summary figure
  args.push_back("--out");
  args.push_back(dir + "/plots");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  fmt::print("plots: {} {} <{} result files> {} --out {}/plots\n", python, script, files.size(),
             summary_path, dir);
  std::fflush(stdout);
  pid_t pid = 0;
  int status = -1;
  const int spawn = posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  if (spawn == 0) waitpid(pid, &status, 0);
  const bool ok = spawn == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok)
    fmt::print(
        "plots: NOT drawn ({}); install python3-matplotlib and python3-h5py (scripts/setup.sh), "
        "then run scripts/plot.py {}/*.h5 {} --out {}/plots\n",
        spawn != 0 ? fmt::format("cannot start {}: {}", python, std::strerror(spawn))
                   : fmt::format("exit status {}", WIFEXITED(status) ? WEXITSTATUS(status) : -1),
        dir, summary_path, dir);
}

}  // namespace

Options suite_experiment_options(const Options& base, const ExperimentEntry& e,
                                 const std::string& dir) {
  Options o = base;
  if (!e.cuda_path) o.device = Device::cpu;
  // An experiment on its own model (kl: the shipped tiny language model on its own text) gets
  // neither the suite's model (a serving model: run_suite refuses others) nor the options it
  // refuses (kl: --drive); those are for the other experiments.
  if (e.own_model) o.model_given = false;
  for (const OptionNote& r : e.refuses) reset_option(o, r.option);
  o.experiment = e.name;
  o.out = dir + "/" + e.name + ".h5";
  // The policy comparison (docs/cache_policies.md): capacity runs every eviction policy side by
  // side unless --policy chose others (about a second in --quick; lru's keys are unchanged).
  if (e.name == "capacity" && o.policies == std::vector<PolicyKind>{PolicyKind::lru})
    o.policies = all_policies();
  return o;
}

int run_suite(const Options& base) {
  const std::string dir = base.out.empty() ? "results" : base.out;
  {
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
      fail("--out {}: suite writes a directory of results, and this is a file", dir);
  }
  const std::string summary_path = base.summary.empty() ? dir + "/summary.json" : base.summary;
  const ModelConfig model = options_model(base);
  check_drive_option(base, model);
  if (base.drive && base.drive->kind == DriveKind::tinylm)
    fail(
        "suite: --drive tinylm runs on the tiny language model, which has no KV cache for memory, "
        "capacity, firecount and replay; run codec or chain with --drive tinylm (kl always runs "
        "the tiny model)");
  if (model.full_layer_count() == 0)
    fail(
        "suite: model {} has no full-attention layers (no KV cache); memory, capacity, firecount "
        "and replay model a hybrid serving model. Run codec or chain on it alone, or give suite a "
        "serving model (--model, data/models/)",
        model.name);
  // The pool sizes of capacity, firecount and replay against the memory budget, before any work.
  kv_tokens_for_pools(
      compute_budget(model, options_dtypes(base), options_budget_inputs(base, true)), model);
  replay_pools(base, model);
  {
    // Every file the suite will write, checked before any work (check_run_outputs).
    Options o = base;
    o.summary = summary_path;
    std::vector<std::string> outs;
    for (const auto& e : experiment_registry())
      if (e.in_suite) outs.push_back(dir + "/" + e.name + ".h5");
    check_run_outputs(o, outs);
  }
  // The trace too, before the experiments that run ahead of replay (a bad line fails in seconds).
  for (const auto& e : experiment_registry())
    if (e.in_suite && e.name == "replay")
      load_mooncake_trace(trace_path(base), base.trace_bad_lines, base.trace_max_tokens);
  auto rows = load_thresholds(thresholds_path());  // before the work: a bad file costs nothing
  upgrade_threshold_keys(rows);
  // Removed again (if empty) when the suite fails; kept once its files are committed.
  CreatedDirectories result_dir("--out " + dir, dir);
  Summary all;
  std::vector<std::pair<std::string, Summary>> per_experiment;  // for the verdict
  fmt::print("suite: model {} at TP {}, {} protocol, results in {}/\n", model.name, model.tp,
             base.quick ? "quick" : "full", dir);
  if (base.device == Device::cuda) {
    // Fail before any work when no GPU can be used; experiments without a CUDA path run on the CPU.
    for (const auto& e : experiment_registry())
      if (e.in_suite && e.cuda_path) require_cuda_if_asked(base, e);
  }
  // Each experiment's file is closed when it is done and all are moved into place only after the
  // last one and the summary succeed: a failing experiment leaves every earlier result untouched.
  std::vector<std::unique_ptr<H5Writer>> files;
  for (const auto& e : experiment_registry()) {
    if (!e.in_suite) continue;
    const Options o = suite_experiment_options(base, e, dir);
    if (e.own_model && base.model_given)
      fmt::print("{}: runs the shipped tiny language model; --model {} applies to the others\n",
                 e.name, base.model);
    fmt::print("\n==== {} : {}\n", e.name, e.description);
    files.push_back(std::make_unique<H5Writer>(o.out));
    H5Writer& file = *files.back();
    RunInfo::collect(o.command_line, o.seed, model.name).write_to(file);
    file.attr("/", "quick", static_cast<int64_t>(o.quick ? 1 : 0));
    file.attr("/", "tp", static_cast<int64_t>(model.tp));
    record_drive_file(o, file);
    Summary measured;
    e.run(o, model, file, measured);
    const Summary s = with_experiment_prefix(e.name, measured);
    file.close();
    if (o.verbose) fmt::print("{}", render_summary_keys(s, e.name + " summary keys"));
    all.merge(s);
    per_experiment.emplace_back(e.name, s);
  }
  check_thresholds(all, rows);
  write_run_summary(summary_path, all, rows,
                    RunInfo::collect(base.command_line, base.seed, model.name), model.tp, base);
  for (auto& f : files) f->commit();
  result_dir.keep();
  fmt::print("\nwrote {}/*.h5 and {} ({} summary keys{})\n", dir, summary_path, all.values().size(),
             base.verbose ? "" : "; --verbose prints them");
  make_plots(dir, summary_path);
  if (base.verbose) print_threshold_table(all, rows, true);
  const int failures = print_threshold_verdict(per_experiment, rows);
  int skipped = 0;
  std::string unmeasured;
  for (const auto& r : rows)
    if (!r.present) unmeasured += (skipped++ ? ", " : "") + r.key;
  // Named, so that a misspelled key (a limit that can never be measured) shows.
  if (skipped)
    fmt::print("  ({} limits not measured by this build or protocol: {})\n", skipped, unmeasured);
  if (failures > 0) {
    fmt::print("\nsuite: {} of {} measured thresholds FAILED (rows above)\n", failures,
               static_cast<int>(rows.size()) - skipped);
    return 1;
  }
  fmt::print("\nsuite: all {} measured thresholds hold\n", static_cast<int>(rows.size()) - skipped);
  return 0;
}

}  // namespace statecheck
