// State files written by another tool (scripts/make_state_fixtures.py: numpy and h5py), read by
// the `states` drive: values recomputed from the generating formula, shape checks against a model
// config, and one-line errors for the truncated and the mislabelled file.
#include <cmath>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/drive/states_file.h"
#include "core/io/hdf5_file.h"
#include "core/io/safetensors.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "tests/h5_read.h"
#include "tests/temp_dir.h"

using namespace statecheck;
namespace fs = std::filesystem;
using statecheck::test_support::read_h5_int_attr;
using statecheck::test_support::TempDir;

namespace {

const std::string kDir = std::string(STATECHECK_TEST_DATA_DIR) + "/states/";

// The fixture formula: state[l, n, h, i, j] = (((l*7 + n*11 + h*3 + i*5 + j) % 17) - 8) / 64.
float expected(int l, int n, int h, int i, int j) {
  return static_cast<float>((((l * 7 + n * 11 + h * 3 + i * 5 + j) % 17) - 8) / 64.0);
}

void expect_states(const std::vector<MultiLayerState>& states, int n_states) {
  ASSERT_EQ(static_cast<int>(states.size()), n_states);
  for (int n = 0; n < n_states; ++n)
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 16; ++j)
            ASSERT_EQ(states[n].head(l, h)[i * 16 + j], expected(l, n, h, i, j))
                << "state " << n << " layer " << l << " head " << h << " [" << i << ", " << j
                << "]";
}

std::string error_of(const std::string& file, const ModelConfig& m) {
  try {
    read_states_file(kDir + file, m);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(StatesFixtures, SafetensorsF32FromNumpy) {
  const ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  expect_states(read_states_file(kDir + "tiny_f32.safetensors", m), 1);
}

TEST(StatesFixtures, SafetensorsBf16WithStateAxisAndAnotherTensorName) {
  const ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  expect_states(read_states_file(kDir + "tiny_n2_bf16.safetensors", m), 2);
}

TEST(StatesFixtures, Hdf5Float64FromH5py) {
  const ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  expect_states(read_states_file(kDir + "tiny_f64.h5", m), 1);
}

TEST(StatesFixtures, TruncatedAndMislabelledFilesAreOneLineErrors) {
  const ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  const std::string truncated = error_of("tiny_truncated.safetensors", m);
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("tiny_truncated.safetensors"), std::string::npos) << truncated;
  const std::string mislabelled = error_of("tiny_mislabelled.safetensors", m);
  EXPECT_NE(mislabelled.find("mislabelled"), std::string::npos) << mislabelled;
  EXPECT_NE(mislabelled.find("labelled F32"), std::string::npos) << mislabelled;
  for (const auto& msg : {truncated, mislabelled}) EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(StatesFixtures, ShapeMismatchNamesTheAxis) {
  // The same file against a model with 4 value heads per shard.
  ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  m.num_value_heads = 4;
  const std::string msg = error_of("tiny_f32.safetensors", m);
  EXPECT_NE(msg.find("2 value heads"), std::string::npos) << msg;
}

namespace {

// A quick codec or chain run on states file `states` with the tiny model; returns the error
// message ("" if the run succeeds) and leaves the result at `out`.
std::string run_on_states(const std::string& experiment, const std::string& states,
                          const std::string& out) {
  Options o;
  o.experiment = experiment;
  o.model = kDir + "model_tiny_gdn.json";
  o.drive = parse_drive("states", states);
  o.quick = true;
  o.threads = 1;
  const ModelConfig m = load_model(o.model);
  try {
    H5Writer file(out);
    Summary summary;
    if (experiment == "codec")
      run_codec(o, m, file, summary);
    else
      run_chain(o, m, file, summary);
    file.commit();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Finite states too large for fp32 arithmetic (3e38: the first decay-and-write step overflows)
// would put inf and NaN into the results; the run stops instead, naming the file and where the
// recurrence overflowed.
TEST(StatesFixtures, StatesThatOverflowTheRecurrenceAreNamed) {
  const TempDir dir("huge_states");
  const std::string huge = dir.file("huge.safetensors");
  TensorToWrite t;
  t.dtype = "F32";
  t.shape = {2, 2, 16, 16};
  t.data.assign(2 * 2 * 16 * 16, 3e38f);
  write_safetensors(huge, {{"state", t}});
  for (const std::string experiment : {"codec", "chain"}) {
    const std::string msg = run_on_states(experiment, huge, dir.file("r.h5"));
    EXPECT_NE(msg.find("states:" + huge + ": sequence 0, layer "), std::string::npos) << msg;
    EXPECT_NE(msg.find("too large for fp32 arithmetic"), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(dir.file("r.h5"))) << experiment;
  }
}

// chain follows one sequence: of a file with N = 2 states it runs the first, and records both
// numbers.
TEST(StatesFixtures, ChainRecordsWhichOfTheFilesStatesItFollows) {
  const TempDir dir("n2_states");
  const std::string out = dir.file("chain.h5");
  ASSERT_EQ(run_on_states("chain", kDir + "tiny_n2_bf16.safetensors", out), "");
  bool found = false, found_followed = false;
  EXPECT_EQ(read_h5_int_attr(out, "chain", "states_in_source", &found), 2);
  EXPECT_EQ(read_h5_int_attr(out, "chain", "state_followed", &found_followed), 0);
  EXPECT_TRUE(found && found_followed) << "the attributes are missing";
}
