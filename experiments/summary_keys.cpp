#include "experiments/summary_keys.h"

#include <utility>

#include "core/codec/codec.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether `name` is a codec name the experiments report under (parse_codec accepts it).
bool is_codec_name(const std::string& name) {
  try {
    parse_codec(name);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

Summary with_experiment_prefix(const std::string& experiment, const Summary& s) {
  const std::string own = experiment + ".", gpu = "cuda.", gpu_own = "cuda." + experiment + ".";
  Summary out;
  for (const auto& [k, v] : s.values()) {
    if (starts_with(k, own))
      out.set(k, v);
    else if (starts_with(k, gpu_own))
      out.set(own + "cuda." + k.substr(gpu_own.size()), v);
    else
      out.set(own + k, v);
  }
  return out;
}

std::string current_summary_key(const std::string& key) {
  if (starts_with(key, "cuda.chain.")) return "chain.cuda." + key.substr(11);
  if (starts_with(key, "cuda.")) return "codec." + key;
  const std::string first = key.substr(0, key.find('.'));
  if (first != key && is_codec_name(first)) return "codec." + key;
  return key;
}

void upgrade_threshold_keys(std::vector<ThresholdRow>& rows) {
  for (ThresholdRow& r : rows) r.key = current_summary_key(r.key);
}

std::map<std::string, std::string> renamed_keys(const Summary& s) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : s.values()) {
    (void)v;
    std::string old;
    if (starts_with(k, "codec.cuda."))
      old = k.substr(6);
    else if (starts_with(k, "chain.cuda."))
      old = "cuda.chain." + k.substr(11);
    else if (starts_with(k, "codec."))
      old = k.substr(6);
    if (!old.empty() && current_summary_key(old) == k) out[old] = k;
  }
  return out;
}

std::string summary_key_unit(const std::string& key) {
  const std::string last = key.substr(key.rfind('.') + 1);
  const auto has = [&](const char* part) { return last.find(part) != std::string::npos; };
  if (ends_with(last, "_gib")) return "GiB";
  // Then ratios: "a_over_b" is a ratio whatever a and b are.
  if (has("_over_") || has("_minus_") || has("ratio") || has("fraction") || has("_frac") ||
      has("share") || has("rate") || has("reuse") || has("agreement"))
    return "1";
  if (has("relerr")) return "1 (relative Frobenius error)";
  if (ends_with(last, "gbps")) return "GB/s";
  if (ends_with(last, "gflops")) return "GFLOP/s";
  if (ends_with(last, "tokens_per_s")) return "tokens/s";
  if (ends_with(last, "_ms")) return "ms";
  if (ends_with(last, "rps")) return "requests/s";
  if (ends_with(last, "_s")) return "s";
  if (has("bytes_per_token")) return "bytes per token";
  if (has("bits_per_byte")) return "bits per byte";
  if (has("bytes")) return "bytes";
  if (has("nats")) return "nats";
  if (key.find(".kv_tokens.") != std::string::npos) return "tokens";
  if (ends_with(last, "slots")) return "slots";
  if (last == "cacheable_states") return "states";
  if (last == "knee_K") return "distinct prefixes";
  if (last == "requests") return "requests";
  if (last == "codec_mismatches") return "heads";
  if (last == "reference_mismatches" || last == "reference_compared") return "elements";
  if (last == "max_abs_err") return "state units";
  if (last == "dequant_loads" || last == "quantizes" || last == "wasted_quantizes" ||
      last == "evictions" || last == "state_hits")
    return "count";
  return "";
}

std::map<std::string, std::string> summary_units(const Summary& s) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : s.values()) {
    (void)v;
    const std::string u = summary_key_unit(k);
    if (!u.empty()) out[k] = u;
  }
  return out;
}

void write_run_summary(const std::string& path, const Summary& summary,
                       const std::vector<ThresholdRow>& rows, const RunInfo& info, int tp,
                       const Options& o) {
  SummaryMeta meta;
  meta.tool_version = info.tool_version;
  meta.git_commit = info.git_commit;
  meta.command_line = info.command_line;
  meta.model = info.model;
  meta.tp = tp;
  meta.seed = info.seed;
  meta.device = device_name(o.device);
  meta.created_utc = info.created_utc;
  meta.quick = o.quick;
  const auto units = summary_units(summary);
  const auto renamed = renamed_keys(summary);
  write_summary_json(path, summary, &rows, SummaryExtras{&meta, &units, &renamed});
}

}  // namespace statecheck
