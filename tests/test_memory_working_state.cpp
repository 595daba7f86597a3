// `memory`'s pools when the working state is kept in a working-state format
// (docs/experiments.md, "memory"): slot bytes by hand from Qwen3.5-35B-A3B's shape at TP 4.
#include <gtest/gtest.h>

#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "experiments/experiment.h"
#include "experiments/options.h"
#include "tests/temp_dir.h"

using namespace statecheck;

// 30 GDN layers x 8 value heads x 128 x 128 = 3,932,160 elements per slot, conv 30 x 2048 x 3 x 2
// = 368,640 bytes. int8 with fp32 scales: 1 + 4/128 bytes per element; int8-ef-int4: 1 + 4/128 +
// 0.5 + 4/128; bf16: 2.
TEST(MemoryWorkingState, SlotBytesByHandAndKvBudgetOrder) {
  const Options o = parse_command_line({"statecheck", "memory"}).options;
  const ModelConfig m = options_model(o);
  test_support::TempDir tmp("memory_working_state");
  Summary summary;
  {
    H5Writer file(tmp.file("memory.h5"));
    run_memory(o, m, file, summary);
    file.commit();
  }
  const double elements = 30.0 * 8 * 128 * 128, conv = 30.0 * 2048 * 3 * 2;
  EXPECT_DOUBLE_EQ(summary.get("memory.working_state.fp32.slot_bytes"), elements * 4 + conv);
  EXPECT_DOUBLE_EQ(summary.get("memory.working_state.bf16.slot_bytes"), elements * 2 + conv);
  EXPECT_DOUBLE_EQ(summary.get("memory.working_state.int8.slot_bytes"),
                   elements * (1 + 4.0 / 128) + conv);
  EXPECT_DOUBLE_EQ(summary.get("memory.working_state.int8-ef-int4.slot_bytes"),
                   elements * (1.5 + 8.0 / 128) + conv);
  EXPECT_DOUBLE_EQ(summary.get("memory.working_state.int8.slots_per_gib"),
                   1073741824.0 / (elements * (1 + 4.0 / 128) + conv));
  // Smaller slots leave more memory to the KV cache.
  EXPECT_GT(summary.get("memory.working_state.int8.kv_tokens_correct"),
            summary.get("memory.working_state.bf16.kv_tokens_correct"));
  EXPECT_GT(summary.get("memory.working_state.bf16.kv_tokens_correct"),
            summary.get("memory.working_state.fp32.kv_tokens_correct"));
}
