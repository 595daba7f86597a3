// States files (core/drive/states_file.h): safetensors and HDF5 files written here and by another
// tool (scripts/make_state_fixtures.py: numpy and h5py), with the values recomputed from the
// generating formula, shape checks against a model config, and one-line errors for the truncated
// and the mislabelled file.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "core/drive/states_file.h"
#include "core/io/hdf5_file.h"
#include "core/io/safetensors.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "tests/error_of.h"
#include "tests/h5_write.h"
#include "tests/temp_dir.h"
#include "tests/tensor_pattern.h"

using namespace statecheck;
using statecheck::test_support::error_of;
using statecheck::test_support::temp_path;
namespace fs = std::filesystem;
using statecheck::test_support::pattern;
using statecheck::test_support::write_h5_dataset;

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

// The message of reading fixture `file` against `m` ("" when it reads); error_of(f) of
// tests/error_of.h is the one for a call.
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

TEST(StatesFile, ShapeChecksAgainstTheModel) {
  const ModelConfig m = load_model("qwen3.5-35b-a3b", 4);  // 30 layers, 8 heads, 128 x 128
  const std::string good = temp_path("good.safetensors");
  write_safetensors(good, {{"state", pattern({30, 2, 8, 128, 128}, "BF16")}});
  const auto states = read_states_file(good, m);
  ASSERT_EQ(states.size(), 2u);
  // [L, N, HV, dv, dk]: state n=1, layer 3, head 5, (7, 9)
  const size_t flat = (((3 * 2 + 1) * 8 + 5) * 128 + 7) * 128 + 9;
  EXPECT_EQ(states[1].head(3, 5)[7 * 128 + 9], pattern({30, 2, 8, 128, 128}, "BF16").data[flat]);

  const std::string wrong_heads = temp_path("heads.safetensors");
  write_safetensors(wrong_heads, {{"state", pattern({30, 32, 128, 128}, "F32")}});
  const std::string msg = error_of([&] { read_states_file(wrong_heads, m); });
  EXPECT_NE(msg.find("32 value heads"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--tp 1"), std::string::npos) << msg;
  const std::string wrong_layers = temp_path("layers.safetensors");
  write_safetensors(wrong_layers, {{"state", pattern({29, 8, 128, 128}, "F32")}});
  EXPECT_NE(error_of([&] { read_states_file(wrong_layers, m); }).find("29 layers"),
            std::string::npos);
}

TEST(Hdf5, StatesFileFromHdf5) {
  const ModelConfig m = load_model("kimi-linear-48b-a3b", 4);  // 20 layers, 8 heads
  const std::string path = temp_path("states.h5");
  {
    H5Writer w(path);
    std::vector<double> data(size_t(20) * 8 * 128 * 128);
    for (size_t i = 0; i < data.size(); ++i) data[i] = double(i % 13) * 0.25;
    w.write("state", data, {20, 8, 128, 128}, "1", "test states");
    w.commit();
  }
  const auto states = read_states_file(path, m);
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].head(19, 7)[127 * 128 + 127],
            float(((size_t(20) * 8 * 128 * 128) - 1) % 13) * 0.25f);
  fs::resize_file(path, fs::file_size(path) / 2);
  EXPECT_THROW(read_states_file(path, m), Error);
}

// An HDF5 file with a user block (MATLAB v7.3, PyTables) has its signature at byte 512: it is read
// as HDF5, not parsed as a safetensors header.
TEST(StatesFile, Hdf5WithAUserBlockIsRecognised) {
  const ModelConfig m =
      load_model(std::string(STATECHECK_TEST_DATA_DIR) + "/states/model_tiny_gdn.json");
  std::vector<float> v(2 * 2 * 16 * 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 9) * 0.125f;
  const std::string path = temp_path("userblock.h5");
  write_h5_dataset(path, H5T_IEEE_F32LE, v.data(), v.size(), v.size(), 0, false, "", 512);
  EXPECT_NE(error_of([&] { read_states_file(path, m); }).find("has shape [1024]"),
            std::string::npos);  // read as HDF5: its 1-D shape is named
}
