// The 'inputs' drive (core/drive/inputs_file.h): files of recurrence inputs read back exactly,
// every refusal naming its tensor, the codec experiment on a file reproducing the synthetic drive
// that generated it, and the `reference` experiment against an independent fp64 loop written here,
// including its guard against a final state that never moved.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/drive/drive.h"
#include "core/drive/inputs_file.h"
#include "core/io/hdf5_file.h"
#include "core/io/safetensors.h"
#include "core/io/sha256.h"
#include "core/io/summary.h"
#include "experiments/experiment.h"
#include "experiments/options.h"
#include "tests/error_of.h"
#include "tests/h5_read.h"
#include "tests/small_models.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::error_of;
using statecheck::test_support::small_gdn_model;
using statecheck::test_support::TempDir;

namespace {

// 3 KDA layers (layer 1 full attention), H = HV = 2, d_k = 8, d_v = 6.
ModelConfig small_kda_model() {
  const nlohmann::json j = {
      {"name", "tiny-kda-inputs"},
      {"family", "kda"},
      {"num_layers", 4},
      {"full_attention_layers", {1}},
      {"linear",
       {{"num_key_heads", 2},
        {"num_value_heads", 2},
        {"head_k_dim", 8},
        {"head_v_dim", 6},
        {"conv_width", 4}}},
      {"full_attention", {{"kind", "mla"}, {"kv_lora_rank", 16}, {"rope_dim", 8}}}};
  return parse_model_config(j, "tiny-kda", 1);
}

using Tensors = std::map<std::string, TensorToWrite>;

TensorToWrite tensor(std::vector<size_t> shape, std::vector<float> data) {
  TensorToWrite t;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

// The inputs of N sequences of T tokens of every linear layer of `m` from a synthetic drive
// (sequence n drawn with seed + n), with optional initial states of small random entries.
Tensors synthetic_file(const ModelConfig& m, DriveKind kind, int N, int T, bool initial) {
  const RecurrenceShape s = recurrence_shape(m);
  Tensors t;
  const size_t uN = N, uT = T, H = s.H, HV = s.HV, dk = s.dk, dv = s.dv;
  for (int l = 0; l < m.linear_layer_count(); ++l) {
    const int i = m.linear_layers[l];
    std::vector<float> q, k, v, g, beta, S0;
    for (int n = 0; n < N; ++n) {
      const LayerInputs in = synthetic_inputs(kind, s, 7 + n, l, T);
      q.insert(q.end(), in.q.begin(), in.q.end());
      k.insert(k.end(), in.k.begin(), in.k.end());
      v.insert(v.end(), in.v.begin(), in.v.end());
      g.insert(g.end(), in.g.begin(), in.g.end());
      beta.insert(beta.end(), in.beta.begin(), in.beta.end());
      for (size_t e = 0; e < HV * dv * dk; ++e)
        S0.push_back(0.01f * static_cast<float>(((e * 2654435761u + n * 97 + l) % 201) - 100));
    }
    t[fmt::format("layers.{}.q", i)] = tensor({uN, uT, H, dk}, q);
    t[fmt::format("layers.{}.k", i)] = tensor({uN, uT, H, dk}, k);
    t[fmt::format("layers.{}.v", i)] = tensor({uN, uT, HV, dv}, v);
    t[fmt::format("layers.{}.g", i)] =
        s.gate == GateKind::gdn ? tensor({uN, uT, HV}, g) : tensor({uN, uT, HV, dk}, g);
    t[fmt::format("layers.{}.beta", i)] = tensor({uN, uT, HV}, beta);
    if (initial) t[fmt::format("layers.{}.initial_state", i)] = tensor({uN, HV, dv, dk}, S0);
  }
  return t;
}

std::map<std::string, std::string> metadata(const ModelConfig& m, bool normalised = false,
                                            const std::string& scale = "") {
  return {{"format", "statecheck-inputs/1"},
          {"gate", gate_kind_name(m.gate)},
          {"qk_l2norm_applied", normalised ? "true" : "false"},
          {"scale", scale.empty() ? fmt::format("{:.9g}", 1.0 / std::sqrt(m.head_k_dim)) : scale}};
}

// An independent fp64 implementation of the recurrence of docs/numerics.md, written token by token
// from the formula (not the library's loop): S [HV, d_v, d_k] in place, outputs [T, HV, d_v].
void naive_recurrence(const RecurrenceShape& s, const LayerInputs& in, std::vector<double>& S,
                      std::vector<double>& o) {
  o.assign(static_cast<size_t>(in.T) * s.HV * s.dv, 0.0);
  for (int t = 0; t < in.T; ++t)
    for (int h = 0; h < s.HV; ++h) {
      const int kh = h / (s.HV / s.H);
      std::vector<double> q(s.dk), k(s.dk);
      double nq = 0, nk = 0;
      for (int j = 0; j < s.dk; ++j) {
        q[j] = in.q[(static_cast<size_t>(t) * s.H + kh) * s.dk + j];
        k[j] = in.k[(static_cast<size_t>(t) * s.H + kh) * s.dk + j];
        nq += q[j] * q[j], nk += k[j] * k[j];
      }
      for (int j = 0; j < s.dk; ++j) {
        if (s.qk_l2norm) q[j] /= std::sqrt(nq + 1e-6), k[j] /= std::sqrt(nk + 1e-6);
        q[j] *= s.effective_scale();
      }
      const double beta = in.beta[static_cast<size_t>(t) * s.HV + h];
      double* Sh = S.data() + static_cast<size_t>(h) * s.dv * s.dk;
      for (int i = 0; i < s.dv; ++i) {
        double* row = Sh + static_cast<size_t>(i) * s.dk;
        double u = 0;
        for (int j = 0; j < s.dk; ++j) {
          const double g = s.gate == GateKind::gdn
                               ? in.g[static_cast<size_t>(t) * s.HV + h]
                               : in.g[(static_cast<size_t>(t) * s.HV + h) * s.dk + j];
          row[j] *= std::exp(g);
          u += row[j] * k[j];
        }
        const double vi = in.v[(static_cast<size_t>(t) * s.HV + h) * s.dv + i];
        double out = 0;
        for (int j = 0; j < s.dk; ++j) {
          row[j] += beta * (vi - u) * k[j];
          out += row[j] * q[j];
        }
        o[(static_cast<size_t>(t) * s.HV + h) * s.dv + i] = out;
      }
    }
}

// Adds o and final_state to `t` from the naive loop over the file's own inputs.
void add_reference(const ModelConfig& m, const std::string& path, Tensors& t) {
  const InputsFile f(path, m);
  const RecurrenceShape& s = f.shape();
  const size_t N = f.count(), T = f.tokens();
  for (int l = 0; l < m.linear_layer_count(); ++l) {
    std::vector<float> o_all, S_all;
    for (size_t n = 0; n < N; ++n) {
      const std::vector<float> S0 = f.initial_layer_state(n, l);
      std::vector<double> S(S0.begin(), S0.end()), o;
      naive_recurrence(s, f.layer_inputs(n, l, T), S, o);
      o_all.insert(o_all.end(), o.begin(), o.end());
      S_all.insert(S_all.end(), S.begin(), S.end());
    }
    const size_t HV = s.HV, dv = s.dv, dk = s.dk;
    t[fmt::format("layers.{}.o", m.linear_layers[l])] = tensor({N, T, HV, dv}, o_all);
    t[fmt::format("layers.{}.final_state", m.linear_layers[l])] = tensor({N, HV, dv, dk}, S_all);
  }
}

Options inputs_options(const std::string& experiment, const std::string& path) {
  Options o;
  o.experiment = experiment;
  o.drive = parse_drive("inputs", "", path);
  o.quick = true;
  o.threads = 1;
  return o;
}

}  // namespace

// Every value written comes back at its place: sequence n, token t, head, channel; the metadata
// sets the recurrence shape.
TEST(InputsFile, ReadsBackEveryTensorAndTheMetadata) {
  const TempDir dir("inputs_read");
  const ModelConfig m = small_kda_model();
  Tensors t = synthetic_file(m, DriveKind::init_kda, 2, 9, true);
  const std::string path = dir.file("in.safetensors");
  write_safetensors(path, t, metadata(m, true, "0.25"));
  const InputsFile f(path, m);
  EXPECT_EQ(f.count(), 2);
  EXPECT_EQ(f.tokens(), 9);
  EXPECT_FALSE(f.shape().qk_l2norm);
  EXPECT_EQ(f.shape().effective_scale(), 0.25f);
  EXPECT_TRUE(f.has_initial_state());
  EXPECT_FALSE(f.has_reference());
  for (int l = 0; l < 2; ++l)
    for (int n = 0; n < 2; ++n) {
      const int i = m.linear_layers[l];
      const LayerInputs in = f.layer_inputs(n, l, 5);
      const LayerInputs want =
          synthetic_inputs(DriveKind::init_kda, recurrence_shape(m), 7 + n, l, 9);
      for (size_t e = 0; e < in.q.size(); ++e) ASSERT_EQ(in.q[e], want.q[e]) << i << " " << n;
      for (size_t e = 0; e < in.g.size(); ++e) ASSERT_EQ(in.g[e], want.g[e]);
      for (size_t e = 0; e < in.beta.size(); ++e) ASSERT_EQ(in.beta[e], want.beta[e]);
      const std::vector<float> S0 = f.initial_layer_state(n, l);
      const auto& all = t[fmt::format("layers.{}.initial_state", i)].data;
      for (size_t e = 0; e < S0.size(); ++e) ASSERT_EQ(S0[e], all[n * S0.size() + e]);
    }
  EXPECT_NE(error_of([&] { f.layer_inputs(0, 0, 10); }).find("the file holds T = 9"),
            std::string::npos);
}

// Each refusal is one line naming the file and the tensor or metadata key at fault.
TEST(InputsFile, RefusalsNameTheTensor) {
  const TempDir dir("inputs_refuse");
  const ModelConfig m = small_gdn_model(16, 12);  // linear layers 0, 1, 2; H 2, HV 4
  const std::string path = dir.file("in.safetensors");
  auto refusal = [&](Tensors t, std::map<std::string, std::string> meta) {
    write_safetensors(path, t, meta);
    return error_of([&] {
      const InputsFile f(path, m);
      for (int l = 0; l < m.linear_layer_count(); ++l) f.layer_inputs(0, l, f.tokens());
    });
  };
  const Tensors good = synthetic_file(m, DriveKind::init_gdn, 1, 6, false);
  EXPECT_EQ(refusal(good, metadata(m)), "");

  Tensors t = good;
  t.erase("layers.1.v");
  EXPECT_NE(refusal(t, metadata(m)).find("tensor 'layers.1.v' is missing"), std::string::npos);
  t = good;
  t["layers.2.q"].shape = {1, 6, 4, 8};  // same size, H and d_k wrong
  EXPECT_NE(refusal(t, metadata(m)).find("tensor 'layers.2.q' has shape [1, 6, 4, 8]; model"),
            std::string::npos);
  t = good;
  t["layers.3.q"] = good.at("layers.0.q");
  EXPECT_NE(refusal(t, metadata(m)).find("'layers.3.q': layer 3 is not a linear-attention layer"),
            std::string::npos);
  t = good;
  t["layers.0.gate"] = good.at("layers.0.beta");
  EXPECT_NE(refusal(t, metadata(m)).find("unknown tensor 'gate'"), std::string::npos);
  t = good;
  t["layers.1.beta"].data[5] = 1.5f;
  EXPECT_NE(refusal(t, metadata(m)).find("'layers.1.beta': beta = 1.5 at [0, 1, 1]"),
            std::string::npos);
  t = good;
  t["layers.0.g"].data[6] = 0.25f;
  EXPECT_NE(refusal(t, metadata(m)).find("'layers.0.g': g = 0.25 > 0 at [0, 1, 2]"),
            std::string::npos);
  t = good;
  t["layers.2.k"].data[3] = NAN;
  EXPECT_NE(refusal(t, metadata(m)).find("'layers.2.k': non-finite value"), std::string::npos);
  t = good;
  t["layers.2.beta"] = tensor({1, 5, 4}, std::vector<float>(20, 0.5f));
  EXPECT_NE(refusal(t, metadata(m)).find("'layers.2.beta' has N = 1, T = 5 but layers.0.q has"),
            std::string::npos);
  auto meta = metadata(m);
  meta.erase("scale");
  EXPECT_NE(refusal(good, meta).find("metadata 'scale' is missing"), std::string::npos);
  meta = metadata(m);
  meta["qk_l2norm_applied"] = "yes";
  EXPECT_NE(refusal(good, meta).find("metadata 'qk_l2norm_applied' must be"), std::string::npos);
  meta = metadata(m);
  meta["gate"] = "kda";
  EXPECT_NE(refusal(good, meta).find("metadata 'gate' is 'kda' but model"), std::string::npos);
}

// codec on a file holding the tokens of the init-gdn drive from a zero state gives the numbers of
// the init-gdn drive itself (same prefill, same decode): the drive adds nothing and loses nothing.
TEST(InputsFile, CodecOnAFileReproducesTheSyntheticDriveItHolds) {
  const TempDir dir("inputs_codec");
  const ModelConfig m = small_gdn_model(16, 12);
  const int Tp = 40, Td = 8;
  Tensors t = synthetic_file(m, DriveKind::init_gdn, 1, Tp + Td, false);
  const std::string path = dir.file("in.safetensors");
  write_safetensors(path, t, metadata(m));
  Options file_run = inputs_options("codec", path);
  file_run.prefill = Tp, file_run.decode = Td;
  Options synthetic = file_run;
  synthetic.drive = parse_drive("init-gdn", "");
  synthetic.seed = 7;  // the file's sequence 0 was drawn with seed 7
  Summary a, b;
  {
    H5Writer fa(dir.file("a.h5")), fb(dir.file("b.h5"));
    run_codec(file_run, m, fa, a);
    run_codec(synthetic, m, fb, b);
  }
  for (const char* key : {"int8.state_relerr", "int8.decode_relerr", "bf16.decode_relerr"}) {
    EXPECT_EQ(a.get(key), b.get(key)) << key;
    EXPECT_GT(a.get(key), 0.0) << key;
  }
}

// Without --prefill / --decode, codec fits its protocol into the file: a quarter for the decode
// (at most the default), the rest for the prefill; chain shortens T to a multiple of 128.
TEST(InputsFile, CodecAndChainFitTheirProtocolIntoTheFile) {
  const TempDir dir("inputs_fit");
  const ModelConfig m = small_gdn_model(16, 12);
  write_safetensors(dir.file("in.safetensors"),
                    synthetic_file(m, DriveKind::init_gdn, 1, 300, false), metadata(m));
  Options o = inputs_options("codec", dir.file("in.safetensors"));
  o.quick = false;
  Summary s;
  H5Writer f(dir.file("codec.h5"));
  run_codec(o, m, f, s);
  f.close();
  EXPECT_EQ(read_hdf5_doubles(dir.file("codec.h5.partial"), "codec/int8/decode_relerr_step").size(),
            75u);  // 300 / 4
  Options c = inputs_options("chain", dir.file("in.safetensors"));
  Summary cs;
  H5Writer cf(dir.file("chain.h5"));
  run_chain(c, m, cf, cs);
  EXPECT_GT(cs.get("chain.relerr_n1"), 0.0);
}

// reference: statecheck's fp64 loop against the naive loop's outputs and final states stored in
// the file (fp32 storage: relative errors near 2^-24), in safetensors and HDF5 alike.
TEST(InputsFile, ReferenceAgreesWithAnIndependentLoop) {
  const TempDir dir("inputs_reference");
  for (const bool kda : {false, true}) {
    const ModelConfig m = kda ? small_kda_model() : small_gdn_model(16, 12);
    const std::string path = dir.file(kda ? "kda.safetensors" : "gdn.safetensors");
    Tensors t = synthetic_file(m, kda ? DriveKind::init_kda : DriveKind::init_gdn, 2, 33, true);
    write_safetensors(path, t, metadata(m));
    add_reference(m, path, t);
    write_safetensors(path, t, metadata(m));
    Summary s;
    H5Writer f(dir.file("ref.h5"));
    run_reference(inputs_options("reference", path), m, f, s);
    EXPECT_LT(s.get("reference.file_vs_fp64.output_relerr"), 1e-6) << kda;
    EXPECT_LT(s.get("reference.file_vs_fp64.final_state_relerr"), 1e-6) << kda;
    EXPECT_GT(s.get("reference.fp32_vs_fp64.output_relerr"), 0.0) << kda;
    EXPECT_LT(s.get("reference.fp32_vs_fp64.output_relerr"), 1e-5) << kda;
  }
}

// A stored final state equal to the starting state, while the recurrence moves it, is what an
// implementation that never wrote its state back leaves behind (flash-linear-attention's
// fused_recurrent_kda with inplace_final_state=True): refused, naming the tensor.
TEST(InputsFile, ReferenceRefusesAFinalStateThatNeverMoved) {
  const TempDir dir("inputs_unmoved");
  const ModelConfig m = small_kda_model();
  const std::string path = dir.file("in.safetensors");
  Tensors t = synthetic_file(m, DriveKind::seed_kda, 1, 16, true);
  write_safetensors(path, t, metadata(m));
  add_reference(m, path, t);
  t["layers.2.final_state"].data = t["layers.2.initial_state"].data;
  write_safetensors(path, t, metadata(m));
  Summary s;
  H5Writer f(dir.file("ref.h5"));
  const std::string msg =
      error_of([&] { run_reference(inputs_options("reference", path), m, f, s); });
  EXPECT_NE(msg.find("tensor 'layers.2.final_state' of sequence 0 equals its starting state"),
            std::string::npos)
      << msg;
}

// The digest recorded in result files is SHA-256 (FIPS 180-4 test vectors).
TEST(InputsFile, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const TempDir dir("sha");
  const std::string path = dir.file("abc");
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  EXPECT_EQ(file_sha256(path), sha256_hex("abc"));
}

// The command line: --drive inputs needs --inputs, and --inputs needs --drive inputs.
TEST(InputsFile, CommandLineNeedsDriveAndFileTogether) {
  const TempDir dir("inputs_cli");
  const ModelConfig m = small_gdn_model(16, 12);
  const std::string path = dir.file("in.safetensors");
  write_safetensors(path, synthetic_file(m, DriveKind::init_gdn, 1, 4, false), metadata(m));
  const CommandLine cl =
      parse_command_line({"statecheck", "codec", "--drive", "inputs", "--inputs", path});
  ASSERT_TRUE(cl.options.drive.has_value());
  EXPECT_EQ(cl.options.drive->kind, DriveKind::inputs);
  EXPECT_EQ(cl.options.drive->inputs_file, path);
  EXPECT_NE(error_of([&] {
              parse_command_line({"statecheck", "codec", "--drive", "inputs"});
            }).find("drive 'inputs' needs --inputs FILE"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_command_line({"statecheck", "codec", "--inputs", path});
            }).find("--inputs " + path + " is given without --drive inputs"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_command_line({"statecheck", "codec", "--drive", "init-gdn", "--inputs", path});
            }).find("use --drive inputs"),
            std::string::npos);
}

// A result file names the inputs file and its SHA-256 at the root.
TEST(InputsFile, ResultFilesRecordTheFileAndItsDigest) {
  const TempDir dir("inputs_digest");
  const ModelConfig m = small_gdn_model(16, 12);
  const std::string path = dir.file("in.safetensors"), model = dir.file("model.json");
  write_safetensors(path, synthetic_file(m, DriveKind::init_gdn, 1, 160, false), metadata(m));
  {
    std::ofstream out(model);
    out << nlohmann::json({{"model_type", "qwen3_next"},
                           {"num_hidden_layers", 4},
                           {"full_attention_interval", 4},
                           {"linear_num_key_heads", 2},
                           {"linear_num_value_heads", 4},
                           {"linear_key_head_dim", 16},
                           {"linear_value_head_dim", 12},
                           {"num_key_value_heads", 1},
                           {"head_dim", 64}})
               .dump();
  }
  Options o = inputs_options("codec", path);
  o.model = model;
  o.out = dir.file("codec.h5");
  ASSERT_EQ(run_experiment(o), 0);
  bool found_file = false, found_digest = false;
  EXPECT_EQ(test_support::read_h5_string_attr(o.out, "/", "inputs_file", &found_file), path);
  EXPECT_EQ(test_support::read_h5_string_attr(o.out, "/", "inputs_sha256", &found_digest),
            file_sha256(path));
  EXPECT_TRUE(found_file && found_digest);
  EXPECT_EQ(file_sha256(path).size(), 64u);
}
