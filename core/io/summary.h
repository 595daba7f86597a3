// The flat summary of a run (docs/experiments.md: `--summary FILE.json`) and the regression gate
// against data/thresholds.json.
//
// thresholds.json: {"limits": {"<summary key>": {"op": "<" | ">" | "<=" | ">=", "limit": x,
// "reason": "one line: the numerical claim behind the limit"}}}. A key absent from the summary
// (its experiment did not run in this build or mode) is reported as skipped, not failed; a
// present key that is NaN fails.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace statecheck {

class Summary {
 public:
  void set(const std::string& key, double value) { values_[key] = value; }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  double get(const std::string& key) const;  // throws statecheck::Error when absent
  const std::map<std::string, double>& values() const { return values_; }
  void merge(const Summary& other);

 private:
  std::map<std::string, double> values_;
};

struct ThresholdRow {
  std::string key;
  std::string op;
  double limit = 0.0;
  std::string reason;
  bool present = false;
  double value = 0.0;
  bool pass = true;
};

// Reads the thresholds file ({"limits": {key: {"op", "limit", "reason"}}}); throws
// statecheck::Error naming the file (and the key) when it is not a regular file, not strict JSON
// (text after the value), has a key twice in one object, no or empty 'limits', an empty key, or a
// malformed row (op not one of < > <= >=, limit not a number, reason not a non-empty string, any
// other field).
std::vector<ThresholdRow> load_thresholds(const std::string& path);

// Fills value/present/pass of each row from `summary`.
void check_thresholds(const Summary& summary, std::vector<ThresholdRow>& rows);

// What summary.json says about the run that made it (its "meta" object).
struct SummaryMeta {
  std::string tool_version;
  std::string git_commit;  // commit of the source tree, "-dirty" with changes, or "unknown"
  std::string command_line;
  std::string model;
  int64_t tp = 0;
  uint64_t seed = 0;
  std::string device;       // cpu | cuda
  std::string created_utc;  // ISO 8601, e.g. 2026-12-01T20:30:00Z
  bool quick = false;
};

// The objects written beside the metric keys (all optional).
struct SummaryExtras {
  const SummaryMeta* meta = nullptr;                          // "meta"
  const std::map<std::string, std::string>* units = nullptr;  // "units": key -> unit
  // "renamed": previous-release key -> current key, read for one release.
  const std::map<std::string, std::string>* renamed = nullptr;
};

// Writes the summary as one JSON object: the metric keys (flat, "experiment.what"), "thresholds":
// {key: {limit, op, pass}} for the checked rows that were present, and the objects of `extras`
// ("meta", "units", "renamed"), through `path.partial` and a rename (a failed write leaves an
// earlier summary untouched). Throws statecheck::Error naming the path on I/O error, and if
// `path.partial` exists (write_file_atomically: not replaced).
void write_summary_json(const std::string& path, const Summary& summary,
                        const std::vector<ThresholdRow>* rows = nullptr,
                        const SummaryExtras& extras = {});

}  // namespace statecheck
