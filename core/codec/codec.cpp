#include "core/codec/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype/bf16.h"
#include "core/dtype/fp8_e4m3.h"
#include "core/util/error.h"

namespace statecheck {

namespace {
constexpr float kAmaxFloor = 1e-8f;
}

const char* Codec::kind_name() const {
  switch (kind) {
    case CodecKind::fp32:
      return "fp32";
    case CodecKind::bf16:
      return "bf16";
    case CodecKind::int8:
      return "int8";
    case CodecKind::fp8_e4m3:
      return "fp8_e4m3";
    case CodecKind::fp8_e4m3_raw:
      return "fp8_e4m3_raw";
  }
  return "?";
}

size_t Codec::value_bytes() const {
  switch (kind) {
    case CodecKind::fp32:
      return 4;
    case CodecKind::bf16:
      return 2;
    default:
      return 1;
  }
}

size_t Codec::scale_bytes() const {
  if (!has_scales()) return 0;
  return scale_dtype == Dtype::bf16 ? 2 : 4;
}

float Codec::code_max() const {
  if (kind == CodecKind::int8) return 127.0f;
  if (kind == CodecKind::fp8_e4m3) return kFp8E4m3Max;
  return 0.0f;
}

size_t Codec::temporal_bytes(const StateShape& s) const {
  const size_t heads = static_cast<size_t>(s.layers) * s.heads;
  return s.size() * value_bytes() + heads * s.dk * scale_bytes();
}

Codec parse_codec(const std::string& name, Dtype scale) {
  Codec c;
  c.scale_dtype = scale;
  std::string base = name;
  for (const char* dt : {"bf16", "fp32"}) {
    const std::string suffix = std::string("_") + dt + "_scale";
    if (base.size() > suffix.size() &&
        base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
      c.scale_dtype = parse_dtype(dt, "scale dtype");
      base = base.substr(0, base.size() - suffix.size());
      if (base != "int8" && base != "fp8_e4m3")
        fail("codec '{}': only int8 and fp8_e4m3 take a scale dtype", name);
    }
  }
  if (base == "fp32")
    c.kind = CodecKind::fp32;
  else if (base == "bf16")
    c.kind = CodecKind::bf16;
  else if (base == "int8")
    c.kind = CodecKind::int8;
  else if (base == "fp8_e4m3" || base == "fp8-e4m3")
    c.kind = CodecKind::fp8_e4m3;
  else if (base == "fp8_e4m3_raw" || base == "fp8-e4m3-raw")
    c.kind = CodecKind::fp8_e4m3_raw;
  else
    fail(
        "unknown codec '{}' (expected fp32, bf16, int8, fp8_e4m3, fp8_e4m3_raw, or int8/fp8_e4m3 "
        "with _bf16_scale / _fp32_scale)",
        name);
  return c;
}

std::string codec_label(const Codec& c, bool explicit_scale) {
  std::string s = c.kind_name();
  if (explicit_scale && c.has_scales())
    s += std::string("_") + dtype_name(c.scale_dtype) + "_scale";
  return s;
}

void check_finite_head(const float* S, int dv, int dk, HeadIndex where) {
  for (int i = 0; i < dv; ++i)
    for (int j = 0; j < dk; ++j) {
      const float x = S[static_cast<size_t>(i) * dk + j];
      if (!std::isfinite(x))
        fail(
            "non-finite state value {} at layer {}, head {}, index [{}, {}] (d_v row, d_k column): "
            "refusing to encode it",
            x, where.layer, where.head, i, j);
    }
}

float scale_at(const Codec& c, const uint8_t* scales, int j) {
  if (c.scale_dtype == Dtype::bf16) {
    uint16_t b;
    std::memcpy(&b, scales + 2 * static_cast<size_t>(j), 2);
    return float_from_bf16_bits(b);
  }
  float f;
  std::memcpy(&f, scales + 4 * static_cast<size_t>(j), 4);
  return f;
}

namespace {

// amax per column (reduce over d_v rows), floored, divided by code_max and rounded to the scale
// dtype. Also returns whether every element was finite (checked without branching per element,
// so the loop vectorises; the slow scan that names the position runs only on failure).
bool column_scales(const Codec& c, const float* S, int dv, int dk, float* scale_out) {
  std::vector<float> amax(dk, 0.0f);
  int all_finite = 1;
  for (int i = 0; i < dv; ++i) {
    const float* row = S + static_cast<size_t>(i) * dk;
    for (int j = 0; j < dk; ++j) {
      const float a = std::fabs(row[j]);
      all_finite &= (a <= 3.40282347e38f);  // false for NaN and Inf
      amax[j] = a > amax[j] ? a : amax[j];
    }
  }
  const float cmax = c.code_max();
  for (int j = 0; j < dk; ++j) {
    const float s = std::max(amax[j], kAmaxFloor) / cmax;
    scale_out[j] = c.scale_dtype == Dtype::bf16 ? round_to_bf16(s) : s;
  }
  return all_finite != 0;
}

void store_scales(const Codec& c, const float* scale, int dk, uint8_t* out) {
  for (int j = 0; j < dk; ++j) {
    if (c.scale_dtype == Dtype::bf16) {
      const uint16_t b = bf16_bits_from_float(scale[j]);
      std::memcpy(out + 2 * static_cast<size_t>(j), &b, 2);
    } else {
      std::memcpy(out + 4 * static_cast<size_t>(j), &scale[j], 4);
    }
  }
}

inline float int8_code_float(float x, float scale) {
  float q = std::nearbyint(x / scale);  // ties to even under the default rounding mode
  q = q < -127.0f ? -127.0f : q;
  q = q > 127.0f ? 127.0f : q;
  return q;
}

bool all_finite(const float* S, size_t n) {
  int ok = 1;
  for (size_t e = 0; e < n; ++e) ok &= (std::fabs(S[e]) <= 3.40282347e38f);
  return ok != 0;
}

}  // namespace

int8_t int8_code(float x, float scale) {
  return static_cast<int8_t>(int8_code_float(x, scale));
}

void encode_head(const Codec& c, const float* S, int dv, int dk, uint8_t* values, uint8_t* scales,
                 HeadIndex where) {
  const size_t n = static_cast<size_t>(dv) * dk;
  switch (c.kind) {
    case CodecKind::fp32:
      if (!all_finite(S, n)) check_finite_head(S, dv, dk, where);
      std::memcpy(values, S, n * 4);
      return;
    case CodecKind::bf16: {
      if (!all_finite(S, n)) check_finite_head(S, dv, dk, where);
      for (size_t e = 0; e < n; ++e) {
        const uint16_t b = bf16_bits_from_float(S[e]);
        std::memcpy(values + 2 * e, &b, 2);
      }
      return;
    }
    case CodecKind::fp8_e4m3_raw:
      if (!all_finite(S, n)) check_finite_head(S, dv, dk, where);
      for (size_t e = 0; e < n; ++e) values[e] = fp8_e4m3_from_float(S[e]);
      return;
    case CodecKind::int8:
    case CodecKind::fp8_e4m3: {
      std::vector<float> scale(dk);
      if (!column_scales(c, S, dv, dk, scale.data())) check_finite_head(S, dv, dk, where);
      store_scales(c, scale.data(), dk, scales);
      for (int i = 0; i < dv; ++i) {
        const float* row = S + static_cast<size_t>(i) * dk;
        uint8_t* out = values + static_cast<size_t>(i) * dk;
        if (c.kind == CodecKind::int8) {
          for (int j = 0; j < dk; ++j)
            out[j] = static_cast<uint8_t>(static_cast<int8_t>(int8_code_float(row[j], scale[j])));
        } else {
          for (int j = 0; j < dk; ++j) out[j] = fp8_e4m3_from_float(row[j] / scale[j]);
        }
      }
      return;
    }
  }
}

void decode_head(const Codec& c, const uint8_t* values, const uint8_t* scales, int dv, int dk,
                 float* S) {
  const size_t n = static_cast<size_t>(dv) * dk;
  switch (c.kind) {
    case CodecKind::fp32:
      std::memcpy(S, values, n * 4);
      return;
    case CodecKind::bf16:
      for (size_t e = 0; e < n; ++e) {
        uint16_t b;
        std::memcpy(&b, values + 2 * e, 2);
        S[e] = float_from_bf16_bits(b);
      }
      return;
    case CodecKind::fp8_e4m3_raw:
      for (size_t e = 0; e < n; ++e) S[e] = fp8_e4m3_to_float(values[e]);
      return;
    case CodecKind::int8:
    case CodecKind::fp8_e4m3: {
      std::vector<float> scale(dk);
      for (int j = 0; j < dk; ++j) scale[j] = scale_at(c, scales, j);
      for (int i = 0; i < dv; ++i) {
        const uint8_t* in = values + static_cast<size_t>(i) * dk;
        float* row = S + static_cast<size_t>(i) * dk;
        if (c.kind == CodecKind::int8) {
          for (int j = 0; j < dk; ++j)
            row[j] = static_cast<float>(static_cast<int8_t>(in[j])) * scale[j];
        } else {
          for (int j = 0; j < dk; ++j) row[j] = fp8_e4m3_to_float(in[j]) * scale[j];
        }
      }
      return;
    }
  }
}

void roundtrip_head(const Codec& c, const float* S, int dv, int dk, float* out, HeadIndex where) {
  const size_t n = static_cast<size_t>(dv) * dk;
  switch (c.kind) {
    case CodecKind::fp32:
      if (!all_finite(S, n)) check_finite_head(S, dv, dk, where);
      std::memcpy(out, S, n * 4);
      return;
    case CodecKind::bf16:
      if (!all_finite(S, n)) check_finite_head(S, dv, dk, where);
      for (size_t e = 0; e < n; ++e) out[e] = round_to_bf16(S[e]);
      return;
    case CodecKind::int8: {
      // Fused form of decode(encode(S)); identical arithmetic, no byte buffer.
      std::vector<float> scale(dk);
      if (!column_scales(c, S, dv, dk, scale.data())) check_finite_head(S, dv, dk, where);
      for (int i = 0; i < dv; ++i) {
        const float* row = S + static_cast<size_t>(i) * dk;
        float* o = out + static_cast<size_t>(i) * dk;
        // Through an integer, as decode does: a code of -0.0f must decode to +0.0f.
        for (int j = 0; j < dk; ++j)
          o[j] = static_cast<float>(static_cast<int>(int8_code_float(row[j], scale[j]))) * scale[j];
      }
      return;
    }
    default: {
      std::vector<uint8_t> values(n * c.value_bytes()),
          scales(static_cast<size_t>(dk) * c.scale_bytes());
      encode_head(c, S, dv, dk, values.data(), scales.data(), where);
      decode_head(c, values.data(), scales.data(), dv, dk, out);
      return;
    }
  }
}

EncodedState encode(const Codec& c, const MultiLayerState& S) {
  EncodedState e;
  e.codec = c;
  e.shape = S.shape;
  const StateShape& s = S.shape;
  e.values.resize(s.size() * c.value_bytes());
  e.scales.resize(static_cast<size_t>(s.layers) * s.heads * s.dk * c.scale_bytes());
  for (int l = 0; l < s.layers; ++l)
    for (int h = 0; h < s.heads; ++h) {
      const size_t head = static_cast<size_t>(l) * s.heads + h;
      encode_head(
          c, S.head(l, h), s.dv, s.dk, e.values.data() + head * s.head_size() * c.value_bytes(),
          c.has_scales() ? e.scales.data() + head * s.dk * c.scale_bytes() : nullptr, {l, h});
    }
  return e;
}

MultiLayerState decode(const EncodedState& e) {
  MultiLayerState S(e.shape);
  const StateShape& s = e.shape;
  const Codec& c = e.codec;
  for (int l = 0; l < s.layers; ++l)
    for (int h = 0; h < s.heads; ++h) {
      const size_t head = static_cast<size_t>(l) * s.heads + h;
      decode_head(c, e.values.data() + head * s.head_size() * c.value_bytes(),
                  c.has_scales() ? e.scales.data() + head * s.dk * c.scale_bytes() : nullptr, s.dv,
                  s.dk, S.head(l, h));
    }
  return S;
}

void roundtrip(const Codec& c, const MultiLayerState& S, MultiLayerState& out) {
  if (out.shape != S.shape || out.data.size() != S.data.size()) out = MultiLayerState(S.shape);
  for (int l = 0; l < S.shape.layers; ++l)
    for (int h = 0; h < S.shape.heads; ++h)
      roundtrip_head(c, S.head(l, h), S.shape.dv, S.shape.dk, out.head(l, h), {l, h});
}

}  // namespace statecheck
