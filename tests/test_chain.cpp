// The `chain` experiment's per-head breakdown (experiments/chain.cpp) on a small GDN model: the
// heads add up to the whole-state error, and head (layer 1, head 2) matches a chain run here with
// the reference recurrence and the codec directly.
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
#include "core/metrics/error_metrics.h"
#include "core/model/model_config.h"
#include "core/recurrence/gated_delta.h"
#include "experiments/experiment.h"

using namespace statecheck;
namespace fs = std::filesystem;

namespace {

// 3 GDN layers (full attention at layer 3), 1 key head and 3 value heads (HV = 3H) of 32 x 32.
ModelConfig small_gdn_model() {
  const nlohmann::json j = {{"model_type", "qwen3_next"},
                            {"num_hidden_layers", 4},
                            {"full_attention_interval", 4},
                            {"linear_num_key_heads", 1},
                            {"linear_num_value_heads", 3},
                            {"linear_key_head_dim", 32},
                            {"linear_value_head_dim", 32},
                            {"linear_conv_kernel_dim", 4},
                            {"num_key_value_heads", 1},
                            {"head_dim", 64},
                            {"hidden_size", 64}};
  return parse_model_config(j, "small-gdn", 1);
}

// Error of head `h` of layer `l` at T after checkpoints every `spacing` tokens, run here from zero
// with the drive's inputs (the experiment's definition, spec experiments.md `chain`).
double chained_head_relerr(const ModelConfig& m, const Options& o, int l, int h, int spacing) {
  const RecurrenceShape s = RecurrenceShape::of_model(m);
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, o.seed, l, o.chain_tokens);
  const Codec codec = parse_codec("int8", ScaleDtype::fp32);
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  std::vector<float> ref(head, 0.0f), chained(head, 0.0f), tmp(head);
  for (int t = 0; t < o.chain_tokens; ++t) {
    gated_delta_head_fp32(s, in, h, t, t + 1, ref.data(), nullptr);
    gated_delta_head_fp32(s, in, h, t, t + 1, chained.data(), nullptr);
    if ((t + 1) % spacing == 0) {
      roundtrip_head(codec, chained.data(), s.dv, s.dk, tmp.data(), {l, h});
      chained.swap(tmp);
    }
  }
  return compare(ref.data(), chained.data(), head).relerr();
}

}  // namespace

TEST(ChainExperiment, PerHeadBreakdownAddsUpToTheWholeStateAndMatchesADirectRun) {
  const fs::path dir =
      fs::temp_directory_path() / ("statecheck_chain_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "chain.h5").string();
  const ModelConfig m = small_gdn_model();
  Options o;
  o.experiment = "chain";
  o.chain_tokens = 256;
  o.threads = 2;
  Summary summary;
  {
    H5Writer file(path);
    run_chain(o, m, file, summary);
    file.commit();
  }
  const int L = 3, HV = 3, heads = L * HV;
  std::vector<size_t> shape;
  const std::vector<double> whole = read_hdf5_doubles(path, "chain/relerr");
  const std::vector<double> per_head = read_hdf5_doubles(path, "chain/per_head/relerr", &shape);
  ASSERT_EQ(shape, (std::vector<size_t>{8, 3, 3}));
  const std::vector<double> share = read_hdf5_doubles(path, "chain/per_head/energy_share");
  const std::vector<double> ratio = read_hdf5_doubles(path, "chain/per_head/saturation_ratio");
  const std::vector<double> decay = read_hdf5_doubles(path, "chain/per_head/mean_log_decay");
  ASSERT_EQ(whole.size(), 8u);
  ASSERT_EQ(share.size(), static_cast<size_t>(heads));
  ASSERT_EQ(ratio.size(), static_cast<size_t>(heads));
  ASSERT_EQ(decay.size(), static_cast<size_t>(heads));

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

  // Index order [n, layer, head]: head 2 of layer 1 against a chain run here, for n = 1 (one
  // checkpoint, at T) and n = 128 (every 2 tokens). The same operations in the same order, so
  // the same bits.
  const int lh = 1 * HV + 2;
  const double n1 = chained_head_relerr(m, o, 1, 2, o.chain_tokens);
  const double n32 = chained_head_relerr(m, o, 1, 2, o.chain_tokens / 32);
  const double n128 = chained_head_relerr(m, o, 1, 2, o.chain_tokens / 128);
  EXPECT_DOUBLE_EQ(per_head[0 * heads + lh], n1);
  EXPECT_DOUBLE_EQ(per_head[5 * heads + lh], n32);
  EXPECT_DOUBLE_EQ(per_head[7 * heads + lh], n128);
  EXPECT_DOUBLE_EQ(ratio[lh], n128 / n32);
  EXPECT_GT(n1, 0.0);  // int8 is lossy

  // Mean log-decay of that head, from the drive's gates g [T, HV].
  const LayerInputs in =
      synthetic_inputs(DriveKind::init_gdn, RecurrenceShape::of_model(m), o.seed, 1, 256);
  double g = 0;
  for (int t = 0; t < 256; ++t) g += in.g[static_cast<size_t>(t) * HV + 2];
  EXPECT_NEAR(decay[lh], g / 256, 1e-12 * std::abs(g / 256));
  EXPECT_LT(decay[lh], 0.0);

  // Summary keys: min / median / max over the heads' ratios.
  std::vector<double> sorted = ratio;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(summary.get("chain.saturation_ratio_head_min"), sorted.front());
  EXPECT_EQ(summary.get("chain.saturation_ratio_head_median"), sorted[heads / 2]);
  EXPECT_EQ(summary.get("chain.saturation_ratio_head_max"), sorted.back());
  EXPECT_TRUE(
      std::isfinite(summary.get("chain.ablation_no_contraction.saturation_ratio_head_max")));
  fs::remove_all(dir);
}
