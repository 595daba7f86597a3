// Summary keys (docs/experiments.md, "Result files"): every key carries its experiment's prefix,
// each gets a unit, and the names of the previous release are mapped to the current ones.
//
// Prefix rule (with_experiment_prefix): a key an experiment sets without its own name first gets
// it; a GPU-path key "cuda.<experiment>.x" becomes "<experiment>.cuda.x" and any other "cuda.x"
// "<experiment>.cuda.x". So codec's "int8.state_relerr" is "codec.int8.state_relerr", its
// "cuda.int8.decode_relerr" "codec.cuda.int8.decode_relerr", chain's "cuda.chain.relerr_n1"
// "chain.cuda.relerr_n1". The previous names are read for one release (current_summary_key): the
// threshold gate and scripts/compare_summaries.py accept both, and summary.json lists them under
// "renamed".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/io/run_info.h"
#include "core/io/summary.h"
#include "experiments/options.h"

namespace statecheck {

// `s` with every key given the prefix of `experiment` (the rule above).
Summary with_experiment_prefix(const std::string& experiment, const Summary& s);

// The current name of a key of the previous release: a key whose first part names a codec
// (fp32, bf16, int8, int8_bf16_scale, fp8_e4m3, fp8_e4m3_raw, ...) gets "codec.", "cuda.chain.x"
// becomes "chain.cuda.x", any other "cuda.x" "codec.cuda.x"; every other key is returned as is.
std::string current_summary_key(const std::string& key);

// Threshold rows whose key is a previous-release name get the current name (a user's own
// thresholds file keeps working for one release).
void upgrade_threshold_keys(std::vector<ThresholdRow>& rows);

// For the keys of `s` that current_summary_key would rename if written the old way: old -> new.
std::map<std::string, std::string> renamed_keys(const Summary& s);

// The unit of a summary key from its name's last part ("GiB", "bytes", "tokens", "nats",
// "GB/s", "s", "ms", "1" for ratios, fractions and relative errors, ...); "" for a key no rule
// covers (it is then left out of the units map).
std::string summary_key_unit(const std::string& key);

// The units map of the keys of `s` that have a unit.
std::map<std::string, std::string> summary_units(const Summary& s);

// Writes the summary JSON of a run (write_summary_json) with its "meta" (from `info`, the model's
// TP and the options' device and protocol), "units" (summary_units) and "renamed" (renamed_keys).
void write_run_summary(const std::string& path, const Summary& summary,
                       const std::vector<ThresholdRow>& rows, const RunInfo& info, int tp,
                       const Options& o);

}  // namespace statecheck
