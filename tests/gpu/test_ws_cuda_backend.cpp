// The CUDA working-state backend (kernels/host/ws_cuda_backend.h): write() then read() stores a
// state as the column store of core/working_state/column_store.h does (an implementation written
// apart from the backend's), copy() is bit for bit, advance() refuses a non-finite state and is
// deterministic for a seed.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/drive/drive.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "core/working_state/column_store.h"
#include "kernels/host/ws_cuda_backend.h"
#include "tests/gpu/gpu_test_util.h"

using namespace statecheck;
using statecheck::cuda::testing::GpuTest;

namespace {

class WsCudaBackend : public GpuTest {};

RecurrenceShape small_shape() {
  RecurrenceShape s;
  s.H = 1, s.HV = 3, s.dk = 64, s.dv = 50, s.gate = GateKind::gdn;
  return s;
}

TEST_F(WsCudaBackend, WriteReadMatchesTheColumnStoreAndCopyIsExact) {
  const RecurrenceShape s = small_shape();
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, 3, 0, 8);
  Rng rng(4);
  std::vector<float> S(static_cast<size_t>(s.HV) * s.dv * s.dk);
  for (auto& x : S) x = static_cast<float>(0.06 * rng.normal());
  for (WorkingStateKind kind : {WorkingStateKind::int8, WorkingStateKind::int8_sr,
                                WorkingStateKind::fp8_e4m3, WorkingStateKind::bf16_sr}) {
    WorkingStateFormat f;
    f.kind = kind;
    auto backend = cuda::cuda_ws_backend(f, 77, 2);
    auto run = backend->bind(s, in, 2);
    run->write(1, S.data());
    std::vector<float> got(S.size()), want = S;
    run->read(1, got.data());
    for (int h = 0; h < s.HV; ++h) {
      const RoundingPlace place{rounding_key(77, 2, h), 0, 1};
      for (int j = 0; j < s.dk; ++j)
        ws_store_column(f, want.data() + static_cast<size_t>(h) * s.dv * s.dk, nullptr, s.dv, s.dk,
                        j, place);
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << f.name();
    run->copy(0, 1);
    std::vector<float> copied(S.size());
    run->read(0, copied.data());
    EXPECT_EQ(std::memcmp(copied.data(), got.data(), got.size() * sizeof(float)), 0) << f.name();
    // Two runs of the same tokens from the same state give the same bits; outputs are finite.
    run->advance(0, 0, 5, nullptr);
    std::vector<float> o(static_cast<size_t>(3) * s.HV * s.dv);
    run->advance(1, 0, 5, nullptr);
    std::vector<float> a(S.size()), b(S.size());
    run->read(0, a.data());
    run->read(1, b.data());
    if (!f.stochastic()) {
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << f.name();
    }
    run->advance(1, 5, 8, o.data());
    for (float x : o) ASSERT_TRUE(std::isfinite(x));
    EXPECT_THROW(run->roundtrip(0, parse_codec("int8"), 0), Error);
  }
}

TEST_F(WsCudaBackend, RefusesANonFiniteStateToWrite) {
  const RecurrenceShape s = small_shape();
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, 3, 0, 2);
  WorkingStateFormat f;
  f.kind = WorkingStateKind::int8;
  auto run = cuda::cuda_ws_backend(f)->bind(s, in, 1);
  std::vector<float> S(static_cast<size_t>(s.HV) * s.dv * s.dk, 0.01f);
  S[17] = NAN;
  EXPECT_THROW(run->write(0, S.data()), Error);
}

TEST(WsCudaBackendFormats, RejectsFormatsWithoutAKernel) {
  WorkingStateFormat f;
  f.kind = WorkingStateKind::int8_ef;
  EXPECT_THROW(cuda::cuda_ws_backend(f), Error);
}

}  // namespace
