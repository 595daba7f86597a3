#include "core/io/summary.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/io/paths.h"
#include "core/util/error.h"

namespace statecheck {

using nlohmann::json;

double Summary::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) fail("summary has no key '{}'", key);
  return it->second;
}

void Summary::merge(const Summary& other) {
  for (const auto& [k, v] : other.values_) values_[k] = v;
}

std::vector<ThresholdRow> load_thresholds(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open thresholds file", path);
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  if (!j.contains("limits") || !j["limits"].is_object()) fail("{}: missing object 'limits'", path);
  std::vector<ThresholdRow> rows;
  for (auto it = j["limits"].begin(); it != j["limits"].end(); ++it) {
    const json& r = it.value();
    ThresholdRow row;
    row.key = it.key();
    if (!r.is_object() || !r.contains("op") || !r.contains("limit") || !r.contains("reason"))
      fail("{}: limit '{}' needs op, limit and reason", path, row.key);
    row.op = r["op"].get<std::string>();
    if (row.op != "<" && row.op != ">" && row.op != "<=" && row.op != ">=")
      fail("{}: limit '{}': op must be <, >, <= or >=", path, row.key);
    if (!r["limit"].is_number()) fail("{}: limit '{}': 'limit' must be a number", path, row.key);
    row.limit = r["limit"].get<double>();
    row.reason = r["reason"].get<std::string>();
    if (row.reason.empty()) fail("{}: limit '{}' has an empty reason", path, row.key);
    rows.push_back(row);
  }
  return rows;
}

void check_thresholds(const Summary& summary, std::vector<ThresholdRow>& rows) {
  for (auto& row : rows) {
    row.present = summary.has(row.key);
    if (!row.present) {
      row.pass = true;
      continue;
    }
    row.value = summary.get(row.key);
    const double v = row.value, x = row.limit;
    if (std::isnan(v))
      row.pass = false;
    else if (row.op == "<")
      row.pass = v < x;
    else if (row.op == ">")
      row.pass = v > x;
    else if (row.op == "<=")
      row.pass = v <= x;
    else
      row.pass = v >= x;
  }
}

void write_summary_json(const std::string& path, const Summary& summary,
                        const std::vector<ThresholdRow>* rows) {
  json j = json::object();
  for (const auto& [k, v] : summary.values()) {
    if (std::isfinite(v))
      j[k] = v;
    else
      j[k] = std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  }
  if (rows) {
    json t = json::object();
    for (const auto& r : *rows)
      if (r.present) t[r.key] = {{"limit", r.limit}, {"op", r.op}, {"pass", r.pass}};
    j["thresholds"] = t;
  }
  write_file_atomically(path, j.dump(2) + "\n");
}

}  // namespace statecheck
