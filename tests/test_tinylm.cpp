// The tiny language model's C++ forward pass (core/tinylm): golden logits of the PyTorch model,
// the state API (prefix, export, restore, continue), loader errors, and the fixed-order product.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <sys/stat.h>

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "core/codec/codec.h"
#include "core/drive/tinylm_drive.h"
#include "core/io/hdf5_file.h"
#include "core/io/safetensors.h"
#include "core/io/summary.h"
#include "core/tinylm/linear.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "experiments/experiment.h"
#include "tests/error_of.h"

using namespace statecheck;
using statecheck::test_support::error_of;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const double kU = std::ldexp(1.0, -24);  // unit roundoff of fp32

std::string temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("statecheck_tinylm_" + std::to_string(::getpid())) / name;
  fs::create_directories(dir);
  return dir.string();
}

// Config files the golden tests run on: the shipped model and, when shipped, the KDA test model.
std::vector<std::string> golden_configs() {
  std::vector<std::string> out = {default_tinylm_config_path()};
  const std::string kda = data_dir() + "/tinylm/kda-test/config.json";
  if (fs::exists(kda)) out.push_back(kda);
  return out;
}

struct Golden {
  std::vector<uint8_t> tokens;
  FloatArray logits, logits_fp64, temporal, conv;
};

Golden read_golden(const TinyLMConfig& c) {
  const std::string path = c.file(c.golden_file);
  Golden g;
  for (float f : read_safetensors(path, "tokens").data) g.tokens.push_back(static_cast<uint8_t>(f));
  g.logits = read_safetensors(path, "logits");
  g.logits_fp64 = read_safetensors(path, "logits_fp64");
  g.temporal = read_safetensors(path, "temporal_state");
  g.conv = read_safetensors(path, "conv_state");
  return g;
}

// Rounding depth of the forward pass: the number of fp32 rounding steps an error can accumulate
// through on the way to a logit, counted per stage as the number of terms the stage sums.
//
// Derivation. A dot product of n terms evaluated in fp32 in any order has error
// <= gamma_n sum |x_i y_i|, gamma_n = n u / (1 - n u) ~ n u (Higham, "Accuracy and Stability of
// Numerical Algorithms", 2nd ed., eq. 3.5). Two evaluations with different summation orders
// (PyTorch's BLAS and linear_fixed_order) therefore differ by at most 2 n u sum |x_i y_i|. To first
// order the stages add: a relative error delta entering a stage leaves it as delta plus that
// stage's own n u, provided the stage does not amplify relative perturbations. That is the
// assumption: the RMSNorms renormalise every block input, the residual stream adds, and the
// recurrence contracts perturbations (eigenvalues of I - beta k k^T in [1 - beta, 1], decay < 1;
// tests/test_recurrence.cpp bounds it by 2 (d_k + 8) u per token and sums over the tokens). Per
// layer the stages are: RMSNorm (D terms), in-projection (D), conv (W), recurrence per token
// (2 (d_k + 8)) plus the T earlier tokens whose writes the state sums, gated RMSNorm (d_v),
// out-projection (HV d_v), residual add (1), RMSNorm (D), gate/up (D), down (F), residual add (1),
// and eight elementary functions (exp, log1p, sqrt, division in softplus, sigmoid, SiLU, the
// norms) of at most 4 ulp each. After the last layer: the final RMSNorm (D) and the LM head (D).
// So |logit_cpp - logit_torch| <= 2 u depth A and |logit_cpp - logit_exact| <= u depth A, with
// A = sum_k |E[v, k]| |h[t, k]| the accumulated magnitude of the LM-head product.
double layer_depth(const TinyLMConfig& c, int T) {
  const double D = c.d_model, F = c.mlp_hidden, W = c.conv_width, dk = c.dk, dv = c.dv, HV = c.HV;
  return D + D + W + 2 * (dk + 8) + T + dv + HV * dv + 1 + D + D + F + 1 + 8 * 4;
}
double rounding_depth(const TinyLMConfig& c, int T) {
  return c.num_layers * layer_depth(c, T) + 2.0 * c.d_model;
}

double frob(const float* a, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(a[i]) * a[i];
  return std::sqrt(s);
}
double frob_diff(const float* a, const float* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

std::vector<uint8_t> text_tokens(const TinyLM& m, size_t n) {
  std::vector<uint8_t> t = read_bytes(m.config().file(m.config().eval_text_file));
  if (t.size() > n) t.resize(n);
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Golden logits and states of the PyTorch model (scripts/train_tinylm.py export_golden).
// ---------------------------------------------------------------------------------------------

TEST(TinyLM, GoldenLogitsMatchPyTorchWithinDerivedBound) {
  for (const std::string& path : golden_configs()) {
    SCOPED_TRACE(path);
    const TinyLM m = TinyLM::load(path);
    const TinyLMConfig& c = m.config();
    const Golden g = read_golden(c);
    const int T = static_cast<int>(g.tokens.size());
    ASSERT_GT(T, 64);
    ASSERT_EQ(g.logits.shape, (std::vector<size_t>{size_t(T), 256}));
    TinyLMState s = TinyLMState::zeros(c);
    std::vector<float> hidden;
    ForwardOptions opt;
    opt.final_hidden = &hidden;
    const std::vector<float> logits = m.forward(g.tokens.data(), T, s, opt);
    const double depth = rounding_depth(c, T);
    const std::vector<float>& E = m.lm_head_weight();
    const int D = c.d_model;
    double worst_use = 0.0, max_err = 0.0, max_err64 = 0.0;
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < 256; ++v) {
        double A = 0.0;
        for (int k = 0; k < D; ++k)
          A += std::fabs(E[size_t(v) * D + k]) * std::fabs(hidden[size_t(t) * D + k]);
        const size_t i = size_t(t) * 256 + v;
        const double err = std::fabs(double(logits[i]) - g.logits.data[i]);
        const double err64 = std::fabs(double(logits[i]) - g.logits_fp64.data[i]);
        ASSERT_TRUE(std::isfinite(logits[i])) << "t " << t << " v " << v;
        ASSERT_LE(err, 2 * kU * depth * A) << "vs PyTorch fp32, t " << t << " byte " << v;
        // The fp64 logits are stored rounded to fp32: half an ulp of the value more.
        ASSERT_LE(err64, kU * depth * A + kU * std::fabs(g.logits_fp64.data[i]))
            << "vs fp64, t " << t << " byte " << v;
        worst_use = std::max(worst_use, err / (2 * kU * depth * A));
        max_err = std::max(max_err, err);
        max_err64 = std::max(max_err64, err64);
      }
    std::printf(
        "  %s: %d tokens, depth %.0f, max |logit - PyTorch fp32| %.3g, vs fp64 %.3g, "
        "%.2g%% of the bound used at worst\n",
        c.name.c_str(), T, depth, max_err, max_err64, 100 * worst_use);
  }
}

TEST(TinyLM, GoldenStatesMatchPyTorchWithinDerivedBound) {
  for (const std::string& path : golden_configs()) {
    SCOPED_TRACE(path);
    const TinyLM m = TinyLM::load(path);
    const TinyLMConfig& c = m.config();
    const Golden g = read_golden(c);
    const int T = static_cast<int>(g.tokens.size());
    TinyLMState s = TinyLMState::zeros(c);
    m.forward(g.tokens.data(), T, s);
    const StateShape sh = c.state_shape();
    ASSERT_EQ(g.temporal.shape, (std::vector<size_t>{size_t(sh.layers), size_t(sh.heads),
                                                     size_t(sh.dv), size_t(sh.dk)}));
    ASSERT_EQ(g.conv.shape, (std::vector<size_t>{size_t(c.num_layers), size_t(c.conv_dim()),
                                                 size_t(c.conv_width - 1)}));
    for (int l = 0; l < c.num_layers; ++l) {
      // Same derivation as the logits, relative to the layer's own state: the temporal state of
      // layer l has passed l full layers and the recurrence of layer l; the conv state holds the
      // in-projections of layer l (l full layers, an RMSNorm and a D-term product).
      const double depth_S = l * layer_depth(c, T) + layer_depth(c, T);
      const double depth_conv = l * layer_depth(c, T) + 2.0 * c.d_model;
      const size_t n = sh.layer_size(), nc = size_t(c.conv_dim()) * (c.conv_width - 1);
      const float* ref = g.temporal.data.data() + l * n;
      EXPECT_LE(frob_diff(s.temporal.layer(l), ref, n), 2 * kU * depth_S * frob(ref, n))
          << "temporal layer " << l;
      const float* cref = g.conv.data.data() + l * nc;
      EXPECT_LE(frob_diff(s.conv_layer(l), cref, nc), 2 * kU * depth_conv * frob(cref, nc))
          << "conv layer " << l;
      EXPECT_GT(frob(ref, n), 0.0) << "the golden state must not be trivially zero";
    }
  }
}

// Independent of PyTorch: with every block's output projections zero, the blocks add nothing and
// logits[t, v] = sum_k E[v, k] RMSNorm(E[tok_t])[k], computed here in fp64.
TEST(TinyLM, ZeroBlocksGiveNormalisedEmbeddingLogits) {
  const std::string dir = temp_dir("zero_blocks");
  const TinyLM shipped = TinyLM::load(default_tinylm_config_path());
  const TinyLMConfig& c = shipped.config();
  fs::copy_file(c.config_path, dir + "/config.json", fs::copy_options::overwrite_existing);
  // Rewrite the weights with zero o_proj and down_proj.
  const std::string src = c.file(c.weights_file);
  std::ifstream in(src, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  std::map<std::string, TensorToWrite> tensors;
  const json names = json::parse(header);
  for (auto& [name, v] : names.items()) {
    if (name == "__metadata__") continue;
    FloatArray a = read_safetensors(src, name);
    TensorToWrite t;
    t.shape = a.shape;
    t.data = a.data;
    if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos)
      std::fill(t.data.begin(), t.data.end(), 0.0f);
    tensors[name] = t;
  }
  write_safetensors(dir + "/" + c.weights_file, tensors);
  const TinyLM m = TinyLM::load(dir + "/config.json");
  const std::vector<uint8_t> tok = text_tokens(shipped, 40);
  TinyLMState s = TinyLMState::zeros(m.config());
  const std::vector<float> logits = m.forward(tok.data(), int(tok.size()), s);
  const std::vector<float> E = tensors["embed.weight"].data, w = tensors["final_norm.weight"].data;
  const std::vector<float>& head = m.lm_head_weight();
  const int D = c.d_model;
  for (size_t t = 0; t < tok.size(); ++t) {
    const float* e = &E[size_t(tok[t]) * D];
    double ss = 0;
    for (int k = 0; k < D; ++k) ss += double(e[k]) * e[k];
    const double r = 1.0 / std::sqrt(ss / D + c.norm_eps);
    for (int v = 0; v < 256; ++v) {
      double z = 0, A = 0;
      for (int k = 0; k < D; ++k) {
        z += double(head[size_t(v) * D + k]) * e[k] * r * w[k];
        A += std::fabs(double(head[size_t(v) * D + k]) * e[k] * r * w[k]);
      }
      // Two products per element in the norm (u each), the sqrt and division (2 u), then the D-term
      // dot product (gamma_D) and the norm's own sum (D u): (2 D + 4) u A.
      ASSERT_NEAR(logits[t * 256 + v], z, (2.0 * D + 4) * kU * A) << "t " << t << " v " << v;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// State API: prefix, export, restore, continue.
// ---------------------------------------------------------------------------------------------

TEST(TinyLM, SplitRunsEqualOneRunBitForBit_T300_splits_1_63_64_150_299) {
  const TinyLM m = TinyLM::load(default_tinylm_config_path());
  const std::vector<uint8_t> tok = text_tokens(m, 300);
  ASSERT_EQ(tok.size(), 300u);
  TinyLMState whole = TinyLMState::zeros(m.config());
  const std::vector<float> ref = m.forward(tok.data(), 300, whole);
  for (int split : {1, 63, 64, 150, 299}) {
    TinyLMState s = TinyLMState::zeros(m.config());
    std::vector<float> a = m.forward(tok.data(), split, s);
    const std::vector<float> b = m.forward(tok.data() + split, 300 - split, s);
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, ref) << "split at " << split;
    EXPECT_EQ(s.temporal.data, whole.temporal.data) << "split at " << split;
    EXPECT_EQ(s.conv, whole.conv) << "split at " << split;
  }
}

// The state leaves the model (through the fp32 identity codec and a safetensors file, as a cache
// would store it) and a fresh state object continues from it: identical to the uninterrupted run.
TEST(TinyLM, ExportedStateRestoredThroughFileContinuesBitForBit) {
  const TinyLM m = TinyLM::load(default_tinylm_config_path());
  const TinyLMConfig& c = m.config();
  const std::vector<uint8_t> tok = text_tokens(m, 256);
  const int P = 100;
  TinyLMState whole = TinyLMState::zeros(c);
  const std::vector<float> ref = m.forward(tok.data(), int(tok.size()), whole);

  TinyLMState prefix = TinyLMState::zeros(c);
  m.forward(tok.data(), P, prefix);
  MultiLayerState cached;
  roundtrip(parse_codec("fp32"), prefix.temporal, cached);
  const std::string file = temp_dir("export") + "/state.safetensors";
  const StateShape sh = c.state_shape();
  TensorToWrite ts{
      {size_t(sh.layers), size_t(sh.heads), size_t(sh.dv), size_t(sh.dk)}, cached.data, "F32"};
  TensorToWrite tc{
      {size_t(c.num_layers), size_t(c.conv_dim()), size_t(c.conv_width - 1)}, prefix.conv, "F32"};
  write_safetensors(file, {{"state", ts}, {"conv", tc}});

  TinyLMState restored = TinyLMState::zeros(c);
  restored.temporal.data = read_safetensors(file, "state").data;
  restored.conv = read_safetensors(file, "conv").data;
  const std::vector<float> cont = m.forward(tok.data() + P, int(tok.size()) - P, restored);
  const std::vector<float> ref_tail(ref.begin() + size_t(P) * 256, ref.end());
  EXPECT_EQ(cont, ref_tail);
  EXPECT_EQ(restored.temporal.data, whole.temporal.data);

  // A bf16 restore is not the same state: the continuation's logits move, by little.
  TinyLMState lossy = TinyLMState::zeros(c);
  m.forward(tok.data(), P, lossy);
  MultiLayerState bf;
  roundtrip(parse_codec("bf16"), lossy.temporal, bf);
  lossy.temporal = bf;
  const std::vector<float> cont_bf = m.forward(tok.data() + P, int(tok.size()) - P, lossy);
  EXPECT_NE(cont_bf, ref_tail);
}

// The layer inputs the forward pass hands out are exactly what its recurrence consumed: running
// the reference recurrence on them from zero reproduces every layer's state bit for bit.
TEST(TinyLM, CapturedLayerInputsReproduceTheStates) {
  const TinyLM m = TinyLM::load(default_tinylm_config_path());
  const TinyLMConfig& c = m.config();
  const std::vector<uint8_t> tok = text_tokens(m, 150);
  TinyLMState s = TinyLMState::zeros(c);
  std::vector<LayerInputs> inputs;
  ForwardOptions opt;
  opt.layer_inputs = &inputs;
  m.forward(tok.data(), int(tok.size()), s, opt);
  ASSERT_EQ(int(inputs.size()), c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    inputs[l].check(c.recurrence_shape());
    std::vector<float> S(c.state_shape().layer_size(), 0.0f);
    gated_delta_layer_fp32(c.recurrence_shape(), inputs[l], 0, inputs[l].T, S.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(S.data(), s.temporal.layer(l), S.size() * sizeof(float)))
        << "layer " << l;
    for (float b : inputs[l].beta) ASSERT_TRUE(b > 0.0f && b < 1.0f);
    for (float g : inputs[l].g) ASSERT_TRUE(g <= 0.0f);
  }
}

TEST(TinyLM, RecurrenceHookReplacesTheReference) {
  const TinyLM m = TinyLM::load(default_tinylm_config_path());
  const TinyLMConfig& c = m.config();
  const std::vector<uint8_t> tok = text_tokens(m, 80);
  TinyLMState a = TinyLMState::zeros(c), b = TinyLMState::zeros(c), z = TinyLMState::zeros(c);
  ForwardOptions bf16;
  bf16.storage = Dtype::bf16;
  const std::vector<float> ref = m.forward(tok.data(), int(tok.size()), a, bf16);
  int calls = 0;
  ForwardOptions hook;
  hook.recurrence = [&](int, const RecurrenceShape& s, const LayerInputs& in, float* S, float* o) {
    ++calls;
    gated_delta_layer_fp32(s, in, 0, in.T, S, o, Dtype::bf16);
  };
  EXPECT_EQ(m.forward(tok.data(), int(tok.size()), b, hook), ref);
  EXPECT_EQ(calls, c.num_layers);
  ForwardOptions silent;
  silent.recurrence = [](int, const RecurrenceShape& s, const LayerInputs& in, float*, float* o) {
    std::fill(o, o + size_t(in.T) * s.HV * s.dv, 0.0f);
  };
  EXPECT_NE(m.forward(tok.data(), int(tok.size()), z, silent), ref);
}

// ---------------------------------------------------------------------------------------------
// Loader errors: one line naming the file and the tensor or field.
// ---------------------------------------------------------------------------------------------

namespace {

// A copy of the shipped model in a temporary directory, with its tensors in memory for editing.
struct ModelCopy {
  std::string dir;
  json config;
  std::map<std::string, TensorToWrite> tensors;
  std::string weights_name;

  explicit ModelCopy(const std::string& name) : dir(temp_dir(name)) {
    const TinyLMConfig c = load_tinylm_config(default_tinylm_config_path());
    weights_name = c.weights_file;
    std::ifstream cf(c.config_path);
    config = json::parse(cf);
    const std::string src = c.file(c.weights_file);
    std::ifstream in(src, std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    in.read(header.data(), static_cast<std::streamsize>(n));
    const json names = json::parse(header);
    for (auto& [key, v] : names.items()) {
      if (key == "__metadata__") continue;
      FloatArray a = read_safetensors(src, key);
      tensors[key] = TensorToWrite{a.shape, a.data, "F32"};
    }
  }
  std::string config_path() const { return dir + "/config.json"; }
  std::string weights_path() const { return dir + "/" + weights_name; }
  void write() const {
    std::ofstream(config_path()) << config.dump(1);
    write_safetensors(weights_path(), tensors);
  }
};

}  // namespace

TEST(TinyLMErrors, MissingWeightsFileNamesIt) {
  ModelCopy mc("missing_file");
  mc.write();
  fs::remove(mc.weights_path());
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find(mc.weights_path()), std::string::npos) << e;
  EXPECT_NE(e.find("(field 'tinylm.weights')"), std::string::npos) << e;
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;
}

// The files a config names must be regular files: a directory reads as garbage, a FIFO would
// block the run.
TEST(TinyLMErrors, NamedFilesMustBeRegularFiles) {
  {
    ModelCopy mc("weights_dir");
    mc.config["tinylm"]["weights"] = ".";
    mc.write();
    const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
    EXPECT_NE(e.find("(field 'tinylm.weights')"), std::string::npos) << e;
    EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  }
  {
    ModelCopy mc("eval_fifo");
    mc.config["tinylm"]["eval_text"] = "fifo";
    mc.write();
    ASSERT_EQ(mkfifo((mc.dir + "/fifo").c_str(), 0600), 0);
    // Through the drive that reads the text (kl reads it through the same check).
    const std::string e = error_of([&] { TinyLMDrive d(mc.config_path()); });
    EXPECT_NE(e.find("(field 'tinylm.eval_text')"), std::string::npos) << e;
    EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  }
}

TEST(TinyLMErrors, MissingTensorNamesFileAndTensor) {
  ModelCopy mc("missing_tensor");
  mc.tensors.erase("layers.1.mixer.dt_bias");
  mc.write();
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find(mc.weights_path()), std::string::npos) << e;
  EXPECT_NE(e.find("missing tensor 'layers.1.mixer.dt_bias'"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
}

TEST(TinyLMErrors, WrongShapeNamesTensorAndBothShapes) {
  ModelCopy mc("wrong_shape");
  TensorToWrite& t = mc.tensors["layers.0.mixer.v_proj.weight"];
  t.shape[0] -= 1;
  t.data.resize(t.shape[0] * t.shape[1]);
  mc.write();
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find("tensor 'layers.0.mixer.v_proj.weight' has shape ["), std::string::npos) << e;
  EXPECT_NE(e.find(mc.weights_path()), std::string::npos) << e;
}

TEST(TinyLMErrors, ConfigDisagreeingWithWeightsIsAShapeError) {
  ModelCopy mc("config_mismatch");
  mc.config["tinylm"]["mlp_hidden"] = mc.config["tinylm"]["mlp_hidden"].get<int>() + 8;
  mc.write();
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find("gate_proj.weight' has shape"), std::string::npos) << e;
}

TEST(TinyLMErrors, TruncatedWeightsFile) {
  ModelCopy mc("truncated");
  mc.write();
  fs::resize_file(mc.weights_path(), fs::file_size(mc.weights_path()) - 1000);
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find(mc.weights_path()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(TinyLMErrors, CorruptHeader) {
  ModelCopy mc("corrupt");
  mc.write();
  {
    std::fstream f(mc.weights_path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(9);
    f.write("#####", 5);
  }
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find(mc.weights_path()), std::string::npos) << e;
  EXPECT_NE(e.find("JSON"), std::string::npos) << e;
}

TEST(TinyLMErrors, UnexpectedTensorWhenConfigSaysTied) {
  ModelCopy mc("extra");
  mc.tensors["lm_head.weight"] = mc.tensors["embed.weight"];
  mc.config["tinylm"]["tie_word_embeddings"] = true;
  mc.write();
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find("unexpected tensor 'lm_head.weight'"), std::string::npos) << e;
}

TEST(TinyLMErrors, NonFiniteWeight) {
  ModelCopy mc("nan");
  mc.tensors["layers.0.gate_proj.weight"].data[17] = std::nanf("");
  mc.write();
  const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
  EXPECT_NE(e.find("'layers.0.gate_proj.weight' holds a non-finite value at flat index 17"),
            std::string::npos)
      << e;
}

// Finite weights whose activations overflow fp32 (embeddings x 1e36) would make the RMSNorm 0 and
// every prediction uniform: refused at the forward pass, not scored as a model.
TEST(TinyLMErrors, ActivationsBeyondFp32AreRefused) {
  ModelCopy mc("overflow");
  for (float& x : mc.tensors["embed.weight"].data) x *= 1e36f;
  mc.write();
  const TinyLM m = TinyLM::load(mc.config_path());
  const std::vector<uint8_t> tok = {'a', 'b', 'c'};
  TinyLMState s = TinyLMState::zeros(m.config());
  const std::string e = error_of([&] { m.forward(tok.data(), 3, s); });
  EXPECT_NE(e.find("activations overflow fp32 (or are NaN) before the attention norm of layer 0 "
                   "(row 0"),
            std::string::npos)
      << e;
}

TEST(TinyLMErrors, ConfigFieldsAreChecked) {
  {
    ModelCopy mc("no_section");
    mc.config.erase("tinylm");
    mc.write();
    EXPECT_NE(error_of([&] { TinyLM::load(mc.config_path()); }).find("no 'tinylm' section"),
              std::string::npos);
  }
  {
    ModelCopy mc("eps");
    mc.config["tinylm"]["l2norm_eps"] = 1e-5;
    mc.write();
    EXPECT_NE(error_of([&] { TinyLM::load(mc.config_path()); }).find("tinylm.l2norm_eps"),
              std::string::npos);
  }
  {
    ModelCopy mc("heads");
    mc.config["linear"]["num_key_heads"] = mc.config["linear"]["num_value_heads"].get<int>() + 1;
    mc.write();
    const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
    EXPECT_NE(e.find("not a multiple"), std::string::npos) << e;
  }
  {
    ModelCopy mc("wrapping");  // 2^32 + 256 must not read as 256
    mc.config["tinylm"]["d_model"] = 4294967552ULL;
    mc.write();
    const std::string e = error_of([&] { TinyLM::load(mc.config_path()); });
    EXPECT_NE(e.find("'tinylm.d_model' must be an integer in [1, 1048576], got 4294967552"),
              std::string::npos)
        << e;
  }
  EXPECT_NE(error_of([] {
              load_tinylm_config("/nonexistent/config.json");
            }).find("/nonexistent/config.json"),
            std::string::npos);
}

TEST(TinyLMErrors, StateOfAnotherShapeIsRefused) {
  const TinyLM m = TinyLM::load(default_tinylm_config_path());
  TinyLMConfig other = m.config();
  other.HV *= 2;
  TinyLMState s = TinyLMState::zeros(other);
  const uint8_t tok[2] = {'a', 'b'};
  EXPECT_NE(error_of([&] { m.forward(tok, 2, s); }).find("does not match"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The fixed-order product.
// ---------------------------------------------------------------------------------------------

// Higham eq. 3.5: any summation order of an n-term dot product is within gamma_n sum |x_i w_i|.
TEST(LinearFixedOrder, WithinDotProductBound_T37_K203_N29) {
  const int T = 37, K = 203, N = 29;
  Rng rng(11);
  std::vector<float> X(T * K), W(N * K), Y(T * N);
  for (auto& x : X) x = static_cast<float>(rng.normal());
  for (auto& w : W) w = static_cast<float>(rng.normal());
  linear_fixed_order(X.data(), T, K, W.data(), N, Y.data());
  const double gamma = K * kU / (1 - K * kU);
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double exact = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        exact += double(X[t * K + k]) * W[n * K + k];
        mag += std::fabs(double(X[t * K + k]) * W[n * K + k]);
      }
      ASSERT_LE(std::fabs(Y[t * N + n] - exact), gamma * mag) << t << ", " << n;
    }
}

TEST(LinearFixedOrder, RowsAreIndependentOfTheirBatch_T37_K203_N29) {
  const int T = 37, K = 203, N = 29;
  Rng rng(12);
  std::vector<float> X(T * K), W(N * K), Y(T * N), Y1(N), acc(T * N);
  for (auto& x : X) x = static_cast<float>(rng.normal());
  for (auto& w : W) w = static_cast<float>(rng.normal());
  for (auto& a : acc) a = static_cast<float>(rng.normal());
  linear_fixed_order(X.data(), T, K, W.data(), N, Y.data());
  for (int t = 0; t < T; ++t) {
    linear_fixed_order(X.data() + t * K, 1, K, W.data(), N, Y1.data());
    EXPECT_EQ(0, std::memcmp(Y1.data(), Y.data() + t * N, N * sizeof(float))) << "row " << t;
  }
  std::vector<float> Ya = acc;
  linear_fixed_order(X.data(), T, K, W.data(), N, Ya.data(), /*accumulate=*/true);
  for (int i = 0; i < T * N; ++i) ASSERT_EQ(Ya[i], acc[i] + Y[i]) << i;
}

// ---------------------------------------------------------------------------------------------
// The 'tinylm' drive: real states and real layer inputs of the model.
// ---------------------------------------------------------------------------------------------

TEST(TinyLMDrive, StatesAndInputsAreTheModelsOwn) {
  const std::string path = default_tinylm_config_path();
  const TinyLMDrive drive(path);
  const TinyLM m = TinyLM::load(path);
  const TinyLMConfig& c = m.config();
  const std::vector<uint8_t> text = read_bytes(c.file(c.eval_text_file));
  const int n = 2, T = 96;
  // By hand: the model over sequence n's prefix, then its continuation with inputs captured.
  TinyLMState s = TinyLMState::zeros(c);
  const uint8_t* start = text.data() + n * kTinyLMDriveStride;
  m.forward(start, kTinyLMDrivePrefix, s);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::vector<float> S = drive.initial_layer_state(n, l);
    EXPECT_EQ(0, std::memcmp(S.data(), s.temporal.layer(l), S.size() * sizeof(float)))
        << "layer " << l;
  }
  std::vector<LayerInputs> inputs;
  ForwardOptions opt;
  opt.layer_inputs = &inputs;
  m.forward(start + kTinyLMDrivePrefix, T, s, opt);
  // Ask for a longer stretch first, then the shorter one: the shorter is the head of the longer.
  drive.layer_inputs(n, 0, 2 * T);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerInputs in = drive.layer_inputs(n, l, T);
    EXPECT_EQ(in.T, T);
    EXPECT_EQ(in.q, inputs[l].q) << "layer " << l;
    EXPECT_EQ(in.k, inputs[l].k) << "layer " << l;
    EXPECT_EQ(in.v, inputs[l].v) << "layer " << l;
    EXPECT_EQ(in.g, inputs[l].g) << "layer " << l;
    EXPECT_EQ(in.beta, inputs[l].beta) << "layer " << l;
  }
  const std::string e =
      error_of([&] { drive.layer_inputs(kTinyLMDriveSequences - 1, 0, 1 << 20); });
  EXPECT_NE(e.find(c.eval_text_file), std::string::npos) << e;
}

TEST(TinyLMDrive, ModelOfOtherShapesIsRefused) {
  const TinyLMDrive drive(default_tinylm_config_path());
  EXPECT_NO_THROW(drive.check_matches(load_model(default_tinylm_config_path())));
  const std::string e = error_of([&] { drive.check_matches(load_model("qwen3.5-35b-a3b", 4)); });
  EXPECT_NE(e.find("drive 'tinylm'"), std::string::npos) << e;
  EXPECT_NE(e.find("qwen3.5-35b-a3b"), std::string::npos) << e;
  EXPECT_NE(e.find("leave out --model"), std::string::npos) << e;
  // The tiny model's own config at TP 2: the sharding is the cause, and named as such.
  const std::string t =
      error_of([&] { drive.check_matches(load_model(default_tinylm_config_path(), 2)); });
  EXPECT_NE(t.find("the tiny model runs whole: leave out --tp"), std::string::npos) << t;
}

// `codec --drive tinylm` end to end: without --model the command line substitutes the tiny model's
// config (experiments/options.cpp); here the experiment gets it directly.
TEST(TinyLMDrive, CodecExperimentRunsOnRealStates) {
  Options o;
  o.experiment = "codec";
  o.drive = parse_drive("tinylm", "");
  o.model = default_tinylm_config_path();
  o.quick = true;
  o.threads = 2;
  Summary s;
  H5Writer file(temp_dir("codec_drive") + "/codec.h5");
  run_codec(o, load_model(o.model), file, s);
  EXPECT_EQ(s.get("fp32.state_relerr"), 0.0);
  // bf16 round to nearest even: relative error <= 2^-8 per element (8 significant bits), so the
  // Frobenius ratio too.
  EXPECT_LE(s.get("bf16.state_relerr"), std::ldexp(1.0, -8));
  EXPECT_GT(s.get("int8.state_relerr"), 0.0);
  // int8: |error| <= scale / 2 = amax_j / 254 per element, so ||err||_F <= sqrt(sum_j d_v amax_j^2)
  // / 254
  // <= ||S||_F sqrt(d_v) / 254 in the worst case of one non-zero per column.
  const TinyLMConfig c = load_tinylm_config(o.model);
  EXPECT_LE(s.get("int8.state_relerr"), std::sqrt(double(c.dv)) / 254.0);
}
