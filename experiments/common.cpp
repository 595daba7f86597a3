#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "core/io/run_info.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "experiments/experiment.h"

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

std::string thresholds_path() {
  return data_dir() + "/thresholds.json";
}

int print_threshold_table(const Summary& summary, std::vector<ThresholdRow>& rows) {
  check_thresholds(summary, rows);
  int failures = 0, shown = 0;
  for (const auto& r : rows) {
    if (!r.present) continue;
    if (shown++ == 0) fmt::print("\nthresholds (data/thresholds.json):\n");
    // Headroom: how much of the limit the value uses (for '<': value/limit, for '>': limit/value).
    double used = std::nan("");
    if (r.op[0] == '<' && r.limit != 0.0)
      used = r.value / r.limit;
    else if (r.op[0] == '>' && r.value != 0.0)
      used = r.limit / r.value;
    fmt::print("  {:4} {:<52} {:>12.4g} {:2} {:<10.4g} {:>5.0f}% of threshold used\n",
               r.pass ? "ok" : "FAIL", r.key, r.value, r.op, r.limit, 100.0 * used);
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
  const auto& reg = experiment_registry();
  auto it = std::find_if(reg.begin(), reg.end(),
                         [&](const ExperimentEntry& e) { return e.name == o.experiment; });
  if (it == reg.end()) fail("unknown experiment '{}'", o.experiment);
  const ModelConfig model = options_model(o);
  H5Writer file(o.out_path());
  RunInfo::collect(o.command_line, o.seed, model.name).write_to(file);
  file.attr("/", "quick", static_cast<int64_t>(o.quick ? 1 : 0));
  file.attr("/", "tp", static_cast<int64_t>(model.tp));
  Summary summary;
  it->run(o, model, file, summary);
  print_summary(summary, o.experiment);
  auto rows = load_thresholds(thresholds_path());
  print_threshold_table(summary, rows);
  if (!o.summary.empty()) write_summary_json(o.summary, summary, &rows);
  fmt::print("\nwrote {}{}\n", file.path(), o.summary.empty() ? "" : " and " + o.summary);
  return 0;
}

}  // namespace statecheck
