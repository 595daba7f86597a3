// The working-state decode kernel (kernels/working_state/ws_decode.h) against its CPU reference
// bit for bit (codes, scales, outputs) for every format on awkward shapes (d_v not a multiple of
// the 32-row groups, T = 63, HV = 3 H, d_k 32 / 64 / 128), non-contiguous distinct slot ids,
// sequences without tokens, outputs prefilled with NaN bits, guard regions after every buffer,
// untouched slots compared with the pool before the launch; the refusal of a non-finite state;
// the working-slot copy. CPU-only checks of the reference itself (no GPU needed): one token
// against the fp64 loop within the format's half-step bound, the exponential against libm, and
// the stochastic rounding's independence of the slot a sequence sits in.
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/rng.h"
#include "core/working_state/element_codec.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_decode_reference.h"
#include "kernels/working_state/ws_step_math.h"
#include "tests/gpu/gpu_test_util.h"

using namespace statecheck;
using namespace statecheck::cuda;
using statecheck::cuda::testing::GpuTest;
using statecheck::cuda::testing::Guarded;

namespace {

constexpr int kSlots = 12;

struct Case {
  const char* name;
  int H, HV, dk, dv;
  GateKind gate;
  WorkingStateKind kind;
  bool bf16_scale;
  std::vector<int> lengths;  // tokens per sequence
  bool qk_l2norm = true;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

// gtest prints a case by its name instead of its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

WorkingStateFormat format_of(const Case& c) {
  WorkingStateFormat f;
  f.kind = c.kind;
  f.bf16_scale = c.bf16_scale;
  return f;
}

// A pool of kSlots random stored states of the format (valid codes, positive scales of states of
// about 0.06 rms), distinct shuffled slot ids, drive inputs (GDN: init-gdn, KDA: seed-kda), and
// per-sequence positions and run indices that differ from the slot and batch order.
HostWsBatch make_batch(const Case& c, uint64_t seed) {
  HostWsBatch b;
  b.H = c.H, b.HV = c.HV, b.dk = c.dk, b.dv = c.dv, b.gate = c.gate, b.qk_l2norm = c.qk_l2norm;
  b.format = format_of(c);
  b.seed = 0x123456789ABCDEFull ^ seed;
  b.layer = 3;
  const size_t elems = static_cast<size_t>(kSlots) * c.HV * c.dv * c.dk;
  const int cb = ws_code_bytes(b.format), sb = ws_scale_bytes(b.format);
  Rng rng(seed);
  b.codes.resize(elems * cb);
  for (size_t e = 0; e < elems; ++e) {
    if (cb == 2) {
      const uint16_t bits = bf16_bits_from_float(static_cast<float>(0.06 * rng.normal()));
      std::memcpy(b.codes.data() + 2 * e, &bits, 2);
    } else if (b.format.kind == WorkingStateKind::int8 ||
               b.format.kind == WorkingStateKind::int8_sr) {
      b.codes[e] =
          static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(rng.below(255)) - 127));
    } else {
      uint8_t code;
      do code = static_cast<uint8_t>(rng.below(256));
      while ((code & 0x7F) == 0x7F);
      b.codes[e] = code;
    }
  }
  const size_t nscales = static_cast<size_t>(kSlots) * c.HV * c.dk;
  b.scales.resize(nscales * sb);
  const float code_max = cb == 1 && (b.format.kind == WorkingStateKind::int8 ||
                                     b.format.kind == WorkingStateKind::int8_sr)
                             ? 127.0f
                             : 448.0f;
  for (size_t j = 0; j < nscales; ++j) {
    const float s = static_cast<float>(rng.uniform(0.05, 0.2)) / code_max;
    if (sb == 4) std::memcpy(b.scales.data() + 4 * j, &s, 4);
    if (sb == 2) {
      const uint16_t bits = bf16_bits_from_float(s);
      std::memcpy(b.scales.data() + 2 * j, &bits, 2);
    }
  }
  std::vector<int32_t> ids(kSlots);
  std::iota(ids.begin(), ids.end(), 0);
  for (int i = kSlots - 1; i > 0; --i) std::swap(ids[i], ids[rng.below(i + 1)]);
  const int seqs = static_cast<int>(c.lengths.size());
  b.slot_ids.assign(ids.begin(), ids.begin() + seqs);
  b.cu_seqlens = {0};
  for (int len : c.lengths) b.cu_seqlens.push_back(b.cu_seqlens.back() + len);
  for (int s = 0; s < seqs; ++s) {
    b.positions.push_back(static_cast<int32_t>(rng.below(5000)));
    b.seq_index.push_back(1000 + 7 * (seqs - s));
  }
  const int T = b.cu_seqlens.back();
  RecurrenceShape shape;
  shape.H = c.H, shape.HV = c.HV, shape.dk = c.dk, shape.dv = c.dv, shape.gate = c.gate;
  const LayerInputs in = synthetic_inputs(
      c.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, shape, seed, 0, T);
  b.q = bf16_bits(in.q), b.k = bf16_bits(in.k), b.v = bf16_bits(in.v);  // drive values: bf16-exact
  b.g = in.g, b.beta = in.beta;
  return b;
}

struct DeviceBatch {
  Guarded<uint8_t> codes, scales;
  Guarded<int32_t> slots, cu, positions, seq_index;
  Guarded<uint16_t> q, k, v, o;
  Guarded<float> g, beta;
  Guarded<int32_t> error_info;
  DeviceBatch(const HostWsBatch& b, const std::vector<uint16_t>& o0)
      : codes(b.codes),
        scales(b.scales.empty() ? std::vector<uint8_t>(16) : b.scales),
        slots(b.slot_ids),
        cu(b.cu_seqlens),
        positions(b.positions),
        seq_index(b.seq_index),
        q(b.q),
        k(b.k),
        v(b.v),
        o(o0),
        g(b.g),
        beta(b.beta),
        error_info(std::vector<int32_t>(4, 0)) {}
  WsDecodeArgs args(const HostWsBatch& b) {
    WsDecodeArgs a;
    a.num_seqs = static_cast<int>(b.slot_ids.size());
    a.H = b.H, a.HV = b.HV, a.dk = b.dk, a.dv = b.dv, a.gate = b.gate, a.qk_l2norm = b.qk_l2norm;
    a.format = b.format;
    a.codes = codes.data();
    a.scales = b.scales.empty() ? nullptr : scales.data();
    a.pool_slots = kSlots;
    a.slot_ids = slots.data(), a.cu_seqlens = cu.data();
    a.positions = positions.data(), a.seq_index = seq_index.data();
    a.seed = b.seed, a.layer = b.layer;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.g = g.data(), a.beta = beta.data();
    a.o = o.data();
    a.error_info = error_info.data();
    return a;
  }
  bool guards_intact() const {
    return codes.guard_intact() && scales.guard_intact() && o.guard_intact() &&
           error_info.guard_intact();
  }
};

// Index of the first differing byte, or -1.
template <typename T>
long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
  return -1;
}

// The stored state of `slot` in batch b, decoded, [HV, d_v, d_k].
std::vector<float> slot_state(const HostWsBatch& b, int slot) {
  const size_t n = static_cast<size_t>(b.HV) * b.dv * b.dk;
  const size_t cs = n * ws_code_bytes(b.format),
               ss = static_cast<size_t>(b.HV) * b.dk * ws_scale_bytes(b.format);
  std::vector<float> S(n);
  ws_decode_slot(b.format, b.HV, b.dv, b.dk, b.codes.data() + slot * cs,
                 b.scales.data() + slot * ss, S.data());
  return S;
}

// The fp32 scale of key channel j of head h in `slot`.
float fp32_scale(const HostWsBatch& b, int slot, int h, int j) {
  float s;
  std::memcpy(&s, b.scales.data() + 4 * ((static_cast<size_t>(slot) * b.HV + h) * b.dk + j), 4);
  return s;
}

// The first index where bf16 bit patterns differ, taking any two NaNs as equal (the device's
// canonical NaN is 0x7FFF, the host's default NaN 0xFFC0; their payloads are not part of the
// contract); 0 when the sizes differ, -1 when none.
long first_difference_nan_equal(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return 0;
  const auto is_nan = [](uint16_t x) { return (x & 0x7F80u) == 0x7F80u && (x & 0x7Fu) != 0; };
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && !(is_nan(a[i]) && is_nan(b[i]))) return static_cast<long>(i);
  return -1;
}

// One launch of case c (with max_tokens) against the reference: codes, scales and outputs bit for
// bit, every output written, guards intact, and only the slots of sequences with tokens changed.
void expect_matches_reference(const Case& c, int max_tokens) {
  HostWsBatch b = make_batch(c, 42);
  const HostWsBatch before = b;
  const int T = b.cu_seqlens.back();
  const std::vector<uint16_t> o0(static_cast<size_t>(T) * c.HV * c.dv, 0xFFFF);  // NaN bits
  DeviceBatch d(b, o0);
  WsDecodeArgs a = d.args(b);
  a.max_tokens = max_tokens;
  if (max_tokens == 1) {
    EXPECT_TRUE(ws_decode_runs_token_kernel(a)) << "not the single-token kernel";
  }
  ws_decode(a);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> o_ref = o0;
  const std::vector<WsRefusal> refused = ws_decode_reference(b, o_ref);
  ASSERT_TRUE(refused.empty()) << "the reference refused a head of finite inputs";
  EXPECT_EQ(d.error_info.download(), std::vector<int32_t>(4, 0));
  EXPECT_EQ(first_difference(d.codes.download(), b.codes), -1) << "codes";
  if (!b.scales.empty()) {
    EXPECT_EQ(first_difference(d.scales.download(), b.scales), -1) << "scales";
  }
  const std::vector<uint16_t> o = d.o.download();
  EXPECT_EQ(first_difference(o, o_ref), -1) << "outputs";
  // Every output of a token was written (no NaN bits left) and is finite.
  for (size_t i = 0; i < o.size(); ++i)
    ASSERT_TRUE(std::isfinite(float_from_bf16_bits(o[i]))) << "output " << i;
  EXPECT_TRUE(d.guards_intact());
  // Slots not listed, and slots of sequences without tokens, are as before the launch; listed
  // slots with tokens changed.
  const size_t slot_codes = b.codes.size() / kSlots, slot_scales = b.scales.size() / kSlots;
  const std::vector<uint8_t> codes = d.codes.download(), scales = d.scales.download();
  for (int s = 0; s < kSlots; ++s) {
    int seq = -1;
    for (size_t n = 0; n < b.slot_ids.size(); ++n)
      if (b.slot_ids[n] == s) seq = static_cast<int>(n);
    const bool runs = seq >= 0 && c.lengths[seq] > 0;
    const bool same_codes = std::memcmp(codes.data() + s * slot_codes,
                                        before.codes.data() + s * slot_codes, slot_codes) == 0;
    const bool same_scales =
        slot_scales == 0 || std::memcmp(scales.data() + s * slot_scales,
                                        before.scales.data() + s * slot_scales, slot_scales) == 0;
    if (runs) {
      EXPECT_FALSE(same_codes) << "slot " << s << " was not updated";
    } else {
      EXPECT_TRUE(same_codes && same_scales) << "slot " << s << " was touched";
    }
  }
}

class WsDecode : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(WsDecode, MatchesReferenceBitForBitAndLeavesOtherSlots) {
  expect_matches_reference(GetParam(), 0);
}

TEST_P(WsDecode, RepeatsItselfAndTwoLaunchesEqualTheReferenceTwice) {
  // Two consecutive launches (decode after decode, positions advanced) against the reference run
  // twice: the stored state the second launch reads is the first one's output, bit for bit.
  const Case& c = GetParam();
  HostWsBatch b = make_batch(c, 7);
  const int T = b.cu_seqlens.back();
  const std::vector<uint16_t> o0(static_cast<size_t>(T) * c.HV * c.dv, 0xFFFF);
  DeviceBatch d(b, o0);
  std::vector<uint16_t> o_ref = o0;
  ws_decode(d.args(b));
  ASSERT_TRUE(ws_decode_reference(b, o_ref).empty());
  HostWsBatch next = b;
  for (size_t n = 0; n < next.positions.size(); ++n) next.positions[n] += c.lengths[n];
  DeviceBatch d_positions_only(next, o0);  // fresh position array for the device
  WsDecodeArgs a = d.args(b);
  a.positions = d_positions_only.positions.data();
  ws_decode(a);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> o_ref2 = o0;
  ASSERT_TRUE(ws_decode_reference(next, o_ref2).empty());
  EXPECT_EQ(first_difference(d.codes.download(), next.codes), -1);
  EXPECT_EQ(first_difference(d.o.download(), o_ref2), -1);
}

const std::vector<Case> kCases = {
    {"int8_gdn_H2_HV6_dk128_dv128_decode",
     2,
     6,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::int8,
     false,
     {1, 1, 1, 1, 1}},
    {"int8_kda_H4_HV4_dk128_dv100_decode",
     4,
     4,
     128,
     100,
     GateKind::kda,
     WorkingStateKind::int8,
     false,
     {1, 1, 1}},
    {"int8_bf16scale_gdn_H1_HV3_dk64_dv50_T63",
     1,
     3,
     64,
     50,
     GateKind::gdn,
     WorkingStateKind::int8,
     true,
     {63, 0, 5}},
    {"int8_sr_gdn_H2_HV6_dk128_dv128_T63",
     2,
     6,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::int8_sr,
     false,
     {63, 1, 0, 17}},
    {"int8_sr_kda_H2_HV2_dk32_dv40_decode",
     2,
     2,
     32,
     40,
     GateKind::kda,
     WorkingStateKind::int8_sr,
     false,
     {1, 1, 1, 1}},
    {"int8_gdn_noqknorm_H1_HV2_dk128_dv128",
     1,
     2,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::int8,
     false,
     {1, 3},
     false},
    {"fp8_gdn_H2_HV6_dk128_dv128_decode",
     2,
     6,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::fp8_e4m3,
     false,
     {1, 1, 1}},
    {"fp8_bf16scale_kda_H2_HV2_dk64_dv96_T63",
     2,
     2,
     64,
     96,
     GateKind::kda,
     WorkingStateKind::fp8_e4m3,
     true,
     {63, 2}},
    {"fp8_sr_kda_H4_HV4_dk128_dv128_decode",
     4,
     4,
     128,
     128,
     GateKind::kda,
     WorkingStateKind::fp8_e4m3_sr,
     false,
     {1, 1, 0, 1}},
    {"fp8_sr_gdn_H1_HV3_dk32_dv40_T63",
     1,
     3,
     32,
     40,
     GateKind::gdn,
     WorkingStateKind::fp8_e4m3_sr,
     false,
     {63}},
    {"bf16_sr_gdn_H2_HV6_dk128_dv128_decode",
     2,
     6,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::bf16_sr,
     false,
     {1, 1, 1, 1}},
    {"bf16_sr_kda_H1_HV3_dk64_dv50_T63",
     1,
     3,
     64,
     50,
     GateKind::kda,
     WorkingStateKind::bf16_sr,
     false,
     {63, 0, 4}},
    {"bf16_kda_H2_HV2_dk128_dv128_decode",
     2,
     2,
     128,
     128,
     GateKind::kda,
     WorkingStateKind::bf16,
     false,
     {1, 1}},
    // bf16 scales at d_k = 128 (256 bytes of scales per head) with d_v below the block's rows,
    // a sequence without tokens among them.
    {"int8_bf16scale_gdn_H2_HV6_dk128_dv100_mixed",
     2,
     6,
     128,
     100,
     GateKind::gdn,
     WorkingStateKind::int8,
     true,
     {1, 0, 3, 1}},
    {"fp8_kda_H2_HV2_dk128_dv72_mixed",
     2,
     2,
     128,
     72,
     GateKind::kda,
     WorkingStateKind::fp8_e4m3,
     false,
     {2, 1, 0}},
    // The variant without row tests (round-to-nearest int8 and fp8, d_k = 128, d_v a multiple of
    // 16) on KDA, below d_v = 128, with bf16 scales, T = 63 and an empty sequence; and the smallest
    // such d_v for a stochastic format, which keeps the row tests.
    {"fp8_kda_H2_HV2_dk128_dv64_T63_full",
     2,
     2,
     128,
     64,
     GateKind::kda,
     WorkingStateKind::fp8_e4m3,
     false,
     {63, 0, 2}},
    {"int8_bf16scale_kda_H1_HV3_dk128_dv112_full",
     1,
     3,
     128,
     112,
     GateKind::kda,
     WorkingStateKind::int8,
     true,
     {3, 1}},
    {"int8_sr_gdn_H2_HV6_dk128_dv16",
     2,
     6,
     128,
     16,
     GateKind::gdn,
     WorkingStateKind::int8_sr,
     false,
     {2, 0, 1}},
};

INSTANTIATE_TEST_SUITE_P(Formats, WsDecode, ::testing::ValuesIn(kCases), case_name);

// The single-token kernel (max_tokens 1: int8 and fp8 round to nearest even at d_k 128) against
// the same reference: d_v 128 (no row tests) and below, bf16 scales, HV = 3 H, sequences without
// tokens, q and k without the L2 norm.
class WsDecodeToken : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(WsDecodeToken, MatchesReferenceBitForBitAndLeavesOtherSlots) {
  expect_matches_reference(GetParam(), 1);
}

const std::vector<Case> kTokenCases = {
    {"int8_gdn_H2_HV6_dv128",
     2,
     6,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::int8,
     false,
     {1, 1, 0, 1, 1}},
    {"int8_kda_H4_HV4_dv100",
     4,
     4,
     128,
     100,
     GateKind::kda,
     WorkingStateKind::int8,
     false,
     {1, 1, 1}},
    {"int8_kda_H2_HV2_dv128",
     2,
     2,
     128,
     128,
     GateKind::kda,
     WorkingStateKind::int8,
     false,
     {1, 0, 1}},
    {"int8_bf16scale_gdn_H1_HV3_dv128",
     1,
     3,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::int8,
     true,
     {1, 0, 1}},
    {"int8_gdn_noqknorm_H1_HV2_dv128",
     1,
     2,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::int8,
     false,
     {1, 1},
     false},
    {"fp8_gdn_H2_HV6_dv128",
     2,
     6,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::fp8_e4m3,
     false,
     {1, 1, 1}},
    {"fp8_bf16scale_kda_H2_HV2_dv72",
     2,
     2,
     128,
     72,
     GateKind::kda,
     WorkingStateKind::fp8_e4m3,
     true,
     {1, 0, 1}},
    {"fp8_kda_H2_HV2_dv128",
     2,
     2,
     128,
     128,
     GateKind::kda,
     WorkingStateKind::fp8_e4m3,
     false,
     {1, 1}},
    // Threads without rows (d_v below the 32 row groups), d_v not a multiple of 4, one row.
    {"int8_bf16scale_kda_H2_HV4_dv37",
     2,
     4,
     128,
     37,
     GateKind::kda,
     WorkingStateKind::int8,
     true,
     {1, 1, 0, 1}},
    {"fp8_bf16scale_gdn_H1_HV2_dv20",
     1,
     2,
     128,
     20,
     GateKind::gdn,
     WorkingStateKind::fp8_e4m3,
     true,
     {1, 1}},
    {"int8_gdn_H1_HV1_dv1", 1, 1, 128, 1, GateKind::gdn, WorkingStateKind::int8, false, {1, 1}},
    {"fp8_kda_noqknorm_H2_HV4_dv128",
     2,
     4,
     128,
     128,
     GateKind::kda,
     WorkingStateKind::fp8_e4m3,
     false,
     {1, 1},
     false},
    // More heads (1152) than an H100 or H200 holds blocks of the int8 kernel at once (6 per SM,
    // 792), so the launch runs in several waves of blocks.
    {"int8_gdn_H32_HV96_dv128_many_heads",
     32,
     96,
     128,
     128,
     GateKind::gdn,
     WorkingStateKind::int8,
     false,
     {1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1}},
    {"int8_bf16scale_kda_H96_HV96_dv128_many_heads",
     96,
     96,
     128,
     128,
     GateKind::kda,
     WorkingStateKind::int8,
     true,
     {1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
};

INSTANTIATE_TEST_SUITE_P(Formats, WsDecodeToken, ::testing::ValuesIn(kTokenCases), case_name);

class WsDecodeDevice : public GpuTest {};

// A non-finite scale in one head of one sequence.
TEST_F(WsDecodeDevice, RefusesANonFiniteStateAndLeavesThatHeadUnchanged) {
  Case c{"", 1, 3, 128, 128, GateKind::gdn, WorkingStateKind::int8, false, {1, 2, 1}};
  HostWsBatch b = make_batch(c, 11);
  // Slot of sequence 1, value head 2, key channel 5: an infinite scale decodes to +-Inf (or NaN
  // for code 0) in that column.
  const size_t at = (static_cast<size_t>(b.slot_ids[1]) * c.HV + 2) * c.dk + 5;
  const float inf = INFINITY;
  std::memcpy(b.scales.data() + 4 * at, &inf, 4);
  const HostWsBatch before = b;
  const int T = b.cu_seqlens.back();
  const std::vector<uint16_t> o0(static_cast<size_t>(T) * c.HV * c.dv,
                                 0x3F80);  // 1.0: finite, so a row left unwritten shows
  DeviceBatch d(b, o0);
  WsDecodeArgs a = d.args(b);
  ws_decode(a);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> o_ref = o0;
  const std::vector<WsRefusal> refused = ws_decode_reference(b, o_ref);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].seq, 1);
  EXPECT_EQ(refused[0].head, 2);
  EXPECT_EQ(refused[0].token, 0);
  EXPECT_EQ(d.error_info.download(), (std::vector<int32_t>{1, 1, 2, 0}));
  EXPECT_EQ(first_difference(d.codes.download(), b.codes), -1);
  EXPECT_EQ(first_difference(d.scales.download(), b.scales), -1);
  // The refused head's slot region is as before; the sequence's other heads ran.
  const size_t head_codes = static_cast<size_t>(c.dv) * c.dk;
  const size_t off = (static_cast<size_t>(b.slot_ids[1]) * c.HV + 2) * head_codes;
  EXPECT_EQ(std::memcmp(b.codes.data() + off, before.codes.data() + off, head_codes), 0);
  EXPECT_NE(std::memcmp(b.codes.data() + off - head_codes, before.codes.data() + off - head_codes,
                        head_codes),
            0);
  // The refused token's outputs are non-finite (NaN from 0 x Inf); NaN payloads may differ.
  EXPECT_EQ(first_difference_nan_equal(d.o.download(), o_ref), -1);
  const size_t refused_row = (static_cast<size_t>(b.cu_seqlens[1]) * c.HV + 2) * c.dv;
  const std::vector<uint16_t> o_gpu = d.o.download();
  for (size_t i = refused_row; i < refused_row + c.dv; ++i) {
    EXPECT_EQ(o_ref[i] & 0x7F80u, 0x7F80u) << "the refused token's output is not Inf or NaN";
    EXPECT_EQ(o_gpu[i] & 0x7F80u, 0x7F80u) << "the kernel did not write the refused token's row";
  }
  // Outside that row the outputs are equal bit for bit (finite, or the untouched sentinel).
  std::vector<uint16_t> g_rest = o_gpu, r_rest = o_ref;
  std::fill(g_rest.begin() + refused_row, g_rest.begin() + refused_row + c.dv, 0);
  std::fill(r_rest.begin() + refused_row, r_rest.begin() + refused_row + c.dv, 0);
  EXPECT_EQ(first_difference(g_rest, r_rest), -1);
  EXPECT_THROW(check_ws_decode_error(d.error_info.data()), Error);
  EXPECT_NO_THROW(check_ws_decode_error(d.error_info.data()));  // cleared by the first check
}

// A non-finite output at a later token of a sequence (v = +Inf in one row of one head): the
// reference refuses that head at that token, and the kernel records the same head and token,
// leaves its slot as it was, writes every output as the reference does and runs the other heads.
// The general kernel after tokens stepped on the int8 codes (and fp8's float path), the
// single-token kernel at its output check; with rows tested (d_v 100) and without (128).
TEST_F(WsDecodeDevice, RefusesANonFiniteOutputAtALaterTokenAsTheReference) {
  struct Setup {
    WorkingStateKind kind;
    int dv;
    std::vector<int> lengths;
    int max_tokens;
  };
  const int seq = 1, head = 2, row = 7;
  for (const Setup& su : std::vector<Setup>{{WorkingStateKind::int8, 100, {1, 3, 2}, 0},
                                            {WorkingStateKind::int8, 128, {1, 3, 2}, 0},
                                            {WorkingStateKind::fp8_e4m3, 100, {1, 3, 2}, 0},
                                            {WorkingStateKind::int8, 100, {1, 1, 1}, 1},
                                            {WorkingStateKind::int8, 128, {1, 1, 1}, 1}}) {
    Case c{"", 1, 3, 128, su.dv, GateKind::gdn, su.kind, false, su.lengths};
    HostWsBatch b = make_batch(c, 23);
    const int token = su.lengths[seq] - 1;  // the last token of sequence 1
    b.v[(static_cast<size_t>(b.cu_seqlens[seq] + token) * c.HV + head) * c.dv + row] = 0x7F80;
    const HostWsBatch before = b;
    const int T = b.cu_seqlens.back();
    const std::vector<uint16_t> o0(static_cast<size_t>(T) * c.HV * c.dv, 0x3F80);
    DeviceBatch d(b, o0);
    WsDecodeArgs a = d.args(b);
    a.max_tokens = su.max_tokens;
    EXPECT_EQ(ws_decode_runs_token_kernel(a), su.max_tokens == 1);
    ws_decode(a);
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_ref = o0;
    const std::vector<WsRefusal> refused = ws_decode_reference(b, o_ref);
    const std::string what = b.format.name() + " d_v " + std::to_string(su.dv) + " max_tokens " +
                             std::to_string(su.max_tokens);
    ASSERT_EQ(refused.size(), 1u) << what;
    EXPECT_EQ(refused[0].seq, seq) << what;
    EXPECT_EQ(refused[0].head, head) << what;
    EXPECT_EQ(refused[0].token, token) << what;
    EXPECT_EQ(d.error_info.download(), (std::vector<int32_t>{1, seq, head, token})) << what;
    EXPECT_EQ(first_difference(d.codes.download(), b.codes), -1) << what;
    EXPECT_EQ(first_difference(d.scales.download(), b.scales), -1) << what;
    const size_t head_codes = static_cast<size_t>(c.dv) * c.dk;
    const size_t off = (static_cast<size_t>(b.slot_ids[seq]) * c.HV + head) * head_codes;
    EXPECT_EQ(std::memcmp(b.codes.data() + off, before.codes.data() + off, head_codes), 0) << what;
    EXPECT_EQ(first_difference_nan_equal(d.o.download(), o_ref), -1) << what;
    EXPECT_TRUE(d.guards_intact()) << what;
  }
}

// max_tokens 1 with a sequence of two tokens: that sequence is refused with its codes and scales
// unchanged while the others run, in the single-token kernel and in the general one (bf16-sr);
// and a non-finite scale is refused by the single-token kernel as by the general one.
TEST_F(WsDecodeDevice, TokenKernelRefusesTwoTokensAndANonFiniteState) {
  Case c{"", 1, 3, 128, 128, GateKind::gdn, WorkingStateKind::int8, false, {1, 2, 1}};
  HostWsBatch b = make_batch(c, 17);
  const HostWsBatch before = b;
  const std::vector<uint16_t> o0(static_cast<size_t>(4) * c.HV * c.dv, 0xFFFF);
  DeviceBatch d(b, o0);
  WsDecodeArgs a = d.args(b);
  a.max_tokens = 1;
  ws_decode(a);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> err = d.error_info.download();
  EXPECT_EQ(err[0], 2);
  EXPECT_EQ(err[1], 1);
  EXPECT_TRUE(err[2] >= 0 && err[2] < c.HV) << err[2];
  EXPECT_EQ(err[3], 2);
  const size_t ss = b.scales.size() / kSlots;
  EXPECT_EQ(std::memcmp(d.scales.download().data() + b.slot_ids[1] * ss,
                        before.scales.data() + b.slot_ids[1] * ss, ss),
            0);
  const size_t sc = b.codes.size() / kSlots;
  const std::vector<uint8_t> codes = d.codes.download();
  EXPECT_EQ(
      std::memcmp(codes.data() + b.slot_ids[1] * sc, before.codes.data() + b.slot_ids[1] * sc, sc),
      0);
  EXPECT_NE(
      std::memcmp(codes.data() + b.slot_ids[0] * sc, before.codes.data() + b.slot_ids[0] * sc, sc),
      0);
  try {
    check_ws_decode_error(d.error_info.data());
    ADD_FAILURE() << "two tokens under max_tokens 1 were not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1 has 2 tokens"), std::string::npos) << e.what();
  }

  // The general kernel (no single-token variant for bf16-sr) refuses the same way.
  Case sr{"", 1, 3, 128, 128, GateKind::gdn, WorkingStateKind::bf16_sr, false, {1, 2, 1}};
  HostWsBatch sb = make_batch(sr, 19);
  const HostWsBatch sbefore = sb;
  DeviceBatch sd(sb, o0);
  WsDecodeArgs sa = sd.args(sb);
  sa.max_tokens = 1;
  EXPECT_FALSE(ws_decode_runs_token_kernel(sa));
  ws_decode(sa);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> serr = sd.error_info.download();
  EXPECT_EQ(serr[0], 2);
  EXPECT_EQ(serr[1], 1);
  EXPECT_EQ(serr[3], 2);
  const size_t ssc = sb.codes.size() / kSlots;
  EXPECT_EQ(std::memcmp(sd.codes.download().data() + sb.slot_ids[1] * ssc,
                        sbefore.codes.data() + sb.slot_ids[1] * ssc, ssc),
            0);

  Case one{"", 1, 3, 128, 128, GateKind::gdn, WorkingStateKind::int8, false, {1, 1, 1}};
  HostWsBatch nb = make_batch(one, 11);
  const size_t at = (static_cast<size_t>(nb.slot_ids[1]) * one.HV + 2) * one.dk + 5;
  const float inf = INFINITY;
  std::memcpy(nb.scales.data() + 4 * at, &inf, 4);
  const HostWsBatch nbefore = nb;
  DeviceBatch nd(nb, std::vector<uint16_t>(static_cast<size_t>(3) * one.HV * one.dv, 0x3F80));
  WsDecodeArgs na = nd.args(nb);
  na.max_tokens = 1;
  ws_decode(na);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(nd.error_info.download(), (std::vector<int32_t>{1, 1, 2, 0}));
  std::vector<uint16_t> o_ref(static_cast<size_t>(3) * one.HV * one.dv, 0x3F80);
  ASSERT_EQ(ws_decode_reference(nb, o_ref).size(), 1u);
  EXPECT_EQ(first_difference(nd.codes.download(), nb.codes), -1);
  EXPECT_EQ(first_difference(nd.scales.download(), nb.scales), -1);
  const size_t head_codes = static_cast<size_t>(one.dv) * one.dk;
  const size_t off = (static_cast<size_t>(nb.slot_ids[1]) * one.HV + 2) * head_codes;
  EXPECT_EQ(std::memcmp(nb.codes.data() + off, nbefore.codes.data() + off, head_codes), 0);
  EXPECT_TRUE(nd.guards_intact());
}

// Near-ties on purpose: every key channel's column holds one code 2 (its amax) and codes -1, 0,
// 1 elsewhere, and the step leaves the state as decoded (g = 0, beta = 0), so the requantized
// codes of the +-1 elements sit at +-127 / 2 = +-63.5 of the new scale, give or take the scale's
// rounding: next to a rounding boundary.
const Case kNearTieCase{"", 1, 2, 128, 128, GateKind::gdn, WorkingStateKind::int8, false, {1, 1}};

HostWsBatch near_tie_batch() {
  const Case& c = kNearTieCase;
  HostWsBatch b = make_batch(c, 29);
  Rng rng(31);
  const size_t head = static_cast<size_t>(c.dv) * c.dk;
  for (size_t e = 0; e < b.codes.size(); ++e) {
    const bool amax_row = (e % head) / c.dk == 0;
    b.codes[e] = amax_row ? 2 : static_cast<uint8_t>(static_cast<int8_t>(rng.below(3)) - 1);
  }
  std::fill(b.g.begin(), b.g.end(), 0.0f);
  std::fill(b.beta.begin(), b.beta.end(), 0.0f);
  return b;
}

// The single-token kernel on the near-tie state (WsDecodeReference.
// Int8StepEncodesTheExactProductOfTheNewScale shows its codes sit next to rounding boundaries)
// equals the reference bit for bit.
TEST_F(WsDecodeDevice, TokenKernelEncodesNearTiesAsTheReference) {
  const Case& c = kNearTieCase;
  HostWsBatch b = near_tie_batch();
  const std::vector<uint16_t> o0(static_cast<size_t>(2) * c.HV * c.dv, 0xFFFF);
  DeviceBatch d(b, o0);
  WsDecodeArgs a = d.args(b);
  a.max_tokens = 1;
  ASSERT_TRUE(ws_decode_runs_token_kernel(a));
  ws_decode(a);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> o_ref = o0;
  ASSERT_TRUE(ws_decode_reference(b, o_ref).empty());
  EXPECT_EQ(d.error_info.download(), std::vector<int32_t>(4, 0));
  EXPECT_EQ(first_difference(d.codes.download(), b.codes), -1) << "codes";
  EXPECT_EQ(first_difference(d.scales.download(), b.scales), -1) << "scales";
  EXPECT_EQ(first_difference(d.o.download(), o_ref), -1) << "outputs";
  EXPECT_TRUE(d.guards_intact());
}

// Every int8 byte, -128 (0x80, which the encoder never writes) included, as a stored code under
// an identity step (g = 0, beta = 0): the general and the single-token kernel decode each as the
// reference does (code x scale in fp32), so codes, scales and outputs equal it bit for bit.
TEST_F(WsDecodeDevice, DecodesEveryInt8ByteAsTheReference) {
  for (int max_tokens : {0, 1}) {
    Case c{"", 1, 2, 128, 128, GateKind::gdn, WorkingStateKind::int8, false, {1, 1}};
    HostWsBatch b = make_batch(c, 37);
    for (size_t e = 0; e < b.codes.size(); ++e)
      b.codes[e] = static_cast<uint8_t>((e * 37 + e / 256) & 0xFF);  // each byte in every head
    std::fill(b.g.begin(), b.g.end(), 0.0f);
    std::fill(b.beta.begin(), b.beta.end(), 0.0f);
    const std::vector<uint16_t> o0(static_cast<size_t>(2) * c.HV * c.dv, 0xFFFF);
    DeviceBatch d(b, o0);
    WsDecodeArgs a = d.args(b);
    a.max_tokens = max_tokens;
    EXPECT_EQ(ws_decode_runs_token_kernel(a), max_tokens == 1);
    ws_decode(a);
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_ref = o0;
    ASSERT_TRUE(ws_decode_reference(b, o_ref).empty());
    EXPECT_EQ(d.error_info.download(), std::vector<int32_t>(4, 0));
    EXPECT_EQ(first_difference(d.codes.download(), b.codes), -1)
        << "codes, max_tokens " << max_tokens;
    EXPECT_EQ(first_difference(d.scales.download(), b.scales), -1)
        << "scales, max_tokens " << max_tokens;
    EXPECT_EQ(first_difference(d.o.download(), o_ref), -1) << "outputs, max_tokens " << max_tokens;
    EXPECT_TRUE(d.guards_intact());
  }
}

TEST_F(WsDecodeDevice, StartsFromAGivenFp32State) {
  // init_state: each sequence starts from an fp32 state as given (not decoded from its slot); the
  // slot of a sequence without tokens stays as it was. int8 rounded to nearest steps the given
  // state on its first token and the codes on the second (sequence 0), with rows tested (d_v 100)
  // and without (128).
  for (const auto& [kind, dv] :
       std::vector<std::pair<WorkingStateKind, int>>{{WorkingStateKind::int8, 100},
                                                     {WorkingStateKind::int8, 128},
                                                     {WorkingStateKind::int8_sr, 100},
                                                     {WorkingStateKind::fp8_e4m3, 100},
                                                     {WorkingStateKind::bf16_sr, 100}}) {
    Case c{"", 2, 2, 128, dv, GateKind::kda, kind, false, {2, 0, 1}};
    HostWsBatch b = make_batch(c, 13);
    const HostWsBatch before = b;
    Rng rng(14);
    b.init_state.resize(static_cast<size_t>(3) * c.HV * c.dv * c.dk);
    for (auto& x : b.init_state) x = static_cast<float>(0.06 * rng.normal());
    const int T = b.cu_seqlens.back();
    const std::vector<uint16_t> o0(static_cast<size_t>(T) * c.HV * c.dv, 0xFFFF);
    DeviceBatch d(b, o0);
    Guarded<float> init(b.init_state);
    WsDecodeArgs a = d.args(b);
    a.init_state = init.data();
    ws_decode(a);
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> o_ref = o0;
    ASSERT_TRUE(ws_decode_reference(b, o_ref).empty());
    EXPECT_EQ(first_difference(d.codes.download(), b.codes), -1) << b.format.name() << " " << dv;
    if (!b.scales.empty()) {  // bf16 formats keep no scales
      EXPECT_EQ(first_difference(d.scales.download(), b.scales), -1)
          << b.format.name() << " " << dv;
    }
    EXPECT_EQ(first_difference(d.o.download(), o_ref), -1) << b.format.name() << " " << dv;
    const size_t sc = b.codes.size() / kSlots;
    EXPECT_EQ(std::memcmp(b.codes.data() + b.slot_ids[1] * sc,
                          before.codes.data() + b.slot_ids[1] * sc, sc),
              0);
    EXPECT_TRUE(d.guards_intact() && init.guard_intact());
  }
}

TEST_F(WsDecodeDevice, SlotCopyMovesCodesAndScalesByteForByte) {
  for (bool bf16_scale : {false, true}) {
    Case c{"", 1, 3, 128, 100, GateKind::gdn, WorkingStateKind::int8, bf16_scale, {1}};
    const HostWsBatch b = make_batch(c, 5);
    Guarded<uint8_t> codes(b.codes), scales(b.scales);
    const std::vector<int32_t> src = {3, 7}, dst = {0, 10};
    Guarded<int32_t> dsrc(src), ddst(dst);
    ws_slot_copy(b.format, c.HV, c.dk, c.dv, codes.data(), scales.data(), codes.data(),
                 scales.data(), dsrc.data(), ddst.data(), 2);
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> want_codes = b.codes, want_scales = b.scales;
    const size_t sc = b.codes.size() / kSlots, ss = b.scales.size() / kSlots;
    for (int i = 0; i < 2; ++i) {
      std::memcpy(want_codes.data() + dst[i] * sc, b.codes.data() + src[i] * sc, sc);
      std::memcpy(want_scales.data() + dst[i] * ss, b.scales.data() + src[i] * ss, ss);
    }
    EXPECT_EQ(first_difference(codes.download(), want_codes), -1);
    EXPECT_EQ(first_difference(scales.download(), want_scales), -1);
    EXPECT_TRUE(codes.guard_intact() && scales.guard_intact());
  }
}

// The argument checks come before any device work, so they run without a GPU too.
TEST(WsDecodeArguments, RejectsBadArguments) {
  WsDecodeArgs a;
  a.num_seqs = 1, a.H = 1, a.HV = 1, a.dk = 96, a.dv = 64;
  a.format.kind = WorkingStateKind::int8;
  EXPECT_THROW(ws_decode(a), Error);  // d_k 96
  a.dk = 128, a.dv = 129;
  EXPECT_THROW(ws_decode(a), Error);  // d_v above 128
  a.dv = 64;
  EXPECT_THROW(ws_decode(a), Error);  // null pointers
  a.format.kind = WorkingStateKind::int8_ef;
  EXPECT_THROW(ws_decode(a), Error);  // no kernel for error feedback
  a.format.kind = WorkingStateKind::int8;
  a.max_tokens = 2;
  EXPECT_THROW(ws_decode(a), Error);  // max_tokens other than 0 or 1
  a.max_tokens = 0;
  a.num_seqs = -1;
  try {
    ws_decode(a);
    ADD_FAILURE() << "a negative batch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_seqs -1"), std::string::npos) << e.what();
  }
}

// ---- the reference alone (no GPU) --------------------------------------------------------------

// One token of the reference against the fp64 loop started from the same decoded state: each
// stored element lies within half a quantization step of the exact update, plus the fp32
// arithmetic. Half a step: int8 scale_j / 2; E4M3 (scaled, normal range) 2^-4 |x| relative, and
// 2^-10 scale_j absolute in the subnormal range (half of 2^-9); bf16 2^-8 |x| (the SR formats: a
// whole step, 2^-7 |x| for bf16 and scale_j for int8). The fp32 part: |u| and the update are sums
// of 128 products of magnitude <= |S|max |k_j| with ||k|| = 1, each rounding 2^-24 relative, so
// 1e-4 |S|max covers them with a margin of about 10 (and the ~2 ulp of wsk::exp).
TEST(WsDecodeReference, OneTokenWithinHalfAStepOfTheFp64Loop) {
  const WorkingStateKind kinds[] = {WorkingStateKind::int8,     WorkingStateKind::int8_sr,
                                    WorkingStateKind::fp8_e4m3, WorkingStateKind::fp8_e4m3_sr,
                                    WorkingStateKind::bf16,     WorkingStateKind::bf16_sr};
  for (GateKind gate : {GateKind::gdn, GateKind::kda})
    for (WorkingStateKind kind : kinds) {
      Case c{"", 2, 4, 128, 128, gate, kind, false, {1}};
      HostWsBatch b = make_batch(c, 99);
      const WorkingStateFormat f = b.format;
      const int cb = ws_code_bytes(f);
      const bool int8 = kind == WorkingStateKind::int8 || kind == WorkingStateKind::int8_sr;
      const bool sr = f.stochastic();
      RecurrenceShape shape;
      shape.H = c.H, shape.HV = c.HV, shape.dk = c.dk, shape.dv = c.dv, shape.gate = gate;
      LayerInputs in = LayerInputs::zeros(shape, 1);
      for (size_t e = 0; e < in.q.size(); ++e) in.q[e] = float_from_bf16_bits(b.q[e]);
      for (size_t e = 0; e < in.k.size(); ++e) in.k[e] = float_from_bf16_bits(b.k[e]);
      for (size_t e = 0; e < in.v.size(); ++e) in.v[e] = float_from_bf16_bits(b.v[e]);
      in.g = b.g, in.beta = b.beta;
      const int slot = b.slot_ids[0];
      const size_t head_elems = static_cast<size_t>(c.dv) * c.dk;
      std::vector<std::vector<double>> S64(c.HV, std::vector<double>(head_elems));
      auto scale_of = [&](int h, int j) { return fp32_scale(b, slot, h, j); };
      // The slot's stored state, decoded, read again after the reference has run.
      std::vector<float> stored = slot_state(b, slot);
      auto value_of = [&](int h, size_t e) { return stored[h * head_elems + e]; };
      for (int h = 0; h < c.HV; ++h) {
        for (size_t e = 0; e < head_elems; ++e) S64[h][e] = value_of(h, e);
        gated_delta_head_fp64(shape, in, h, 0, 1, S64[h].data(), nullptr);
      }
      std::vector<uint16_t> o(static_cast<size_t>(c.HV) * c.dv, 0xFFFF);
      ASSERT_TRUE(ws_decode_reference(b, o).empty());
      stored = slot_state(b, slot);
      double worst = 0.0;  // largest error over its bound
      for (int h = 0; h < c.HV; ++h) {
        double smax = 0.0;
        for (double x : S64[h]) smax = std::max(smax, std::fabs(x));
        for (size_t e = 0; e < head_elems; ++e) {
          const double x = S64[h][e], got = value_of(h, e);
          const double s = cb == 1 ? scale_of(h, static_cast<int>(e % c.dk)) : 0.0;
          double step;
          if (cb == 2)
            step = (sr ? 0x1p-7 : 0x1p-8) * std::fabs(x) * (1 + 1e-3);
          else if (int8)
            step = (sr ? 1.0 : 0.5) * s;
          else
            step = (sr ? 2.0 : 1.0) * std::max(0x1p-4 * std::fabs(x) * (1 + 1e-3), 0x1p-10 * s);
          const double bound = step + 1e-4 * smax;
          worst = std::max(worst, std::fabs(got - x) / bound);
        }
      }
      EXPECT_LE(worst, 1.0) << WorkingStateFormat{kind}.name() << " "
                            << (gate == GateKind::kda ? "kda" : "gdn");
      std::printf("[ ws reference ] %s %s: %.1f%% of the bound used\n",
                  WorkingStateFormat{kind}.name().c_str(), gate == GateKind::kda ? "kda" : "gdn",
                  100.0 * worst);
    }
}

// The kernel's reference against the CPU working-state reference of the recurrence
// (gated_delta_head_fp32_ws, core/recurrence), which sums the same fp32 step in another order and
// uses libm's exp, for one token from the same stored state with the same Philox keys and
// counters. The two fp32 updates differ by a few ulp of the terms (the fp32 part of the bound
// above, 1e-4 |S|max per element with a margin), so the two stored codes of an element are equal
// or, where the updates straddle a rounding boundary, one step apart (and a column's scale may
// differ in its last bits with its amax): |mine - theirs| <= one step + 1e-4 |S|max, the step
// scale_j for int8 / int8-sr, 2^-3 |x| (or 2^-9 scale_j below the E4M3 normal range) for fp8,
// 2^-7 |x| for bf16. Codes one step apart must be rare: at most 1% of the elements may differ by
// more than a thousandth of a step (a column whose scale moved by an ulp differs in every element,
// by ulps: that is not a different code).
TEST(WsDecodeReference, OneTokenWithinOneStepOfTheRecurrenceReference) {
  const WorkingStateKind kinds[] = {WorkingStateKind::int8,     WorkingStateKind::int8_sr,
                                    WorkingStateKind::fp8_e4m3, WorkingStateKind::fp8_e4m3_sr,
                                    WorkingStateKind::bf16,     WorkingStateKind::bf16_sr};
  for (GateKind gate : {GateKind::gdn, GateKind::kda})
    for (WorkingStateKind kind : kinds) {
      Case c{"", 2, 4, 128, 128, gate, kind, false, {1}};
      HostWsBatch b = make_batch(c, 98);
      const WorkingStateFormat f = b.format;
      const int cb = ws_code_bytes(f);
      const bool int8 = kind == WorkingStateKind::int8 || kind == WorkingStateKind::int8_sr;
      RecurrenceShape shape;
      shape.H = c.H, shape.HV = c.HV, shape.dk = c.dk, shape.dv = c.dv, shape.gate = gate;
      // The reference recurrence's token index is the position in its inputs: put the token at
      // the batch's position.
      const int pos = b.positions[0];
      LayerInputs in = LayerInputs::zeros(shape, pos + 1);
      const size_t qk = static_cast<size_t>(c.H) * c.dk, vv = static_cast<size_t>(c.HV) * c.dv;
      const size_t gw = static_cast<size_t>(shape.gate_width());
      for (size_t e = 0; e < qk; ++e) {
        in.q[pos * qk + e] = float_from_bf16_bits(b.q[e]);
        in.k[pos * qk + e] = float_from_bf16_bits(b.k[e]);
      }
      for (size_t e = 0; e < vv; ++e) in.v[pos * vv + e] = float_from_bf16_bits(b.v[e]);
      for (size_t e = 0; e < gw; ++e) in.g[pos * gw + e] = b.g[e];
      for (int e = 0; e < c.HV; ++e) in.beta[pos * c.HV + e] = b.beta[e];
      const int slot = b.slot_ids[0];
      const size_t head_elems = static_cast<size_t>(c.dv) * c.dk;
      auto scale_of = [&](int h, int j) { return fp32_scale(b, slot, h, j); };
      // The slot's stored state, decoded, read again after the reference has run.
      std::vector<float> stored = slot_state(b, slot);
      auto value_of = [&](int h, size_t e) { return stored[h * head_elems + e]; };
      const WorkingStateRun ws{f, b.seed, b.layer, b.seq_index[0]};
      std::vector<std::vector<float>> theirs(c.HV, std::vector<float>(head_elems));
      for (int h = 0; h < c.HV; ++h) {
        for (size_t e = 0; e < head_elems; ++e) theirs[h][e] = value_of(h, e);
        gated_delta_head_fp32_ws(shape, in, h, pos, pos + 1, theirs[h].data(), nullptr, nullptr,
                                 ws);
      }
      std::vector<uint16_t> o(static_cast<size_t>(c.HV) * c.dv, 0xFFFF);
      ASSERT_TRUE(ws_decode_reference(b, o).empty());
      stored = slot_state(b, slot);
      double worst = 0.0;
      size_t differ = 0;
      for (int h = 0; h < c.HV; ++h) {
        double smax = 0.0;
        for (float x : theirs[h]) smax = std::max(smax, std::fabs(static_cast<double>(x)));
        for (size_t e = 0; e < head_elems; ++e) {
          const double x = theirs[h][e], got = value_of(h, e);
          const double s = cb == 1 ? scale_of(h, static_cast<int>(e % c.dk)) : 0.0;
          double step;
          if (cb == 2)
            step = 0x1p-7 * std::fabs(x) * (1 + 1e-3);
          else if (int8)
            step = s * (1 + 1e-3);
          else
            step = std::max(0x1p-3 * std::fabs(x) * (1 + 1e-3), 0x1p-9 * s);
          worst = std::max(worst, std::fabs(got - x) / (step + 1e-4 * smax));
          differ += std::fabs(got - x) > 1e-3 * step;
        }
      }
      const double fraction = static_cast<double>(differ) / (c.HV * head_elems);
      EXPECT_LE(worst, 1.0) << f.name();
      EXPECT_LE(fraction, 0.01) << f.name();
      std::printf(
          "[ ws reference vs recurrence ] %s %s: %.1f%% of the bound, %.3f%% of codes "
          "differ\n",
          f.name().c_str(), gate == GateKind::kda ? "kda" : "gdn", 100.0 * worst, 100.0 * fraction);
    }
}

// A sequence's stochastic roundings depend on its run index and position, not on its pool slot or
// its place in the batch: the same sequence run from two slots (and batch positions) stores the
// same codes; a different run index stores different ones.
TEST(WsDecodeReference, StochasticRoundingFollowsTheSequenceNotTheSlot) {
  Case c{"", 1, 2, 64, 64, GateKind::gdn, WorkingStateKind::int8_sr, false, {3, 3}};
  HostWsBatch b = make_batch(c, 21);
  // Both sequences: the same stored state and inputs, slots swapped between two runs.
  const size_t slot_codes = b.codes.size() / kSlots, slot_scales = b.scales.size() / kSlots;
  const int s0 = b.slot_ids[0], s1 = b.slot_ids[1];
  std::memcpy(b.codes.data() + s1 * slot_codes, b.codes.data() + s0 * slot_codes, slot_codes);
  std::memcpy(b.scales.data() + s1 * slot_scales, b.scales.data() + s0 * slot_scales, slot_scales);
  const size_t per_seq_q = static_cast<size_t>(3) * c.H * c.dk, per_seq_v = 3ull * c.HV * c.dv;
  std::copy(b.q.begin(), b.q.begin() + per_seq_q, b.q.begin() + per_seq_q);
  std::copy(b.k.begin(), b.k.begin() + per_seq_q, b.k.begin() + per_seq_q);
  std::copy(b.v.begin(), b.v.begin() + per_seq_v, b.v.begin() + per_seq_v);
  std::copy(b.g.begin(), b.g.begin() + 3 * c.HV, b.g.begin() + 3 * c.HV);
  std::copy(b.beta.begin(), b.beta.begin() + 3 * c.HV, b.beta.begin() + 3 * c.HV);
  b.positions = {100, 100};
  HostWsBatch same = b, other = b;
  same.seq_index = {5, 5};
  other.seq_index = {5, 6};
  std::vector<uint16_t> o(static_cast<size_t>(6) * c.HV * c.dv);
  ASSERT_TRUE(ws_decode_reference(same, o).empty());
  ASSERT_TRUE(ws_decode_reference(other, o).empty());
  EXPECT_EQ(std::memcmp(same.codes.data() + s0 * slot_codes, same.codes.data() + s1 * slot_codes,
                        slot_codes),
            0);
  EXPECT_NE(std::memcmp(other.codes.data() + s0 * slot_codes, other.codes.data() + s1 * slot_codes,
                        slot_codes),
            0);
}

// The int8 step's exact dot products (ws_step_math.h): for random vectors x (magnitudes over
// forty binades, zeros, the largest float, subnormals) dot_shift puts max |x| 2^E in [2^21, 2^22);
// the digits are signed bytes (|d0| <= 64) that recombine to rint(x 2^E) (fp64, ties to even); and
// dot_value of the integer sums D_p = sum_j c_j d_pj lies within the stated bound of the fp64 sum
// of c_j x_j: 0.5 sum_j |c_j| 2^-E for the digits' rounding, plus an fp32 rounding of the result
// and the fp64 sum's own error (infinity where the sum passes the largest float).
TEST(WsDecodeReference, DotDigitsRecombineAndBoundTheError) {
  EXPECT_EQ(wsk::dot_shift(0.0f), 0);
  EXPECT_EQ(wsk::dot_shift(1.0f), 21);            // 2^21 exactly
  EXPECT_EQ(wsk::dot_shift(0x1.fffffep-1f), 22);  // just below 1
  EXPECT_EQ(wsk::dot_shift(3.40282347e38f), 22 - 128);
  EXPECT_EQ(wsk::dot_shift(0x1p-149f), 22 + 148);
  Rng rng(41);
  for (int n = 0; n < 2000; ++n) {
    const int dk = 128;
    std::vector<float> x(dk);
    std::vector<int> c(dk);
    const int binade = static_cast<int>(rng.uniform(-40, 40));
    float K = 0.0f;
    for (int j = 0; j < dk; ++j) {
      x[j] = static_cast<float>(
          std::ldexp(rng.uniform(-1.0, 1.0), binade - static_cast<int>(rng.uniform(0, 30))));
      if (rng.uniform(0, 1) < 0.05) x[j] = 0.0f;
      c[j] = static_cast<int>(rng.uniform(-128, 128));
    }
    if (n == 0) x[0] = 3.40282347e38f;
    if (n == 1)
      for (int j = 0; j < dk; ++j) x[j] = static_cast<float>(j % 7) * 0x1p-149f;
    for (float v : x) K = std::max(K, std::fabs(v));
    const int E = wsk::dot_shift(K);
    if (K > 0.0f) {
      ASSERT_GE(std::ldexp(static_cast<double>(K), E), 0x1p21);
      ASSERT_LT(std::ldexp(static_cast<double>(K), E), 0x1p22);
    }
    int D[3] = {0, 0, 0};
    double exact = 0.0, bound = 0.0;
    for (int j = 0; j < dk; ++j) {
      int d[3];
      wsk::dot_digits(x[j], E, d[0], d[1], d[2]);
      for (int p = 0; p < 3; ++p) ASSERT_TRUE(d[p] >= -128 && d[p] <= 127) << d[p];
      ASSERT_LE(std::abs(d[0]), 64);
      const double want = std::nearbyint(std::ldexp(static_cast<double>(x[j]), E));
      ASSERT_EQ(65536.0 * d[0] + 256.0 * d[1] + d[2], want) << "x " << x[j] << " E " << E;
      for (int p = 0; p < 3; ++p) D[p] += c[j] * d[p];
      exact += c[j] * static_cast<double>(x[j]);
      bound += 0.5 * std::abs(c[j]);
    }
    const double got = wsk::dot_value(D[0], D[1], D[2], E);
    bound =
        std::ldexp(bound, -E) + std::fabs(exact) * 0x1p-23 + 0x1p-149 + std::fabs(exact) * 0x1p-50;
    if (std::fabs(exact) > 3.40282347e38)
      ASSERT_TRUE(std::isinf(got)) << "an fp32 overflow gives infinity";
    else
      ASSERT_LE(std::fabs(got - exact), bound) << "n " << n << " E " << E;
  }
}

// The int8 encode of the reference on the near-tie state, on the host: with g = 0 and beta = 0
// the step leaves S = fl(code x scale) (w = 0), so the new scale of column j is
// ws_column_scale(max_i |S_ij|) and every stored code is rint(S_ij fl(1 / scale_j)) of the exact
// product, ties to even, taken here in fp64; the reference refuses nothing, and the +-1 elements
// really sit next to a boundary (the division would round some of them the other way).
TEST(WsDecodeReference, Int8StepEncodesTheExactProductOfTheNewScale) {
  const Case& c = kNearTieCase;
  HostWsBatch b = near_tie_batch();
  const HostWsBatch before = b;
  std::vector<uint16_t> o(static_cast<size_t>(2) * c.HV * c.dv, 0);
  ASSERT_TRUE(ws_decode_reference(b, o).empty());
  long split = 0;
  for (int slot : b.slot_ids)
    for (int h = 0; h < c.HV; ++h)
      for (int j = 0; j < c.dk; ++j) {
        std::vector<float> S(c.dv);
        float amax = 0.0f;
        for (int i = 0; i < c.dv; ++i) {
          const size_t at = ((static_cast<size_t>(slot) * c.HV + h) * c.dv + i) * c.dk + j;
          S[i] = static_cast<float>(static_cast<int8_t>(before.codes[at])) *
                 fp32_scale(before, slot, h, j);
          amax = std::max(amax, std::fabs(S[i]));
        }
        const float scale = ws_column_scale(amax, 127.0f, false);
        ASSERT_EQ(fp32_scale(b, slot, h, j), scale)
            << "slot " << slot << " head " << h << " j " << j;
        const float inv = 1.0f / scale;
        for (int i = 0; i < c.dv; ++i) {
          const size_t at = ((static_cast<size_t>(slot) * c.HV + h) * c.dv + i) * c.dk + j;
          const int want = static_cast<int>(
              std::nearbyint(static_cast<double>(S[i]) * static_cast<double>(inv)));
          ASSERT_EQ(static_cast<int8_t>(b.codes[at]), want) << "element " << at;
          split += want != ws_int8_rne(S[i], scale);
        }
      }
  EXPECT_GT(split, 0) << "no element of the near-tie state sat next to a boundary";
}

// wsk::exp against the fp64 exponential: within 2 ulp over the gates' range [-30, 0], and at the
// ends (0, the subnormal range, below it, NaN).
TEST(WsDecodeReference, ExpWithinTwoUlpOfFp64) {
  double worst = 0.0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -30.0f + 30.0f * static_cast<float>(i) / 200000.0f;
    const double want = std::exp(static_cast<double>(x));
    const float got = wsk::exp(x);
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    worst = std::max(worst, std::fabs(got - want) / ulp);
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(wsk::exp(0.0f), 1.0f);
  EXPECT_EQ(wsk::exp(-200.0f), 0.0f);
  EXPECT_GT(wsk::exp(-100.0f), 0.0f);  // subnormal range
  // Subnormal result: within one unit of the smallest subnormal, 2^-149.
  EXPECT_LE(std::fabs(wsk::exp(-100.0f) - std::exp(-100.0)), 0x1p-149);
  EXPECT_TRUE(std::isnan(wsk::exp(NAN)));
}

}  // namespace
