// The CUDA recurrence backend (kernels/host/cuda_backend.h) against the CPU fp32 backend on the
// same inputs: states and outputs within the tolerance of bf16 outputs and fp32 arithmetic in
// another order, the round trip bit for bit the CPU codec's on the same GPU state, split launches
// bit for bit one launch, states not advanced left as they were.
#include <cmath>
#include <cstring>
#include <ostream>
#include <vector>

#include <gtest/gtest.h>

#include "core/backend/recurrence_backend.h"
#include "core/drive/drive.h"
#include "core/metrics/error_metrics.h"
#include "core/util/rng.h"
#include "kernels/host/cuda_backend.h"
#include "tests/gpu/gpu_test_util.h"

using namespace statecheck;
using statecheck::cuda::testing::GpuTest;

namespace {

struct Case {
  GateKind gate;
  int H, HV, dk, dv, T;
  const char* name;
};

// GoogleTest prints the parameter in failure messages by this (found by argument-dependent
// lookup), instead of its bytes: the case's name, as in the test's name.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class CudaBackend : public GpuTest, public ::testing::WithParamInterface<Case> {};

}  // namespace

TEST_P(CudaBackend, MatchesTheCpuBackend) {
  const Case c = GetParam();
  RecurrenceShape s;
  s.H = c.H, s.HV = c.HV, s.dk = c.dk, s.dv = c.dv, s.gate = c.gate;
  const LayerInputs in = synthetic_inputs(
      c.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, 21, 0, c.T);
  Rng rng(22);
  std::vector<float> S0(static_cast<size_t>(s.HV) * s.dv * s.dk);
  for (auto& x : S0) x = static_cast<float>(0.2 * rng.normal());
  const auto cpu = cpu_fp32_backend();
  const auto gpu = cuda::cuda_backend();
  const auto rc = cpu->bind(s, in, 1);
  const auto rg = gpu->bind(s, in, 3);
  rc->write(0, S0.data());
  rg->write(0, S0.data());
  rg->write(2, S0.data());
  const size_t outs = static_cast<size_t>(c.T) * s.HV * s.dv;
  std::vector<float> oc(outs), og(outs, NAN), Sc(S0.size()), Sg(S0.size());
  rc->advance(0, 0, c.T, oc.data());
  rg->advance(0, 0, c.T, og.data());
  rc->read(0, Sc.data());
  rg->read(0, Sg.data());
  // fp32 arithmetic in another order: far under 1e-4 over T tokens; outputs are bf16 (2^-9).
  EXPECT_LT(compare(Sc.data(), Sg.data(), Sc.size()).relerr(), 1e-4);
  EXPECT_LT(compare(oc.data(), og.data(), outs).relerr(), 8e-3);
  // The same tokens in two launches: bit for bit one launch (the state stays fp32 in the pool).
  rg->copy(1, 2);
  rg->advance(1, 0, c.T / 2, nullptr);
  rg->advance(1, c.T / 2, c.T, nullptr);
  std::vector<float> Sg2(S0.size()), S_untouched(S0.size());
  rg->read(1, Sg2.data());
  EXPECT_EQ(std::memcmp(Sg.data(), Sg2.data(), Sg.size() * sizeof(float)), 0);
  rg->read(2, S_untouched.data());
  EXPECT_EQ(std::memcmp(S_untouched.data(), S0.data(), S0.size() * sizeof(float)), 0);
  // Round trip through the checkpoint kernels: the CPU codec's bytes on the same state.
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  for (const char* name : {"int8", "int8_bf16_scale", "fp8_e4m3", "fp8_e4m3_raw", "bf16", "fp32"}) {
    const Codec codec = parse_codec(name);
    rg->copy(1, 0);
    rg->roundtrip(1, codec, 0);
    std::vector<float> got(S0.size()), want(S0.size());
    rg->read(1, got.data());
    for (int h = 0; h < s.HV; ++h)
      roundtrip_head(codec, Sg.data() + h * head, s.dv, s.dk, want.data() + h * head, {0, h});
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaBackend,
    ::testing::Values(Case{GateKind::gdn, 2, 4, 128, 128, 63, "gdn_d128_T63"},
                      Case{GateKind::kda, 2, 6, 64, 64, 33, "kda_d64_HV3H_T33"},
                      Case{GateKind::gdn, 1, 3, 60, 40, 17, "gdn_dk60_dv40_T17"}),
    [](const auto& info) { return std::string(info.param.name); });
