// Memory of the state pools and the KV budget (docs/cache_model.md sections 1 and 5), against
// values computed by hand from the models' public configs (docs/numerics.md, "Real model shapes").
#include <cmath>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "core/memory/memory_budget.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "tests/error_of.h"
#include "tests/h5_read.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::read_h5_int_attr;
using statecheck::test_support::read_h5_string_attr;
using statecheck::test_support::read_h5_strings;

namespace {
StateDtypes fp32_states() {
  StateDtypes d;
  d.temporal = Dtype::fp32;
  d.scale = Dtype::fp32;
  return d;
}
}  // namespace

// Qwen3.5-35B-A3B at TP 4: 30 GDN layers, 32 / 4 = 8 value heads of 128 x 128, conv channels
// (2 * 16 * 128 + 32 * 128) / 4 = 2048, W - 1 = 3; 10 full-attention layers with 2 KV heads of 256
// (replicated: 1 per GPU at TP 4).
TEST(Memory, Qwen35SlotBytesByHand) {
  const ModelConfig m = load_model("qwen3.5-35b-a3b", 4);
  const SlotBytes a = active_slot_bytes(m, fp32_states());
  EXPECT_EQ(a.temporal, 30ull * 8 * 128 * 128 * 4);  // 15,728,640
  EXPECT_EQ(a.conv, 30ull * 2048 * 3 * 2);           // 368,640
  EXPECT_EQ(a.scale, 0u);
  const SlotBytes c = checkpoint_slot_bytes(m, fp32_states());
  EXPECT_EQ(c.temporal, 30ull * 8 * 128 * 128);
  EXPECT_EQ(c.scale, 30ull * 8 * 128 * 4);
  EXPECT_EQ(c.conv, a.conv);
  StateDtypes bf = fp32_states();
  bf.temporal = Dtype::bf16;
  bf.scale = Dtype::bf16;
  EXPECT_EQ(active_slot_bytes(m, bf).temporal, 30ull * 8 * 128 * 128 * 2);
  EXPECT_EQ(checkpoint_slot_bytes(m, bf).scale, 30ull * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(m, fp32_states()), 10ull * 2 * 1 * 256 * 2);
}

// Qwen3-Next-80B-A3B at TP 4: 36 GDN layers. SGLang prints the temporal pool in "GB" that are GiB:
// 1351 slots (+ slot 0) of fp32 state are 1352 * 18,874,368 bytes = 23.77 GiB.
TEST(Memory, Qwen3NextPoolInGiB) {
  const ModelConfig m = load_model("qwen3-next-80b-a3b", 4);
  const PoolBytes p = pool_bytes(1351, active_slot_bytes(m, fp32_states()));
  EXPECT_EQ(p.per_slot.temporal, 36ull * 8 * 128 * 128 * 4);
  EXPECT_EQ(p.total.temporal, 1352ull * 18874368);
  EXPECT_NEAR(p.total.temporal / kGiB, 23.77, 0.005);
  EXPECT_EQ(kv_bytes_per_token(m, fp32_states()), 12ull * 2 * 1 * 256 * 2);
}

// Kimi-Linear-48B-A3B at TP 1: 20 KDA layers of 32 heads, conv 3 * 32 * 128 = 12,288 channels;
// 7 MLA layers of 512 + 64 latent values per token.
TEST(Memory, KimiLinearSlotBytesByHand) {
  const ModelConfig m = load_model("kimi-linear-48b-a3b", 1);
  const SlotBytes a = active_slot_bytes(m, fp32_states());
  EXPECT_EQ(a.temporal, 20ull * 32 * 128 * 128 * 4);
  EXPECT_EQ(a.conv, 20ull * 12288 * 3 * 2);
  EXPECT_EQ(kv_bytes_per_token(m, fp32_states()), 7ull * (512 + 64) * 2);
}

TEST(Memory, EngineBudgetOmitsTheCheckpointPoolCorrectBudgetSubtractsIt) {
  const ModelConfig m = load_model("qwen3.5-35b-a3b", 4);
  BudgetInputs in;
  in.gpu_mem_gib = 100.0;
  in.mem_fraction = 0.9;
  in.weights_gib = 10.0;  // rest = 80 GiB exactly
  in.active_slots = 256;
  in.ckpt_slots = 512;
  const Budget b = compute_budget(m, fp32_states(), in);
  const double rest = 80.0 * kGiB;
  EXPECT_DOUBLE_EQ(b.rest_bytes, rest);
  const double act = 16097280.0, ck = 4423680.0, kv = 10240.0;
  EXPECT_EQ(b.kv_tokens_engine, static_cast<int64_t>(std::floor((rest - 256 * act) / kv)));
  EXPECT_EQ(b.kv_tokens_correct,
            static_cast<int64_t>(std::floor((rest - 257 * act - 513 * ck) / kv)));
  EXPECT_EQ(b.active.total.total(), 257ull * 16097280);
  EXPECT_EQ(b.checkpoint.total.total(), 513ull * 4423680);
  // SGLang's automatic active pool: rest * 0.9 / 1.9 / slot bytes.
  in.active_slots = 0;
  in.ckpt_slots = 0;
  const Budget a = compute_budget(m, fp32_states(), in);
  EXPECT_EQ(a.active.slots, static_cast<int64_t>(std::floor(rest * 0.9 / 1.9 / act)));
  EXPECT_TRUE(a.active_from_ratio);
  EXPECT_EQ(a.checkpoint.total.total(), 0u);
}

TEST(Memory, BadInputsAreErrors) {
  const ModelConfig m = load_model("qwen3.5-35b-a3b", 4);
  BudgetInputs in;
  in.weights_gib = 500.0;  // more than the device
  EXPECT_THROW(compute_budget(m, fp32_states(), in), Error);
  in = BudgetInputs();
  in.mem_fraction = 1.5;
  EXPECT_THROW(compute_budget(m, fp32_states(), in), Error);
  StateDtypes d = fp32_states();
  d.temporal = Dtype::int8;  // not a floating-point active state
  EXPECT_THROW(active_slot_bytes(m, d), Error);
}

TEST(Memory, Int8SplitAtEqualMemoryByHand) {
  SlotBytes act, ck;
  act.temporal = 100;
  ck.temporal = 30;
  // (99 + 1) * 100 = 10000 bytes: A = floor((10000 - 100 - 30) / (100 + 60)) = 61, C = 122.
  const Int8Split s = int8_split_at_equal_memory(99, act, ck);
  EXPECT_EQ(s.active, 61);
  EXPECT_EQ(s.ckpt, 122);
  EXPECT_EQ(s.bytes, 62u * 100 + 123u * 30);
  EXPECT_LE(s.bytes, s.budget);
}

// A model without full-attention layers has no KV cache: its KV-token budget is undefined, and the
// refusal says so (it used to divide by zero bytes per token and blame the pool sizes).
TEST(Memory, ModelWithoutKvCacheIsRefusedForWhatItIs) {
  const ModelConfig m = load_model(data_dir() + "/tinylm/config.json", 1);
  ASSERT_EQ(kv_bytes_per_token(m, fp32_states()), 0u);
  const std::string err =
      test_support::error_of([&] { compute_budget(m, fp32_states(), BudgetInputs()); });
  EXPECT_NE(err.find("model 'tinylm-kjv-gdn' has no full-attention layers (no KV cache)"),
            std::string::npos)
      << err;
}

// ---- the memory experiment: the table and plot show the model and TP asked for ---------------

namespace {
struct MemoryRun {
  std::string stdout_text;
  std::string h5;
};

MemoryRun run_memory_experiment(Options o, const test_support::TempDir& dir,
                                const std::string& tag) {
  o.experiment = "memory";
  MemoryRun r;
  r.h5 = dir.file(tag + ".h5");
  H5Writer file(r.h5);
  Summary summary;
  testing::internal::CaptureStdout();
  run_memory(o, load_model(o.model, o.tp), file, summary);
  r.stdout_text = testing::internal::GetCapturedStdout();
  file.commit();
  return r;
}
}  // namespace

// `memory --model qwen3.5-35b-a3b --tp 8`: the first row and the first plotted group are TP 8
// (8 layers' heads: 32 / 8 = 4 value heads per GPU, half the TP 4 slot); no shipped rows unless
// asked for.
TEST(MemoryExperiment, TableAndPlotShowTheAskedModelAndTp) {
  const test_support::TempDir dir("memory_asked");
  Options o;
  o.tp = 8;
  const MemoryRun r = run_memory_experiment(o, dir, "tp8");
  const ModelConfig tp8 = load_model("qwen3.5-35b-a3b", 8);
  const uint64_t slot = active_slot_bytes(tp8, StateDtypes{}).total();
  EXPECT_NE(r.stdout_text.find(fmt::format("{:<22} {:>14}", "qwen3.5-35b-a3b (8)", slot)),
            std::string::npos)
      << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("qwen3.5-35b-a3b (4)"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.stdout_text.find("kimi-linear-48b-a3b"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(read_h5_strings(r.h5, "memory/models"), std::vector<std::string>{"selected"});
  bool found = false;
  EXPECT_EQ(read_h5_int_attr(r.h5, "memory/selected", "tp", &found), 8);
  EXPECT_EQ(read_h5_string_attr(r.h5, "memory/selected", "model", &found), "qwen3.5-35b-a3b");
  EXPECT_EQ(read_hdf5_doubles(r.h5, "memory/selected/active/slot_bytes")[0],
            static_cast<double>(slot));

  // --compare-shipped adds every shipped model at its default TP, after the asked one.
  o.compare_shipped = true;
  const MemoryRun c = run_memory_experiment(o, dir, "compare");
  std::vector<std::string> want = {"selected"};
  for (const std::string& n : shipped_model_names()) want.push_back(n);
  EXPECT_EQ(read_h5_strings(c.h5, "memory/models"), want);
  EXPECT_LT(c.stdout_text.find("qwen3.5-35b-a3b (8)"), c.stdout_text.find("qwen3.5-35b-a3b (4)"));
}

// A user's config (a Hugging Face folder) is the table's row; --weights-gib sets its weights and
// not those of the comparison rows, which keep their own parameter counts.
TEST(MemoryExperiment, UserConfigIsTheRowAndWeightsGibIsItsOnly) {
  const test_support::TempDir dir("memory_user");
  Options o;
  o.model = std::string(STATECHECK_TEST_DATA_DIR) + "/hf_configs/qwen3-next-80b-a3b";
  o.tp = 2;
  o.weights_gib = 12.5;
  o.compare_shipped = true;
  const MemoryRun r = run_memory_experiment(o, dir, "user");
  EXPECT_NE(r.stdout_text.find("qwen3_next (2)"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(read_hdf5_doubles(r.h5, "memory/selected/weights_gib")[0], 12.5);
  for (const std::string& n : shipped_model_names()) {
    const ModelConfig m = load_model(n, 0);
    EXPECT_NEAR(read_hdf5_doubles(r.h5, "memory/" + n + "/weights_gib")[0],
                m.params_billion * 1e9 * 2.0 / m.tp / kGiB, 1e-9)
        << n;
  }
}

// `memory --tp 1 --active-slots 1024`: the error shows the memory for caches, the pool's size and
// the shortfall, each computed here by hand.
TEST(MemoryExperiment, NoMemoryForTheKvCacheShowsTheArithmetic) {
  const ModelConfig m = load_model("qwen3.5-35b-a3b", 1);
  // 30 GDN layers x 32 value heads x 128 x 128 x 4 bytes + 30 x 8192 conv channels x 3 x 2 bytes.
  const double slot = 30.0 * 32 * 128 * 128 * 4 + 30.0 * 8192 * 3 * 2;
  const double rest = 141e9 * 0.88 - 35e9 * 2.0;
  BudgetInputs in;
  in.active_slots = 1024;
  in.ckpt_slots = 2048;
  const std::string err = test_support::error_of([&] { compute_budget(m, StateDtypes{}, in); });
  EXPECT_NE(
      err.find(fmt::format("1024 slots x {:.0f} bytes = {:.2f} GiB", slot, 1024 * slot / kGiB)),
      std::string::npos)
      << err;
  EXPECT_NE(err.find(fmt::format("memory for caches {:.2f} GiB", rest / kGiB)), std::string::npos)
      << err;
  EXPECT_NE(err.find(fmt::format("short by {:.2f} GiB", (1024 * slot - rest) / kGiB)),
            std::string::npos)
      << err;
}
