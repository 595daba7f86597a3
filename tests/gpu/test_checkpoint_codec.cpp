// Checkpoint store / load kernels against the CPU codecs, bit for bit: every codec, fp32 and bf16
// active pools, awkward geometries (d_k not a multiple of 4, d_v = 60), non-contiguous slot
// lists, outputs prefilled with 0xFF, guard regions, untouched slots compared byte for byte, the
// conv window copied exactly, and non-finite input refused with its position.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>

#include "core/codec/codec.h"
#include "core/dtype/bf16.h"
#include "core/dtype/fp8_e4m3.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "kernels/codec/checkpoint_codec.h"
#include "tests/error_of.h"
#include "tests/gpu/gpu_test_util.h"

using namespace statecheck;
using namespace statecheck::cuda;
using statecheck::cuda::testing::GpuTest;
using statecheck::cuda::testing::Guarded;

namespace {

struct Case {
  const char* name;
  PoolGeometry geo;
  const char* codec;
  Dtype active;
};

// GoogleTest prints the parameter in failure messages by this (found by argument-dependent
// lookup), instead of its bytes: the case's name, as in the test's name.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

constexpr int kActiveSlots = 9, kCkptSlots = 13;
const std::vector<int32_t> kSrc = {5, 1, 8}, kDst = {12, 3, 7}, kBack = {2, 6, 4};

// Host active pool as fp32 values (bf16-exact when the active dtype is bf16).
std::vector<float> make_active(const PoolGeometry& g, Dtype dtype, uint64_t seed) {
  const size_t n = static_cast<size_t>(g.L) * kActiveSlots * g.HV * g.dv * g.dk;
  std::vector<float> a(n);
  Rng rng(seed);
  for (size_t e = 0; e < n; ++e) {
    double x = 0.06 * rng.normal();
    if (e % 997 == 0)  // large entries, beyond E4M3's 448: saturation paths of fp8_raw
      x = (e % 2 ? 1.0 : -1.0) * (e % 3 == 0 ? 1e6 : 500.0);
    if (e % 1499 == 0) x = 0.0;                 // exact zeros
    if (e % 211 == 0) x = 1e-7 * rng.normal();  // tiny entries: subnormal fp8 paths
    a[e] = dtype == Dtype::bf16 ? round_to_bf16(static_cast<float>(x)) : static_cast<float>(x);
  }
  return a;
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Pool bytes of fp32 values in the active dtype (bf16: the values must be bf16 values).
std::vector<uint8_t> active_bytes_of(const std::vector<float>& values, Dtype active) {
  if (active == Dtype::fp32) return as_bytes(values);
  std::vector<uint16_t> b16(values.size());
  for (size_t e = 0; e < values.size(); ++e) b16[e] = bf16_bits_from_float(values[e]);
  return as_bytes(b16);
}

class CheckpointCodec : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CheckpointCodec, StoreAndLoadMatchCpuCodecBitForBit) {
  const Case c = GetParam();
  const PoolGeometry& g = c.geo;
  const Codec codec = parse_codec(c.codec);
  const size_t head = static_cast<size_t>(g.dv) * g.dk;
  const size_t vb = codec.value_bytes(), sb = codec.scale_bytes();
  const std::vector<float> active = make_active(g, c.active, 77);

  // Active pool in its dtype, checkpoint pool prefilled with 0xFF, conv pools with patterns.
  const std::vector<uint8_t> active_bytes = active_bytes_of(active, c.active);
  std::vector<uint16_t> active_conv(static_cast<size_t>(g.L) * kActiveSlots * g.conv_elems);
  for (size_t e = 0; e < active_conv.size(); ++e)
    active_conv[e] = static_cast<uint16_t>(e * 2654435761u >> 7);
  const size_t ckpt_values = static_cast<size_t>(g.L) * kCkptSlots * g.HV * head * vb;
  const size_t ckpt_scales = static_cast<size_t>(g.L) * kCkptSlots * g.HV * g.dk * sb;
  Guarded<uint8_t> d_active(active_bytes), d_ckpt(std::vector<uint8_t>(ckpt_values, 0xFF)),
      d_scales(std::vector<uint8_t>(std::max<size_t>(ckpt_scales, 1), 0xFF));
  Guarded<uint16_t> d_aconv(active_conv),
      d_cconv(std::vector<uint16_t>(static_cast<size_t>(g.L) * kCkptSlots * g.conv_elems, 0xFFFF));
  Guarded<int32_t> src(kSrc), dst(kDst), back(kBack);
  Guarded<int32_t> err(std::vector<int32_t>(4, 0));

  StatePoolView av{d_active.data(), nullptr, d_aconv.data(), kActiveSlots};
  StatePoolView cv{d_ckpt.data(), codec.has_scales() ? d_scales.data() : nullptr, d_cconv.data(),
                   kCkptSlots};
  checkpoint_store(g, av, c.active, cv, codec, src.data(), dst.data(), 3, err.data());
  check_store_error(err.data(), g);

  const std::vector<uint8_t> got_values = d_ckpt.download(), got_scales = d_scales.download();
  const std::vector<uint16_t> got_cconv = d_cconv.download();
  std::vector<uint8_t> want_values(head * vb), want_scales(g.dk * sb);
  for (int l = 0; l < g.L; ++l)
    for (int slot = 0; slot < kCkptSlots; ++slot) {
      const auto it = std::find(kDst.begin(), kDst.end(), slot);
      for (int h = 0; h < g.HV; ++h) {
        const size_t hi = (static_cast<size_t>(l) * kCkptSlots + slot) * g.HV + h;
        const uint8_t* gv = got_values.data() + hi * head * vb;
        const uint8_t* gs = got_scales.data() + hi * g.dk * sb;
        if (it == kDst.end()) {
          for (size_t b = 0; b < head * vb; ++b)
            ASSERT_EQ(gv[b], 0xFF) << "untouched checkpoint slot " << slot << " written";
          for (size_t b = 0; b < g.dk * sb; ++b)
            ASSERT_EQ(gs[b], 0xFF) << "scales of untouched checkpoint slot " << slot << " written";
          continue;
        }
        const int a_slot = kSrc[it - kDst.begin()];
        const float* S =
            active.data() + ((static_cast<size_t>(l) * kActiveSlots + a_slot) * g.HV + h) * head;
        encode_head(codec, S, g.dv, g.dk, want_values.data(), want_scales.data(), {l, h});
        for (size_t b = 0; b < head * vb; ++b)
          ASSERT_EQ(gv[b], want_values[b])
              << "layer " << l << " slot " << slot << " head " << h << " byte " << b;
        for (size_t b = 0; b < g.dk * sb; ++b)
          ASSERT_EQ(gs[b], want_scales[b]) << "scale byte " << b;
      }
      for (int64_t e = 0; e < g.conv_elems; ++e) {
        const uint16_t x =
            got_cconv[(static_cast<size_t>(l) * kCkptSlots + slot) * g.conv_elems + e];
        const uint16_t want =
            it == kDst.end()
                ? 0xFFFF
                : active_conv[(static_cast<size_t>(l) * kActiveSlots + kSrc[it - kDst.begin()]) *
                                  g.conv_elems +
                              e];
        ASSERT_EQ(x, want) << "conv layer " << l << " slot " << slot << " element " << e;
      }
    }
  EXPECT_TRUE(d_ckpt.guard_intact());
  EXPECT_TRUE(d_scales.guard_intact());
  EXPECT_TRUE(d_cconv.guard_intact());

  // Load (copy-on-write) into other active slots, prefilled with NaN bytes.
  std::vector<uint8_t> active_before = d_active.download();
  for (int l = 0; l < g.L; ++l)
    for (int32_t slot : kBack) {
      const size_t off =
          (static_cast<size_t>(l) * kActiveSlots + slot) * g.HV * head * dtype_bytes(c.active);
      std::memset(active_before.data() + off, 0xFF, g.HV * head * dtype_bytes(c.active));
    }
  Guarded<uint8_t> d_active2(active_before);
  StatePoolView av2{d_active2.data(), nullptr, d_aconv.data(), kActiveSlots};
  checkpoint_load(g, cv, codec, av2, c.active, dst.data(), back.data(), 3);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> loaded = d_active2.download();
  const std::vector<uint16_t> loaded_conv = d_aconv.download();
  std::vector<float> decoded(head);
  const size_t ab = dtype_bytes(c.active);
  for (int l = 0; l < g.L; ++l)
    for (int slot = 0; slot < kActiveSlots; ++slot) {
      const auto it = std::find(kBack.begin(), kBack.end(), slot);
      for (int h = 0; h < g.HV; ++h) {
        const size_t off = ((static_cast<size_t>(l) * kActiveSlots + slot) * g.HV + h) * head * ab;
        if (it == kBack.end()) {
          ASSERT_EQ(0, std::memcmp(loaded.data() + off, active_before.data() + off, head * ab))
              << "untouched active slot " << slot << " changed";
          continue;
        }
        const int c_slot = kDst[it - kBack.begin()];
        const size_t hi = (static_cast<size_t>(l) * kCkptSlots + c_slot) * g.HV + h;
        decode_head(codec, got_values.data() + hi * head * vb, got_scales.data() + hi * g.dk * sb,
                    g.dv, g.dk, decoded.data());
        for (size_t e = 0; e < head; ++e) {
          if (c.active == Dtype::fp32) {
            uint32_t a, b;
            std::memcpy(&a, loaded.data() + off + 4 * e, 4);
            std::memcpy(&b, &decoded[e], 4);
            ASSERT_EQ(a, b) << "layer " << l << " slot " << slot << " head " << h << " element "
                            << e;
          } else {
            uint16_t a;
            std::memcpy(&a, loaded.data() + off + 2 * e, 2);
            ASSERT_EQ(a, bf16_bits_from_float(decoded[e]))
                << "layer " << l << " slot " << slot << " element " << e;
          }
        }
      }
      if (it == kBack.end()) {  // an untouched active slot keeps its conv window
        for (int64_t e = 0; e < g.conv_elems; ++e) {
          const size_t i = (static_cast<size_t>(l) * kActiveSlots + slot) * g.conv_elems + e;
          ASSERT_EQ(loaded_conv[i], active_conv[i]) << "conv of untouched active slot " << slot;
        }
        continue;
      }
      for (int64_t e = 0; e < g.conv_elems; ++e)
        ASSERT_EQ(loaded_conv[(static_cast<size_t>(l) * kActiveSlots + slot) * g.conv_elems + e],
                  active_conv[(static_cast<size_t>(l) * kActiveSlots + kSrc[it - kBack.begin()]) *
                                  g.conv_elems +
                              e]);
    }
  EXPECT_TRUE(d_active2.guard_intact());
  EXPECT_TRUE(d_aconv.guard_intact());
}

const PoolGeometry kSmall{3, 3, 60, 36, 17};  // d_v = 60, odd conv length (unaligned copies)
const PoolGeometry kOddK{2, 2, 50, 30, 24};  // d_k not a multiple of 4: scalar path (not fp32 copy)
const PoolGeometry kQwen{2, 8, 128, 128, 6144};   // two layers of the Qwen3.5 TP-4 shard
const PoolGeometry kRagged{2, 3, 100, 64, 40};    // fast paths with d_v not a multiple of rows
const PoolGeometry kTall{1, 2, 256, 64, 8};       // d_v = 256: the store's 16-row-per-thread path
const PoolGeometry kK96{1, 2, 128, 96, 8};        // d_k % 64 != 0: 4 columns per thread for fp32
const PoolGeometry kWideK{1, 2, 64, 256, 8};      // d_k = 256: the load's 64 lanes per row
const PoolGeometry kK32{1, 2, 64, 32, 8};         // d_k = 32: the load's 8 lanes per row, one run
const PoolGeometry kOddHead{2, 3, 25, 29, 24};    // head bytes not whole 16-byte units (slot copy)
const PoolGeometry kOddHead12{2, 3, 25, 12, 24};  // bf16 copy fallback, 4-wide store, per-head load
const PoolGeometry kOddHead4{2, 3, 25, 4, 24};    // bf16 copy fallback, 4-wide store, row load

INSTANTIATE_TEST_SUITE_P(
    Codecs, CheckpointCodec,
    ::testing::Values(
        Case{"int8_bf16_scale_fp32_active_small", kSmall, "int8_bf16_scale", Dtype::fp32},
        Case{"int8_fp32_scale_fp32_active_small", kSmall, "int8_fp32_scale", Dtype::fp32},
        Case{"int8_bf16_scale_bf16_active_small", kSmall, "int8_bf16_scale", Dtype::bf16},
        Case{"int8_fp32_scale_fp32_active_oddk", kOddK, "int8_fp32_scale", Dtype::fp32},
        Case{"int8_fp32_scale_fp32_active_qwen", kQwen, "int8_fp32_scale", Dtype::fp32},
        Case{"int8_bf16_scale_bf16_active_qwen", kQwen, "int8_bf16_scale", Dtype::bf16},
        Case{"int8_fp32_scale_fp32_active_ragged", kRagged, "int8_fp32_scale", Dtype::fp32},
        Case{"int8_bf16_scale_bf16_active_tall", kTall, "int8_bf16_scale", Dtype::bf16},
        Case{"fp8_fp32_scale_bf16_active_ragged", kRagged, "fp8_e4m3_fp32_scale", Dtype::bf16},
        Case{"int8_fp32_scale_fp32_active_tall", kTall, "int8_fp32_scale", Dtype::fp32},
        Case{"int8_bf16_scale_fp32_active_k96", kK96, "int8_bf16_scale", Dtype::fp32},
        Case{"int8_fp32_scale_bf16_active_qwen", kQwen, "int8_fp32_scale", Dtype::bf16},
        Case{"int8_bf16_scale_fp32_active_widek", kWideK, "int8_bf16_scale", Dtype::fp32},
        Case{"int8_fp32_scale_fp32_active_k32", kK32, "int8_fp32_scale", Dtype::fp32},
        Case{"fp8_fp32_scale_fp32_active_qwen", kQwen, "fp8_e4m3_fp32_scale", Dtype::fp32},
        Case{"fp8_raw_bf16_active_qwen", kQwen, "fp8_e4m3_raw", Dtype::bf16},
        Case{"bf16_copy_bf16_active_qwen", kQwen, "bf16", Dtype::bf16},
        Case{"fp8_fp32_scale_fp32_active_small", kSmall, "fp8_e4m3_fp32_scale", Dtype::fp32},
        Case{"fp8_bf16_scale_bf16_active_qwen", kQwen, "fp8_e4m3_bf16_scale", Dtype::bf16},
        Case{"fp8_raw_fp32_active_small", kSmall, "fp8_e4m3_raw", Dtype::fp32},
        Case{"fp8_raw_fp32_active_oddk", kOddK, "fp8_e4m3_raw", Dtype::fp32},
        Case{"bf16_copy_fp32_active_qwen", kQwen, "bf16", Dtype::fp32},
        Case{"bf16_copy_bf16_active_small", kSmall, "bf16", Dtype::bf16},
        Case{"fp32_copy_fp32_active_qwen", kQwen, "fp32", Dtype::fp32},
        Case{"fp32_copy_fp32_active_oddk", kOddK, "fp32", Dtype::fp32},
        Case{"fp32_copy_fp32_active_small", kSmall, "fp32", Dtype::fp32},
        Case{"fp32_copy_fp32_active_ragged", kRagged, "fp32", Dtype::fp32},
        Case{"fp32_copy_fp32_active_oddhead", kOddHead, "fp32", Dtype::fp32},
        Case{"bf16_copy_bf16_active_oddhead", kOddHead, "bf16", Dtype::bf16},
        Case{"bf16_copy_bf16_active_oddk", kOddK, "bf16", Dtype::bf16},
        Case{"bf16_copy_bf16_active_oddhead12", kOddHead12, "bf16", Dtype::bf16},
        Case{"bf16_copy_bf16_active_oddhead4", kOddHead4, "bf16", Dtype::bf16}),
    case_name);

// E4M3 conversion on the GPU (fp8_raw store) against the CPU encoder on every code's value, every
// midpoint between neighbouring codes (ties to even), one float ulp either side of each midpoint,
// and values past the saturation point.
TEST_F(GpuTest, Fp8EncodeMatchesCpuOnTiesAndSaturation) {
  std::vector<float> values;
  for (int code = 0; code < 0x7E; ++code) {
    const float a = fp8_e4m3_to_float(code), b = fp8_e4m3_to_float(code + 1);
    const float mid = 0.5f * (a + b);
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  for (float x : {448.0f, 460.0f, 464.0f, 470.0f, 1e6f}) values.push_back(x), values.push_back(-x);
  const int dk = 4;
  while (values.size() % dk) values.push_back(0.0f);
  const PoolGeometry g{1, 1, static_cast<int>(values.size() / dk), dk, 0};
  if (g.dv > 256) GTEST_SKIP() << "too many probe values";
  std::vector<float> pool(values.size() * 2, 0.0f);  // 2 slots, probe values in slot 1
  std::copy(values.begin(), values.end(), pool.begin() + values.size());
  Guarded<float> active(pool);
  Guarded<uint8_t> ckpt(std::vector<uint8_t>(values.size() * 2, 0xFF));
  Guarded<int32_t> one(std::vector<int32_t>{1});
  const Codec raw = parse_codec("fp8_e4m3_raw");
  checkpoint_store(g, {active.data(), nullptr, nullptr, 2}, Dtype::fp32,
                   {ckpt.data(), nullptr, nullptr, 2}, raw, one.data(), one.data(), 1);
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = ckpt.download();
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(got[values.size() + i], fp8_e4m3_from_float(values[i])) << "value " << values[i];
}

// The scale the codec gives a column whose largest magnitude is `amax` (docs/codecs.md).
float codec_scale(const Codec& c, float amax) {
  const float s = std::max(amax, 1e-8f) / (c.kind == CodecKind::int8 ? 127.0f : 448.0f);
  return c.scale_dtype == Dtype::bf16 ? round_to_bf16(s) : s;
}

// Whether the code the kernels form before their exact fallback differs from the codec's for x in a
// column of scale s (int8: the fused x * (1/s) + 1.5 * 2^23 rounding; E4M3: the code of the
// product x * (1/s)). The inputs that make a test of the fallback able to fail.
bool cheap_code_differs(const Codec& c, float x, float s) {
  const float inv = 1.0f / s, q = x / s;
  if (c.kind == CodecKind::int8)
    return std::fma(x, inv, 12582912.0f) - 12582912.0f != std::nearbyint(q);
  return fp8_e4m3_from_float(x * inv) != fp8_e4m3_from_float(q);
}

// How many values of a [HV, d_v, d_k] block of heads the cheap rounding alone gets wrong.
long cheap_code_misses(const Codec& c, const float* heads, const PoolGeometry& g) {
  long misses = 0;
  for (int h = 0; h < g.HV; ++h)
    for (int j = 0; j < g.dk; ++j) {
      const float* col = heads + static_cast<size_t>(h) * g.dv * g.dk + j;
      float amax = 0.0f;
      for (int i = 0; i < g.dv; ++i) amax = std::max(amax, std::fabs(col[i * g.dk]));
      const float s = codec_scale(c, amax);
      for (int i = 0; i < g.dv; ++i) misses += cheap_code_differs(c, col[i * g.dk], s);
    }
  return misses;
}

// Stores slot 1 of a one-layer, two-slot pool (`pool`: fp32 values, held in the `active` dtype,
// which they must be values of) with codec `c`, and compares every code and scale byte with the
// CPU codec. The slot must hold inputs the cheap rounding alone gets wrong, so that a kernel
// without its exact fallback fails.
void expect_store_matches_cpu(const PoolGeometry& g, const std::vector<float>& pool, Dtype active,
                              const Codec& c, const char* name) {
  const size_t head = static_cast<size_t>(g.dv) * g.dk;
  const char* dtype = active == Dtype::bf16 ? "bf16 active" : "fp32 active";
  ASSERT_GT(cheap_code_misses(c, pool.data() + g.HV * head, g), 0)
      << name << ", " << dtype << ": no input the cheap rounding alone gets wrong";
  Guarded<uint8_t> d_active(active_bytes_of(pool, active));
  Guarded<uint8_t> ckpt(std::vector<uint8_t>(2 * g.HV * head, 0xFF)),
      scales(std::vector<uint8_t>(2 * g.HV * g.dk * c.scale_bytes(), 0xFF));
  Guarded<int32_t> one(std::vector<int32_t>{1}), err(std::vector<int32_t>(4, 0));
  checkpoint_store(g, {d_active.data(), nullptr, nullptr, 2}, active,
                   {ckpt.data(), scales.data(), nullptr, 2}, c, one.data(), one.data(), 1,
                   err.data());
  check_store_error(err.data(), g);
  const std::vector<uint8_t> got = ckpt.download(), got_scales = scales.download();
  std::vector<uint8_t> want(head), want_scales(g.dk * c.scale_bytes());
  for (int h = 0; h < g.HV; ++h) {
    encode_head(c, pool.data() + (static_cast<size_t>(g.HV) + h) * head, g.dv, g.dk, want.data(),
                want_scales.data(), {0, h});
    for (size_t e = 0; e < head; ++e)
      ASSERT_EQ(got[(static_cast<size_t>(g.HV) + h) * head + e], want[e])
          << name << ", " << dtype << ", head " << h << " element [" << e / g.dk << ", " << e % g.dk
          << "] value " << pool[(static_cast<size_t>(g.HV) + h) * head + e];
    ASSERT_EQ(0, std::memcmp(got_scales.data() + (g.HV + h) * want_scales.size(),
                             want_scales.data(), want_scales.size()))
        << name << ", " << dtype << ", scales of head " << h;
  }
}

// A one-layer, two-slot pool of geometry g (layout [slot, HV, d_v, d_k]) whose slot 1 holds
// value(h, i, j) and slot 0 zeros.
template <typename F>
std::vector<float> probe_pool(const PoolGeometry& g, F value) {
  const size_t head = static_cast<size_t>(g.dv) * g.dk;
  std::vector<float> pool(2 * g.HV * head, 0.0f);
  for (int h = 0; h < g.HV; ++h)
    for (int i = 0; i < g.dv; ++i)
      for (int j = 0; j < g.dk; ++j)
        pool[(static_cast<size_t>(g.HV) + h) * head + static_cast<size_t>(i) * g.dk + j] =
            value(h, i, j);
  return pool;
}

// The int8 store's rounding on exact ties and next to them, fp32 active states on the serving
// shape (the strip kernel: cheap rounding and exact fallback). In the first half of the columns
// row 0 holds +-127 / 128, so the column's scale is exactly 2^-7 in fp32 and bf16 and
// x = (k + 1/2) 2^-7 is a tie (round half to even); the floats one ulp either side must round
// away from it. In the second half the codec's scale s of amax 0.77 is no power of two, and x
// lies within two ulps of (k + 1/2) s, where the product x * (1/s) and the quotient x / s can
// round to different sides of the half. Every byte is compared with the CPU codec.
TEST_F(GpuTest, Int8StoreRoundsTiesLikeTheCpuCodec) {
  const PoolGeometry g{1, 2, 128, 128, 0};
  for (const char* name : {"int8_fp32_scale", "int8_bf16_scale"}) {
    const Codec c = parse_codec(name);
    const float s = codec_scale(c, 0.77f);
    const auto value = [&](int h, int i, int j) {
      const int k = (i * 131 + j * 7 + h * 3) % 254 - 127;  // ties in [-126.5, 126.5]
      if (j < g.dk / 2) {  // exact ties of the exact scale 2^-7, and one ulp either side
        if (i == 0) return (j % 2 ? -127.0f : 127.0f) / 128.0f;
        float x = (static_cast<float>(k) + 0.5f) / 128.0f;
        if ((i + j) % 3 == 1) x = std::nextafter(x, 1e9f);
        if ((i + j) % 3 == 2) x = std::nextafter(x, -1e9f);
        return x;
      }
      if (i == 0) return j % 2 ? -0.77f : 0.77f;
      float x = (static_cast<float>(k) + 0.5f) * s;  // within two ulps of (k + 1/2) s
      for (int u = (i + j) % 5 - 2; u != 0; u += u > 0 ? -1 : 1)
        x = std::nextafter(x, u > 0 ? 1e9f : -1e9f);
      return x;
    };
    expect_store_matches_cpu(g, probe_pool(g, value), Dtype::fp32, c, name);
  }
}

// The fp8_e4m3 store next to E4M3 rounding boundaries, fp32 active states on the serving shape
// (the strip kernel, whose paired bracket encoding must fall back to the quotient there). In the
// first half of the columns row 0 holds +-3.5, so the scale is 3.5 / 448 = 2^-7 exactly and
// x = m 2^-7, m the midpoint of two neighbouring E4M3 values, is an exact tie of the quotient; the
// floats one ulp either side must round away from it. In the second half the codec's scale s of
// amax 2.9 is no power of two and x lies within two ulps of m s. Every byte is compared with the
// CPU codec.
TEST_F(GpuTest, Fp8StoreRoundsBoundariesLikeTheCpuCodec) {
  const PoolGeometry g{1, 2, 128, 128, 0};
  for (const char* name : {"fp8_e4m3_fp32_scale", "fp8_e4m3_bf16_scale"}) {
    const Codec c = parse_codec(name);
    const float s = codec_scale(c, 2.9f);
    const auto value = [&](int h, int i, int j) {
      const bool exact = j < g.dk / 2;
      if (i == 0) return (j % 2 ? -1.0f : 1.0f) * (exact ? 3.5f : 2.9f);
      const int code = (i * 131 + j * 7 + h * 3) % 126;  // midpoints below 448
      const float mid = 0.5f * (fp8_e4m3_to_float(code) + fp8_e4m3_to_float(code + 1));
      float x = ((i + j) % 2 ? -mid : mid) * (exact ? 1.0f / 128.0f : s);
      for (int u = (i + j) % (exact ? 3 : 5) - (exact ? 1 : 2); u != 0; u += u > 0 ? -1 : 1)
        x = std::nextafter(x, u > 0 ? 1e9f : -1e9f);
      return x;
    };
    expect_store_matches_cpu(g, probe_pool(g, value), Dtype::fp32, c, name);
  }
}

// The int8 and fp8_e4m3 stores of bf16 active states on the serving shape (the staged kernel) on
// and next to rounding boundaries. Column j of each head has largest magnitude the bf16 value
// 0x3F00 + j (in [0.5, 1), row 0), so its scale differs from column to column; its other rows are
// bf16 values of the column's range, found by enumerating them all: first those the cheap
// rounding alone gets wrong (bf16 quotients land on exact ties often), then those next to a
// boundary (int8: within 10^-3 of a half-integer; E4M3: the two bracket ends encode apart), then
// evenly spaced ones; signs alternate, the second head is the first negated. Every byte is
// compared with the CPU codec.
TEST_F(GpuTest, Bf16StoreRoundsBoundariesLikeTheCpuCodec) {
  const PoolGeometry g{1, 2, 128, 128, 0};
  const size_t head = static_cast<size_t>(g.dv) * g.dk;
  for (const char* name :
       {"int8_fp32_scale", "int8_bf16_scale", "fp8_e4m3_fp32_scale", "fp8_e4m3_bf16_scale"}) {
    const Codec c = parse_codec(name);
    std::vector<float> pool(2 * g.HV * head, 0.0f);  // 2 slots, probe values in slot 1
    float* h0 = pool.data() + g.HV * head;
    for (int j = 0; j < g.dk; ++j) {
      const float amax = float_from_bf16_bits(static_cast<uint16_t>(0x3F00 + j));
      const float s = codec_scale(c, amax), inv = 1.0f / s;
      std::vector<float> wrong, near, rest;
      for (uint16_t b = 1; float_from_bf16_bits(b) < amax; ++b) {
        const float x = float_from_bf16_bits(b), q = x / s;
        const bool boundary = c.kind == CodecKind::int8
                                  ? std::fabs(q - std::floor(q) - 0.5f) < 1e-3f
                                  : fp8_e4m3_from_float(x * inv * (1.0f - 0x1p-19f)) !=
                                        fp8_e4m3_from_float(x * inv * (1.0f + 0x1p-19f));
        (cheap_code_differs(c, x, s) ? wrong : boundary ? near : rest).push_back(x);
      }
      wrong.insert(wrong.end(), near.begin(), near.end());
      for (int i = 1; i < g.dv; ++i) {
        const float x = static_cast<size_t>(i - 1) < wrong.size()
                            ? wrong[i - 1]
                            : rest[(static_cast<size_t>(i) * 131) % rest.size()];
        h0[static_cast<size_t>(i) * g.dk + j] = i % 2 ? -x : x;
      }
      h0[j] = j % 2 ? -amax : amax;
    }
    for (size_t e = 0; e < head; ++e) h0[head + e] = -h0[e];
    expect_store_matches_cpu(g, pool, Dtype::bf16, c, name);
  }
}

// Argument checks run before any device work, so this needs no GPU: a pool buffer off 16-byte
// alignment is refused by name (the pointers are never dereferenced).
TEST(CheckpointCodecArguments, MisalignedPoolBufferIsRefused) {
  const PoolGeometry g{1, 2, 128, 128, 0};
  const Codec c = parse_codec("int8_fp32_scale");
  auto* aligned = reinterpret_cast<void*>(uintptr_t{0x10000});
  auto* off = reinterpret_cast<void*>(uintptr_t{0x10008});
  const auto* ids = reinterpret_cast<const int32_t*>(uintptr_t{0x20000});
  const std::string store_err = statecheck::test_support::error_of([&] {
    checkpoint_store(g, {off, nullptr, nullptr, 2}, Dtype::bf16, {aligned, aligned, nullptr, 2}, c,
                     ids, ids, 1);
  });
  EXPECT_NE(store_err.find("active pool's temporal buffer is not 16-byte aligned"),
            std::string::npos)
      << "error: '" << store_err << "'";
  const std::string load_err = statecheck::test_support::error_of([&] {
    checkpoint_load(g, {aligned, off, nullptr, 2}, c, {aligned, nullptr, nullptr, 2}, Dtype::fp32,
                    ids, ids, 1);
  });
  EXPECT_NE(load_err.find("checkpoint pool's scales buffer is not 16-byte aligned"),
            std::string::npos)
      << "error: '" << load_err << "'";
}

// The store's byte model split into read and written bytes, by hand for 8 slots of the Qwen3.5
// TP-4 state (30 layers, 8 heads, 128 x 128, conv 2048 channels x 3), fp32 active, int8 with bf16
// scales: 31457280 values read as fp32 and written as int8, 491520 bytes of scales written, the
// 2949120-byte conv window each way, 64 bytes of slot ids read. No GPU needed.
TEST(CheckpointCodecByteModel, StoreReadsTheActiveSideAndWritesTheCheckpointSide) {
  const PoolGeometry g{30, 8, 128, 128, 6144};
  const Codec c = parse_codec("int8_bf16_scale");
  EXPECT_EQ(checkpoint_store_read_bytes(g, Dtype::fp32, 8), 125829120.0 + 2949120.0 + 64.0);
  EXPECT_EQ(
      checkpoint_store_bytes(g, Dtype::fp32, c, 8) - checkpoint_store_read_bytes(g, Dtype::fp32, 8),
      31457280.0 + 491520.0 + 2949120.0);
  EXPECT_EQ(checkpoint_store_read_bytes(g, Dtype::bf16, 1), 3932160.0 * 2 + 368640.0 + 8.0);
}

// The kernel a launch takes, by the rules of checkpoint_codec.h (CheckpointKernel), without a
// GPU: the query asks nothing of the device, and the launches take their kernel from it.
struct VariantCase {
  PoolGeometry geo;
  const char* codec;
  Dtype active;
  CheckpointKernel store, load;
};

TEST(CheckpointCodecVariant, RepresentativeGeometriesTakeTheDocumentedKernels) {
  using K = CheckpointKernel;
  const PoolGeometry k128{1, 2, 128, 128, 0};
  const std::vector<VariantCase> cases = {
      // int8 / fp8_e4m3 on bf16 128 x 128 heads: the staged store; d_k / 4 = 32 divides 128.
      {k128, "int8_bf16_scale", Dtype::bf16, K::store_staged_bf16, K::load_rows},
      {kQwen, "fp8_e4m3_fp32_scale", Dtype::bf16, K::store_staged_bf16, K::load_rows},
      // The same heads held in fp32: strips of 64 columns (8 per thread).
      {k128, "int8_fp32_scale", Dtype::fp32, K::store_strips, K::load_rows},
      {kQwen, "fp8_e4m3_bf16_scale", Dtype::fp32, K::store_strips, K::load_rows},
      // d_v 256 (16 rows per thread), d_k 64: strips for both active dtypes.
      {kTall, "int8_bf16_scale", Dtype::bf16, K::store_strips, K::load_rows},
      {kTall, "int8_fp32_scale", Dtype::fp32, K::store_strips, K::load_rows},
      // d_k = 96: 96 % 64 != 0, so 4 columns per thread and strips of 32; 96 / 4 = 24 does not
      // divide 128, so the per-head load.
      {kK96, "int8_bf16_scale", Dtype::fp32, K::store_strips, K::load_per_head},
      {{1, 2, 128, 32, 0}, "int8_fp32_scale", Dtype::bf16, K::store_strips, K::load_rows},
      // d_k = 48 is no multiple of 32 (strips) and 12 does not divide 128 (rows).
      {{1, 2, 128, 48, 0}, "int8_fp32_scale", Dtype::fp32, K::store_per_head, K::load_per_head},
      // d_v other than 128 or 256: the per-head store.
      {kRagged, "int8_fp32_scale", Dtype::fp32, K::store_per_head, K::load_rows},
      {kRagged, "fp8_e4m3_fp32_scale", Dtype::bf16, K::store_per_head, K::load_rows},
      {kWideK, "int8_bf16_scale", Dtype::fp32, K::store_per_head, K::load_rows},
      {kK32, "int8_fp32_scale", Dtype::fp32, K::store_per_head, K::load_rows},
      {kSmall, "int8_bf16_scale", Dtype::fp32, K::store_per_head, K::load_per_head},
      {kOddK, "int8_fp32_scale", Dtype::fp32, K::store_per_head, K::load_per_head},
      // Codecs without scales other than a slot copy: the per-head store.
      {k128, "fp8_e4m3_raw", Dtype::bf16, K::store_per_head, K::load_rows},
      {kQwen, "bf16", Dtype::fp32, K::store_per_head, K::load_rows},
      {kQwen, "fp32", Dtype::bf16, K::store_per_head, K::load_rows},
      // Slot copies with heads of whole 16-byte units.
      {kQwen, "fp32", Dtype::fp32, K::slot_copy, K::slot_copy},
      {kQwen, "bf16", Dtype::bf16, K::slot_copy, K::slot_copy},
      {kSmall, "bf16", Dtype::bf16, K::slot_copy, K::slot_copy},  // 60 * 36 * 2 bytes
      {kOddK, "fp32", Dtype::fp32, K::slot_copy, K::slot_copy},   // 50 * 30 * 4 bytes
      // ... and without: 25 * 29 * 4, 25 * 12 * 2, 25 * 4 * 2 bytes are not multiples of 16.
      {kOddHead, "fp32", Dtype::fp32, K::store_per_head, K::load_per_head},
      {kOddHead12, "bf16", Dtype::bf16, K::store_per_head, K::load_per_head},
      {kOddHead4, "bf16", Dtype::bf16, K::store_per_head, K::load_rows},
  };
  for (const VariantCase& c : cases) {
    const Codec codec = parse_codec(c.codec);
    SCOPED_TRACE(::testing::Message() << c.codec << ", " << dtype_name(c.active) << " active, d_v "
                                      << c.geo.dv << ", d_k " << c.geo.dk);
    EXPECT_STREQ(checkpoint_kernel_name(checkpoint_store_variant(c.geo, c.active, codec)),
                 checkpoint_kernel_name(c.store));
    EXPECT_STREQ(checkpoint_kernel_name(checkpoint_load_variant(c.geo, codec, c.active)),
                 checkpoint_kernel_name(c.load));
  }
}

TEST(CheckpointCodecVariant, KernelNamesAreTheEnumNames) {
  EXPECT_STREQ(checkpoint_kernel_name(CheckpointKernel::store_staged_bf16), "store_staged_bf16");
  EXPECT_STREQ(checkpoint_kernel_name(CheckpointKernel::store_strips), "store_strips");
  EXPECT_STREQ(checkpoint_kernel_name(CheckpointKernel::store_per_head), "store_per_head");
  EXPECT_STREQ(checkpoint_kernel_name(CheckpointKernel::slot_copy), "slot_copy");
  EXPECT_STREQ(checkpoint_kernel_name(CheckpointKernel::load_rows), "load_rows");
  EXPECT_STREQ(checkpoint_kernel_name(CheckpointKernel::load_per_head), "load_per_head");
}

// Stores a two-slot pool whose slot 1 holds 0.01 everywhere except `bad` at (layer, head, row,
// col) with `codec` and expects the store to refuse it with that position in the message, leaving
// the offender's checkpoint bytes (prefilled with zeros) unwritten.
void expect_store_refuses(const PoolGeometry& g, Dtype active_dtype, const char* codec, float bad,
                          int layer, int head, int row, int col) {
  const size_t head_elems = static_cast<size_t>(g.dv) * g.dk;
  std::vector<float> pool(static_cast<size_t>(g.L) * 2 * g.HV * head_elems, 0.01f);
  const size_t at = ((static_cast<size_t>(layer) * 2 + 1) * g.HV + head) * head_elems +
                    static_cast<size_t>(row) * g.dk + col;
  pool[at] = bad;
  const Codec c = parse_codec(codec);
  Guarded<uint8_t> active(active_bytes_of(pool, active_dtype));
  Guarded<uint8_t> ckpt(std::vector<uint8_t>(pool.size() * c.value_bytes(), 0)),
      scales(std::vector<uint8_t>(g.L * 2 * g.HV * g.dk * 4, 0));
  Guarded<int32_t> one(std::vector<int32_t>{1}), err(std::vector<int32_t>(4, 0));
  checkpoint_store(g, {active.data(), nullptr, nullptr, 2}, active_dtype,
                   {ckpt.data(), scales.data(), nullptr, 2}, c, one.data(), one.data(), 1,
                   err.data());
  const std::string where = "layer " + std::to_string(layer) + ", head " + std::to_string(head) +
                            ", index [" + std::to_string(row) + ", " + std::to_string(col) + "]";
  const std::vector<uint8_t> stored = ckpt.download();
  for (size_t b = 0; b < c.value_bytes(); ++b)
    EXPECT_EQ(stored[at * c.value_bytes() + b], 0) << codec << ": the offender was written";
  // A slot copy refuses the offender's whole run (8 KiB of its head, the last one partial) and
  // writes the head's other runs.
  if ((c.kind == CodecKind::fp32 && active_dtype == Dtype::fp32) ||
      (c.kind == CodecKind::bf16 && active_dtype == Dtype::bf16)) {
    constexpr size_t kRun = 8192;
    const size_t head_bytes = head_elems * c.value_bytes();
    const size_t head_at = (at - at % head_elems) * c.value_bytes();
    const size_t run = (at % head_elems) * c.value_bytes() / kRun;
    for (size_t r = 0; r * kRun < head_bytes; ++r) {
      const size_t end = std::min(head_bytes, (r + 1) * kRun);
      const bool all_zero =
          std::all_of(stored.begin() + head_at + r * kRun, stored.begin() + head_at + end,
                      [](uint8_t x) { return x == 0; });
      EXPECT_EQ(all_zero, r == run) << codec << ": run " << r << " of the offender's head";
    }
  }
  try {
    check_store_error(err.data(), g);
    FAIL() << codec << ": a state holding " << bad << " at " << where << " was stored";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
  }
}

// The per-head kernel (d_k = 4), and on the serving shape the strip kernel (fp32 active), the
// staged kernel (bf16 active) and the slot copy (fp32 on fp32, bf16 on bf16; an offender in the
// middle run of a head, then in the last unit of a head whose last run is partial): NaN and +-Inf.
TEST_F(GpuTest, StoreRefusesNonFiniteWithPosition) {
  expect_store_refuses({2, 3, 8, 4, 0}, Dtype::fp32, "int8_fp32_scale", NAN, 1, 2, 3, 1);
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    for (const Dtype active : {Dtype::fp32, Dtype::bf16})
      expect_store_refuses({2, 2, 128, 128, 0}, active, "int8_fp32_scale", bad, 1, 1, 77, 45);
    expect_store_refuses({2, 2, 128, 128, 0}, Dtype::fp32, "fp32", bad, 1, 1, 77, 45);
    expect_store_refuses({2, 2, 128, 128, 0}, Dtype::bf16, "bf16", bad, 1, 1, 77, 45);
    expect_store_refuses({3, 3, 60, 36, 0}, Dtype::fp32, "fp32", bad, 2, 2, 59, 35);
    expect_store_refuses({3, 3, 60, 36, 0}, Dtype::bf16, "bf16", bad, 2, 1, 59, 34);
  }
}

}  // namespace
