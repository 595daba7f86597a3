// State codecs: exact semantics of docs/codecs.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "core/codec/codec.h"
#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/dtype/fp8_e4m3.h"
#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "experiments/experiment.h"
#include "tests/small_models.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::TempDir;
namespace fs = std::filesystem;

namespace {

MultiLayerState random_state(StateShape shape, uint64_t seed, double stddev) {
  MultiLayerState S(shape);
  Rng rng(seed);
  for (auto& x : S.data) x = static_cast<float>(stddev * rng.normal());
  return S;
}

const char* kAllCodecs[] = {"fp32",
                            "bf16",
                            "int8_bf16_scale",
                            "int8_fp32_scale",
                            "fp8_e4m3_bf16_scale",
                            "fp8_e4m3_fp32_scale",
                            "fp8_e4m3_raw"};

}  // namespace

TEST(Codec, ZeroStateRoundTripsExactly) {
  const StateShape shape{2, 3, 5, 4};
  MultiLayerState zero(shape);
  for (const char* name : kAllCodecs) {
    const Codec c = parse_codec(name);
    const MultiLayerState back = decode(encode(c, zero));
    for (float x : back.data) EXPECT_EQ(x, 0.0f) << name;
  }
}

// roundtrip_head has its own code for fp32 (a copy), bf16 (a rounding loop) and int8 (a fused
// quantise-dequantise without a byte buffer); those must give the bits of decode(encode(S)).
// fp8_e4m3 and fp8_e4m3_raw are left out: roundtrip_head runs encode_head + decode_head for
// them, so the comparison would be of a path with itself (their encoding is pinned by
// Fp8ScaledErrorBoundAndScaleIsAmaxOver448 and tests/test_dtype.cpp).
TEST(Codec, EncodeDecodeEqualsFusedRoundTrip) {
  const StateShape shape{2, 3, 60, 36};
  const MultiLayerState S = random_state(shape, 7, 0.06);
  for (const char* name : {"fp32", "bf16", "int8_bf16_scale", "int8_fp32_scale"}) {
    const Codec c = parse_codec(name);
    const MultiLayerState a = decode(encode(c, S));
    MultiLayerState b;
    roundtrip(c, S, b);
    ASSERT_EQ(a.data.size(), b.data.size());
    EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), a.data.size() * 4)) << name;
  }
}

// The element holding a column's amax decodes to 127 * scale; the only error is the rounding of
// the scale to its dtype: |127 * scale - amax| <= 127 * |scale - amax/127| <= amax * 2^-8 (bf16
// has 8 significant bits, unit roundoff 2^-8) or <= amax * 2^-23 (fp32: one rounding of the
// division plus one of the product).
TEST(Codec, AmaxElementRecoveredWithinScaleRounding) {
  const StateShape shape{1, 4, 64, 32};
  const MultiLayerState S = random_state(shape, 11, 0.06);
  for (const char* name : {"int8_bf16_scale", "int8_fp32_scale"}) {
    const Codec c = parse_codec(name);
    const MultiLayerState back = decode(encode(c, S));
    const double rel = c.scale_dtype == Dtype::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -23);
    for (int h = 0; h < shape.heads; ++h)
      for (int j = 0; j < shape.dk; ++j) {
        int arg = 0;
        float amax = 0;
        for (int i = 0; i < shape.dv; ++i) {
          const float a = std::fabs(S.head(0, h)[i * shape.dk + j]);
          if (a > amax) amax = a, arg = i;
        }
        const float got = back.head(0, h)[arg * shape.dk + j];
        EXPECT_LE(std::fabs(std::fabs(got) - amax), amax * rel)
            << name << " head " << h << " col " << j;
      }
  }
}

TEST(Codec, RoundHalfToEvenTies) {
  // Column amax 127 gives scale 127/127 = 1 exactly (representable in bf16 and fp32), so
  // S / scale is S itself and the halves are exact ties.
  const StateShape shape{1, 1, 8, 1};
  MultiLayerState S(shape);
  const float col[8] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.5f, -126.5f};
  const int expect[8] = {127, 0, 2, 2, 0, -2, 4, -126};
  for (int i = 0; i < 8; ++i) S.data[i] = col[i];
  for (const char* name : {"int8_bf16_scale", "int8_fp32_scale"}) {
    const EncodedState e = encode(parse_codec(name), S);
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(static_cast<int8_t>(e.values[i]), expect[i]) << name << " row " << i;
  }
}

// Why the clamp never fires on amax-derived scales: scale_bf16 = bf16(amax / 127) is at least
// (amax / 127) * (1 - 2^-8) (round to nearest moves by at most half a bf16 ulp, at most 2^-8 of
// the value), so |S / scale| <= amax / scale <= 127 / (1 - 2^-8) = 127.498 < 127.5 (the fp32
// division adds at most one rounding, 127.5 * 2^-24), and rint gives at most 127.
// The clamp is a guard for scales supplied from elsewhere; test it with such a scale.
TEST(Codec, ClampAt127WithAGivenScale) {
  EXPECT_EQ(int8_code(127.4f, 1.0f), 127);
  EXPECT_EQ(int8_code(127.6f, 1.0f), 127);  // rint gives 128: clamped
  EXPECT_EQ(int8_code(1000.0f, 1.0f), 127);
  EXPECT_EQ(int8_code(-127.6f, 1.0f), -127);  // not -128: symmetric range
  EXPECT_EQ(int8_code(-1e9f, 0.5f), -127);
  EXPECT_EQ(int8_code(2.5f, 1.0f), 2);  // tie to even
  EXPECT_EQ(int8_code(-3.5f, 1.0f), -4);
}

TEST(Codec, AmaxScalesNeverReachTheClamp) {
  const StateShape shape{2, 4, 128, 128};
  const MultiLayerState S = random_state(shape, 3, 1.0);
  for (const char* name : {"int8_bf16_scale", "int8_fp32_scale"}) {
    const Codec c = parse_codec(name);
    const EncodedState e = encode(c, S);
    for (size_t h = 0; h < size_t(shape.layers) * shape.heads; ++h)
      for (int i = 0; i < shape.dv; ++i)
        for (int j = 0; j < shape.dk; ++j) {
          const float x = S.data[h * shape.head_size() + size_t(i) * shape.dk + j];
          const float s = scale_at(c, e.scales.data() + h * shape.dk * c.scale_bytes(), j);
          EXPECT_LT(std::fabs(x / s), 127.5f);
          EXPECT_LE(std::fabs(x / s),
                    127.0 / (1.0 - std::ldexp(1.0, -8)) * (1 + std::ldexp(1.0, -23)));
        }
  }
}

// Elementwise bound |S - S_hat| <= scale / 2 (+ rounding). In exact arithmetic
// |S/scale - rint(S/scale)| <= 1/2. Here S/scale is an fp32 division (relative error <= u = 2^-24,
// |S/scale| <= 127.25 so absolute error <= 127.25 u) and the decode q * scale is one fp32 product
// (error <= |q| scale u <= 127 scale u). Hence |S - S_hat| <= scale (1/2 + 254.25 u).
TEST(Codec, Int8ElementwiseErrorAtMostHalfAScale) {
  const double u = std::ldexp(1.0, -24);
  for (uint64_t seed : {1, 2, 3}) {
    const StateShape shape{3, 3, 60, 36};
    MultiLayerState S = random_state(shape, seed, seed == 3 ? 1e-6 : 0.06);
    for (const char* name : {"int8_bf16_scale", "int8_fp32_scale"}) {
      const Codec c = parse_codec(name);
      const EncodedState e = encode(c, S);
      const MultiLayerState back = decode(e);
      for (size_t h = 0; h < size_t(shape.layers) * shape.heads; ++h)
        for (int i = 0; i < shape.dv; ++i)
          for (int j = 0; j < shape.dk; ++j) {
            const size_t idx = h * shape.head_size() + size_t(i) * shape.dk + j;
            const double s = scale_at(c, e.scales.data() + h * shape.dk * c.scale_bytes(), j);
            EXPECT_LE(std::fabs(double(back.data[idx]) - S.data[idx]), s * (0.5 + 254.25 * u))
                << name << " seed " << seed;
          }
    }
  }
}

namespace {
// fp32 -> nearest bf16 value, ties to the even bf16 mantissa, chosen by comparing the two bf16
// neighbours of x in fp64 (independent of core/dtype/bf16.h's bit trick). Finite positive x only.
float nearest_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t lo_bits = bits & 0xFFFF0000u, hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, 4);
  std::memcpy(&hi, &hi_bits, 4);
  const double dlo = double(x) - lo, dhi = double(hi) - x;
  if (dlo != dhi) return dlo < dhi ? lo : hi;
  return (lo_bits & 0x10000u) == 0 ? lo : hi;
}
}  // namespace

// fp8_e4m3 with scale amax/448 (448 = the largest finite E4M3 value), for both scale dtypes.
// The scale: amax_j = max(max_i |S[i, j]|, 1e-8) in fp32, divided by 448 in fp32, then rounded
// to nearest-even bf16 for the bf16 scale dtype (codec.h), recomputed here and compared bit for
// bit; head 0 has an all-zero column 0 and a column 1 of 1e-10 entries, both floored to 1e-8.
// The error: every scaled value lies in [-448 (1 + 2^-8), 448 (1 + 2^-8)] (a bf16 scale may be
// up to 2^-8 below amax/448; E4M3 saturates beyond 448, an error below 2^-8 |S|) and decodes to
// a nearest E4M3 value, whose relative spacing is 2^-3, so |S - S_hat| <= 2^-4 |S| + half the
// subnormal step (2^-10 scale).
TEST(Codec, Fp8ScaledErrorBoundAndScaleIsAmaxOver448) {
  const StateShape shape{1, 2, 64, 16};
  MultiLayerState S = random_state(shape, 5, 0.06);
  for (int i = 0; i < shape.dv; ++i) {
    S.head(0, 0)[i * shape.dk + 0] = 0.0f;
    S.head(0, 0)[i * shape.dk + 1] = (i % 2 ? -1e-10f : 1e-10f);
  }
  for (const char* name : {"fp8_e4m3_fp32_scale", "fp8_e4m3_bf16_scale"}) {
    SCOPED_TRACE(name);
    const Codec c = parse_codec(name);
    const EncodedState e = encode(c, S);
    const MultiLayerState back = decode(e);
    ASSERT_EQ(e.scales.size(), size_t(shape.heads) * shape.dk * c.scale_bytes());
    for (int h = 0; h < shape.heads; ++h)
      for (int j = 0; j < shape.dk; ++j) {
        float amax = 0.0f;
        for (int i = 0; i < shape.dv; ++i)
          amax = std::max(amax, std::fabs(S.head(0, h)[i * shape.dk + j]));
        const float q = std::max(amax, 1e-8f) / 448.0f;
        const float want = c.scale_dtype == Dtype::bf16 ? nearest_bf16(q) : q;
        const float got = scale_at(c, e.scales.data() + size_t(h) * shape.dk * c.scale_bytes(), j);
        uint32_t got_bits, want_bits;
        std::memcpy(&got_bits, &got, 4);
        std::memcpy(&want_bits, &want, 4);
        EXPECT_EQ(got_bits, want_bits) << "head " << h << " col " << j;
      }
    for (size_t h = 0; h < size_t(shape.heads); ++h)
      for (int i = 0; i < shape.dv; ++i)
        for (int j = 0; j < shape.dk; ++j) {
          const size_t idx = h * shape.head_size() + size_t(i) * shape.dk + j;
          const double s = scale_at(c, e.scales.data() + h * shape.dk * c.scale_bytes(), j);
          const double bound =
              std::ldexp(std::fabs(S.data[idx]), -4) + s * std::ldexp(1.0, -10) + 1e-12;
          EXPECT_LE(std::fabs(double(back.data[idx]) - S.data[idx]), bound * (1 + 1e-6));
        }
  }
}

namespace {
float hex_float(const std::string& hex) {
  const uint32_t bits = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
}  // namespace

TEST(Codec, GoldenVectorsBitForBit) {
  std::ifstream in(std::string(STATECHECK_TEST_DATA_DIR) + "/int8_golden.json");
  ASSERT_TRUE(in) << "tests/data/int8_golden.json missing";
  nlohmann::json j;
  in >> j;
  const auto shp = j["shape"];
  const StateShape shape{shp[0].get<int>(), shp[1].get<int>(), shp[2].get<int>(),
                         shp[3].get<int>()};
  int cases = 0;
  for (const auto& tc : j["cases"]) {
    const std::string name =
        tc["name"].get<std::string>() + "/" + tc["scale_dtype"].get<std::string>();
    MultiLayerState S(shape);
    for (size_t i = 0; i < S.data.size(); ++i)
      S.data[i] = hex_float(tc["state_fp32_hex"][i].get<std::string>());
    const Codec c =
        parse_codec("int8", parse_dtype(tc["scale_dtype"].get<std::string>(), "scale dtype"));
    const EncodedState e = encode(c, S);
    const MultiLayerState back = decode(e);
    for (size_t i = 0; i < S.data.size(); ++i) {
      EXPECT_EQ(static_cast<int8_t>(e.values[i]), tc["q_int8"][i].get<int>())
          << name << " q[" << i << "]";
      EXPECT_EQ(bits_of(back.data[i]),
                bits_of(hex_float(tc["decoded_fp32_hex"][i].get<std::string>())))
          << name << " decoded[" << i << "]";
    }
    const size_t heads = size_t(shape.layers) * shape.heads;
    for (size_t s = 0; s < heads * shape.dk; ++s) {
      const float got = scale_at(c, e.scales.data(), static_cast<int>(s));
      EXPECT_EQ(bits_of(got), bits_of(hex_float(tc["scale_fp32_hex"][s].get<std::string>())))
          << name << " scale[" << s << "]";
    }
    ++cases;
  }
  EXPECT_EQ(cases, 10);
}

TEST(Codec, NonFiniteInputRejectedWithPosition) {
  const StateShape shape{2, 3, 5, 4};
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    for (const char* name : kAllCodecs) {
      MultiLayerState S = random_state(shape, 9, 0.06);
      S.head(1, 2)[3 * shape.dk + 1] = bad;
      try {
        encode(parse_codec(name), S);
        ADD_FAILURE() << name << " accepted a non-finite state";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("layer 1, head 2, index [3, 1]"), std::string::npos)
            << e.what();
      }
      MultiLayerState out;
      EXPECT_THROW(roundtrip(parse_codec(name), S, out), Error) << name;
    }
  }
}

TEST(Codec, BytesPerState) {
  const StateShape shape{30, 8, 128, 128};
  EXPECT_EQ(parse_codec("fp32").temporal_bytes(shape), 30u * 8 * 128 * 128 * 4);
  EXPECT_EQ(parse_codec("bf16").temporal_bytes(shape), 30u * 8 * 128 * 128 * 2);
  EXPECT_EQ(parse_codec("int8_bf16_scale").temporal_bytes(shape),
            30u * 8 * 128 * 128 + 30u * 8 * 128 * 2);
  EXPECT_EQ(parse_codec("int8_fp32_scale").temporal_bytes(shape),
            30u * 8 * 128 * 128 + 30u * 8 * 128 * 4);
  EXPECT_EQ(parse_codec("fp8_e4m3_raw").temporal_bytes(shape), 30u * 8 * 128 * 128);
}

TEST(Codec, UnknownNamesAreErrors) {
  EXPECT_THROW(parse_codec("int4"), Error);
  EXPECT_THROW(parse_codec("bf16_fp32_scale"), Error);
  EXPECT_THROW(parse_dtype("fp16", "scale dtype"), Error);
}

namespace {

// 3 GDN layers, 2 key heads and 4 value heads of d_v 36 x d_k 40 (neither a power of two).
ModelConfig small_gdn_model() {
  return test_support::small_gdn_model(40, 36);
}

// Decode outputs of one head run by the fp64 loop from an fp32 start state, and per step how far
// the fp32 reference's output lies from them (run here only to size the tolerance: the experiment
// decodes in fp32; the expected errors come from the fp64 outputs). The worst-case bound of
// tests/test_recurrence.cpp (Fp32MatchesFp64WithinDerivedBound) would also do, but on 32 steps it
// allows about 1e-3 of ||o||, as much as the bf16 decode error itself; the measured distance is
// about 1e-6 of ||o||.
struct Fp64Decode {
  std::vector<double> o;    // [Td, d_v]
  std::vector<double> dev;  // [Td]: ||o32_t - o64_t||
};

Fp64Decode decode_fp64(const RecurrenceShape& s, const LayerInputs& in, int h, const float* S0,
                       int t0, int t1) {
  const size_t n = static_cast<size_t>(s.dv) * s.dk;
  std::vector<double> S(S0, S0 + n);
  std::vector<float> S32(S0, S0 + n), o32(static_cast<size_t>(t1 - t0) * s.dv);
  Fp64Decode r{std::vector<double>(o32.size()), {}};
  gated_delta_head_fp64(s, in, h, t0, t1, S.data(), r.o.data());
  gated_delta_head_fp32(s, in, h, t0, t1, S32.data(), o32.data());
  for (int t = 0; t < t1 - t0; ++t) {
    double d2 = 0;
    for (int i = 0; i < s.dv; ++i) {
      const double d = o32[t * s.dv + i] - r.o[t * s.dv + i];
      d2 += d * d;
    }
    r.dev.push_back(std::sqrt(d2));
  }
  return r;
}

// |a/b - c/d| for a ratio measured as a/b when the exact one is c/d, |a - c| <= E and
// |b - d| <= R: |a - c| / b + c |1/b - 1/d| <= E / (d - R) + (c / d) R / (d - R).
double ratio_tolerance(double c, double d, double E, double R) {
  return E / (d - R) + (c / d) * R / (d - R);
}

struct Sums {
  double err = 0, ref = 0, E = 0, R = 0;  // sum of squares of each
  void add(double e, double r, double eb, double rb) { err += e, ref += r, E += eb, R += rb; }
  double relerr() const { return std::sqrt(err / ref); }
  double tolerance() const {
    return ratio_tolerance(std::sqrt(err), std::sqrt(ref), std::sqrt(E), std::sqrt(R));
  }
};

// Share of the squared error of head S -> S_hat in the entries whose |S| lies below their
// column's median |S| (d_v even: the mean of the two middle magnitudes), summed here in fp64.
void small_entry_sums(const float* S, const float* S_hat, int dv, int dk, double* small,
                      double* all) {
  for (int j = 0; j < dk; ++j) {
    std::vector<double> mag(dv);
    for (int i = 0; i < dv; ++i) mag[i] = std::fabs(double(S[i * dk + j]));
    std::vector<double> sorted = mag;
    std::sort(sorted.begin(), sorted.end());
    const double median = 0.5 * (sorted[dv / 2 - 1] + sorted[dv / 2]);
    for (int i = 0; i < dv; ++i) {
      const double d = double(S_hat[i * dk + j]) - S[i * dk + j];
      *all += d * d;
      if (mag[i] < median) *small += d * d;
    }
  }
}

}  // namespace

// `codec` on a small GDN model (quick: prefill 128, decode 32): the decode errors per head, per
// step and overall, and the small-entry share, against sums done here. The state S is the fp32
// reference's prefill (as the experiment builds it); S_hat = decode(encode(S)) through the
// unfused codec calls; the decode outputs from S and from S_hat come from the fp64 loop, so the
// experiment's fp32 decode may differ from them by the fp32 rounding measured in decode_fp64,
// converted to a bound on the ratio (ratio_tolerance). The state errors are the same bits as the
// experiment's (tested in EncodeDecodeEqualsFusedRoundTrip), so the small-entry share agrees to
// fp64 summation order.
TEST(CodecExperiment, DecodeErrorsAndSmallEntryShareMatchSumsDoneHere) {
  const ModelConfig m = small_gdn_model();
  const TempDir dir("codec_exp");
  const std::string path = dir.file("codec.h5");
  Options o;
  o.experiment = "codec";
  o.quick = true;
  o.threads = 2;
  o.seed = 3;
  Summary summary;
  {
    H5Writer file(path);
    run_codec(o, m, file, summary);
    file.commit();
  }
  const RecurrenceShape s = recurrence_shape(m);
  const int L = m.linear_layer_count(), HV = s.HV, dv = s.dv, dk = s.dk;
  const int Tp = 128, Td = 32;  // the quick protocol (experiments/codec.cpp)
  for (const char* name : {"fp32", "bf16", "int8", "fp8_e4m3", "fp8_e4m3_raw"}) {
    SCOPED_TRACE(name);
    const Codec c = parse_codec(name, Dtype::fp32);  // scale dtype: the fp32 temporal dtype
    const std::string g = std::string("codec/") + name;
    std::vector<size_t> shape;
    const std::vector<double> decode_lh =
        read_hdf5_doubles(path, g + "/decode_relerr_layer_head", &shape);
    ASSERT_EQ(shape, (std::vector<size_t>{size_t(L), size_t(HV)}));
    const std::vector<double> step = read_hdf5_doubles(path, g + "/decode_relerr_step", &shape);
    ASSERT_EQ(shape, (std::vector<size_t>{size_t(Td)}));
    const std::vector<double> small_lh =
        read_hdf5_doubles(path, g + "/small_entry_error_share_layer_head");
    ASSERT_EQ(small_lh.size(), size_t(L) * HV);

    Sums total;
    std::vector<Sums> per_step(Td);
    double small_all = 0, err_all = 0;
    for (int l = 0; l < L; ++l) {
      const LayerInputs in = synthetic_inputs(DriveKind::init_gdn, s, o.seed, l, Tp + Td);
      MultiLayerState S({1, HV, dv, dk});
      gated_delta_layer_fp32(s, in, 0, Tp, S.data.data(), nullptr);
      const MultiLayerState S_hat = decode(encode(c, S));
      for (int h = 0; h < HV; ++h) {
        const Fp64Decode ref = decode_fp64(s, in, h, S.head(0, h), Tp, Tp + Td);
        const Fp64Decode hat = decode_fp64(s, in, h, S_hat.head(0, h), Tp, Tp + Td);
        Sums head;
        for (int t = 0; t < Td; ++t) {
          double e = 0, r = 0;
          for (int i = 0; i < dv; ++i) {
            const double d = hat.o[t * dv + i] - ref.o[t * dv + i];
            e += d * d;
            r += ref.o[t * dv + i] * ref.o[t * dv + i];
          }
          // ||D32 - D64|| <= dev_ref + dev_hat (triangle inequality); ||O32 - O64|| = dev_ref.
          const double E = ref.dev[t] + hat.dev[t], R = ref.dev[t];
          head.add(e, r, E * E, R * R);
          per_step[t].add(e, r, E * E, R * R);
          total.add(e, r, E * E, R * R);
        }
        EXPECT_NEAR(decode_lh[l * HV + h], head.relerr(), head.tolerance())
            << "layer " << l << " head " << h;
        double small = 0, all = 0;
        small_entry_sums(S.head(0, h), S_hat.head(0, h), dv, dk, &small, &all);
        EXPECT_NEAR(small_lh[l * HV + h], all > 0 ? small / all : 0.0, 1e-12)
            << "layer " << l << " head " << h;
        small_all += small;
        err_all += all;
      }
    }
    for (int t = 0; t < Td; ++t)
      EXPECT_NEAR(step[t], per_step[t].relerr(), per_step[t].tolerance()) << "step " << t;
    EXPECT_NEAR(summary.get(std::string(name) + ".decode_relerr"), total.relerr(),
                total.tolerance());
    EXPECT_NEAR(summary.get(std::string(name) + ".small_entry_error_share"),
                err_all > 0 ? small_all / err_all : 0.0, 1e-12);
    if (c.kind == CodecKind::fp32) {
      // The identity codec: S_hat is S, so both decode runs are the same run.
      EXPECT_EQ(summary.get("fp32.decode_relerr"), 0.0);
      for (double x : step) EXPECT_EQ(x, 0.0);
      EXPECT_EQ(summary.get("fp32.small_entry_error_share"), 0.0);
    } else {
      // A lossy state: the error must show, and be far above the fp32 rounding allowance.
      EXPECT_GT(total.relerr(), 10 * total.tolerance());
      EXPECT_GT(summary.get(std::string(name) + ".decode_relerr"), 0.0);
      for (double x : step) EXPECT_GT(x, 0.0);
    }
  }
}
