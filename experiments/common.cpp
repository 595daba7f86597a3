// What the experiments share: the model, drive, trace and result paths of the options, and
// run_experiment with its threshold table.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/drive/drive.h"
#include "core/drive/states_source.h"
#include "core/io/run_info.h"
#include "core/io/sha256.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "experiments/report_table.h"
#include "experiments/summary_keys.h"

namespace statecheck {

ModelConfig options_model(const Options& o) {
  return load_model(o.model, o.tp);
}

StatesSource options_states_source(const Options& o, const ModelConfig& m) {
  const DriveSpec drive = o.drive ? *o.drive : default_drive(m);
  return StatesSource::resolve(drive, o.seed, m,
                               drive.kind == DriveKind::tinylm ? tinylm_config_for(o.model) : "");
}

std::string trace_path(const Options& o) {
  return o.trace.empty() ? data_dir() + "/traces/mooncake_conversation_trace.jsonl" : o.trace;
}

std::vector<InputPath> run_inputs(const Options& o) {
  std::vector<InputPath> in;
  if (o.drive && o.drive->kind == DriveKind::states)
    in.push_back({"--states", o.drive->states_file});
  if (o.drive && o.drive->kind == DriveKind::inputs)
    in.push_back({"--inputs", o.drive->inputs_file});
  if (!o.trace.empty()) in.push_back({"--trace", o.trace});
  std::error_code ec;
  if (std::filesystem::is_regular_file(o.model, ec)) in.push_back({"--model", o.model});
  // A model folder (the Hugging Face layout): its config.json is the input.
  const std::string in_folder = (std::filesystem::path(o.model) / "config.json").string();
  if (std::filesystem::is_directory(o.model, ec) && std::filesystem::is_regular_file(in_folder, ec))
    in.push_back({"--model", in_folder});
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

void record_drive_file(const Options& o, H5Writer& file) {
  if (!o.drive) return;
  const std::string* path = o.drive->kind == DriveKind::inputs   ? &o.drive->inputs_file
                            : o.drive->kind == DriveKind::states ? &o.drive->states_file
                                                                 : nullptr;
  if (!path) return;
  const std::string prefix = o.drive->kind == DriveKind::inputs ? "inputs" : "states";
  file.attr("/", prefix + "_file", *path);
  file.attr("/", prefix + "_sha256", file_sha256(*path));
}

void check_drive_option(const Options& o, const ModelConfig& m) {
  if (o.drive) check_drive_matches_model(*o.drive, m);
}

std::string thresholds_path() {
  return data_dir() + "/thresholds.json";
}

namespace {
// The thresholds file as the verdict names it: data/thresholds.json for the checkout's own, else
// the path read (STATECHECK_DATA_DIR).
std::string thresholds_label() {
  return data_dir() == std::string(STATECHECK_SOURCE_DIR) + "/data" ? "data/thresholds.json"
                                                                    : thresholds_path();
}
}  // namespace

std::string threshold_margin(const ThresholdRow& r) {
  // How far the value lies from the limit, relative to the limit, and on which side (an upper
  // bound passes below it, a lower bound above it); under 1% with two digits, so that a row
  // failing by a hair does not read "0%".
  if (r.limit == 0.0 || !std::isfinite(r.value))
    return "(limit is 0 or value not finite: no margin)";
  const double pct = 100.0 * std::fabs(r.value - r.limit) / std::fabs(r.limit);
  const char* side = r.value < r.limit ? "below" : "above";
  return r.value == r.limit ? std::string("at the limit")
         : pct >= 1.0       ? fmt::format("{:>5.0f}% {} the limit", pct, side)
                            : fmt::format("{:>5.2g}% {} the limit", pct, side);
}

int print_threshold_verdict(const std::vector<std::pair<std::string, Summary>>& experiments,
                            const std::vector<ThresholdRow>& rows) {
  int failures = 0;
  ReportTable table(
      fmt::format("thresholds ({}) per experiment; --verbose lists every row:", thresholds_label()),
      {"experiment", "limits", "hold", "closest to its limit", "margin"});
  table.align_left(3);
  table.align_left(4);
  for (const auto& [name, s] : experiments) {
    int checked = 0, hold = 0;
    const ThresholdRow* closest = nullptr;
    double closest_pct = 0;
    for (const ThresholdRow& r : rows) {
      if (!r.present || !s.has(r.key)) continue;
      ++checked;
      hold += r.pass;
      failures += !r.pass;
      if (r.limit == 0.0 || !std::isfinite(r.value)) continue;
      const double pct = std::fabs(r.value - r.limit) / std::fabs(r.limit);
      if (!closest || pct < closest_pct) closest = &r, closest_pct = pct;
    }
    std::string margin = closest ? threshold_margin(*closest) : "-";
    margin.erase(0, margin.find_first_not_of(' '));
    table.add_row({name, std::to_string(checked), std::to_string(hold),
                   closest ? closest->key : "-", margin});
  }
  fmt::print("\n");
  table.print();
  for (const ThresholdRow& r : rows)
    if (r.present && !r.pass)
      fmt::print("  FAIL {} = {:.6g}, limit {} {:.6g}: {}\n", r.key, r.value, r.op, r.limit,
                 r.reason);
  return failures;
}

int print_threshold_table(const Summary& summary, std::vector<ThresholdRow>& rows, bool gate) {
  check_thresholds(summary, rows);
  int failures = 0, shown = 0;
  for (const auto& r : rows) {
    if (!r.present) continue;
    if (shown++ == 0)
      fmt::print("\nthresholds ({}{}):\n", thresholds_label(),
                 gate ? ""
                      : "; for reference, not a gate: only `statecheck suite` exits 1 on a "
                        "failing row");
    const std::string headroom = threshold_margin(r);
    fmt::print("  {:4} {:<52} {:>12.4g} {:2} {:<10.4g} {}\n", r.pass ? "ok" : "FAIL", r.key,
               r.value, r.op, r.limit, headroom);
    if (!r.pass) {
      ++failures;
      fmt::print("       reason for the limit: {}\n", r.reason);
    }
  }
  return failures;
}

int run_experiment(const Options& o) {
  if (o.experiment == "suite") return run_suite(o);
  const ExperimentEntry* it = find_experiment(o.experiment);
  if (!it) fail("unknown experiment '{}'", o.experiment);
  require_cuda_if_asked(o, *it);
  const ModelConfig model = options_model(o);
  check_drive_option(o, model);
  const std::string out = o.out_path();  // once: the default name carries the time
  check_run_outputs(o, {out});
  auto rows = load_thresholds(thresholds_path());  // before the work: a bad file costs nothing
  upgrade_threshold_keys(rows);
  H5Writer file(out);
  const RunInfo info = RunInfo::collect(o.command_line, o.seed, model.name);
  info.write_to(file);
  file.attr("/", "quick", static_cast<int64_t>(o.quick ? 1 : 0));
  file.attr("/", "tp", static_cast<int64_t>(model.tp));
  record_drive_file(o, file);
  Summary measured;
  it->run(o, model, file, measured);
  const Summary summary = with_experiment_prefix(o.experiment, measured);
  file.close();
  if (o.verbose)
    fmt::print("\n{}", render_summary_keys(summary, o.experiment + " summary"));
  else
    fmt::print("\n{}: {} summary keys (--verbose prints them{})\n", o.experiment,
               summary.values().size(),
               o.summary.empty() ? "; --summary FILE.json writes them" : "");
  // capacity's limits are derived for the suite's pools (A 256, C 512); with other pools they do
  // not apply, and capacity's own reference rows (computed from the pools it ran) stand instead.
  if (o.experiment == "capacity" &&
      !(o.active_slots == 256 && (o.ckpt_slots == -1 || o.ckpt_slots == 512))) {
    rows.erase(
        std::remove_if(rows.begin(), rows.end(),
                       [](const ThresholdRow& r) { return r.key.rfind("capacity.", 0) == 0; }),
        rows.end());
    fmt::print(
        "\nthresholds: capacity's limits assume --active-slots 256 --ckpt-slots 512 and are not "
        "shown for A = {}, C = {}; see the reference rows above\n",
        o.active_slots, o.ckpt_slots == -1 ? 2 * o.active_slots : o.ckpt_slots);
  }
  print_threshold_table(summary, rows, false);
  // The summary first: if it cannot be written, the result file is not moved into place either.
  if (!o.summary.empty()) write_run_summary(o.summary, summary, rows, info, model.tp, o);
  file.commit();
  fmt::print("\nwrote {}{}\n", file.path(), o.summary.empty() ? "" : " and " + o.summary);
  return 0;
}

}  // namespace statecheck
