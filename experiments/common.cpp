// What the experiments share: the model, drive, trace and result paths of the options, and
// run_experiment with its threshold table.
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

int run_experiment(const Options& o) {
  if (o.experiment == "suite") return run_suite(o);
  const ExperimentEntry* it = find_experiment(o.experiment);
  if (!it) fail("unknown experiment '{}'", o.experiment);
  require_cuda_if_asked(o, *it);
  const ModelConfig model = options_model(o);
  check_drive_option(o, model);
  check_run_outputs(o, {o.out_path()});
  auto rows = load_thresholds(thresholds_path());  // before the work: a bad file costs nothing
  H5Writer file(o.out_path());
  RunInfo::collect(o.command_line, o.seed, model.name).write_to(file);
  file.attr("/", "quick", static_cast<int64_t>(o.quick ? 1 : 0));
  file.attr("/", "tp", static_cast<int64_t>(model.tp));
  record_drive_file(o, file);
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
