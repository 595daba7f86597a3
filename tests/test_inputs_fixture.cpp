// The committed real-model fixture (tests/data/inputs/, written on a machine with PyTorch and
// transformers by `scripts/crosscheck.py --fixture`, docs/real_models.md): recurrence inputs
// captured from a randomly initialised transformers model, with that model's own recurrence outputs
// and final states. statecheck's fp64 reference on the inputs must reproduce them.
//
// Tolerance, derived: the exporting model runs in float32, so the stored outputs and states carry
// fp32 rounding only. Each of the T steps adds at most about d_k roundings of relative size 2^-24
// to every state entry (the decay, the dot product k.S and the rank-1 update), and the recurrence
// does not amplify earlier errors (its transition diag(exp g) (I - beta k k^T) has norm <= 1 for
// g <= 0, beta in [0, 1] and unit keys). So the relative error of the states, and of the outputs
// read from them, is at most about T d_k 2^-24.
#include <cmath>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/drive/drive.h"
#include "core/drive/inputs_file.h"
#include "core/io/safetensors.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "experiments/experiment.h"
#include "tests/temp_dir.h"

using namespace statecheck;

namespace {
const std::string kFixtureDir = std::string(STATECHECK_TEST_DATA_DIR) + "/inputs/";
const std::string kFixture = kFixtureDir + "qwen3_next_tiny.safetensors";
const std::string kModel = kFixtureDir + "qwen3_next_tiny.model.json";
}  // namespace

TEST(InputsFixture, StatecheckReproducesTransformersOutputsAndFinalStates) {
  if (!std::filesystem::exists(kFixture) && !std::filesystem::exists(kModel))
    GTEST_SKIP() << kFixture
                 << " is absent: generate it with `scripts/crosscheck.py --fixture` on a machine "
                    "with PyTorch and transformers (docs/real_models.md)";
  ASSERT_TRUE(std::filesystem::exists(kFixture)) << kFixture << " missing beside " << kModel;
  ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " missing beside " << kFixture;
  const auto meta = safetensors_metadata(kFixture);
  ASSERT_EQ(meta.count("compute_dtype"), 1u);
  ASSERT_EQ(meta.at("compute_dtype"), "float32") << "the tolerance below assumes an fp32 export";
  const ModelConfig m = load_model(kModel);
  const InputsFile f(kFixture, m);
  ASSERT_TRUE(f.has_reference());
  Options o;
  o.experiment = "reference";
  o.drive = parse_drive("inputs", "", kFixture);
  o.threads = 2;
  const test_support::TempDir dir("inputs_fixture");
  H5Writer file(dir.file("reference.h5"));
  Summary s;
  run_reference(o, m, file, s);  // also refuses a stored final state that never moved
  const double tol = f.tokens() * f.shape().dk * std::ldexp(1.0, -24);
  const double out = s.get("reference.file_vs_fp64.output_relerr_layer_max");
  const double state = s.get("reference.file_vs_fp64.final_state_relerr_layer_max");
  std::printf(
      "fixture: T %d, d_k %d: outputs %.3g, final states %.3g of tolerance %.3g (%.0f%%, %.0f%%)\n",
      f.tokens(), f.shape().dk, out, state, tol, 100 * out / tol, 100 * state / tol);
  EXPECT_LT(out, tol);
  EXPECT_LT(state, tol);
  // Not vacuous: a state that moved, and outputs that are not all zero.
  EXPECT_GT(s.get("reference.fp32_vs_fp64.output_relerr"), 0.0);
}
