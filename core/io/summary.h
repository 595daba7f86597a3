// The flat summary of a run (docs/experiments.md: `--summary FILE.json`) and the regression gate
// against data/thresholds.json.
//
// thresholds.json: {"limits": {"<summary key>": {"op": "<" | ">" | "<=" | ">=", "limit": x,
// "reason": "one line: the numerical claim behind the limit"}}}. A key absent from the summary
// (its experiment did not run in this build or mode) is reported as skipped, not failed; a
// present key that is NaN fails.
#pragma once

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

// Writes the summary as one flat JSON object, plus "thresholds": {key: {limit, op, pass}} for the
// checked rows that were present, through `path.partial` and a rename (a failed write leaves an
// earlier summary untouched). Throws statecheck::Error naming the path on I/O error.
void write_summary_json(const std::string& path, const Summary& summary,
                        const std::vector<ThresholdRow>* rows = nullptr);

}  // namespace statecheck
