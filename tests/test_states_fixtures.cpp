// State files written by another tool (scripts/make_state_fixtures.py: numpy and h5py), read by
// the `states` drive: values recomputed from the generating formula, shape checks against a model
// config, and one-line errors for the truncated and the mislabelled file.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "core/io/states_file.h"
#include "core/model/model_config.h"
#include "core/util/error.h"

using namespace statecheck;

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
