// libFuzzer harness: the thresholds file loader (data/thresholds.json's format) on any bytes,
// and the gate over an empty summary. A statecheck::Error is the expected answer; anything else
// is a finding.
#include <cstdint>

#include "core/io/summary.h"
#include "core/util/error.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = statecheck::fuzz::input_file(data, size, ".json");
  try {
    std::vector<statecheck::ThresholdRow> rows = statecheck::load_thresholds(path);
    statecheck::Summary empty;
    statecheck::check_thresholds(empty, rows);
  } catch (const statecheck::Error&) {
  }
  return 0;
}
