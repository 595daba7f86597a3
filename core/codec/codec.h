// State codecs: what a checkpoint pool stores for a temporal state, and how it is restored.
//
// Semantics (docs/codecs.md), per (layer, head, key channel j), reduced over d_v:
//   int8:      amax_j = max(max_i |S[i, j]|, 1e-8)             (fp32)
//              scale_j = amax_j / 127, rounded to the scale dtype (bf16: round-to-nearest-even)
//              q[i, j] = clamp(rint(S[i, j] / scale_j), -127, 127)  (fp32 division, ties to even)
//              decode  = float(q) * scale_j                      (fp32)
//   fp8_e4m3:  the same with scale_j = amax_j / 448 and q = E4M3(S / scale_j) (RNE, saturating)
//   fp8_e4m3_raw: E4M3(S), no scale;  bf16: RNE cast;  fp32: identity.
// The scale is rounded to its storage dtype before dividing, so encode and decode use the same
// scale. Every codec refuses non-finite input (statecheck::Error naming layer, head and [i, j]);
// the public torch implementation instead turns one NaN into a NaN scale and a garbage column.
//
// Encoded layout of one head (what a checkpoint slot holds, and what the CUDA codecs produce bit
// for bit): values [d_v, d_k] row-major, value_bytes() each (fp32 and bf16 little-endian words,
// int8 two's complement, E4M3 codes); scales [d_k], scale_bytes() each (bf16 bits or fp32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype/dtype.h"
#include "core/state/state.h"

namespace statecheck {

enum class CodecKind { fp32, bf16, int8, fp8_e4m3, fp8_e4m3_raw };

struct Codec {
  CodecKind kind = CodecKind::fp32;
  Dtype scale_dtype = Dtype::fp32;  // int8 and fp8_e4m3 only

  // Canonical name: fp32, bf16, int8, fp8_e4m3, fp8_e4m3_raw.
  const char* kind_name() const;
  bool has_scales() const { return kind == CodecKind::int8 || kind == CodecKind::fp8_e4m3; }
  size_t value_bytes() const;  // bytes per state element
  size_t scale_bytes() const;  // bytes per (head, key channel); 0 without scales
  // Largest code magnitude the scale maps amax to: 127 (int8), 448 (fp8_e4m3), 0 otherwise.
  float code_max() const;
  // Temporal bytes of a state of `shape` under this codec (values + scales).
  size_t temporal_bytes(const StateShape& shape) const;
};

// Parses "fp32", "bf16", "int8", "fp8_e4m3", "fp8_e4m3_raw" (with scale dtype `scale`), and the
// explicit variants "int8_bf16_scale", "int8_fp32_scale", "fp8_e4m3_bf16_scale",
// "fp8_e4m3_fp32_scale". Unknown names are an Error listing the valid ones.
Codec parse_codec(const std::string& name, Dtype scale = Dtype::fp32);

// Names the experiments report a codec under: the kind name, or "<kind>_<dtype>_scale" when
// `explicit_scale` is set.
std::string codec_label(const Codec& c, bool explicit_scale);

// Which head is being encoded; used only to name the position of a non-finite value.
struct HeadIndex {
  int layer = 0;
  int head = 0;
};

// Encodes one head S_vk [d_v, d_k] into `values` (d_v * d_k * value_bytes()) and `scales`
// (d_k * scale_bytes(); may be null for codecs without scales). Throws on NaN/Inf.
void encode_head(const Codec& c, const float* S_vk, int dv, int dk, uint8_t* values,
                 uint8_t* scales, HeadIndex where = {});

// Decodes one head to fp32 S_vk [d_v, d_k].
void decode_head(const Codec& c, const uint8_t* values, const uint8_t* scales, int dv, int dk,
                 float* S_vk);

// decode(encode(S)) for one head, into out_vk (must not alias S_vk). Throws on NaN/Inf.
void roundtrip_head(const Codec& c, const float* S_vk, int dv, int dk, float* out_vk,
                    HeadIndex where = {});

// The int8 code of one value for a given scale: clamp(rint(x / scale), -127, 127) with fp32
// division and ties to even. Exposed so the clamp can be tested with a scale given directly (the
// amax-derived scales never reach it; see tests/test_codec.cpp).
int8_t int8_code(float x, float scale);

// Reads scale j of an encoded head as fp32.
float scale_at(const Codec& c, const uint8_t* scales, int j);

// A whole encoded multi-layer state: values [L, HV, d_v, d_k], scales [L, HV, d_k].
struct EncodedState {
  Codec codec;
  StateShape shape;
  std::vector<uint8_t> values;
  std::vector<uint8_t> scales;

  size_t bytes() const { return values.size() + scales.size(); }
};

EncodedState encode(const Codec& c, const MultiLayerState& S);
MultiLayerState decode(const EncodedState& e);
// decode(encode(S)) into `out` (resized to S's shape).
void roundtrip(const Codec& c, const MultiLayerState& S, MultiLayerState& out);

// Scans a head for NaN/Inf; throws statecheck::Error naming layer, head and [i, j].
void check_finite_head(const float* S_vk, int dv, int dk, HeadIndex where);

}  // namespace statecheck
