// The `chain` experiment's per-head breakdown and contraction model (experiments/chain.cpp) on
// small GDN and KDA models: the heads add up to the whole-state error, one head matches a chain
// run here with the reference recurrence and the codec directly, and the measured saturation
// follows the first-order contraction model (core/metrics/contraction_model.h).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "core/metrics/contraction_model.h"
#include "core/metrics/error_metrics.h"
#include "core/model/model_config.h"
#include "core/recurrence/gated_delta.h"
#include "experiments/experiment.h"
#include "tests/small_models.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::TempDir;
namespace fs = std::filesystem;

namespace {

// 3 GDN layers, 2 key heads and 4 value heads (GVA) of 32 x 32.
ModelConfig small_gdn_model() {
  return test_support::small_gdn_model(32, 32);
}

// 3 KDA layers (MLA at 1-based layer 4), 4 heads of 32 x 32.
ModelConfig small_kda_model() {
  const nlohmann::json j = {{"model_type", "kimi_linear"},
                            {"num_hidden_layers", 4},
                            {"kv_lora_rank", 64},
                            {"qk_rope_head_dim", 16},
                            {"linear_attn_config",
                             {{"num_heads", 4},
                              {"head_dim", 32},
                              {"short_conv_kernel_size", 4},
                              {"full_attn_layers", {4}}}}};
  return parse_model_config(j, "small-kda", 1);
}

Summary run_chain_to(const ModelConfig& m, const Options& o, const std::string& path) {
  Summary summary;
  H5Writer file(path);
  run_chain(o, m, file, summary);
  file.commit();
  return summary;
}

// Reference and chained state [d_v, d_k] of head h of layer l at T, checkpoints every `spacing`
// tokens, run here from zero with the drive's inputs (docs/experiments.md `chain`).
struct HeadRun {
  std::vector<float> ref, chained;
};

HeadRun run_head(const ModelConfig& m, const Options& o, DriveKind drive, int l, int h,
                 int spacing) {
  const RecurrenceShape s = recurrence_shape(m);
  const LayerInputs in = synthetic_inputs(drive, s, o.seed, l, o.chain_tokens);
  const Codec codec = parse_codec("int8", Dtype::fp32);
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  HeadRun r{std::vector<float>(head, 0.0f), std::vector<float>(head, 0.0f)};
  std::vector<float> tmp(head);
  for (int t = 0; t < o.chain_tokens; ++t) {
    gated_delta_head_fp32(s, in, h, t, t + 1, r.ref.data(), nullptr);
    gated_delta_head_fp32(s, in, h, t, t + 1, r.chained.data(), nullptr);
    if ((t + 1) % spacing == 0) {
      roundtrip_head(codec, r.chained.data(), s.dv, s.dk, tmp.data(), {l, h});
      r.chained.swap(tmp);
    }
  }
  return r;
}

double relerr(const HeadRun& r) {
  return compare(r.ref.data(), r.chained.data(), r.ref.size()).relerr();
}

Options chain_options() {
  Options o;
  o.experiment = "chain";
  o.chain_tokens = 256;
  o.threads = 2;
  return o;
}

}  // namespace

namespace {

// Runs `chain` on a small model and checks its per-head output against sums done here: the heads
// add up to the whole state; one head's errors match a chain run here bit for bit; every head's
// contraction rates match the drive's gates; every head's model ratio and the whole state's
// match the per-column one-checkpoint errors of a run here, accumulated at those rates.
void check_per_head_breakdown(const ModelConfig& m, const std::string& drive_name,
                              DriveKind drive) {
  SCOPED_TRACE(drive_name);
  const TempDir tmp("chain_" + drive_name);
  Options o = chain_options();
  o.drive = parse_drive(drive_name, "");
  const Summary summary = run_chain_to(m, o, tmp.file("chain.h5"));
  const RecurrenceShape s = recurrence_shape(m);
  const int L = m.linear_layer_count(), HV = s.HV, dk = s.dk, dv = s.dv, heads = L * HV;
  const size_t Ls = L, HVs = HV, dks = dk;
  std::vector<size_t> shape;
  const std::vector<double> whole = read_hdf5_doubles(tmp.file("chain.h5"), "chain/relerr");
  const std::vector<double> per_head =
      read_hdf5_doubles(tmp.file("chain.h5"), "chain/per_head/relerr", &shape);
  ASSERT_EQ(shape, (std::vector<size_t>{8, Ls, HVs}));  // [n, layer, head]
  const std::vector<double> share =
      read_hdf5_doubles(tmp.file("chain.h5"), "chain/per_head/energy_share");
  const std::vector<double> ratio =
      read_hdf5_doubles(tmp.file("chain.h5"), "chain/per_head/saturation_ratio");
  const std::vector<double> decay =
      read_hdf5_doubles(tmp.file("chain.h5"), "chain/per_head/mean_log_decay");
  const std::vector<double> rate =
      read_hdf5_doubles(tmp.file("chain.h5"), "chain/per_head/contraction_rate", &shape);
  ASSERT_EQ(shape, (std::vector<size_t>{Ls, HVs, dks}));  // [layer, head, key channel]
  const std::vector<double> model =
      read_hdf5_doubles(tmp.file("chain.h5"), "chain/per_head/model_saturation_ratio");
  ASSERT_EQ(whole.size(), 8u);
  ASSERT_EQ(share.size(), static_cast<size_t>(heads));
  ASSERT_EQ(ratio.size(), static_cast<size_t>(heads));
  ASSERT_EQ(decay.size(), static_cast<size_t>(heads));
  ASSERT_EQ(model.size(), static_cast<size_t>(heads));

  // The reference state at T is the same for every n, so ||err||^2 / ||ref||^2 of the whole state
  // is the energy-weighted mean of the heads' relerr^2, for every n.
  double share_sum = 0;
  for (double x : share) {
    EXPECT_GE(x, 0.0);
    share_sum += x;
  }
  EXPECT_NEAR(share_sum, 1.0, 1e-12);
  for (int i = 0; i < 8; ++i) {
    double sq = 0;
    for (int lh = 0; lh < heads; ++lh)
      sq += share[lh] * per_head[i * heads + lh] * per_head[i * heads + lh];
    EXPECT_NEAR(std::sqrt(sq), whole[i], 1e-12 * whole[i]) << "n index " << i;
  }

  // Head 2 of layer 1 against a chain run here, for n = 32 and 128 (every 2 tokens): the same
  // operations in the same order, so the same bits.
  {
    const int l = 1, h = 2, lh = l * HV + h;
    const double n32 = relerr(run_head(m, o, drive, l, h, o.chain_tokens / 32));
    const double n128 = relerr(run_head(m, o, drive, l, h, o.chain_tokens / 128));
    EXPECT_DOUBLE_EQ(per_head[5 * heads + lh], n32);
    EXPECT_DOUBLE_EQ(per_head[7 * heads + lh], n128);
    EXPECT_DOUBLE_EQ(ratio[lh], n128 / n32);
  }

  // Every head: n = 1 error, gates and the model, from sums done here. The rates from the drive's
  // g ([T, HV] for GDN, [T, HV, d_k] for KDA) and beta ([T, HV]); each key column's squared error
  // after the one checkpoint, accumulated at its rate over 128 and over 32 checkpoints.
  const bool kda = s.gate == GateKind::kda;
  double all128 = 0, all32 = 0;
  for (int l = 0; l < L; ++l) {
    const LayerInputs in = synthetic_inputs(drive, s, o.seed, l, o.chain_tokens);
    for (int h = 0; h < HV; ++h) {
      const int lh = l * HV + h;
      const HeadRun n1 = run_head(m, o, drive, l, h, o.chain_tokens);
      EXPECT_DOUBLE_EQ(per_head[0 * heads + lh], relerr(n1)) << "head " << lh;
      EXPECT_GT(relerr(n1), 0.0);  // int8 is lossy
      double w = 0, g_head = 0;
      for (int t = 0; t < o.chain_tokens; ++t) {
        const double b = in.beta[static_cast<size_t>(t) * HV + h];
        w += (1.0 - (1.0 - b) * (1.0 - b)) / o.chain_tokens;
      }
      double a128 = 0, a32 = 0;
      for (int j = 0; j < dk; ++j) {
        double g = 0;
        for (int t = 0; t < o.chain_tokens; ++t)
          g += in.g[kda ? (static_cast<size_t>(t) * HV + h) * dk + j
                        : static_cast<size_t>(t) * HV + h] /
               o.chain_tokens;
        g_head += g / dk;
        const double r = -2.0 * g + w / dk;
        EXPECT_NEAR(rate[static_cast<size_t>(lh) * dk + j], r, 1e-12 * r)
            << "head " << lh << ", channel " << j;
        double e1 = 0;  // column j's squared error after the one checkpoint
        for (int row = 0; row < dv; ++row) {
          const double d = static_cast<double>(n1.chained[row * dk + j]) - n1.ref[row * dk + j];
          e1 += d * d;
        }
        a128 += e1 * accumulated_checkpoints(r, o.chain_tokens, o.chain_tokens / 128);
        a32 += e1 * accumulated_checkpoints(r, o.chain_tokens, o.chain_tokens / 32);
      }
      EXPECT_NEAR(decay[lh], g_head, 1e-9 * std::abs(g_head)) << "head " << lh;
      EXPECT_LT(decay[lh], 0.0);
      EXPECT_NEAR(model[lh], std::sqrt(a128 / a32), 1e-9 * model[lh]) << "head " << lh;
      all128 += a128;
      all32 += a32;
    }
  }
  EXPECT_NEAR(summary.get("chain.saturation_ratio_model"), std::sqrt(all128 / all32),
              1e-9 * std::sqrt(all128 / all32));
  EXPECT_DOUBLE_EQ(
      summary.get("chain.saturation_ratio_over_model"),
      summary.get("chain.saturation_ratio") / summary.get("chain.saturation_ratio_model"));

  // Summary keys: min / median / max over the heads' ratios (an even count of heads: the median
  // is the mean of the middle two).
  ASSERT_EQ(heads % 2, 0);
  std::vector<double> sorted = ratio;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(summary.get("chain.saturation_ratio_head_min"), sorted.front());
  EXPECT_EQ(summary.get("chain.saturation_ratio_head_median"),
            0.5 * (sorted[heads / 2 - 1] + sorted[heads / 2]));
  EXPECT_EQ(summary.get("chain.saturation_ratio_head_max"), sorted.back());
}

}  // namespace

TEST(ChainExperiment, PerHeadBreakdownOfGdnMatchesSumsDoneHere) {
  check_per_head_breakdown(small_gdn_model(), "init-gdn", DriveKind::init_gdn);
}

// KDA on init-kda: each key channel decays at its own rate, so the model's per-column weights
// matter (on GDN they cancel within a head).
TEST(ChainExperiment, PerHeadBreakdownOfKdaMatchesSumsDoneHere) {
  check_per_head_breakdown(small_kda_model(), "init-kda", DriveKind::init_kda);
}

// The first-order model predicts the whole state's saturation, per key channel for KDA (whose
// channels decay at different rates on init-kda) and per head for GDN, on every seed tried: the
// claim behind the gate chain.saturation_ratio_over_model < 1.05. Without contraction the model
// is sqrt(128 / 32) = 2 whatever the state, and the measured ablation is close to it.
TEST(ChainExperiment, SaturationFollowsTheContractionModel) {
  struct Case {
    const char* drive;
    ModelConfig model;
  };
  for (const Case& c : {Case{"init-gdn", small_gdn_model()}, Case{"init-kda", small_kda_model()},
                        Case{"seed-kda", small_kda_model()}})
    for (uint64_t seed : {0, 1}) {
      const TempDir tmp(std::string("chain_model_") + c.drive);
      Options o = chain_options();
      o.drive = parse_drive(c.drive, "");
      o.seed = seed;
      const Summary s = run_chain_to(c.model, o, tmp.file("chain.h5"));
      const double measured = s.get("chain.saturation_ratio");
      EXPECT_GT(measured, 1.0) << c.drive << " seed " << seed;
      EXPECT_NEAR(s.get("chain.saturation_ratio_over_model"), 1.0, 0.05)
          << c.drive << " seed " << seed << ": measured " << measured << ", model "
          << s.get("chain.saturation_ratio_model");
      EXPECT_NEAR(s.get("chain.ablation_no_contraction.saturation_ratio_model"), 2.0, 1e-3)
          << c.drive;
      // The ablation (g = 0, beta * 1e-3) measured: each checkpoint adds its own rounding error
      // and nothing removes it, so independent errors add in energy and relerr(n) ~ sqrt(n):
      // relerr(128) / relerr(32) = sqrt(4) = 2. Departures: the residual delta-rule contraction
      // (included in the model above, which is 2 within 1e-3); the statistics of the sums (each
      // squared uniform rounding error has a coefficient of variation 0.89, and n = 32 already sums
      // 32 x 3 x 4 x 1024 of them: 0.14%); the rest, up to 2.3% on these six cases (1.954 to
      // 2.005), we attribute to correlated errors of consecutive checkpoints (the state moves by
      // only a few quantisation steps in the 2 tokens between n = 128 checkpoints). Hence
      // [1.9, 2.1]; the contracting drives give 1.65 to 1.81 on this short run (T = 256), so 1.9
      // also tells the ablation from the drive as is.
      const double ablation = s.get("chain.ablation_no_contraction.saturation_ratio");
      EXPECT_GT(ablation, 1.9) << c.drive << " seed " << seed;
      EXPECT_LT(ablation, 2.1) << c.drive << " seed " << seed;
    }
}
