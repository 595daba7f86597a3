// Reference recurrences: fp32 (Eigen) against the fp64 loop, hand-computed cases and the
// mathematical properties of the gated delta rule (docs/numerics.md, "The recurrence").
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/rng.h"

using namespace statecheck;

namespace {

double frob(const std::vector<double>& a) {
  double s = 0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}

RecurrenceShape awkward(GateKind gate) {
  RecurrenceShape s;
  s.H = 2;
  s.HV = 6;  // HV = 3 H
  s.dk = 60;
  s.dv = 60;
  s.gate = gate;
  s.qk_l2norm = true;
  return s;
}

}  // namespace

// fp32 against fp64 over T = 63 tokens, d = 60, HV = 3H, from a random start state.
//
// Bound: one step is S <- S D (I - beta k k^T) + beta v k^T, and S -> S D (I - beta k k^T) is
// non-expansive in the Frobenius norm (D = diag(exp(g)) <= 1, I - beta k k^T has eigenvalues 1 and
// 1 - beta in [0, 1] for unit k). So an error injected at step t is never amplified later, and the
// final error is at most the sum of the per-step rounding errors. Per step the fp32 code rounds:
// the normalisation of k (relative error <= (d_k + 3) u in k), the decay product (u), the dot
// product S k (<= d_k u ||row|| ||k||), w = beta (v - u) (2 u) and the rank-1 update (2 u). Each
// contributes at most (d_k + 8) u (||S_t||_F + beta ||v_t||); the error in k enters twice (through
// u and through the update), hence the factor 2:
//   ||S32_T - S64_T||_F <= 2 (d_k + 8) u sum_t (||S_t||_F + beta_t ||v_t||).
// The readout adds the state error through ||q|| scale = scale plus (d_k + 2) u ||S_t|| scale.
TEST(Recurrence, Fp32MatchesFp64WithinDerivedBound_d60_T63_HV3H) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    const RecurrenceShape s = awkward(gate);
    const int T = 63;
    const LayerInputs in = synthetic_inputs(
        gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, 42, 0, T);
    const size_t head = size_t(s.dv) * s.dk;
    Rng rng(5);
    std::vector<float> S0(s.HV * head);
    for (auto& x : S0) x = static_cast<float>(0.1 * rng.normal());
    for (int h = 0; h < s.HV; ++h) {
      std::vector<double> S64(S0.begin() + h * head, S0.begin() + (h + 1) * head);
      std::vector<float> S32(S0.begin() + h * head, S0.begin() + (h + 1) * head);
      const double u = std::ldexp(1.0, -24);
      double bound = 0.0, out_bound_extra = 0.0;
      std::vector<double> o64(s.dv);
      std::vector<float> o32(s.dv);
      double max_out_err = 0.0, max_out_allowed = 0.0;
      for (int t = 0; t < T; ++t) {
        double vnorm = 0;
        for (int i = 0; i < s.dv; ++i) {
          const double v = in.v[(size_t(t) * s.HV + h) * s.dv + i];
          vnorm += v * v;
        }
        const double beta = in.beta[size_t(t) * s.HV + h];
        bound += 2.0 * (s.dk + 8) * u * (frob(S64) + beta * std::sqrt(vnorm));
        gated_delta_head_fp64(s, in, h, t, t + 1, S64.data(), o64.data());
        gated_delta_head_fp32(s, in, h, t, t + 1, S32.data(), o32.data());
        const double scale = s.effective_scale();
        out_bound_extra = (s.dk + 2) * u * frob(S64) * scale;
        double out_err = 0;
        for (int i = 0; i < s.dv; ++i) out_err += (o32[i] - o64[i]) * (o32[i] - o64[i]);
        max_out_err = std::max(max_out_err, std::sqrt(out_err));
        max_out_allowed = std::max(max_out_allowed, scale * bound + out_bound_extra);
        double err = 0;
        for (size_t e = 0; e < head; ++e) err += (S32[e] - S64[e]) * (S32[e] - S64[e]);
        ASSERT_LE(std::sqrt(err), bound)
            << "gate " << gate_kind_name(gate) << " head " << h << " t " << t;
      }
      EXPECT_LE(max_out_err, max_out_allowed) << gate_kind_name(gate) << " head " << h;
    }
  }
}

// Hand-computed 2x2 GDN step: S0 = [[1, 2], [3, 4]], exp(g) = 0.5, k = [1, 0], v = [1, 1],
// beta = 0.5, q = [1, 1], scale 1, no normalisation.
//   decay: [[0.5, 1], [1.5, 2]];  u = S k = [0.5, 1.5];  w = 0.5 (v - u) = [0.25, -0.25]
//   S = [[0.75, 1], [1.25, 2]];   o = S q = [1.75, 3.25]
TEST(Recurrence, HandComputed2x2Gdn) {
  RecurrenceShape s{1, 1, 2, 2, GateKind::gdn, false, 1.0f};
  LayerInputs in = LayerInputs::zeros(s, 1);
  in.q = {1, 1};
  in.k = {1, 0};
  in.v = {1, 1};
  in.g = {std::log(0.5f)};
  in.beta = {0.5f};
  std::vector<double> S64 = {1, 2, 3, 4}, o64(2);
  std::vector<float> S32 = {1, 2, 3, 4}, o32(2);
  gated_delta_head_fp64(s, in, 0, 0, 1, S64.data(), o64.data());
  gated_delta_head_fp32(s, in, 0, 0, 1, S32.data(), o32.data());
  // g is log(0.5) rounded to fp32, so exp(g) = 0.5 (1 + O(1e-8)): fp64 tolerance 1e-7.
  const double want[4] = {0.75, 1, 1.25, 2}, want_o[2] = {1.75, 3.25};
  for (int e = 0; e < 4; ++e) {
    EXPECT_NEAR(S64[e], want[e], 1e-7);
    EXPECT_NEAR(S32[e], want[e], 1e-6);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(o64[i], want_o[i], 1e-7);
    EXPECT_NEAR(o32[i], want_o[i], 1e-6);
  }
}

// Hand-computed 2x2 KDA step: exp(g) = [0.5, 0.25] per column, k = [0.6, 0.8], v = [1, 2],
// beta = 1, q = [1, 0].
//   decay: [[0.5, 0.5], [1.5, 1]];  u = [0.7, 1.7];  w = [0.3, 0.3]
//   S = [[0.68, 0.74], [1.68, 1.24]];  o = [0.68, 1.68]
TEST(Recurrence, HandComputed2x2Kda) {
  RecurrenceShape s{1, 1, 2, 2, GateKind::kda, false, 1.0f};
  LayerInputs in = LayerInputs::zeros(s, 1);
  in.q = {1, 0};
  in.k = {0.6f, 0.8f};
  in.v = {1, 2};
  in.g = {std::log(0.5f), std::log(0.25f)};
  in.beta = {1.0f};
  std::vector<double> S64 = {1, 2, 3, 4}, o64(2);
  std::vector<float> S32 = {1, 2, 3, 4}, o32(2);
  gated_delta_head_fp64(s, in, 0, 0, 1, S64.data(), o64.data());
  gated_delta_head_fp32(s, in, 0, 0, 1, S32.data(), o32.data());
  const double want[4] = {0.68, 0.74, 1.68, 1.24}, want_o[2] = {0.68, 1.68};
  for (int e = 0; e < 4; ++e) {
    EXPECT_NEAR(S64[e], want[e], 1e-7);  // k = 0.6f, 0.8f are not exact in fp32
    EXPECT_NEAR(S32[e], want[e], 1e-6);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(o64[i], want_o[i], 1e-7);
    EXPECT_NEAR(o32[i], want_o[i], 1e-6);
  }
}

// Delta-rule property: with g = 0, beta = 1 and unit k, one step makes S k == v exactly (in exact
// arithmetic): S' k = S k + (v - S k) k^T k = v.
TEST(Recurrence, DeltaRuleWritesValueExactly) {
  RecurrenceShape s{1, 1, 60, 60, GateKind::gdn, true, 0.0f};
  LayerInputs in = LayerInputs::zeros(s, 1);
  Rng rng(3);
  for (auto& x : in.k) x = static_cast<float>(rng.normal());
  for (auto& x : in.q) x = static_cast<float>(rng.normal());
  for (auto& x : in.v) x = static_cast<float>(rng.normal());
  in.g = {0.0f};
  in.beta = {1.0f};
  std::vector<double> S(60 * 60);
  for (auto& x : S) x = rng.normal();
  gated_delta_head_fp64(s, in, 0, 0, 1, S.data(), nullptr);
  double knorm = 0;
  for (float x : in.k) knorm += double(x) * x;
  knorm = std::sqrt(knorm + 1e-6);
  for (int i = 0; i < 60; ++i) {
    double sk = 0;
    for (int j = 0; j < 60; ++j) sk += S[i * 60 + j] * in.k[j] / knorm;
    // The 1e-6 epsilon in the normalisation makes ||k|| = 1 - O(1e-8), hence the tolerance.
    EXPECT_NEAR(sk, in.v[i], 1e-6) << i;
  }
}

// Decay only (beta = 0): the step scales column j by exp(g[j]) (KDA) or everything by exp(g) (GDN).
TEST(Recurrence, DecayOnlyScalesColumns) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    RecurrenceShape s{1, 1, 7, 5, gate, true, 0.0f};  // d_k = 7, d_v = 5
    LayerInputs in = LayerInputs::zeros(s, 1);
    Rng rng(4);
    for (auto& x : in.k) x = static_cast<float>(rng.normal());
    for (auto& x : in.g) x = static_cast<float>(-rng.uniform(0.0, 2.0));
    in.beta = {0.0f};
    std::vector<double> S(5 * 7), S0;
    for (auto& x : S) x = rng.normal();
    S0 = S;
    std::vector<float> S32(S.begin(), S.end());
    gated_delta_head_fp64(s, in, 0, 0, 1, S.data(), nullptr);
    gated_delta_head_fp32(s, in, 0, 0, 1, S32.data(), nullptr);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 7; ++j) {
        const double d = std::exp(double(gate == GateKind::gdn ? in.g[0] : in.g[j]));
        EXPECT_NEAR(S[i * 7 + j], S0[i * 7 + j] * d, 1e-15) << gate_kind_name(gate);
        EXPECT_NEAR(S32[i * 7 + j], float(S0[i * 7 + j]) * d, 1e-6) << gate_kind_name(gate);
      }
  }
}

// A perturbation of S shrinks under a step with beta in (0, 1) and g < 0: the difference of two
// runs evolves as P <- P D (I - beta k k^T), a strict contraction.
TEST(Recurrence, PerturbationShrinks) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    RecurrenceShape s = awkward(gate);
    const LayerInputs in = synthetic_inputs(
        gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, 8, 0, 20);
    const size_t head = size_t(s.dv) * s.dk;
    Rng rng(6);
    std::vector<double> A(head), B(head);
    for (size_t e = 0; e < head; ++e) {
      A[e] = 0.1 * rng.normal();
      B[e] = A[e] + 1e-3 * rng.normal();
    }
    double prev = 0;
    for (size_t e = 0; e < head; ++e) prev += (A[e] - B[e]) * (A[e] - B[e]);
    for (int t = 0; t < 20; ++t) {
      gated_delta_head_fp64(s, in, 1, t, t + 1, A.data(), nullptr);
      gated_delta_head_fp64(s, in, 1, t, t + 1, B.data(), nullptr);
      double now = 0;
      for (size_t e = 0; e < head; ++e) now += (A[e] - B[e]) * (A[e] - B[e]);
      EXPECT_LT(now, prev) << gate_kind_name(gate) << " t " << t;
      prev = now;
    }
  }
}

// GVA: value heads hv read key head hv / (HV / H). Running the layer must equal running each head
// with a one-key-head copy of its group's q and k.
TEST(Recurrence, GroupedValueHeadsReadTheirKeyHead) {
  const RecurrenceShape s = awkward(GateKind::gdn);
  const int T = 5;
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, 1, 0, T);
  std::vector<float> S(size_t(s.HV) * s.dv * s.dk, 0.0f);
  std::vector<float> o(size_t(T) * s.HV * s.dv);
  gated_delta_layer_fp32(s, in, 0, T, S.data(), o.data());
  for (int h = 0; h < s.HV; ++h) {
    RecurrenceShape one = s;
    one.H = 1;
    one.HV = 1;
    LayerInputs single = LayerInputs::zeros(one, T);
    const int kh = h / (s.HV / s.H);
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < s.dk; ++j) {
        single.q[t * s.dk + j] = in.q[(size_t(t) * s.H + kh) * s.dk + j];
        single.k[t * s.dk + j] = in.k[(size_t(t) * s.H + kh) * s.dk + j];
      }
      for (int i = 0; i < s.dv; ++i)
        single.v[t * s.dv + i] = in.v[(size_t(t) * s.HV + h) * s.dv + i];
      single.g[t] = in.g[size_t(t) * s.HV + h];
      single.beta[t] = in.beta[size_t(t) * s.HV + h];
    }
    std::vector<float> S1(size_t(s.dv) * s.dk, 0.0f), o1(size_t(T) * s.dv);
    gated_delta_head_fp32(one, single, 0, 0, T, S1.data(), o1.data());
    for (size_t e = 0; e < S1.size(); ++e) ASSERT_EQ(S1[e], S[h * S1.size() + e]) << "head " << h;
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < s.dv; ++i)
        ASSERT_EQ(o1[t * s.dv + i], o[(size_t(t) * s.HV + h) * s.dv + i]);
  }
}

// A bf16 state pool stores the state after every token: the bf16-storage run must equal, bit for
// bit, the fp32 reference stepped one token at a time with the state rounded to bf16
// (round-to-nearest-even, core/dtype/bf16.h, tested in test_dtype.cpp) between tokens, and its
// outputs must be read before that rounding. Rounding only once at the end gives a different
// state (checked, so the comparison can tell the two apart).
TEST(Recurrence, Bf16StorageRoundsStateEveryStep) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    SCOPED_TRACE(gate_kind_name(gate));
    const RecurrenceShape s = awkward(gate);
    const int T = 20;
    const LayerInputs in = synthetic_inputs(
        gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, 2, 0, T);
    const size_t head = size_t(s.dv) * s.dk;
    for (int h : {0, 4}) {  // value heads of key heads 0 and 1
      std::vector<float> S(head, 0.0f), o(size_t(T) * s.dv);
      gated_delta_head_fp32(s, in, h, 0, T, S.data(), o.data(), Dtype::bf16);
      std::vector<float> R(head, 0.0f), o_step(s.dv), F(head, 0.0f);
      for (int t = 0; t < T; ++t) {
        gated_delta_head_fp32(s, in, h, t, t + 1, R.data(), o_step.data());
        for (int i = 0; i < s.dv; ++i)
          ASSERT_EQ(float_bits(o[size_t(t) * s.dv + i]), float_bits(o_step[i]))
              << "head " << h << " t " << t << " output " << i;
        for (float& x : R) x = round_to_bf16(x);
      }
      for (size_t e = 0; e < head; ++e)
        ASSERT_EQ(float_bits(S[e]), float_bits(R[e])) << "head " << h << " element " << e;
      gated_delta_head_fp32(s, in, h, 0, T, F.data(), nullptr);
      size_t differ = 0;
      for (size_t e = 0; e < head; ++e) differ += round_to_bf16(F[e]) != R[e];
      EXPECT_GT(differ, 0u) << "head " << h;
    }
  }
}
