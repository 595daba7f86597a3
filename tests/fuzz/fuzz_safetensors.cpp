// libFuzzer harness: the safetensors reader (header length, JSON header, offsets, data) on any
// bytes. A statecheck::Error is the expected answer to a bad file; anything else (a crash, a
// sanitizer report, another exception) is a finding.
#include <cstdint>

#include "core/io/safetensors.h"
#include "core/util/error.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = statecheck::fuzz::input_file(data, size, ".safetensors");
  try {
    statecheck::read_safetensors(path);
  } catch (const statecheck::Error&) {
  }
  return 0;
}
