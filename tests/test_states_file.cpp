// States files (core/drive/states_file.h): safetensors and HDF5 files written here and by another
// tool (scripts/make_state_fixtures.py: numpy and h5py), with the values recomputed from the
// generating formula, shape checks against a model config, and one-line errors for the truncated
// and the mislabelled file.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
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
  // A file without a size (procfs) is named as such, not by the error value of its size.
  {
    std::ifstream probe("/proc/self/status");
    probe.seekg(0, std::ios::end);
    if (!probe.is_open() || (probe && probe.tellg() >= 0))
      GTEST_SKIP() << "/proc/self/status is absent or has a size to seek to here";
  }
  std::string proc;
  try {
    read_states_file("/proc/self/status", m);
  } catch (const Error& e) {
    proc = e.what();
  }
  EXPECT_EQ(proc,
            "/proc/self/status: neither an HDF5 nor a safetensors file (no size to seek to: not an "
            "ordinary file)");
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

// ---- per-layer tensors ---------------------------------------------------------------------

namespace {

// One layer's tensor [N, HV, d_v, d_k] (N > 1) or [HV, d_v, d_k] of the fixture formula, for the
// tiny model (HV 2, 16 x 16); `layer` is the position among the linear-attention layers.
TensorToWrite layer_tensor(int layer, int n_states) {
  TensorToWrite t;
  t.shape = n_states > 1 ? std::vector<size_t>{size_t(n_states), 2, 16, 16}
                         : std::vector<size_t>{2, 16, 16};
  for (int n = 0; n < n_states; ++n)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) t.data.push_back(expected(layer, n, h, i, j));
  return t;
}

std::vector<double> as_doubles(const TensorToWrite& t) {
  return std::vector<double>(t.data.begin(), t.data.end());
}

}  // namespace

// safetensors.torch.save_file dumps: one tensor per layer ("layers.{i}.ssm_state"), beside the
// conv states; found without --states-key (the one pattern naming L tensors, conv aside) and with
// it, and the values land on the right layer.
TEST(StatesPerLayer, SafetensorsLayersFoundByPatternAndByKey) {
  const ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  const std::string path = temp_path("per_layer.safetensors");
  TensorToWrite conv;
  conv.shape = {6, 3};
  conv.data.assign(18, 1.0f);
  write_safetensors(path, {{"layers.0.ssm_state", layer_tensor(0, 1)},
                           {"layers.1.ssm_state", layer_tensor(1, 1)},
                           {"layers.0.conv_state", conv},
                           {"layers.1.conv_state", conv}});
  expect_states(read_states_file(path, m), 1);
  expect_states(read_states_file(path, m, "layers.{i}.ssm_state"), 1);
  // The conv pattern names two tensors too, of the wrong shape: named in the error.
  const std::string err = error_of([&] { read_states_file(path, m, "layers.{i}.conv_state"); });
  EXPECT_NE(err.find("tensor 'layers.0.conv_state' has shape [6, 3]"), std::string::npos) << err;
}

// HDF5 per-layer datasets at the root and in groups ("layers/{i}/ssm_state", as h5py writes
// nested keys), with a state axis N = 2.
TEST(StatesPerLayer, Hdf5RootAndGroupedLayersWithStateAxis) {
  const ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  const std::string root = temp_path("per_layer_root.h5"),
                    nested = temp_path("per_layer_nested.h5");
  {
    H5Writer w(root);
    for (int l = 0; l < 2; ++l)
      w.write(fmt::format("model.layers.{}.linear_attn.ssm_state", l),
              as_doubles(layer_tensor(l, 2)), {2, 2, 16, 16}, "1", "layer state");
    w.commit();
    H5Writer g(nested);
    for (int l = 0; l < 2; ++l)
      g.write(fmt::format("layers/{}/ssm_state", l), as_doubles(layer_tensor(l, 2)), {2, 2, 16, 16},
              "1", "layer state");
    g.commit();
  }
  expect_states(read_states_file(root, m), 2);
  expect_states(read_states_file(nested, m, "layers/{i}/ssm_state"), 2);
}

// Engines number every decoder layer: a model whose full-attention layer is layer 1 has its
// linear-attention states at indices 0 and 2. Other indices are refused naming them.
TEST(StatesPerLayer, IndicesAreConsecutiveOrTheModelsLayerIndices) {
  const test_support::TempDir dir("per_layer_indices");
  {
    std::ofstream cfg(dir.file("model.json"));
    cfg << R"({"name": "tiny-gdn-full1", "family": "gdn", "num_layers": 3,
      "full_attention_layers": [1], "linear": {"num_key_heads": 1, "num_value_heads": 2,
      "head_k_dim": 16, "head_v_dim": 16, "conv_width": 4},
      "full_attention": {"kind": "mha", "num_kv_heads": 1, "head_dim": 16}, "params_billion": 0.001})";
  }
  const ModelConfig m = load_model(dir.file("model.json"));
  write_safetensors(dir.file("a.safetensors"), {{"layers.0.ssm_state", layer_tensor(0, 1)},
                                                {"layers.2.ssm_state", layer_tensor(1, 1)}});
  expect_states(read_states_file(dir.file("a.safetensors"), m), 1);
  {
    H5Writer w(dir.file("nested.h5"));  // groups named by the model's indices 0 and 2
    w.write("layers/0/ssm_state", as_doubles(layer_tensor(0, 1)), {2, 16, 16}, "1", "layer 0");
    w.write("layers/2/ssm_state", as_doubles(layer_tensor(1, 1)), {2, 16, 16}, "1", "layer 2");
    w.commit();
  }
  expect_states(read_states_file(dir.file("nested.h5"), m, "layers/{i}/ssm_state"), 1);
  EXPECT_FALSE(hdf5_has_dataset(dir.file("nested.h5"), "layers/1/ssm_state"));
  EXPECT_FALSE(hdf5_has_dataset(dir.file("nested.h5"), "layers"));  // a group
  write_safetensors(dir.file("b.safetensors"), {{"layers.3.ssm_state", layer_tensor(0, 1)},
                                                {"layers.5.ssm_state", layer_tensor(1, 1)}});
  const std::string err = error_of([&] { read_states_file(dir.file("b.safetensors"), m); });
  EXPECT_NE(err.find("layer indices 3..5, neither 0..1 nor the linear-attention layers"),
            std::string::npos)
      << err;
}

// Nothing matches: one short line naming at most four of the tensors found and --states-key.
TEST(StatesPerLayer, NothingMatchesIsAShortErrorNamingAFewTensors) {
  const ModelConfig m = load_model(kDir + "model_tiny_gdn.json");
  const std::string path = temp_path("unmatched.safetensors");
  std::map<std::string, TensorToWrite> tensors;
  for (const char* n : {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"})
    tensors[n] = layer_tensor(0, 1);
  write_safetensors(path, tensors);
  const std::string err = error_of([&] { read_states_file(path, m); });
  EXPECT_NE(err.find("6 tensors (alpha, beta, delta, epsilon and 2 more)"), std::string::npos)
      << err;
  EXPECT_NE(err.find("--states-key"), std::string::npos) << err;
  EXPECT_LT(err.size(), 300u) << err;
  const std::string missing = error_of([&] { read_states_file(path, m, "layers.{i}.ssm_state"); });
  EXPECT_NE(missing.find("pattern 'layers.{i}.ssm_state' names 0 tensors"), std::string::npos)
      << missing;
  EXPECT_LT(missing.size(), 300u) << missing;
}

TEST(StatesPerLayer, PatternMatching) {
  const auto m =
      match_layer_pattern({"l.10.s", "l.2.s", "l.02.s", "l.x.s", "l.3.t", "l.1.s"}, "l.{i}.s");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], (std::pair<int, std::string>{1, "l.1.s"}));
  EXPECT_EQ(m[1], (std::pair<int, std::string>{2, "l.2.s"}));
  EXPECT_EQ(m[2], (std::pair<int, std::string>{10, "l.10.s"}));
  EXPECT_TRUE(match_layer_pattern({"state"}, "state").empty());
}
