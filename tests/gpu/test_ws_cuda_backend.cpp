// The CUDA working-state backend (kernels/host/ws_cuda_backend.h) against the kernel's CPU
// reference (ws_decode_reference) run on the same tokens, bit for bit: a written fp32 state, two
// advances in a row (the second from the stored codes), outputs and the stored state read back;
// copy() of a stored and of a written state; the refusal of a non-finite state; and the kernel's
// CPU reference as a backend (ws_reference_backend) against the CUDA backend.
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "kernels/host/ws_cuda_backend.h"
#include "kernels/host/ws_reference_backend.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_decode_reference.h"
#include "tests/gpu/gpu_test_util.h"

using namespace statecheck;
using statecheck::cuda::testing::GpuTest;

namespace {

class WsCudaBackend : public GpuTest {};

// The state of a one-slot reference batch, decoded, [HV, d_v, d_k].
std::vector<float> decoded(const cuda::HostWsBatch& b) {
  std::vector<float> S(static_cast<size_t>(b.HV) * b.dv * b.dk);
  cuda::ws_decode_slot(b.format, b.HV, b.dv, b.dk, b.codes.data(), b.scales.data(), S.data());
  return S;
}

TEST_F(WsCudaBackend, MatchesTheKernelReferenceBitForBit) {
  RecurrenceShape s;
  s.H = 1, s.HV = 3, s.dk = 64, s.dv = 50, s.gate = GateKind::kda;
  const int T = 6, layer = 4, sequence = 9;
  const LayerInputs in = synthetic_inputs(DriveKind::seed_kda, s, 3, 0, T);
  Rng rng(4);
  std::vector<float> S0(static_cast<size_t>(s.HV) * s.dv * s.dk);
  for (auto& x : S0) x = static_cast<float>(0.06 * rng.normal());
  for (WorkingStateKind kind : {WorkingStateKind::int8, WorkingStateKind::int8_sr,
                                WorkingStateKind::fp8_e4m3_sr, WorkingStateKind::bf16_sr}) {
    WorkingStateFormat f;
    f.kind = kind;
    f.bf16_scale = kind == WorkingStateKind::int8;
    auto backend = cuda::cuda_ws_backend(f, 77);
    EXPECT_EQ(backend->working_state().name(), f.name());
    auto run = backend->bind_at(s, in, 2, layer, sequence);
    run->write(1, S0.data());
    std::vector<float> back(S0.size());
    run->read(1, back.data());
    EXPECT_EQ(std::memcmp(back.data(), S0.data(), back.size() * sizeof(float)), 0);
    std::vector<float> o1(static_cast<size_t>(4) * s.HV * s.dv), o2(2ull * s.HV * s.dv);
    run->advance(1, 0, 4, o1.data());
    std::vector<float> after1(S0.size()), after2(S0.size());
    run->read(1, after1.data());
    run->advance(1, 4, 6, o2.data());
    run->read(1, after2.data());

    // The reference: one slot, the written state as init_state, then the stored codes.
    cuda::HostWsBatch b;
    b.H = s.H, b.HV = s.HV, b.dk = s.dk, b.dv = s.dv, b.gate = s.gate, b.format = f;
    b.seed = 77, b.layer = layer;
    b.codes.assign(S0.size() * cuda::ws_code_bytes(f), 0);
    b.scales.assign(static_cast<size_t>(s.HV) * s.dk * cuda::ws_scale_bytes(f), 0);
    b.slot_ids = {0}, b.seq_index = {sequence};
    auto tokens = [&](int t0, int t1) {
      b.cu_seqlens = {0, t1 - t0};
      b.positions = {t0};
      b.q = bf16_bits(
          std::vector<float>(in.q.begin() + t0 * s.H * s.dk, in.q.begin() + t1 * s.H * s.dk));
      b.k = bf16_bits(
          std::vector<float>(in.k.begin() + t0 * s.H * s.dk, in.k.begin() + t1 * s.H * s.dk));
      b.v = bf16_bits(
          std::vector<float>(in.v.begin() + t0 * s.HV * s.dv, in.v.begin() + t1 * s.HV * s.dv));
      const int gw = s.gate_width();
      b.g.assign(in.g.begin() + t0 * gw, in.g.begin() + t1 * gw);
      b.beta.assign(in.beta.begin() + t0 * s.HV, in.beta.begin() + t1 * s.HV);
    };
    tokens(0, 4);
    b.init_state = S0;
    std::vector<uint16_t> r1(o1.size(), 0xFFFF), r2(o2.size(), 0xFFFF);
    ASSERT_TRUE(cuda::ws_decode_reference(b, r1).empty());
    const std::vector<float> want1 = decoded(b);
    tokens(4, 6);
    b.init_state.clear();
    ASSERT_TRUE(cuda::ws_decode_reference(b, r2).empty());
    const std::vector<float> want2 = decoded(b);
    EXPECT_EQ(std::memcmp(after1.data(), want1.data(), want1.size() * sizeof(float)), 0)
        << f.name();
    EXPECT_EQ(std::memcmp(after2.data(), want2.data(), want2.size() * sizeof(float)), 0)
        << f.name();
    for (size_t e = 0; e < o1.size(); ++e)
      ASSERT_EQ(float_bits(o1[e]), float_bits(float_from_bf16_bits(r1[e]))) << f.name() << " " << e;
    for (size_t e = 0; e < o2.size(); ++e)
      ASSERT_EQ(float_bits(o2[e]), float_bits(float_from_bf16_bits(r2[e]))) << f.name() << " " << e;

    // copy() of a stored state and of a written one.
    run->copy(0, 1);
    std::vector<float> c(S0.size());
    run->read(0, c.data());
    EXPECT_EQ(std::memcmp(c.data(), after2.data(), c.size() * sizeof(float)), 0);
    run->write(1, S0.data());
    run->copy(0, 1);
    run->read(0, c.data());
    EXPECT_EQ(std::memcmp(c.data(), S0.data(), c.size() * sizeof(float)), 0);
    EXPECT_THROW(run->roundtrip(0, parse_codec("int8"), 0), Error);
  }
}

TEST_F(WsCudaBackend, RefusesANonFiniteState) {
  RecurrenceShape s;
  s.H = 1, s.HV = 3, s.dk = 64, s.dv = 50, s.gate = GateKind::gdn;
  const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, 3, 0, 2);
  WorkingStateFormat f;
  f.kind = WorkingStateKind::int8;
  auto run = cuda::cuda_ws_backend(f)->bind(s, in, 1);
  std::vector<float> S(static_cast<size_t>(s.HV) * s.dv * s.dk, 0.01f);
  S[17] = NAN;
  run->write(0, S.data());
  EXPECT_THROW(run->advance(0, 0, 1, nullptr), Error);
}

// The kernel's CPU reference as a backend (ws_reference_backend, the other side of `inloop
// --device cuda`) equals the CUDA backend bit for bit through the same calls: a written state,
// three advances of uneven length (T = 63 in all, d_v not a multiple of the block's rows), a copy
// of a stored state advanced again, on GDN with HV = 3 H and on KDA.
TEST_F(WsCudaBackend, EqualsTheReferenceBackendBitForBit) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    RecurrenceShape s;
    s.H = gate == GateKind::gdn ? 1 : 3, s.HV = 3, s.dk = 128, s.dv = 100, s.gate = gate;
    const int T = 63;
    const LayerInputs in = synthetic_inputs(
        gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, 5, 1, T);
    Rng rng(6);
    std::vector<float> S0(static_cast<size_t>(s.HV) * s.dv * s.dk);
    for (auto& x : S0) x = static_cast<float>(0.05 * rng.normal());
    for (const WorkingStateFormat& f : all_working_state_formats()) {
      if (!cuda::ws_decode_supports(f)) continue;
      auto gpu = cuda::cuda_ws_backend(f, 31)->bind_at(s, in, 2, 3, 2);
      auto ref = cuda::ws_reference_backend(f, 31)->bind_at(s, in, 2, 3, 2);
      EXPECT_EQ(cuda::ws_reference_backend(f, 31)->working_state().name(), f.name());
      std::vector<float> og(static_cast<size_t>(T) * s.HV * s.dv, 1.0f), orf(og.size(), 2.0f);
      std::vector<float> a(S0.size()), b(S0.size());
      gpu->write(0, S0.data()), ref->write(0, S0.data());
      const size_t hv = static_cast<size_t>(s.HV) * s.dv;
      for (auto [t0, t1] : {std::pair{0, 1}, std::pair{1, 40}, std::pair{40, 50}}) {
        gpu->advance(0, t0, t1, og.data() + t0 * hv);
        ref->advance(0, t0, t1, orf.data() + t0 * hv);
        gpu->read(0, a.data()), ref->read(0, b.data());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << f.name() << " after token " << t1;
      }
      gpu->copy(1, 0), ref->copy(1, 0);
      gpu->advance(1, 50, T, og.data() + 50 * hv);
      ref->advance(1, 50, T, orf.data() + 50 * hv);
      gpu->read(1, a.data()), ref->read(1, b.data());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << f.name();
      EXPECT_EQ(std::memcmp(og.data(), orf.data(), og.size() * sizeof(float)), 0) << f.name();
      // And the runs moved the state: the check is not of two untouched copies.
      EXPECT_NE(std::memcmp(a.data(), S0.data(), a.size() * sizeof(float)), 0) << f.name();
    }
  }
}

TEST(WsCudaBackendFormats, RejectsFormatsWithoutAKernel) {
  WorkingStateFormat f;
  f.kind = WorkingStateKind::int8_ef;
  EXPECT_THROW(cuda::cuda_ws_backend(f), Error);
  EXPECT_THROW(cuda::ws_reference_backend(f), Error);
}

}  // namespace
