// The logit-level metrics (core/tinylm/logit_metrics.h) and the `kl` experiment end to end on the
// shipped tiny model (quick protocol).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/codec/codec.h"
#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/tinylm/logit_metrics.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "tests/h5_read.h"

using namespace statecheck;
using statecheck::test_support::read_h5_string_attr;
using statecheck::test_support::read_h5_strings;
namespace fs = std::filesystem;

// Hand-computed: p = softmax(0, 0) = (1/2, 1/2), q = softmax(ln 3, 0) = (3/4, 1/4):
// KL(p || q) = 1/2 ln((1/2)/(3/4)) + 1/2 ln((1/2)/(1/4)) = 1/2 ln(4/3).
TEST(LogitMetrics, KlTwoClassesHandComputed) {
  const float p[2] = {0.0f, 0.0f};
  const float q[2] = {static_cast<float>(std::log(3.0)), 0.0f};
  // q's logit is ln 3 rounded to fp32: the softmax moves by at most that rounding (~1.2e-7
  // relative).
  EXPECT_NEAR(kl_nats(p, q, 2), 0.5 * std::log(4.0 / 3.0), 1e-7);
  // Shifting all logits by a constant leaves the distribution, hence KL = 0 up to fp64 rounding.
  const float shifted[2] = {5.0f, 5.0f};
  EXPECT_NEAR(kl_nats(p, shifted, 2), 0.0, 1e-15);
  EXPECT_EQ(kl_nats(q, q, 2), 0.0);  // identical logits: exactly zero
}

TEST(LogitMetrics, LogSoftmaxNormalisesAndSurvivesLargeLogits) {
  std::vector<float> z(256);
  for (int v = 0; v < 256; ++v) z[v] = 1000.0f + 0.25f * static_cast<float>(v % 7);
  std::vector<double> lp(256);
  log_softmax(z.data(), 256, lp.data());
  double s = 0;
  for (double x : lp) s += std::exp(x);
  EXPECT_NEAR(s, 1.0, 1e-12);
  EXPECT_EQ(argmax(z.data(), 256), 6);  // first of the ties at 1000 + 1.5
}

TEST(KlExperiment, QuickRunOnTheShippedModel) {
  const fs::path dir = fs::temp_directory_path() / ("statecheck_kl_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "kl.h5").string();
  Options o;
  o.experiment = "kl";
  o.quick = true;
  o.threads = 2;
  Summary s;
  {
    H5Writer file(path);
    run_kl(o, load_model("qwen3.5-35b-a3b"), file, s);
    file.commit();
  }
  // The identity codec and its chained version leave the continuation bit-identical (the forward
  // pass is split-invariant), so KL is exactly 0 and every greedy byte agrees.
  for (const char* v : {"fp32", "fp32_chained64"}) {
    EXPECT_EQ(s.get(std::string("kl.") + v + ".max_nats"), 0.0) << v;
    EXPECT_EQ(s.get(std::string("kl.") + v + ".top1_agreement"), 1.0) << v;
  }
  const std::vector<std::string> variants = {"bf16",
                                             "int8_bf16_scale",
                                             "int8_fp32_scale",
                                             "fp8_e4m3",
                                             "bf16_chained64",
                                             "int8_bf16_scale_chained64",
                                             "int8_fp32_scale_chained64",
                                             "fp8_e4m3_chained64",
                                             "bf16_state_pool"};
  for (const auto& v : variants) {
    const double mean = s.get("kl." + v + ".mean_nats"), p99 = s.get("kl." + v + ".p99_nats"),
                 mx = s.get("kl." + v + ".max_nats"), top1 = s.get("kl." + v + ".top1_agreement");
    EXPECT_GT(mean, 0.0) << v << ": a lossy state must move the distribution";
    EXPECT_LE(mean, mx) << v;
    EXPECT_LE(p99, mx) << v;
    EXPECT_GE(top1, 0.0) << v;
    EXPECT_LE(top1, 1.0) << v;
  }
  EXPECT_TRUE(std::isfinite(s.get("kl.ref_bits_per_byte")));

  // The ordering bf16 < int8 < fp8_e4m3, first in the state error, from the codecs' resolution:
  // bf16 keeps 8 significant bits (relative rounding error <= 2^-8, RMS about 2^-8 / sqrt(3) of
  // an element's magnitude); int8 rounds to a step of amax_j / 127, an RMS error of
  // amax_j / (127 sqrt(12)) per element, a few times 2^-8 of the column's RMS since amax_j is a
  // few RMS; E4M3 keeps 4 significant bits (relative error up to 2^-4). Then in KL: for a small
  // logit perturbation delta, KL(p_ref || p) = delta^T F delta / 2 + O(delta^3) (F the softmax
  // Fisher matrix), and delta is linear in the state error to first order, so the mean KL ratio
  // of two codecs is about the square of their state-error ratio: the factors of ~5 and ~2.5 in
  // state error become ~25 and ~6 in KL, far from a tie. The squared-ratio model is asserted
  // within a factor 2 (the error directions of two codecs differ, so only the scale is modelled).
  const std::vector<std::string> names = read_h5_strings(path, "/kl/variants");
  const std::vector<double> relerr = read_hdf5_doubles(path, "kl/state_relerr");
  ASSERT_EQ(names.size(), relerr.size());
  auto state_relerr = [&](const std::string& v) {
    const auto it = std::find(names.begin(), names.end(), v);
    EXPECT_NE(it, names.end()) << v;
    return it == names.end() ? NAN : relerr[it - names.begin()];
  };
  EXPECT_EQ(state_relerr("fp32"), 0.0);
  EXPECT_LE(state_relerr("bf16"), std::ldexp(1.0, -8));
  EXPECT_EQ(s.get("kl.fp32.mean_nats"), 0.0);
  for (const char* i8 : {"int8_bf16_scale", "int8_fp32_scale"}) {
    SCOPED_TRACE(i8);
    const std::string k = std::string("kl.") + i8;
    EXPECT_LT(state_relerr("bf16"), state_relerr(i8));
    EXPECT_LT(state_relerr(i8), state_relerr("fp8_e4m3"));
    EXPECT_LT(s.get("kl.bf16.mean_nats"), s.get(k + ".mean_nats"));
    EXPECT_LT(s.get(k + ".mean_nats"), s.get("kl.fp8_e4m3.mean_nats"));
    for (const char* pair : {"bf16", "fp8_e4m3"}) {
      const double kl_ratio =
          s.get(k + ".mean_nats") / s.get(std::string("kl.") + pair + ".mean_nats");
      const double err_ratio = state_relerr(i8) / state_relerr(pair);
      EXPECT_GT(kl_ratio, 0.5 * err_ratio * err_ratio) << "against " << pair;
      EXPECT_LT(kl_ratio, 2.0 * err_ratio * err_ratio) << "against " << pair;
    }
    // The serving gate of data/thresholds.json: the greedy byte changes at fewer than 1% of the
    // positions.
    EXPECT_GT(s.get(k + ".top1_agreement"), 0.99);
  }
  EXPECT_NEAR(s.get("kl.int8_bf16_scale_over_fp8_e4m3.mean_nats"),
              s.get("kl.int8_bf16_scale.mean_nats") / s.get("kl.fp8_e4m3.mean_nats"), 1e-12);

  // Result file: per-position means average to the overall mean; every dataset is documented.
  std::vector<size_t> shape;
  const std::vector<double> pos = read_hdf5_doubles(path, "kl/kl_mean_position", &shape);
  const std::vector<double> mean = read_hdf5_doubles(path, "kl/mean_nats");
  ASSERT_EQ(shape.size(), 2u);
  ASSERT_EQ(shape[0], mean.size());
  for (size_t v = 0; v < shape[0]; ++v) {
    double m = 0;
    for (size_t t = 0; t < shape[1]; ++t) m += pos[v * shape[1] + t] / shape[1];
    EXPECT_NEAR(m, mean[v], 1e-12 + 1e-9 * mean[v]) << "variant " << v;
  }
  // KL of int8_bf16_scale at every continuation position, recomputed here from the tiny model's
  // forward pass and an fp64 softmax, against kl_mean_position and kl_max_position. The quick
  // protocol (experiments/kl.cpp): starts 0 and |text| - (256 + 128 + 1) (the longest prefix, the
  // continuation and the byte after it), prefixes 128 and 256, a continuation of Tc = 128 bytes;
  // the state at the prefix end goes through decode(encode(.)) once, the conv state is kept.
  {
    const int Tc = 128;
    const auto vit = std::find(names.begin(), names.end(), "int8_bf16_scale");
    ASSERT_NE(vit, names.end());
    const size_t vi = vit - names.begin();
    ASSERT_EQ(shape[1], size_t(Tc));
    const std::vector<double> max_pos = read_hdf5_doubles(path, "kl/kl_max_position");
    const TinyLM model = TinyLM::load(default_tinylm_config_path());
    const TinyLMConfig& c = model.config();
    const std::vector<uint8_t> text = read_bytes(c.input_file("eval_text", c.eval_text_file));
    const Codec codec = parse_codec("int8", Dtype::bf16);
    // log softmax in fp64: z - max - log(sum exp(z - max)).
    auto log_probs = [](const float* z) {
      const double m = *std::max_element(z, z + 256);
      double sum = 0;
      for (int v = 0; v < 256; ++v) sum += std::exp(double(z[v]) - m);
      std::vector<double> lp(256);
      for (int v = 0; v < 256; ++v) lp[v] = double(z[v]) - m - std::log(sum);
      return lp;
    };
    std::vector<double> want_mean(Tc, 0.0), want_max(Tc, 0.0);
    for (const int start : {0, static_cast<int>(text.size()) - (256 + Tc + 1)})
      for (const int P : {128, 256}) {
        TinyLMState at = TinyLMState::zeros(c);
        model.forward(text.data() + start, P, at);
        TinyLMState ref = at, hat = at;
        hat.temporal = decode(encode(codec, at.temporal));
        const std::vector<float> z_ref = model.forward(text.data() + start + P, Tc, ref);
        const std::vector<float> z_hat = model.forward(text.data() + start + P, Tc, hat);
        for (int t = 0; t < Tc; ++t) {
          const std::vector<double> lr = log_probs(&z_ref[size_t(t) * 256]),
                                    lh = log_probs(&z_hat[size_t(t) * 256]);
          double kl = 0;
          for (int v = 0; v < 256; ++v) kl += std::exp(lr[v]) * (lr[v] - lh[v]);
          want_mean[t] += kl / 4;
          want_max[t] = std::max(want_max[t], kl);
        }
      }
    // fp64 rounding of the sums: about 256 terms of size |log p| (< 30) times 2^-53, 1e-12 nats.
    for (int t = 0; t < Tc; ++t) {
      EXPECT_NEAR(pos[vi * Tc + t], want_mean[t], 1e-12 + 1e-9 * want_mean[t]) << "position " << t;
      EXPECT_NEAR(max_pos[vi * Tc + t], want_max[t], 1e-12 + 1e-9 * want_max[t])
          << "position " << t;
    }
    EXPECT_GT(*std::max_element(want_max.begin(), want_max.end()), 1e-9);
  }

  for (const char* ds :
       {"variants", "variant_descriptions", "prefix_lengths", "start_offsets", "kl_mean_position",
        "kl_max_position", "kl_mean_prefix", "top1_agreement_prefix", "mean_nats", "p99_nats",
        "max_nats", "top1_agreement", "state_relerr", "ref_bits_per_byte", "ref_top1_accuracy"}) {
    for (const char* attr : {"description", "units"}) {
      bool found = false;
      read_h5_string_attr(path, std::string("/kl/") + ds, attr, &found);
      EXPECT_TRUE(found) << ds << " has no string attribute " << attr;
    }
  }
}

TEST(KlExperiment, CudaDeviceIsRefusedWithAReason) {
#ifdef STATECHECK_HAVE_CUDA
  GTEST_SKIP() << "CUDA build: kl --device cuda runs the GPU recurrence";
#endif
  Options o;
  o.quick = true;
  o.device = Device::cuda;
  Summary s;
  H5Writer file(
      (fs::temp_directory_path() / ("statecheck_kl_cuda_" + std::to_string(::getpid()) + ".h5"))
          .string());
  try {
    run_kl(o, load_model("qwen3.5-35b-a3b"), file, s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
}
