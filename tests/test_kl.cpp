// The logit-level metrics (core/tinylm/logit_metrics.h) and the `kl` experiment end to end on the
// shipped tiny model (quick protocol).
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/tinylm/logit_metrics.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "experiments/experiment.h"

using namespace statecheck;
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

namespace {

bool has_string_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return false;
  const hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  const hid_t t = H5Aget_type(a);
  const bool ok = H5Tget_class(t) == H5T_STRING;
  H5Tclose(t);
  H5Aclose(a);
  return ok;
}

}  // namespace

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
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (const char* ds :
       {"variants", "variant_descriptions", "prefix_lengths", "start_offsets", "kl_mean_position",
        "kl_max_position", "kl_mean_prefix", "top1_agreement_prefix", "mean_nats", "p99_nats",
        "max_nats", "top1_agreement", "state_relerr", "ref_bits_per_byte", "ref_top1_accuracy"}) {
    const hid_t d = H5Dopen2(f, (std::string("/kl/") + ds).c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0) << ds;
    EXPECT_TRUE(has_string_attr(d, "description")) << ds;
    EXPECT_TRUE(has_string_attr(d, "units")) << ds;
    H5Dclose(d);
  }
  H5Fclose(f);
}

TEST(KlExperiment, CudaDeviceIsRefusedWithAReason) {
#ifdef STATECHECK_HAVE_CUDA
  GTEST_SKIP() << "CUDA build: kl --device cuda runs the GPU recurrence";
#endif
  Options o;
  o.quick = true;
  o.device = "cuda";
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
