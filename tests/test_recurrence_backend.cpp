// The CPU recurrence backends (core/backend/recurrence_backend.h) against the references they
// wrap: the fp32 backend gives gated_delta_layer_fp32's bits, split or not; the fp64 backend the
// fp64 loop's values rounded once to fp32; the round trip the CPU codec's bytes per head; and the
// LayerRun contract (zeroed states, copies, range and index errors).
#include <cstring>
#include <ostream>
#include <vector>

#include <gtest/gtest.h>

#include "core/backend/recurrence_backend.h"
#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/rng.h"

using namespace statecheck;

namespace statecheck {
// GoogleTest prints the parameter in failure messages by this (found by argument-dependent
// lookup), instead of its bytes.
void PrintTo(GateKind gate, std::ostream* os) {
  *os << gate_kind_name(gate);
}
}  // namespace statecheck

namespace {

RecurrenceShape awkward(GateKind gate) {
  RecurrenceShape s;
  s.H = 2, s.HV = 6, s.dk = 60, s.dv = 60, s.gate = gate;  // HV = 3 H, d = 60
  return s;
}

std::vector<float> random_state(const RecurrenceShape& s, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> S(static_cast<size_t>(s.HV) * s.dv * s.dk);
  for (auto& x : S) x = static_cast<float>(0.3 * rng.normal());
  return S;
}

LayerInputs inputs(const RecurrenceShape& s, int T) {
  return synthetic_inputs(s.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s,
                          11, 0, T);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

class CpuBackends : public ::testing::TestWithParam<GateKind> {};

// T = 63 run as [0, 20) + [20, 63) on the backend: the same bits, state and outputs, as one call
// of gated_delta_layer_fp32 over [0, 63), for fp32 and bf16 state storage.
TEST_P(CpuBackends, Fp32BackendIsTheFp32ReferenceBitForBit) {
  const RecurrenceShape s = awkward(GetParam());
  const LayerInputs in = inputs(s, 63);
  for (Dtype storage : {Dtype::fp32, Dtype::bf16}) {
    std::vector<float> S_ref = random_state(s, 3), o_ref(static_cast<size_t>(63) * s.HV * s.dv);
    const std::vector<float> S0 = S_ref;
    gated_delta_layer_fp32(s, in, 0, 63, S_ref.data(), o_ref.data(), storage);
    const auto backend = cpu_fp32_backend(storage);
    const auto run = backend->bind(s, in, 2);
    run->write(1, S0.data());
    std::vector<float> o(o_ref.size()), S(S0.size());
    run->advance(1, 0, 20, o.data());
    run->advance(1, 20, 63, o.data() + static_cast<size_t>(20) * s.HV * s.dv);
    run->read(1, S.data());
    EXPECT_TRUE(same_bits(S, S_ref)) << dtype_name(storage);
    EXPECT_TRUE(same_bits(o, o_ref)) << dtype_name(storage);
  }
}

// The fp64 backend holds fp64 states: its state after 63 tokens is the fp64 loop's rounded once.
TEST_P(CpuBackends, Fp64BackendIsTheFp64Loop) {
  const RecurrenceShape s = awkward(GetParam());
  const LayerInputs in = inputs(s, 63);
  const std::vector<float> S0 = random_state(s, 4);
  std::vector<double> S64(S0.begin(), S0.end()), o64(static_cast<size_t>(63) * s.HV * s.dv);
  gated_delta_layer_fp64(s, in, 0, 63, S64.data(), o64.data());
  const auto run = cpu_fp64_backend()->bind(s, in, 1);
  run->write(0, S0.data());
  std::vector<float> S(S0.size()), o(o64.size());
  run->advance(0, 0, 30, o.data());
  run->advance(0, 30, 63, o.data() + static_cast<size_t>(30) * s.HV * s.dv);
  run->read(0, S.data());
  for (size_t e = 0; e < S.size(); ++e) ASSERT_EQ(S[e], static_cast<float>(S64[e])) << e;
  for (size_t e = 0; e < o.size(); ++e) ASSERT_EQ(o[e], static_cast<float>(o64[e])) << e;
}

// A round trip is roundtrip_head on every head; copy() is exact; a new state is zero.
TEST_P(CpuBackends, RoundtripIsTheCpuCodecPerHead) {
  const RecurrenceShape s = awkward(GetParam());
  const LayerInputs in = inputs(s, 4);
  const std::vector<float> S0 = random_state(s, 5);
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  for (const char* name : {"int8", "fp8_e4m3", "bf16", "int8_bf16_scale"}) {
    const Codec c = parse_codec(name);
    const auto run = cpu_fp32_backend()->bind(s, in, 3);
    std::vector<float> zero(S0.size(), 1.0f);
    run->read(2, zero.data());
    EXPECT_TRUE(same_bits(zero, std::vector<float>(S0.size(), 0.0f)));
    run->write(0, S0.data());
    run->copy(1, 0);
    run->roundtrip(1, c, 7);
    std::vector<float> got(S0.size()), copy(S0.size()), want(S0.size());
    run->read(1, got.data());
    run->read(0, copy.data());
    EXPECT_TRUE(same_bits(copy, S0));
    for (int h = 0; h < s.HV; ++h)
      roundtrip_head(c, S0.data() + h * head, s.dv, s.dk, want.data() + h * head, {7, h});
    EXPECT_TRUE(same_bits(got, want)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Gates, CpuBackends, ::testing::Values(GateKind::gdn, GateKind::kda),
                         [](const auto& info) { return std::string(gate_kind_name(info.param)); });

// Out-of-range tokens and state indices are errors; a non-finite state is refused by the round
// trip naming the layer.
TEST(CpuBackends, BadCallsAreErrors) {
  const RecurrenceShape s = awkward(GateKind::gdn);
  const LayerInputs in = inputs(s, 8);
  const auto run = cpu_fp32_backend()->bind(s, in, 2);
  EXPECT_THROW(run->advance(0, 0, 9, nullptr), Error);
  EXPECT_THROW(run->advance(0, 5, 4, nullptr), Error);
  EXPECT_THROW(run->advance(2, 0, 1, nullptr), Error);
  EXPECT_THROW(run->copy(0, -1), Error);
  EXPECT_THROW(cpu_fp32_backend()->bind(s, in, 0), Error);
  EXPECT_THROW(cpu_fp32_backend(Dtype::int8), Error);
  std::vector<float> S = random_state(s, 6);
  S[5] = std::numeric_limits<float>::infinity();
  run->write(0, S.data());
  try {
    run->roundtrip(0, parse_codec("int8"), 3);
    FAIL() << "a non-finite state passed the round trip";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 3"), std::string::npos) << e.what();
  }
}

// layer_recurrence: the whole-layer seam a model runs through gives the backend's own results.
TEST(CpuBackends, LayerRecurrenceRunsTheBackend) {
  const RecurrenceShape s = awkward(GateKind::kda);
  const LayerInputs in = inputs(s, 17);
  std::vector<float> S_ref = random_state(s, 8), S = S_ref;
  std::vector<float> o_ref(static_cast<size_t>(17) * s.HV * s.dv), o(o_ref.size());
  gated_delta_layer_fp32(s, in, 0, 17, S_ref.data(), o_ref.data(), Dtype::bf16);
  const auto backend = cpu_fp32_backend(Dtype::bf16);
  layer_recurrence (*backend)(0, s, in, S.data(), o.data());
  EXPECT_TRUE(same_bits(S, S_ref));
  EXPECT_TRUE(same_bits(o, o_ref));
}
