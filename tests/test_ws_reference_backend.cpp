// The working-state decode kernel's CPU reference as a recurrence backend
// (kernels/host/ws_reference_backend.h), on the host, without a GPU: its states against a value
// computed independently in double for one token from a zero state; splitting a run into launches
// changes nothing (the roundings are keyed by absolute token position); copy(), write()/read(),
// the refusal of a non-finite state, and the checks of bind_at. Its agreement with the kernel
// itself is tests/gpu/test_ws_cuda_backend.cpp. Needs the kernels library (a CUDA build).
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/backend/recurrence_backend.h"
#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "core/working_state/format.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/host/ws_reference_backend.h"
#include "kernels/working_state/ws_decode.h"
#endif

using namespace statecheck;

namespace {

#ifdef STATECHECK_HAVE_CUDA
RecurrenceShape shape(GateKind gate) {
  RecurrenceShape s;
  s.H = 2, s.HV = 4, s.dk = 64, s.dv = 40, s.gate = gate;
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
#endif

// One token from a zero state: S_ij = beta v_i k_j / ||k|| exactly (the decay multiplies zero, the
// delta term is v itself), stored in bf16; q, k, v are read as bf16. Each stored element is
// within one bf16 rounding (2^-8 relative) plus the fp32 roundings of the step (a few 2^-24) of
// the value computed in double from the bf16 inputs.
TEST(WsReferenceBackend, OneTokenFromZeroIsTheOuterProductInBf16) {
#ifndef STATECHECK_HAVE_CUDA
  GTEST_SKIP() << "host build: the kernel's CPU reference is part of the kernels library (CUDA "
                  "build)";
#else
  const RecurrenceShape s = shape(GateKind::gdn);
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, 7, 0, 1);
  WorkingStateFormat f;
  f.kind = WorkingStateKind::bf16;
  auto run = cuda::ws_reference_backend(f, 1)->bind(s, in, 1);
  std::vector<float> S(static_cast<size_t>(s.HV) * s.dv * s.dk, 0.0f);
  run->write(0, S.data());
  run->advance(0, 0, 1, nullptr);
  run->read(0, S.data());
  const int group = s.HV / s.H;
  double worst = 0.0;
  for (int h = 0; h < s.HV; ++h) {
    const int kh = h / group;
    double kk = 0.0;
    for (int j = 0; j < s.dk; ++j) {
      const double kj = float_from_bf16_bits(bf16_bits_from_float(in.k[kh * s.dk + j]));
      kk += kj * kj;
    }
    const double beta = in.beta[h];
    for (int i = 0; i < s.dv; ++i) {
      const double vi = float_from_bf16_bits(bf16_bits_from_float(in.v[h * s.dv + i]));
      for (int j = 0; j < s.dk; ++j) {
        const double kj = float_from_bf16_bits(bf16_bits_from_float(in.k[kh * s.dk + j]));
        const double want = beta * vi * kj / std::sqrt(kk + 1e-6);
        const double got = S[(static_cast<size_t>(h) * s.dv + i) * s.dk + j];
        const double bound = std::ldexp(std::fabs(want), -8) + std::ldexp(std::fabs(want), -20);
        EXPECT_LE(std::fabs(got - want), bound) << "h " << h << " i " << i << " j " << j;
        worst = std::max(worst, std::fabs(got - want) / std::max(std::fabs(want), 1e-30));
      }
    }
  }
  EXPECT_GT(worst, 0.0);  // the values were rounded to bf16: the check is not of an identity
#endif
}

// Splitting a run of T = 37 tokens into launches (1 + 20 + 16) gives the same states and outputs
// bit for bit as one launch, for every format with a kernel: the stochastic roundings are keyed
// by absolute position and sequence, not by the launch. A copy advanced equals its source
// advanced; a written state reads back as written.
TEST(WsReferenceBackend, LaunchesSplitAnywhereGiveTheSameBits) {
#ifndef STATECHECK_HAVE_CUDA
  GTEST_SKIP() << "host build: the kernel's CPU reference is part of the kernels library (CUDA "
                  "build)";
#else
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    const RecurrenceShape s = shape(gate);
    const int T = 37;
    const LayerInputs in = synthetic_inputs(
        gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, 9, 2, T);
    Rng rng(3);
    std::vector<float> S0(static_cast<size_t>(s.HV) * s.dv * s.dk);
    for (auto& x : S0) x = static_cast<float>(0.05 * rng.normal());
    for (const WorkingStateFormat& f : all_working_state_formats()) {
      if (!cuda::ws_decode_supports(f)) continue;
      auto backend = cuda::ws_reference_backend(f, 11);
      auto one = backend->bind_at(s, in, 2, 5, 3), split = backend->bind_at(s, in, 2, 5, 3);
      const size_t hv = static_cast<size_t>(s.HV) * s.dv;
      std::vector<float> o1(T * hv, 1.0f), o2(T * hv, 2.0f), a(S0.size()), b(S0.size());
      one->write(0, S0.data()), split->write(0, S0.data());
      split->read(0, b.data());
      EXPECT_TRUE(same_bits(b, S0)) << f.name();
      one->advance(0, 0, T, o1.data());
      split->advance(0, 0, 1, o2.data());
      split->copy(1, 0);
      split->advance(0, 1, 21, o2.data() + hv);
      split->advance(0, 21, T, o2.data() + 21 * hv);
      one->read(0, a.data()), split->read(0, b.data());
      EXPECT_TRUE(same_bits(a, b)) << f.name() << (gate == GateKind::gdn ? " gdn" : " kda");
      EXPECT_TRUE(same_bits(o1, o2)) << f.name();
      EXPECT_FALSE(same_bits(a, S0)) << f.name();  // the run moved the state
      // The copy taken after token 1, advanced over the rest in one launch, ends where both did.
      split->advance(1, 1, T, nullptr);
      split->read(1, b.data());
      EXPECT_TRUE(same_bits(a, b)) << f.name();
    }
  }
#endif
}

// A non-finite stored state is refused with an Error naming the head and token and leaves the
// state as it was; a bad place or format is refused at once.
TEST(WsReferenceBackend, RefusesNonFiniteStatesAndBadPlaces) {
#ifndef STATECHECK_HAVE_CUDA
  GTEST_SKIP() << "host build: the kernel's CPU reference is part of the kernels library (CUDA "
                  "build)";
#else
  const RecurrenceShape s = shape(GateKind::gdn);
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, 7, 0, 4);
  WorkingStateFormat f;
  f.kind = WorkingStateKind::int8;
  auto backend = cuda::ws_reference_backend(f, 1);
  auto run = backend->bind(s, in, 1);
  std::vector<float> S(static_cast<size_t>(s.HV) * s.dv * s.dk, 0.01f);
  run->write(0, S.data());
  run->advance(0, 0, 2, nullptr);  // a stored int8 state
  S[3 * s.dv * s.dk + 5] = NAN;    // value head 3
  run->write(0, S.data());
  try {
    run->advance(0, 2, 4, nullptr);
    ADD_FAILURE() << "a NaN state was advanced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("value head 3, token 2;"), std::string::npos) << e.what();
  }
  std::vector<float> kept(S.size());
  run->read(0, kept.data());  // the written state is kept as it was given
  EXPECT_EQ(std::memcmp(kept.data(), S.data(), S.size() * sizeof(float)), 0);
  auto fresh = backend->bind(s, in, 1);
  try {
    fresh->advance(0, 3, 5, nullptr);  // past the 4 bound tokens
    ADD_FAILURE() << "tokens past the bound ones were run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the bound 4 tokens"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(backend->bind_at(s, in, 1, 65536, 0), Error);
  EXPECT_THROW(backend->bind_at(s, in, 1, 0, -1), Error);
  EXPECT_THROW(backend->bind(s, in, 0), Error);
  WorkingStateFormat ef;
  ef.kind = WorkingStateKind::int8_ef;
  EXPECT_THROW(cuda::ws_reference_backend(ef), Error);
#endif
}

}  // namespace
