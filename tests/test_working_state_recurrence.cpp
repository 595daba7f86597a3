// Working-state formats in the reference recurrences (core/recurrence/gated_delta.h, the
// cpu_working_state_backend): fp32 and bf16 formats bit for bit the plain recurrence, fp32 and
// fp64 implementations of every format within a derived bound, stochastic roundings reproducible
// for a seed and keyed by it, error-feedback residuals carried with the state.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/backend/recurrence_backend.h"
#include "core/drive/drive.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/rng.h"
#include "core/working_state/column_store.h"

using namespace statecheck;

namespace {

RecurrenceShape awkward(GateKind gate) {
  RecurrenceShape s;
  s.H = 2;
  s.HV = 6;  // HV = 3 H
  s.dk = 60;
  s.dv = 60;
  s.gate = gate;
  return s;
}

LayerInputs inputs(const RecurrenceShape& s, int T) {
  return synthetic_inputs(s.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s,
                          42, 0, T);
}

std::vector<float> random_state(const RecurrenceShape& s, double sigma, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> S(static_cast<size_t>(s.HV) * s.dv * s.dk);
  for (float& x : S) x = static_cast<float>(sigma * rng.normal());
  return S;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(WorkingStateRecurrence, Fp32FormatIsThePlainRecurrenceBitForBit_d60_T63_HV3H) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    const RecurrenceShape s = awkward(gate);
    const LayerInputs in = inputs(s, 63);
    std::vector<float> S1 = random_state(s, 0.1, 1), S2 = S1, o1(63 * s.HV * s.dv), o2(o1.size());
    gated_delta_layer_fp32(s, in, 0, 63, S1.data(), o1.data());
    gated_delta_layer_fp32_ws(s, in, 0, 63, S2.data(), nullptr, o2.data(),
                              {WorkingStateFormat{}, 9, 0, 0});
    EXPECT_TRUE(same_bits(S1, S2)) << gate_kind_name(gate);
    EXPECT_TRUE(same_bits(o1, o2)) << gate_kind_name(gate);
    // The bf16 format is the bf16 state storage of the plain recurrence.
    std::vector<float> B1 = random_state(s, 0.1, 1), B2 = B1;
    gated_delta_layer_fp32(s, in, 0, 63, B1.data(), o1.data(), Dtype::bf16);
    gated_delta_layer_fp32_ws(s, in, 0, 63, B2.data(), nullptr, o2.data(),
                              {{WorkingStateKind::bf16, false}, 9, 0, 0});
    EXPECT_TRUE(same_bits(B1, B2)) << gate_kind_name(gate);
    EXPECT_TRUE(same_bits(o1, o2)) << gate_kind_name(gate);
  }
}

TEST(WorkingStateRecurrence, BackendWithFp32FormatIsThePlainBackends) {
  const RecurrenceShape s = awkward(GateKind::kda);
  const LayerInputs in = inputs(s, 40);
  const std::vector<float> S0 = random_state(s, 0.1, 2);
  for (bool fp64 : {false, true}) {
    const auto plain = fp64 ? cpu_fp64_backend() : cpu_fp32_backend();
    const auto ws = cpu_working_state_backend(WorkingStateFormat{}, 5, fp64);
    std::vector<float> a(S0.size()), b(S0.size()), oa(40 * s.HV * s.dv), ob(oa.size());
    auto ra = plain->bind(s, in, 1);
    auto rb = ws->bind_at(s, in, 1, 3, 1);
    ra->write(0, S0.data()), rb->write(0, S0.data());
    ra->advance(0, 0, 40, oa.data()), rb->advance(0, 0, 40, ob.data());
    ra->read(0, a.data()), rb->read(0, b.data());
    EXPECT_TRUE(same_bits(a, b)) << fp64;
    EXPECT_TRUE(same_bits(oa, ob)) << fp64;
  }
}

// One token from the same stored state, fp32 and fp64 steps, then the same fp32 store.
// Bound per element: the unquantized steps differ by at most d = max |a - b| (measured between
// the plain fp32 and fp64 steps from that state); a rounding onto a grid adds at most one gap
// (|Q(a) - Q(b)| <= |a - b| + gap, for round to nearest and for stochastic rounding with the same
// word, both monotone in the value); a scale from the column's amax moves by at most d / code_max,
// which moves a decoded value by at most |code| d / code_max <= d. Hence |a_F - b_F| <= 2 d + gap
// with gap = scale_j (int8), 2^-3 |x| + 2^-9 scale_j (E4M3: 3 mantissa bits, subnormal step),
// 2^-7 |x| (bf16), |x| <= |b| + d. A rounding flips only where a value lies within d of a grid
// boundary: with d / gap near 1e-4 here, well under 1% of the elements; a format implemented
// differently in the two loops (another word, another scale) would flip about half.
TEST(WorkingStateRecurrence, Fp32AndFp64AgreeWithinDerivedBoundEveryFormat) {
  const RecurrenceShape s = awkward(GateKind::kda);
  const LayerInputs in = inputs(s, 8);
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  for (const WorkingStateFormat& f : all_working_state_formats()) {
    if (f.kind == WorkingStateKind::fp32) continue;
    std::vector<float> S0 = random_state(s, 0.1, 3);
    for (int h = 0; h < s.HV; ++h)
      ws_store_head(f, S0.data() + h * head, std::vector<float>(head, 0.0f).data(), s.dv, s.dk,
                    {rounding_key(7, 0, h), 4, 0});
    std::vector<float> p32 = S0, w32 = S0, e32(S0.size(), 0.0f), e64(S0.size(), 0.0f);
    std::vector<double> p64(S0.begin(), S0.end()), w64 = p64;
    const WorkingStateRun run{f, 7, 0, 0};
    gated_delta_layer_fp32(s, in, 5, 6, p32.data(), nullptr);
    gated_delta_layer_fp64(s, in, 5, 6, p64.data(), nullptr);
    gated_delta_layer_fp32_ws(s, in, 5, 6, w32.data(), e32.data(), nullptr, run);
    gated_delta_layer_fp64_ws(s, in, 5, 6, w64.data(), e64.data(), nullptr, run);
    double d = 0.0;
    for (size_t n = 0; n < p32.size(); ++n) d = std::max(d, std::fabs(p32[n] - p64[n]));
    int flips = 0;
    for (int h = 0; h < s.HV; ++h)
      for (int j = 0; j < s.dk; ++j) {
        double amax = 0.0;
        for (int i = 0; i < s.dv; ++i)
          amax = std::max(amax, std::fabs(p64[h * head + i * s.dk + j]) + d);
        for (int i = 0; i < s.dv; ++i) {
          const size_t n = h * head + i * s.dk + j;
          const double x = std::fabs(p64[n]) + d;
          double gap = 0.0;
          if (f.kind == WorkingStateKind::bf16 || f.kind == WorkingStateKind::bf16_sr)
            gap = std::ldexp(x, -7);
          else if (f.kind == WorkingStateKind::fp8_e4m3 || f.kind == WorkingStateKind::fp8_e4m3_sr)
            gap = std::ldexp(x, -3) + std::ldexp(amax / 448.0, -9);
          else
            gap = amax / 127.0 * (1 + 1e-6);
          const double diff = std::fabs(w32[n] - w64[n]);
          EXPECT_LE(diff, (2 * d + gap) * (1 + 1e-6)) << f.name() << " element " << n;
          if (diff > 2 * d) ++flips;
        }
      }
    EXPECT_LT(flips, static_cast<int>(0.01 * s.HV * head)) << f.name();
  }
}

TEST(WorkingStateRecurrence, StochasticRoundingReproducibleAndKeyedBySeedAndLayer) {
  const RecurrenceShape s = awkward(GateKind::gdn);
  const LayerInputs in = inputs(s, 30);
  const std::vector<float> S0 = random_state(s, 0.1, 4);
  auto run = [&](const WorkingStateFormat& f, uint64_t seed, int layer) {
    const auto b = cpu_working_state_backend(f, seed);
    auto r = b->bind_at(s, in, 1, layer, 0);
    r->write(0, S0.data());
    r->advance(0, 0, 30, nullptr);
    std::vector<float> out(S0.size());
    r->read(0, out.data());
    return out;
  };
  for (WorkingStateKind k :
       {WorkingStateKind::bf16_sr, WorkingStateKind::int8_sr, WorkingStateKind::fp8_e4m3_sr}) {
    const WorkingStateFormat f{k, false};
    const std::vector<float> a = run(f, 11, 2);
    EXPECT_TRUE(same_bits(a, run(f, 11, 2))) << f.name();
    EXPECT_FALSE(same_bits(a, run(f, 12, 2))) << f.name();
    EXPECT_FALSE(same_bits(a, run(f, 11, 3))) << f.name();
  }
}

// The residual travels with the state: a copy advanced gives what the original gives, and
// write() starts a state with a zero residual (so the first token stores like int8).
TEST(WorkingStateRecurrence, ErrorFeedbackResidualIsCopiedWithTheState) {
  const RecurrenceShape s = awkward(GateKind::kda);
  const LayerInputs in = inputs(s, 20);
  const std::vector<float> S0 = random_state(s, 0.1, 6);
  for (WorkingStateKind k : {WorkingStateKind::int8_ef, WorkingStateKind::int8_ef_int4}) {
    const auto b = cpu_working_state_backend({k, false}, 1);
    auto r = b->bind(s, in, 3);
    r->write(0, S0.data());
    r->advance(0, 0, 10, nullptr);
    r->copy(1, 0);
    std::vector<float> mid(S0.size());
    r->read(0, mid.data());
    r->write(2, mid.data());  // same state, zero residual
    for (int st = 0; st < 3; ++st) r->advance(st, 10, 20, nullptr);
    std::vector<float> a(S0.size()), c(S0.size()), w(S0.size());
    r->read(0, a.data()), r->read(1, c.data()), r->read(2, w.data());
    EXPECT_TRUE(same_bits(a, c));
    EXPECT_FALSE(same_bits(a, w));  // the carried residual changed the stored codes
    // First token from a zero residual stores exactly as int8.
    const auto i8 = cpu_working_state_backend({WorkingStateKind::int8, false}, 1);
    auto r8 = i8->bind(s, in, 1), re = b->bind(s, in, 1);
    r8->write(0, S0.data()), re->write(0, S0.data());
    r8->advance(0, 0, 1, nullptr), re->advance(0, 0, 1, nullptr);
    std::vector<float> x8(S0.size()), xe(S0.size());
    r8->read(0, x8.data()), re->read(0, xe.data());
    EXPECT_TRUE(same_bits(x8, xe));
  }
}

TEST(WorkingStateRecurrence, NonFiniteStateIsRefusedNamingLayerHeadToken) {
  const RecurrenceShape s = awkward(GateKind::gdn);
  const LayerInputs in = inputs(s, 4);
  std::vector<float> S0 = random_state(s, 0.1, 8);
  S0[static_cast<size_t>(s.dv) * s.dk * 2 + 7] = NAN;  // head 2
  const auto b = cpu_working_state_backend({WorkingStateKind::int8, false}, 1);
  auto r = b->bind_at(s, in, 1, 4, 0);
  r->write(0, S0.data());
  try {
    r->advance(0, 0, 4, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 4, head 2, token 0"), std::string::npos)
        << e.what();
  }
}

TEST(WorkingStateFormat, NamesParseAndBytes) {
  for (const WorkingStateFormat& f : all_working_state_formats())
    EXPECT_EQ(parse_working_state_format(f.name()).kind, f.kind);
  EXPECT_TRUE(parse_working_state_format("int8+bf16scale").bf16_scale);
  EXPECT_THROW(parse_working_state_format("int3"), Error);
  EXPECT_THROW(parse_working_state_format("bf16+bf16scale"), Error);
  // d_v = 128, fp32 scales: int8 1 + 4/128; int8-ef + 4; int8-ef-int4 + 0.5 + 4/128.
  EXPECT_DOUBLE_EQ(parse_working_state_format("int8").bytes_per_element(128), 1.03125);
  EXPECT_DOUBLE_EQ(parse_working_state_format("int8-ef").bytes_per_element(128), 5.03125);
  EXPECT_DOUBLE_EQ(parse_working_state_format("int8-ef-int4").bytes_per_element(128), 1.5625);
  EXPECT_DOUBLE_EQ(parse_working_state_format("fp8_e4m3+bf16scale").bytes_per_element(128),
                   1.015625);
  EXPECT_DOUBLE_EQ(parse_working_state_format("bf16-sr").bytes_per_element(128), 2.0);
}
