// The chunked prefill kernel (kernels/chunked_delta/chunked_prefill.h) against the fp64 token
// loop and the fp64 chunked reference (core/recurrence/chunked_delta.h) on awkward shapes: T = 63,
// lengths that are not multiples of the chunk, T = 1, an empty sequence, HV = 3H, d_v not a
// multiple of the value tile, both value tiles (which must agree bit for bit: every element is
// the same sums in the same order), fp32 and bf16 pools, both forms (fused and split, which must
// agree bit for bit too); NaN-prefilled outputs, guard regions (the split form's workspace
// included), untouched slots bit-identical, a launch without outputs, and the argument refusals.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>

#include <fmt/format.h>

#include "core/dtype/bf16.h"
#include "core/recurrence/chunked_delta.h"
#include "core/recurrence/gated_delta.h"
#include "kernels/chunked_delta/chunk_workspace.h"
#include "kernels/chunked_delta/chunked_prefill.h"
#include "kernels/gated_delta/gated_delta_pool_reference.h"
#include "tests/error_of.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/pool_batch.h"

using namespace statecheck;
using namespace statecheck::cuda;
using statecheck::cuda::testing::DevicePoolBatch;
using statecheck::cuda::testing::GpuTest;
using statecheck::cuda::testing::Guarded;
using statecheck::cuda::testing::make_pool_batch;
using statecheck::cuda::testing::pool_value;
using statecheck::test_support::error_of;

namespace {

constexpr int kSlots = 12;

struct Case {
  const char* name;
  int H, HV, dv;
  GateKind gate;
  Dtype dtype;
  std::vector<int> lengths;
  // Added to g for the packed tokens [offset_from, offset_to): KDA's chunks whose decays are too
  // strong for its tensor-core intra-chunk products (|G_r - G_m| > 40) or above 0 take the
  // elementwise ones. At -12 a token, 8 tokens span 96 > 88: the split factors would overflow
  // fp32 on the tensor-core path, so this case fails if the guard does not send it elsewhere.
  float g_offset = 0.0f;
  int offset_from = 0, offset_to = 0;
};

HostPoolBatch case_batch(const Case& c, uint64_t seed) {
  HostPoolBatch b =
      make_pool_batch(c.H, c.HV, 128, c.dv, c.gate, c.dtype, c.lengths, true, kSlots, seed);
  const int T = b.cu_seqlens.back();
  const size_t width = T ? b.g.size() / T : 0;
  for (int t = c.offset_from; t < std::min(c.offset_to, T); ++t)
    for (size_t e = 0; e < width; ++e) b.g[t * width + e] += c.g_offset;
  return b;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

using Launch = statecheck::cuda::testing::LaunchResult;

// One launch in `form`; the split form gets a workspace of exactly the size it asks for, with a
// guard after it (and the workspace's own guard joins the result's), or none (the launcher's own).
// skip_first: the launch covers every sequence but the first, so its cu_seqlens starts past 0.
Launch launch(const HostPoolBatch& b, int value_tile, bool with_outputs,
              ChunkedForm form = ChunkedForm::fused, bool own_workspace = true,
              bool skip_first = false) {
  DevicePoolBatch d(b, kSlots);
  ChunkedPrefillOptions opt;
  opt.value_tile = value_tile;
  opt.form = form;
  GatedDeltaPoolArgs a = d.args(with_outputs);
  if (skip_first) a.num_seqs -= 1, a.cu_seqlens += 1, a.slot_ids += 1;
  if (form == ChunkedForm::split) opt.total_tokens = b.cu_seqlens.back();
  const size_t ws_bytes =
      form == ChunkedForm::split ? chunked_prefill_workspace_bytes(a, opt.total_tokens) : 0;
  // Filled with bf16 NaN: a state pass that read a tile the transform pass did not write fails.
  Guarded<uint16_t> ws(std::vector<uint16_t>(own_workspace ? ws_bytes / 2 : 0, 0xFFFF));
  if (form == ChunkedForm::split && own_workspace)
    opt.workspace = ws.data(), opt.workspace_bytes = ws_bytes;
  chunked_prefill_pool(a, opt);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  Launch r = d.download();
  r.guards_intact = r.guards_intact && ws.guard_intact();
  return r;
}

const ChunkedForm kForms[] = {ChunkedForm::fused, ChunkedForm::split};

// Bit for bit (EXPECT_EQ on floats would take -0 for +0).
bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}
const char* form_name(ChunkedForm f) {
  return f == ChunkedForm::split ? "split" : "fused";
}

double rel_frobenius(const std::vector<double>& x, const std::vector<double>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i)
    d += (x[i] - ref[i]) * (x[i] - ref[i]), n += ref[i] * ref[i];
  return std::sqrt(d / n);
}

// tol16 (scripts/crosscheck.py, docs/chunked_prefill.md): the kernel's paths to an output or a
// final state chain at most four bf16 roundings of its operands (the normalised keys and queries,
// T diag(beta), the pseudo-values U, the bf16 copy of the state), each off by at most 2^-8 of the
// value, plus fp32 accumulation far below that.
const double kTol16 = 4.0 * std::ldexp(1.0, -8);

class ChunkedPrefill : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(ChunkedPrefill, MatchesFp64LoopAndChunkedReference) {
  const Case c = GetParam();
  const HostPoolBatch before = case_batch(c, 2026);
  for (const ChunkedForm form : kForms) {
    SCOPED_TRACE(form_name(form));
    const Launch run = launch(before, 0, true, form);
    EXPECT_TRUE(run.guards_intact) << "write past the pool, the outputs or the workspace";
    HostPoolBatch got = before;
    got.pool_fp32 = run.pool32, got.pool_bf16 = run.pool16;

    const RecurrenceShape shape = pool_batch_shape(before);
    const size_t head = static_cast<size_t>(c.dv) * 128, slot_elems = head * c.HV;
    std::vector<int> seq_of_slot(kSlots, -1);
    for (size_t n = 0; n < before.slot_ids.size(); ++n)
      seq_of_slot[before.slot_ids[n]] = static_cast<int>(n);
    for (int slot = 0; slot < kSlots; ++slot) {
      const size_t base = slot * slot_elems;
      const int n = seq_of_slot[slot];
      const int len = n < 0 ? 0 : before.cu_seqlens[n + 1] - before.cu_seqlens[n];
      if (len == 0) {  // not listed, or a sequence without tokens: bit for bit as before
        const bool same =
            c.dtype == Dtype::fp32
                ? std::memcmp(&got.pool_fp32[base], &before.pool_fp32[base], slot_elems * 4) == 0
                : std::equal(got.pool_bf16.begin() + base,
                             got.pool_bf16.begin() + base + slot_elems,
                             before.pool_bf16.begin() + base);
        EXPECT_TRUE(same) << "slot " << slot << " changed without tokens";
        continue;
      }
      const LayerInputs in = pool_batch_sequence_inputs(before, n);
      std::vector<double> S0(slot_elems), S_loop, S_chunk, S_gpu(slot_elems);
      for (size_t e = 0; e < slot_elems; ++e) {
        S0[e] = pool_value(before, base + e);
        S_gpu[e] = pool_value(got, base + e);
        ASSERT_TRUE(std::isfinite(S_gpu[e])) << "slot " << slot << " element " << e;
      }
      S_loop = S0, S_chunk = S0;
      const size_t outs = static_cast<size_t>(len) * c.HV * c.dv;
      std::vector<double> o_loop(outs), o_chunk(outs), o_gpu(outs);
      gated_delta_layer_fp64(shape, in, 0, len, S_loop.data(), o_loop.data());
      gated_delta_layer_chunked_fp64(shape, in, 0, len, kChunkedPrefillChunk, S_chunk.data(),
                                     o_chunk.data());
      const size_t o0 = static_cast<size_t>(before.cu_seqlens[n]) * c.HV * c.dv;
      for (size_t e = 0; e < outs; ++e) {
        o_gpu[e] = float_from_bf16_bits(run.o[o0 + e]);
        ASSERT_TRUE(std::isfinite(o_gpu[e]))
            << "sequence " << n << " output " << e << " not written";
      }
      // The two fp64 forms agree to rounding, so a failure below is the kernel's.
      ASSERT_LT(rel_frobenius(S_chunk, S_loop), 1e-12);
      ASSERT_LT(rel_frobenius(o_chunk, o_loop), 1e-12);
      // The state moved well beyond the tolerance, so the state check can fail.
      ASSERT_GT(rel_frobenius(S0, S_loop), 4 * kTol16) << "sequence " << n;
      const double err_state = rel_frobenius(S_gpu, S_loop), err_o = rel_frobenius(o_gpu, o_loop);
      EXPECT_LE(err_state, kTol16) << "sequence " << n << " final state";
      EXPECT_LE(err_o, kTol16) << "sequence " << n << " outputs";
      std::printf("  %s %s sequence %d (%d tokens): final state %.3g, outputs %.3g of tol16 %.3g\n",
                  c.name, form_name(form), n, len, err_state, err_o, kTol16);
    }
    // Outputs exist for the batch's tokens only; the buffer has no slack, so every entry is
    // checked.
    EXPECT_EQ(run.o.size(), static_cast<size_t>(before.cu_seqlens.back()) * c.HV * c.dv);
  }
}

TEST_P(ChunkedPrefill, SplitFormEqualsFusedFormBitForBit) {
  const Case c = GetParam();
  const HostPoolBatch b = case_batch(c, 91);
  const Launch fused = launch(b, 32, true);
  for (const int tile : {32, 64}) {
    if (c.dv % tile != 0) continue;
    SCOPED_TRACE(tile);
    const Launch split = launch(b, tile, true, ChunkedForm::split);
    EXPECT_TRUE(split.guards_intact) << "write past the pool, the outputs or the workspace";
    EXPECT_EQ(0, std::memcmp(fused.pool32.data(), split.pool32.data(), fused.pool32.size() * 4));
    EXPECT_EQ(fused.pool16, split.pool16);
    EXPECT_EQ(fused.o, split.o);
  }
  // The launcher's own workspace (stream-ordered allocation) and a launch without outputs.
  const Launch own = launch(b, 0, true, ChunkedForm::split, false);
  EXPECT_TRUE(same_bits(fused.pool32, own.pool32));
  EXPECT_EQ(fused.pool16, own.pool16);
  EXPECT_EQ(fused.o, own.o);
  const Launch bare = launch(b, 0, false, ChunkedForm::split);
  EXPECT_TRUE(same_bits(fused.pool32, bare.pool32));
  EXPECT_EQ(fused.pool16, bare.pool16);
  EXPECT_TRUE(std::all_of(bare.o.begin(), bare.o.end(), [](uint16_t x) { return x == 0xFFFF; }))
      << "outputs written although o is null";
  // A launch whose first token is not 0 (its workspace slots start past 0).
  if (b.slot_ids.size() < 2 || b.cu_seqlens[1] == 0) return;
  const Launch fused_tail = launch(b, 0, true, ChunkedForm::fused, true, true);
  const Launch split_tail = launch(b, 0, true, ChunkedForm::split, true, true);
  EXPECT_TRUE(split_tail.guards_intact);
  EXPECT_TRUE(same_bits(fused_tail.pool32, split_tail.pool32));
  EXPECT_EQ(fused_tail.pool16, split_tail.pool16);
  EXPECT_EQ(fused_tail.o, split_tail.o);
  EXPECT_NE(fused_tail.o, fused.o) << "the first sequence's outputs were written anyway";
}

TEST_P(ChunkedPrefill, ValueTilesAgreeBitForBitAndOutputsAreOptional) {
  const Case c = GetParam();
  const HostPoolBatch b = case_batch(c, 77);
  const Launch t32 = launch(b, 32, true);
  const Launch bare = launch(b, 32, false);
  EXPECT_EQ(t32.pool32, bare.pool32);
  EXPECT_EQ(t32.pool16, bare.pool16);
  EXPECT_TRUE(std::all_of(bare.o.begin(), bare.o.end(), [](uint16_t x) { return x == 0xFFFF; }))
      << "outputs written although o is null";
  if (c.dv % 64 != 0) return;
  const Launch t64 = launch(b, 64, true);
  EXPECT_TRUE(t64.guards_intact);
  EXPECT_EQ(0, std::memcmp(t32.pool32.data(), t64.pool32.data(), t32.pool32.size() * 4));
  EXPECT_EQ(t32.pool16, t64.pool16);
  EXPECT_EQ(t32.o, t64.o);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ChunkedPrefill,
    ::testing::Values(
        Case{"gdn_H2_HV2_T63", 2, 2, 128, GateKind::gdn, Dtype::fp32, {63}},
        Case{"gdn_H2_HV6_mixed", 2, 6, 128, GateKind::gdn, Dtype::fp32, {65, 1, 130, 0, 200, 64}},
        Case{"gdn_H2_HV6_mixed_bf16", 2, 6, 128, GateKind::gdn, Dtype::bf16, {65, 1, 0, 129}},
        Case{"gdn_H1_HV3_dv96", 1, 3, 96, GateKind::gdn, Dtype::fp32, {100, 37}},
        Case{"gdn_H2_HV2_dv64_T1", 2, 2, 64, GateKind::gdn, Dtype::fp32, {1, 1, 1}},
        Case{"gdn_H4_HV4_long", 4, 4, 128, GateKind::gdn, Dtype::fp32, {1000}},
        // d_v above 128: the split form's transform reuses its value-tile buffers (4 and 3 tiles).
        Case{"gdn_H1_HV2_dv256", 1, 2, 256, GateKind::gdn, Dtype::fp32, {130, 64}},
        Case{"kda_H1_HV1_dv192_bf16", 1, 1, 192, GateKind::kda, Dtype::bf16, {100}},
        Case{"kda_H2_HV2_T63", 2, 2, 128, GateKind::kda, Dtype::fp32, {63}},
        Case{"kda_H1_HV3_mixed_bf16_dv64", 1, 3, 64, GateKind::kda, Dtype::bf16, {65, 1, 0, 140}},
        Case{"kda_H2_HV2_dv32_long", 2, 2, 32, GateKind::kda, Dtype::fp32, {513, 2}},
        Case{"kda_strong_decay_second_chunk",
             2,
             2,
             64,
             GateKind::kda,
             Dtype::fp32,
             {200},
             -12.0f,
             64,
             128},
        Case{"kda_positive_decay_first_chunk",
             1,
             1,
             64,
             GateKind::kda,
             Dtype::fp32,
             {70},
             0.3f,
             0,
             8}),
    case_name);

GatedDeltaPoolArgs refusal_args() {
  GatedDeltaPoolArgs a;
  a.num_seqs = 1, a.H = 2, a.HV = 4, a.dk = 128, a.dv = 128;
  return a;
}

// The checks come before any device work, so these run without a GPU.
TEST(ChunkedPrefillArgs, RefusesShapesItDoesNotRun) {
  GatedDeltaPoolArgs a = refusal_args();
  a.dk = 64;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a); }).find("d_k = 64"), std::string::npos);
  a = refusal_args(), a.dv = 48;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a); }).find("d_v = 48"), std::string::npos);
  a = refusal_args(), a.HV = 3;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a); }).find("HV (3)"), std::string::npos);
  a = refusal_args(), a.dv = 96;
  ChunkedPrefillOptions opt;
  opt.value_tile = 64;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a, opt); }).find("does not divide d_v = 96"),
            std::string::npos);
  opt.value_tile = 48;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a, opt); }).find("value_tile = 48"),
            std::string::npos);
  a = refusal_args(), a.num_seqs = -1;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a); }).find("num_seqs = -1"), std::string::npos);
  a = refusal_args();  // valid shape, no pointers
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a); }).find("state_pool is null"),
            std::string::npos);
  opt = {}, opt.form = ChunkedForm::split;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a, opt); }).find("needs total_tokens"),
            std::string::npos);
  opt.total_tokens = -5;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a, opt); }).find("total_tokens = -5"),
            std::string::npos);
  // One sequence of 100 tokens: 100 / 64 + 1 + 1 = 3 slots of 4 heads.
  opt.total_tokens = 100;
  const size_t need = chunked_prefill_workspace_bytes(a, 100);
  EXPECT_EQ(need, 3u * 4u * ChunkTile::bytes(128));
  alignas(16) static char dummy[32];
  opt.workspace = dummy, opt.workspace_bytes = need - 1;
  EXPECT_NE(error_of([&] {
              chunked_prefill_pool(a, opt);
            }).find(fmt::format("workspace_bytes = {} (the split form needs {})", need - 1, need)),
            std::string::npos);
  opt.workspace = dummy + 1, opt.workspace_bytes = need;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a, opt); }).find("not 16-byte aligned"),
            std::string::npos);
}

TEST(ChunkedPrefillArgs, AutomaticFormIsSplitWhenTheHostKnowsTheTokensAndAChunkCanWait) {
  GatedDeltaPoolArgs a = refusal_args();
  ChunkedPrefillOptions opt;
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::fused);  // no total_tokens
  opt.total_tokens = 500;
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::split);  // lengths unknown
  a.max_seq_len = 64;                                           // one chunk per sequence at most
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::fused);
  a.max_seq_len = 65;
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::split);
  opt.form = ChunkedForm::fused;
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::fused);
  a.max_seq_len = 1, opt.form = ChunkedForm::split;
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::split);
  // More sequences than the state pass's grid takes: automatic is fused, split is refused.
  a.max_seq_len = 0, a.num_seqs = kChunkedSplitMaxSeqs + 1, opt.form = ChunkedForm::automatic;
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::fused);
  a.num_seqs = kChunkedSplitMaxSeqs;
  EXPECT_EQ(chunked_prefill_form(a, opt), ChunkedForm::split);
  a.num_seqs = kChunkedSplitMaxSeqs + 1, opt.form = ChunkedForm::split;
  EXPECT_NE(error_of([&] { chunked_prefill_pool(a, opt); }).find("at most 65535 sequences"),
            std::string::npos);
}

TEST(ChunkedPrefillArgs, SupportedShapesAreTheOnesTheChecksLetThrough) {
  GatedDeltaPoolArgs a = refusal_args();
  EXPECT_TRUE(chunked_prefill_supported(a));
  a.state_dtype = Dtype::bf16;
  EXPECT_TRUE(chunked_prefill_supported(a));
  a.dv = 96;
  EXPECT_TRUE(chunked_prefill_supported(a));
  a.dv = 48;
  EXPECT_FALSE(chunked_prefill_supported(a));
  a = refusal_args(), a.dk = 64;
  EXPECT_FALSE(chunked_prefill_supported(a));
}

TEST(ChunkedPrefillArgs, FlopModelSumsTheChunksOfEverySequence) {
  GatedDeltaPoolArgs a = refusal_args();
  // Two sequences, 64 and 65 tokens: chunks of 64, 64 and 1. Per chunk of n: 4 n^2 d_k +
  // 3 n^2 d_v + 6 n d_k d_v with d_k = d_v = 128.
  auto chunk = [](double n) { return 4 * n * n * 128 + 3 * n * n * 128 + 6 * n * 128 * 128; };
  EXPECT_DOUBLE_EQ(chunked_prefill_flops(a, {0, 64, 129}), 4 * (2 * chunk(64) + chunk(1)));
}

}  // namespace
