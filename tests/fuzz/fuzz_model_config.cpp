// libFuzzer harness: the model config loader (statecheck schema and Hugging Face config.json,
// then the consistency checks and TP sharding) on any bytes. A statecheck::Error is the expected
// answer; anything else is a finding.
#include <cstdint>

#include "core/model/model_config.h"
#include "core/util/error.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = statecheck::fuzz::input_file(data, size, ".json");
  for (const int tp : {0, 1, 4}) {
    try {
      const statecheck::ModelConfig m = statecheck::load_model(path, tp);
      (void)statecheck::recurrence_shape(m);
      (void)m.kv_heads_shard();
    } catch (const statecheck::Error&) {
    }
  }
  return 0;
}
