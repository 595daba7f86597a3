// The CUDA working-state backend (kernels/host/ws_cuda_backend.h) against the kernel's CPU
// reference (ws_decode_reference) run on the same tokens, bit for bit: a written fp32 state, two
// advances in a row (the second from the stored codes), outputs and the stored state read back;
// copy() of a stored and of a written state; the refusal of a non-finite state.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "core/working_state/element_codec.h"
#include "kernels/host/ws_cuda_backend.h"
#include "kernels/working_state/ws_decode_reference.h"
#include "tests/gpu/gpu_test_util.h"

using namespace statecheck;
using statecheck::cuda::testing::GpuTest;

namespace {

class WsCudaBackend : public GpuTest {};

// The state of a one-slot reference batch, decoded, [HV, d_v, d_k].
std::vector<float> decoded(const cuda::HostWsBatch& b) {
  const int cb = cuda::ws_code_bytes(b.format), sb = cuda::ws_scale_bytes(b.format);
  const bool int8 =
      b.format.kind == WorkingStateKind::int8 || b.format.kind == WorkingStateKind::int8_sr;
  const size_t n = static_cast<size_t>(b.HV) * b.dv * b.dk;
  std::vector<float> S(n);
  for (size_t e = 0; e < n; ++e) {
    if (cb == 2) {
      uint16_t bits;
      std::memcpy(&bits, b.codes.data() + 2 * e, 2);
      S[e] = ws_bf16_decode(bits);
      continue;
    }
    const size_t col = e / (static_cast<size_t>(b.dv) * b.dk) * b.dk + e % b.dk;
    float s;
    if (sb == 4) {
      std::memcpy(&s, b.scales.data() + 4 * col, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, b.scales.data() + 2 * col, 2);
      s = ws_bf16_decode(bits);
    }
    S[e] = int8 ? ws_int_decode(static_cast<int8_t>(b.codes[e]), s)
                : ws_mul(ws_fp8_e4m3_decode(b.codes[e]), s);
  }
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

TEST(WsCudaBackendFormats, RejectsFormatsWithoutAKernel) {
  WorkingStateFormat f;
  f.kind = WorkingStateKind::int8_ef;
  EXPECT_THROW(cuda::cuda_ws_backend(f), Error);
}

}  // namespace
