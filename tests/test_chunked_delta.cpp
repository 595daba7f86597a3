// The chunked (UT-transform) fp64 form against the fp64 token loop, a hand-computed case and the
// FLOP model's hand values (docs/chunked_prefill.md).
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/drive/drive.h"
#include "core/recurrence/chunked_delta.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/rng.h"

using namespace statecheck;

namespace {

RecurrenceShape shape_of(GateKind gate, int H, int HV, int d) {
  RecurrenceShape s;
  s.H = H;
  s.HV = HV;
  s.dk = d;
  s.dv = d;
  s.gate = gate;
  s.qk_l2norm = true;
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

struct Case {
  GateKind gate;
  int T;
  int chunk;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(info.param.gate == GateKind::gdn ? "gdn" : "kda") + "_T" +
         std::to_string(info.param.T) + "_chunk" + std::to_string(info.param.chunk);
}

class ChunkedDelta : public testing::TestWithParam<Case> {};

}  // namespace

// The two forms are the same function in exact arithmetic; in fp64 they differ by rounding only.
// Every term of both is a sum of at most max(d_k, n) products of values of magnitude <= a few
// (unit k and q, |S0| ~ 0.1, |v| <= a few, decays <= 1, the solve's U bounded like the token
// loop's beta (v - S k)), so a difference above 1e-10 of the largest entry would be an algorithm
// error, not rounding (u = 1.1e-16; 1e-10 leaves six orders of magnitude of margin).
TEST_P(ChunkedDelta, MatchesTokenLoop) {
  const Case c = GetParam();
  const RecurrenceShape s = shape_of(c.gate, 2, 6, 40);  // HV = 3 H, d not a power of two
  const LayerInputs in = synthetic_inputs(
      c.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, 7, 0, c.T);
  const size_t head = size_t(s.dv) * s.dk;
  Rng rng(3);
  std::vector<double> S_loop(s.HV * head);
  for (auto& x : S_loop) x = 0.1 * rng.normal();
  std::vector<double> S_chunk = S_loop;
  std::vector<double> o_loop(size_t(c.T) * s.HV * s.dv), o_chunk(o_loop.size());
  gated_delta_layer_fp64(s, in, 0, c.T, S_loop.data(), o_loop.data());
  gated_delta_layer_chunked_fp64(s, in, 0, c.T, c.chunk, S_chunk.data(), o_chunk.data());
  EXPECT_LE(max_abs_diff(S_loop, S_chunk), 1e-10 * max_abs(S_loop));
  EXPECT_LE(max_abs_diff(o_loop, o_chunk), 1e-10 * max_abs(o_loop));
  EXPECT_GT(max_abs(o_loop), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ChunkedDelta,
                         testing::Values(Case{GateKind::gdn, 63, 64}, Case{GateKind::kda, 63, 64},
                                         Case{GateKind::gdn, 130, 64}, Case{GateKind::kda, 130, 64},
                                         Case{GateKind::gdn, 100, 16}, Case{GateKind::kda, 100, 16},
                                         Case{GateKind::gdn, 1, 64}, Case{GateKind::kda, 1, 64},
                                         Case{GateKind::gdn, 37, 1}, Case{GateKind::kda, 37, 1}),
                         case_name);

// A sub-range [t0, t1) of the inputs, in chunks that start at t0, gives the token loop's result
// over the same range (the state carried across two calls is the loop's state).
TEST(ChunkedDeltaRange, TwoCallsEqualOneLoop) {
  const RecurrenceShape s = shape_of(GateKind::kda, 1, 2, 24);
  const LayerInputs in = synthetic_inputs(DriveKind::seed_kda, s, 11, 0, 90);
  const size_t head = size_t(s.dv) * s.dk;
  std::vector<double> S_loop(s.HV * head, 0.0), S_chunk(s.HV * head, 0.0);
  gated_delta_layer_fp64(s, in, 0, 90, S_loop.data(), nullptr);
  gated_delta_layer_chunked_fp64(s, in, 0, 33, 8, S_chunk.data(), nullptr);
  gated_delta_layer_chunked_fp64(s, in, 33, 90, 16, S_chunk.data(), nullptr);
  EXPECT_LE(max_abs_diff(S_loop, S_chunk), 1e-10 * max_abs(S_loop));
}

// d_k = d_v = 1, no normalisation, scale 1, no decay, beta 0.5, k = q = v = 1, S0 = 0:
// token 1: u = 0, S = 0.5, o = 0.5; token 2: u = 0.5, S = 0.5 + 0.5 (1 - 0.5) = 0.75, o = 0.75.
TEST(ChunkedDeltaHand, TwoTokensOneChunk) {
  RecurrenceShape s = shape_of(GateKind::gdn, 1, 1, 1);
  s.qk_l2norm = false;
  s.scale = 1.0f;
  LayerInputs in = LayerInputs::zeros(s, 2);
  for (int t = 0; t < 2; ++t) {
    in.q[t] = in.k[t] = in.v[t] = 1.0f;
    in.beta[t] = 0.5f;
  }
  double S = 0.0;
  double o[2];
  gated_delta_head_chunked_fp64(s, in, 0, 0, 2, 64, &S, o);
  EXPECT_DOUBLE_EQ(o[0], 0.5);
  EXPECT_DOUBLE_EQ(o[1], 0.75);
  EXPECT_DOUBLE_EQ(S, 0.75);
}

TEST(ChunkedDeltaHand, RefusesChunkBelowOne) {
  const RecurrenceShape s = shape_of(GateKind::gdn, 1, 1, 4);
  const LayerInputs in = LayerInputs::zeros(s, 3);
  std::vector<double> S(16, 0.0);
  EXPECT_THROW(gated_delta_head_chunked_fp64(s, in, 0, 0, 3, 0, S.data(), nullptr), Error);
}

// Hand values: T = 128, chunk 64, d = 128: 2 chunks x (4 * 64^2 * 128 + 3 * 64^2 * 128 +
// 6 * 64 * 128^2) = 2 x 9961472; T = 65 adds one chunk of n = 1: 4*128 + 3*128 + 6*128^2 = 99200.
TEST(ChunkedDeltaFlops, HandValues) {
  EXPECT_DOUBLE_EQ(chunked_delta_flops_per_head(128, 64, 128, 128), 19922944.0);
  EXPECT_DOUBLE_EQ(chunked_delta_flops_per_head(65, 64, 128, 128), 9961472.0 + 99200.0);
  EXPECT_DOUBLE_EQ(chunked_delta_flops_per_head(0, 64, 128, 128), 0.0);
}
