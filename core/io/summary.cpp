#include "core/io/summary.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/paths.h"
#include "core/util/error.h"
#include "core/util/json_parse.h"

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
  check_input_file("thresholds file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open thresholds file", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Duplicate keys would let a later entry silently replace an earlier limit: refused, naming the
  // object they repeat in.
  // The JSON parser stops at a NUL byte, which would hide whatever follows it.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    fail("{}: a NUL byte at offset {}: not a JSON text", path, nul);
  JsonRepeatedKey repeated;
  json j;
  try {
    j = parse_json_noting_repeated_keys(text, repeated);  // strict: no text after the JSON value
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  if (repeated.depth > 1)
    fail("{}: key '{}' (in '{}') appears twice in one object", path, repeated.key, repeated.parent);
  if (repeated.depth == 1) fail("{}: key '{}' appears twice in one object", path, repeated.key);
  if (!j.is_object() || !j.contains("limits") || !j["limits"].is_object())
    fail("{}: missing object 'limits'", path);
  if (j["limits"].empty()) fail("{}: 'limits' is empty (the gate would check nothing)", path);
  std::vector<ThresholdRow> rows;
  for (auto it = j["limits"].begin(); it != j["limits"].end(); ++it) {
    const json& r = it.value();
    ThresholdRow row;
    row.key = it.key();
    if (row.key.empty()) fail("{}: a limit has an empty key", path);
    if (!r.is_object() || !r.contains("op") || !r.contains("limit") || !r.contains("reason"))
      fail("{}: limit '{}' needs op, limit and reason", path, row.key);
    for (auto f = r.begin(); f != r.end(); ++f)
      if (f.key() != "op" && f.key() != "limit" && f.key() != "reason")
        fail("{}: limit '{}': unknown field '{}' (a row has op, limit and reason)", path, row.key,
             f.key());
    if (!r["op"].is_string()) fail("{}: limit '{}': 'op' must be a string", path, row.key);
    row.op = r["op"].get<std::string>();
    if (row.op != "<" && row.op != ">" && row.op != "<=" && row.op != ">=")
      fail("{}: limit '{}': op must be <, >, <= or >=", path, row.key);
    if (!r["limit"].is_number()) fail("{}: limit '{}': 'limit' must be a number", path, row.key);
    row.limit = r["limit"].get<double>();
    if (!r["reason"].is_string()) fail("{}: limit '{}': 'reason' must be a string", path, row.key);
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
                        const std::vector<ThresholdRow>* rows, const SummaryExtras& extras) {
  json j = json::object();
  if (const SummaryMeta* m = extras.meta)
    j["meta"] = {{"tool_version", m->tool_version},
                 {"git_commit", m->git_commit},
                 {"command_line", m->command_line},
                 {"model", m->model},
                 {"tp", m->tp},
                 {"seed", m->seed},
                 {"device", m->device},
                 {"created_utc", m->created_utc},
                 {"quick", m->quick}};
  if (extras.units) j["units"] = *extras.units;
  if (extras.renamed) j["renamed"] = *extras.renamed;
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
