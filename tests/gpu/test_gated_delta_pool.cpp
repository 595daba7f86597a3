// The pool-indexed gated-delta CUDA kernel against its CPU reference (gather -> fp32 reference ->
// scatter), on awkward shapes, non-contiguous distinct slot ids, variable sequence lengths, NaN
// prefilled outputs, guard regions, and untouched slots compared bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <ostream>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/rng.h"
#include "kernels/gated_delta/gated_delta_pool.h"
#include "kernels/gated_delta/gated_delta_pool_reference.h"
#include "tests/error_of.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/pool_batch.h"

using namespace statecheck;
using namespace statecheck::cuda;
using statecheck::cuda::testing::DevicePoolBatch;
using statecheck::cuda::testing::GpuTest;
using statecheck::cuda::testing::LaunchResult;
using statecheck::cuda::testing::make_pool_batch;
using statecheck::cuda::testing::pool_value;

namespace {

struct Case {
  const char* name;
  int H, HV, dk, dv;
  GateKind gate;
  Dtype dtype;
  std::vector<int> lengths;  // tokens per sequence
  int max_seq_len = -1;      // the launch's hint; -1: 1 when every sequence has at most 1 token
  int max_blocks = 0;        // cap on the persistent decode grid (0: none)
  bool staged = false;       // the launch must run on the staged decode variant
  bool packed = false;       // ... on the packed bf16 decode variant
  bool qk_l2norm = true;
};

// GoogleTest prints the parameter in failure messages by this (found by argument-dependent
// lookup), instead of its bytes: the case's name, as in the test's name.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

HostPoolBatch make_batch(const Case& c, uint64_t seed) {
  return make_pool_batch(c.H, c.HV, c.dk, c.dv, c.gate, c.dtype, c.lengths, c.qk_l2norm, 12, seed);
}

float as_float(const HostPoolBatch& b, size_t e) {
  return pool_value(b, e);
}

// One launch of batch b with the given hint, grid cap and outputs on or off.
struct Launch : LaunchResult {
  GatedDeltaKernel kernel = GatedDeltaKernel::general;  // gated_delta_pool_variant
};

Launch launch(const HostPoolBatch& b, int max_seq_len, int max_blocks, bool with_outputs) {
  DevicePoolBatch d(b, 12);
  GatedDeltaPoolArgs a = d.args(with_outputs);
  a.max_seq_len = max_seq_len, a.max_blocks = max_blocks;
  Launch r;
  r.kernel = gated_delta_pool_variant(a);
  gated_delta_pool(a);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  static_cast<LaunchResult&>(r) = d.download();
  return r;
}

class GatedDeltaPool : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(GatedDeltaPool, MatchesCpuReference) {
  const Case c = GetParam();
  HostPoolBatch ref = make_batch(c, 1234);
  const HostPoolBatch before = ref;

  // Decode batches pass the one-token hint (decode variant); varlen batches pass none (0), unless
  // the case sets the hint itself.
  const int longest = *std::max_element(c.lengths.begin(), c.lengths.end());
  const int hint = c.max_seq_len >= 0 ? c.max_seq_len : (longest <= 1 ? 1 : 0);
  const Launch run = launch(ref, hint, c.max_blocks, true);
  EXPECT_EQ(run.kernel == GatedDeltaKernel::decode_staged, c.staged)
      << "the launch ran on " << gated_delta_kernel_name(run.kernel);
  EXPECT_EQ(run.kernel == GatedDeltaKernel::decode_packed_bf16, c.packed)
      << "the launch ran on " << gated_delta_kernel_name(run.kernel);
  EXPECT_TRUE(run.guards_intact) << "write past the pool or the outputs";

  const std::vector<uint16_t> o_ref = gated_delta_pool_reference(ref);
  HostPoolBatch got = before;
  if (c.dtype == Dtype::fp32)
    got.pool_fp32 = run.pool32;
  else
    got.pool_bf16 = run.pool16;
  const std::vector<uint16_t>& o_gpu = run.o;

  // Tolerance, per (sequence, head). Both sides compute the same fp32 recurrence with different
  // summation orders (warp tree vs sequential) and fused multiply-adds. Each is within the bound of
  // tests/test_recurrence.cpp of the exact result, ||err_T||_F <= 2 (d_k + 8) u sum_t (||S_t||_F +
  // beta_t ||v_t||), so they differ by at most twice that,
  //   ||S_gpu - S_cpu||_F <= 4 (d_k + 8) u sum_t (||S_t||_F + beta_t ||v_t||)  =: B,
  // with the norms of the exact states taken from the fp64 loop over the same inputs (its own
  // error, ~1e-16 relative, is covered by the factor 1.001). The head's whole difference is held
  // to B. A bf16 pool adds at most one bf16 rounding on each side where the two fp32 values
  // straddle a rounding boundary: per element |diff| <= B + 2^-7 |x|. Outputs o_t = S_t (scale
  // q_hat) with ||q_hat|| = 1 differ by at most scale * B plus their two bf16 roundings.
  ASSERT_TRUE(c.qk_l2norm) << "the tolerance below is derived for unit q and k";
  const double u = std::ldexp(1.0, -24);
  const RecurrenceShape shape = pool_batch_shape(before);
  const size_t head = static_cast<size_t>(c.dv) * c.dk;
  const double scale = 1.0 / std::sqrt(double(c.dk));
  const double bf16_state = c.dtype == Dtype::bf16 ? std::ldexp(1.0, -7) : 0.0;
  std::vector<int> seq_of_slot(12, -1);
  for (size_t n = 0; n < ref.slot_ids.size(); ++n)
    seq_of_slot[ref.slot_ids[n]] = static_cast<int>(n);
  for (int slot = 0; slot < 12; ++slot) {
    for (int h = 0; h < c.HV; ++h) {
      const size_t base = (static_cast<size_t>(slot) * c.HV + h) * head;
      const int n = seq_of_slot[slot];
      if (n < 0) {
        for (size_t e = 0; e < head; ++e) {
          const bool same =
              c.dtype == Dtype::fp32
                  ? std::memcmp(&got.pool_fp32[base + e], &before.pool_fp32[base + e], 4) == 0
                  : got.pool_bf16[base + e] == before.pool_bf16[base + e];
          ASSERT_TRUE(same) << "untouched slot " << slot << " changed at head " << h << " element "
                            << e;
        }
        continue;
      }
      const int t0 = ref.cu_seqlens[n], len = ref.cu_seqlens[n + 1] - t0;
      if (len == 0) {  // a sequence without tokens keeps its state bit for bit
        const bool same =
            c.dtype == Dtype::fp32
                ? std::memcmp(&got.pool_fp32[base], &before.pool_fp32[base], head * 4) == 0
                : std::equal(got.pool_bf16.begin() + base, got.pool_bf16.begin() + base + head,
                             before.pool_bf16.begin() + base);
        ASSERT_TRUE(same) << "slot " << slot << " (a sequence without tokens) changed at head "
                          << h;
        continue;
      }
      const LayerInputs in = pool_batch_sequence_inputs(before, n);
      std::vector<double> S(head);
      for (size_t e = 0; e < head; ++e) S[e] = as_float(before, base + e);
      double norm_sum = 0;
      for (int t = 0; t < len; ++t) {
        gated_delta_head_fp64(shape, in, h, t, t + 1, S.data(), nullptr);
        double sn = 0, vn = 0;
        for (const double x : S) sn += x * x;
        for (int i = 0; i < c.dv; ++i) {
          const double x = in.v[(static_cast<size_t>(t) * c.HV + h) * c.dv + i];
          vn += x * x;
        }
        norm_sum += std::sqrt(sn) + in.beta[static_cast<size_t>(t) * c.HV + h] * std::sqrt(vn);
      }
      const double B = 4.0 * (c.dk + 8) * u * norm_sum * 1.001;
      double diff_sq = 0;
      for (size_t e = 0; e < head; ++e) {
        const double r = as_float(ref, base + e), x = as_float(got, base + e);
        ASSERT_TRUE(std::isfinite(x)) << "slot " << slot << " head " << h << " element " << e;
        ASSERT_LE(std::fabs(x - r), B + bf16_state * std::fabs(r))
            << "slot " << slot << " head " << h << " element " << e << " gpu " << x << " cpu " << r
            << " bound " << B;
        diff_sq += (x - r) * (x - r);
      }
      if (c.dtype == Dtype::fp32) {
        ASSERT_LE(std::sqrt(diff_sq), B) << "slot " << slot << " head " << h << " (Frobenius)";
      }
      for (int t = t0; t < t0 + len; ++t)
        for (int i = 0; i < c.dv; ++i) {
          const size_t e = (static_cast<size_t>(t) * c.HV + h) * c.dv + i;
          const double r = float_from_bf16_bits(o_ref[e]), x = float_from_bf16_bits(o_gpu[e]);
          ASSERT_TRUE(std::isfinite(x))
              << "output [" << t << ", " << h << ", " << i << "] not written";
          ASSERT_LE(std::fabs(x - r), scale * B + std::ldexp(std::fabs(r), -7))
              << "output [" << t << ", " << h << ", " << i << "]";
        }
    }
  }
}

const std::vector<int> kDecode8 = {1, 1, 1, 1, 1, 1, 1, 1};
const std::vector<int> kVarlen = {63, 1, 17, 40};
// Decode with two sequences that have no token: their states must come back bit for bit.
const std::vector<int> kDecodeGaps = {1, 0, 1, 1, 1, 0, 1, 1};
// Sequences longer than a one-token hint says.
const std::vector<int> kLongerThanHint = {1, 3, 0, 2, 1};
// Decode whose last sequence has no token (its start is the end of the token arrays).
const std::vector<int> kDecodeTrailingGap = {1, 1, 0, 1, 0};

INSTANTIATE_TEST_SUITE_P(
    Shapes, GatedDeltaPool,
    ::testing::Values(
        Case{"gdn_fp32_d60_HV3H_decode", 2, 6, 60, 60, GateKind::gdn, Dtype::fp32, kDecode8},
        Case{"gdn_fp32_d60_HV3H_varlen_T63", 2, 6, 60, 60, GateKind::gdn, Dtype::fp32, kVarlen},
        Case{"kda_fp32_d60_HV3H_varlen_T63", 2, 6, 60, 60, GateKind::kda, Dtype::fp32, kVarlen},
        Case{"gdn_bf16_d60_HV3H_varlen_T63", 2, 6, 60, 60, GateKind::gdn, Dtype::bf16, kVarlen},
        // bf16 decode: the packed variant, d_k 128 and 64, d_v not a multiple of its 64-row
        // blocks, GVA, sequences without tokens, and a one-token hint the batch does not keep.
        Case{"kda_bf16_d128_decode_packed", 4, 4, 128, 128, GateKind::kda, Dtype::bf16, kDecode8,
             -1, 0, false, true},
        Case{"gdn_bf16_dk128_dv40_HV3H_decode_gaps_packed", 2, 6, 128, 40, GateKind::gdn,
             Dtype::bf16, kDecodeGaps, -1, 0, false, true},
        Case{"kda_bf16_dk64_dv96_hint_1_longer_seqs_packed", 2, 4, 64, 96, GateKind::kda,
             Dtype::bf16, kLongerThanHint, 1, 0, false, true},
        Case{"gdn_bf16_dk32_dv64_trailing_gap_packed", 1, 2, 32, 64, GateKind::gdn, Dtype::bf16,
             kDecodeTrailingGap, -1, 0, false, true},
        Case{"gdn_bf16_d60_decode_gaps_general", 2, 6, 60, 60, GateKind::gdn, Dtype::bf16,
             kDecodeGaps},
        Case{"gdn_fp32_d128_H4_HV8_varlen", 4, 8, 128, 128, GateKind::gdn, Dtype::fp32, kVarlen},
        Case{"kda_fp32_d128_varlen", 4, 4, 128, 128, GateKind::kda, Dtype::fp32, kVarlen},
        Case{"gdn_fp32_dk30_dv50_scalar_path", 1, 3, 30, 50, GateKind::gdn, Dtype::fp32, kVarlen},
        Case{"kda_fp32_dk64_dv64_decode", 2, 4, 64, 64, GateKind::kda, Dtype::fp32, kDecode8},
        Case{"gdn_fp32_dk256_dv40", 1, 2, 256, 40, GateKind::gdn, Dtype::fp32, kVarlen},
        // The staged decode variant (fp32, d_k = 128, d_v % 32 == 0, at least 16 tiles of 32
        // rows per block): 3 tiles per head (d_v 96) with GVA on 4 blocks (36 tiles each); 128
        // tiles on 3 blocks, so each block cycles its ring of 4 buffers about 11 times, with two
        // sequences without tokens; a one-token hint that the batch does not keep (3 and 2
        // tokens), on 2 blocks. The same decode without a grid cap takes the row kernel.
        Case{"gdn_fp32_d128_dv96_HV3H_decode_staged", 2, 6, 128, 96, GateKind::gdn, Dtype::fp32,
             kDecode8, -1, 4, true},
        Case{"kda_fp32_d128_decode_staged_3_blocks", 4, 4, 128, 128, GateKind::kda, Dtype::fp32,
             kDecodeGaps, -1, 3, true},
        Case{"gdn_fp32_d128_staged_hint_1_longer_seqs", 2, 4, 128, 64, GateKind::gdn, Dtype::fp32,
             kLongerThanHint, 1, 2, true},
        Case{"kda_fp32_d128_decode_rows", 4, 4, 128, 128, GateKind::kda, Dtype::fp32, kDecodeGaps}),
    case_name);

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The staged decode variant applies token_step's arithmetic in the same order as the row kernel:
// pools and outputs agree bit for bit (the row kernel's prefetching form runs with hint 0), and
// without outputs the staged variant leaves them alone and updates the pool the same way.
TEST_F(GpuTest, StagedDecodeMatchesRowKernelBitForBit) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
    SCOPED_TRACE(gate == GateKind::gdn ? "gdn" : "kda");
    const Case c{"bits", 2, 6, 128, 64, gate, Dtype::fp32, kDecodeGaps};
    const HostPoolBatch b = make_batch(c, 99);
    const Launch staged = launch(b, 1, 2, true);  // 96 tiles on 2 blocks
    const Launch rows = launch(b, 0, 0, true);
    const Launch staged_no_outputs = launch(b, 1, 2, false);
    ASSERT_EQ(staged.kernel, GatedDeltaKernel::decode_staged);
    ASSERT_EQ(rows.kernel, GatedDeltaKernel::rows8);
    EXPECT_FALSE(same_bits(staged.pool32, b.pool_fp32)) << "the launch changed no state";
    EXPECT_TRUE(same_bits(staged.pool32, rows.pool32));
    EXPECT_EQ(staged.o, rows.o);
    EXPECT_TRUE(same_bits(staged_no_outputs.pool32, staged.pool32));
    EXPECT_TRUE(std::all_of(staged_no_outputs.o.begin(), staged_no_outputs.o.end(),
                            [](uint16_t x) { return x == 0xFFFF; }));
    EXPECT_TRUE(staged.guards_intact && rows.guards_intact && staged_no_outputs.guards_intact);
  }
}

// The packed bf16 decode converts each state piece twice and rounds once, in token_step's order:
// its pools and outputs are those of the row kernel (prefetching form, hint 0) bit for bit, on
// one-token batches with gaps (one of them last) and on a batch longer than its one-token hint
// (the row-by-row path), for d_k 128, 64 and 32, with and without the q/k L2 norm; without
// outputs it leaves them alone and updates the pool the same.
TEST_F(GpuTest, PackedBf16DecodeMatchesRowKernelBitForBit) {
  for (GateKind gate : {GateKind::gdn, GateKind::kda})
    for (int dk : {128, 64, 32})
      for (const std::vector<int>* lengths : {&kDecodeGaps, &kDecodeTrailingGap, &kLongerThanHint})
        for (bool l2norm : {true, false}) {
          SCOPED_TRACE(::testing::Message()
                       << (gate == GateKind::gdn ? "gdn" : "kda") << " d_k " << dk
                       << (lengths == &kLongerThanHint ? " longer" : " gaps") << " l2norm "
                       << l2norm);
          Case c{"bits", 2, 6, dk, 72, gate, Dtype::bf16, *lengths};
          c.qk_l2norm = l2norm;
          const HostPoolBatch b = make_batch(c, 7);
          const Launch packed = launch(b, 1, 0, true);
          const Launch rows = launch(b, 0, 0, true);
          const Launch packed_no_outputs = launch(b, 1, 0, false);
          ASSERT_EQ(packed.kernel, GatedDeltaKernel::decode_packed_bf16);
          ASSERT_EQ(rows.kernel, GatedDeltaKernel::rows8);
          EXPECT_NE(packed.pool16, b.pool_bf16) << "the launch changed no state";
          EXPECT_EQ(packed.pool16, rows.pool16);
          EXPECT_EQ(packed.o, rows.o);
          EXPECT_EQ(packed_no_outputs.pool16, packed.pool16);
          EXPECT_TRUE(std::all_of(packed_no_outputs.o.begin(), packed_no_outputs.o.end(),
                                  [](uint16_t x) { return x == 0xFFFF; }));
          EXPECT_TRUE(packed.guards_intact && rows.guards_intact &&
                      packed_no_outputs.guards_intact);
        }
}

// The kernel a launch takes where the choice asks nothing of the device (every launch but an fp32
// decode with d_k = 128 and d_v % 32 == 0, whose staged grid depends on the device), by the rules
// of gated_delta_pool.h: bf16 decode with d_k <= 128 packed, other decode rows8 without prefetch,
// longer or unknown sequence lengths rows8, d_k outside {32, 64, 128, 256} general. No GPU needed.
TEST(GatedDeltaPoolVariant, ChoiceWithoutTheDevice) {
  struct VariantCase {
    int dk, dv, max_seq_len;
    Dtype dtype;
    GatedDeltaKernel want;
  };
  const std::vector<VariantCase> cases = {
      {128, 128, 1, Dtype::bf16, GatedDeltaKernel::decode_packed_bf16},
      {64, 96, 1, Dtype::bf16, GatedDeltaKernel::decode_packed_bf16},
      {32, 64, 1, Dtype::bf16, GatedDeltaKernel::decode_packed_bf16},
      {256, 64, 1, Dtype::bf16, GatedDeltaKernel::decode_rows8},
      {64, 64, 1, Dtype::fp32, GatedDeltaKernel::decode_rows8},
      {128, 40, 1, Dtype::fp32, GatedDeltaKernel::decode_rows8},  // d_v % 32 != 0: not staged
      {256, 40, 1, Dtype::fp32, GatedDeltaKernel::decode_rows8},
      {128, 128, 0, Dtype::fp32, GatedDeltaKernel::rows8},
      {128, 128, 0, Dtype::bf16, GatedDeltaKernel::rows8},
      {32, 64, 7, Dtype::bf16, GatedDeltaKernel::rows8},
      {60, 60, 1, Dtype::bf16, GatedDeltaKernel::general},
      {30, 50, 0, Dtype::fp32, GatedDeltaKernel::general},
  };
  for (const VariantCase& c : cases) {
    GatedDeltaPoolArgs a;
    a.num_seqs = 8, a.H = 2, a.HV = 4, a.dk = c.dk, a.dv = c.dv, a.state_dtype = c.dtype;
    a.max_seq_len = c.max_seq_len;
    for (GateKind gate : {GateKind::gdn, GateKind::kda}) {
      a.gate = gate;
      EXPECT_EQ(gated_delta_pool_variant(a), c.want)
          << "d_k " << c.dk << ", d_v " << c.dv << ", hint " << c.max_seq_len << ", "
          << dtype_name(c.dtype) << ": " << gated_delta_kernel_name(gated_delta_pool_variant(a));
    }
  }
}

// The names result files record for the kernel that ran (bench rows' "kernel" attribute): those of
// earlier results, whatever the enum values are called. No GPU needed.
TEST(GatedDeltaPoolVariant, KernelNamesAreThoseOfEarlierResults) {
  EXPECT_STREQ(gated_delta_kernel_name(GatedDeltaKernel::decode_staged), "staged_decode");
  EXPECT_STREQ(gated_delta_kernel_name(GatedDeltaKernel::decode_packed_bf16), "packed_bf16_decode");
  EXPECT_STREQ(gated_delta_kernel_name(GatedDeltaKernel::decode_rows8), "rows8_decode");
  EXPECT_STREQ(gated_delta_kernel_name(GatedDeltaKernel::rows8), "rows8");
  EXPECT_STREQ(gated_delta_kernel_name(GatedDeltaKernel::general), "general");
}

// Argument checks run before any device work, so these need no GPU (the pointers are never
// dereferenced): each bad launch is refused with a message naming what is wrong.
TEST(GatedDeltaPoolArguments, BadLaunchesAreRefusedByName) {
  auto* dev = reinterpret_cast<uint16_t*>(uintptr_t{0x10000});
  auto* dev_f = reinterpret_cast<float*>(uintptr_t{0x10000});
  const auto* ids = reinterpret_cast<const int32_t*>(uintptr_t{0x20000});
  GatedDeltaPoolArgs ok;
  ok.num_seqs = 1, ok.H = 2, ok.HV = 4, ok.dk = 8, ok.dv = 8;
  ok.state_pool = dev, ok.pool_slots = 2, ok.slot_ids = ids, ok.cu_seqlens = ids;
  ok.q = dev, ok.k = dev, ok.v = dev, ok.g = dev_f, ok.beta = dev_f;
  struct Bad {
    std::function<void(GatedDeltaPoolArgs&)> edit;
    const char* message;
  };
  const std::vector<Bad> cases = {
      {[](GatedDeltaPoolArgs& a) { a.H = 3; }, "HV (4) is not a multiple of H (3)"},
      {[](GatedDeltaPoolArgs& a) { a.dk = 512; }, "d_k = 512 > 256 is not supported"},
      {[](GatedDeltaPoolArgs& a) { a.dv = 0; }, "must be positive"},
      {[](GatedDeltaPoolArgs& a) { a.num_seqs = -1; }, "num_seqs = -1"},
      {[](GatedDeltaPoolArgs& a) { a.max_blocks = -1; }, "max_blocks = -1"},
      {[](GatedDeltaPoolArgs& a) { a.beta = nullptr; }, "beta is null"},
      {[](GatedDeltaPoolArgs& a) { a.slot_ids = nullptr; }, "slot_ids is null"},
      {[](GatedDeltaPoolArgs& a) { a.state_pool = reinterpret_cast<void*>(uintptr_t{0x10008}); },
       "state_pool is not 16-byte aligned"},
  };
  for (const Bad& bad : cases) {
    GatedDeltaPoolArgs a = ok;
    bad.edit(a);
    const std::string err = statecheck::test_support::error_of([&] { gated_delta_pool(a); });
    EXPECT_NE(err.find(bad.message), std::string::npos)
        << "expected '" << bad.message << "', got '" << err << "'";
  }
}

}  // namespace
