// One key channel of a working-state head stored in its format and read back: the whole of a
// format's storage step, written on raw pointers with the element functions of element_codec.h
// so a CUDA kernel that holds a head (or a tile of whole columns) can call it on its own copy and
// store what the CPU reference stores, bit for bit. The fp32 step of the recurrence stays
// outside (core/recurrence), so a kernel with its own fp32 step order reuses this encode.
//
// Layout: S_vk and e_vk are one head [d_v, d_k] row-major fp32 (row i = value channel, column j
// = key channel); the column is S_vk[i * d_k + j], i = 0..d_v-1. Inputs must be finite (the host
// reference checks before calling). Semantics: docs/working_state.md, "Formats".
#pragma once

#include <cstdint>

#include "core/working_state/element_codec.h"
#include "core/working_state/format.h"
#include "core/working_state/host_device.h"
#include "core/working_state/philox.h"

namespace statecheck {

// Where the stochastic roundings of one head at one token draw from: the head's key
// (rounding_key(seed, layer, head)), the token's absolute position and the sequence's index.
struct RoundingPlace {
  Philox4x32Key key;
  uint32_t token;
  uint32_t sequence;
};

// max_i |S[i, j]| over the column (fp32; the order of the maximum does not change its value).
WS_HD float ws_column_amax(const float* S_vk, int dv, int dk, int j) {
  float amax = 0.0f;
  for (int i = 0; i < dv; ++i) {
    const float a = ws_bits_float(ws_float_bits(S_vk[i * dk + j]) & 0x7FFFFFFFu);
    amax = a > amax ? a : amax;
  }
  return amax;
}

// Column j of S_vk <- decode(encode_F(column j)), and for error feedback e_vk (the carried
// residual, as the next token will read it; ignored, may be null, for other formats) <- the new
// residual. Error feedback, per docs/working_state.md:
//   y = S + e;  codes and scale from y as in int8;  S <- decode(codes);  e <- y - S  (exact)
//   int8-ef-int4 keeps e as int4 codes with scale amax|e| / 7 and carries their decode.
// Returns the column's scale (1 for formats without scales).
WS_HD float ws_store_column(WorkingStateFormat f, float* S_vk, float* e_vk, int dv, int dk, int j,
                            RoundingPlace place) {
  switch (f.kind) {
    case WorkingStateKind::fp32:
      return 1.0f;
    case WorkingStateKind::bf16:
      for (int i = 0; i < dv; ++i) {
        float& x = S_vk[i * dk + j];
        x = ws_bf16_decode(ws_bf16_rne(x));
      }
      return 1.0f;
    case WorkingStateKind::bf16_sr:
      for (int i = 0; i < dv; ++i) {
        const uint32_t element = static_cast<uint32_t>(i * dk + j);
        float& x = S_vk[element];
        x = ws_bf16_decode(
            ws_bf16_sr(x, rounding_word(place.key, element, place.token, place.sequence)));
      }
      return 1.0f;
    case WorkingStateKind::int8:
    case WorkingStateKind::int8_sr: {
      const float scale = ws_column_scale(ws_column_amax(S_vk, dv, dk, j), 127.0f, f.bf16_scale);
      for (int i = 0; i < dv; ++i) {
        const uint32_t element = static_cast<uint32_t>(i * dk + j);
        float& x = S_vk[element];
        const int code =
            f.kind == WorkingStateKind::int8
                ? ws_int8_rne(x, scale)
                : ws_int8_sr(x, scale,
                             rounding_word(place.key, element, place.token, place.sequence));
        x = ws_int_decode(code, scale);
      }
      return scale;
    }
    case WorkingStateKind::fp8_e4m3:
    case WorkingStateKind::fp8_e4m3_sr: {
      const float scale = ws_column_scale(ws_column_amax(S_vk, dv, dk, j), 448.0f, f.bf16_scale);
      for (int i = 0; i < dv; ++i) {
        const uint32_t element = static_cast<uint32_t>(i * dk + j);
        float& x = S_vk[element];
        const float y = ws_div(x, scale);
        const uint8_t code =
            f.kind == WorkingStateKind::fp8_e4m3
                ? ws_fp8_e4m3_rne(y)
                : ws_fp8_e4m3_sr(y, rounding_word(place.key, element, place.token, place.sequence));
        x = ws_mul(ws_fp8_e4m3_decode(code), scale);
      }
      return scale;
    }
    case WorkingStateKind::int8_ef:
    case WorkingStateKind::int8_ef_int4: {
      float amax = 0.0f;
      for (int i = 0; i < dv; ++i) {
        float& x = S_vk[i * dk + j];
        x = ws_add(x, e_vk[i * dk + j]);  // y, held in S until its codes are formed
        const float a = x < 0.0f ? -x : x;
        amax = a > amax ? a : amax;
      }
      const float scale = ws_column_scale(amax, 127.0f, f.bf16_scale);
      float eamax = 0.0f;
      for (int i = 0; i < dv; ++i) {
        float& x = S_vk[i * dk + j];
        const float y = x;
        x = ws_int_decode(ws_int8_rne(y, scale), scale);
        const float e = ws_sub(y, x);
        e_vk[i * dk + j] = e;
        const float a = e < 0.0f ? -e : e;
        eamax = a > eamax ? a : eamax;
      }
      if (f.kind == WorkingStateKind::int8_ef_int4) {
        const float rscale = ws_column_scale(eamax, 7.0f, f.bf16_scale);
        for (int i = 0; i < dv; ++i) {
          float& e = e_vk[i * dk + j];
          e = ws_int_decode(ws_int4_rne(e, rscale), rscale);
        }
      }
      return scale;
    }
  }
  return 1.0f;
}

// Every column of head S_vk (and e_vk) stored in format f: ws_store_column for j = 0..d_k-1.
WS_HD void ws_store_head(WorkingStateFormat f, float* S_vk, float* e_vk, int dv, int dk,
                         RoundingPlace place) {
  if (f.kind == WorkingStateKind::fp32) return;
  for (int j = 0; j < dk; ++j) ws_store_column(f, S_vk, e_vk, dv, dk, j, place);
}

// The same result as ws_store_head, bit for bit, in row order: the column amaxes are gathered in
// one pass over the rows (the maximum does not depend on the order), then every element is
// encoded with its column's scale by the same element functions, and one Philox block serves
// the four elements it numbers. This is the order a row-major CPU loop (or a kernel whose
// threads own rows) wants; scratch_k and scratch2_k are caller arrays of d_k floats.
WS_HD void ws_store_head_rows(WorkingStateFormat f, float* S_vk, float* e_vk, int dv, int dk,
                              RoundingPlace place, float* scratch_k, float* scratch2_k) {
  const WorkingStateKind k = f.kind;
  if (k == WorkingStateKind::fp32) return;
  const bool ef = k == WorkingStateKind::int8_ef || k == WorkingStateKind::int8_ef_int4;
  const bool scaled = k != WorkingStateKind::bf16 && k != WorkingStateKind::bf16_sr;
  const bool fp8 = k == WorkingStateKind::fp8_e4m3 || k == WorkingStateKind::fp8_e4m3_sr;
  const bool sr = k == WorkingStateKind::bf16_sr || k == WorkingStateKind::int8_sr ||
                  k == WorkingStateKind::fp8_e4m3_sr;
  float* scale = scratch_k;
  if (scaled) {
    for (int j = 0; j < dk; ++j) scale[j] = 0.0f;
    for (int i = 0; i < dv; ++i)
      for (int j = 0; j < dk; ++j) {
        float& x = S_vk[i * dk + j];
        if (ef) x = ws_add(x, e_vk[i * dk + j]);
        const float a = ws_bits_float(ws_float_bits(x) & 0x7FFFFFFFu);
        scale[j] = a > scale[j] ? a : scale[j];
      }
    for (int j = 0; j < dk; ++j)
      scale[j] = ws_column_scale(scale[j], fp8 ? 448.0f : 127.0f, f.bf16_scale);
  }
  uint32_t block_index = 0xFFFFFFFFu;
  Philox4x32Counter block{0, 0, 0, 0};
  for (int i = 0; i < dv; ++i)
    for (int j = 0; j < dk; ++j) {
      const uint32_t element = static_cast<uint32_t>(i * dk + j);
      uint32_t r = 0;
      if (sr) {
        if (element / 4u != block_index) {
          block_index = element / 4u;
          block = philox4x32_10(rounding_counter(element, place.token, place.sequence), place.key);
        }
        r = philox_word(block, element % 4u);
      }
      float& x = S_vk[element];
      switch (k) {
        case WorkingStateKind::bf16:
          x = ws_bf16_decode(ws_bf16_rne(x));
          break;
        case WorkingStateKind::bf16_sr:
          x = ws_bf16_decode(ws_bf16_sr(x, r));
          break;
        case WorkingStateKind::int8:
          x = ws_int_decode(ws_int8_rne(x, scale[j]), scale[j]);
          break;
        case WorkingStateKind::int8_sr:
          x = ws_int_decode(ws_int8_sr(x, scale[j], r), scale[j]);
          break;
        case WorkingStateKind::fp8_e4m3:
          x = ws_mul(ws_fp8_e4m3_decode(ws_fp8_e4m3_rne(ws_div(x, scale[j]))), scale[j]);
          break;
        case WorkingStateKind::fp8_e4m3_sr:
          x = ws_mul(ws_fp8_e4m3_decode(ws_fp8_e4m3_sr(ws_div(x, scale[j]), r)), scale[j]);
          break;
        case WorkingStateKind::int8_ef:
        case WorkingStateKind::int8_ef_int4: {
          const float y = x;
          x = ws_int_decode(ws_int8_rne(y, scale[j]), scale[j]);
          e_vk[element] = ws_sub(y, x);
          break;
        }
        case WorkingStateKind::fp32:
          break;
      }
    }
  if (k == WorkingStateKind::int8_ef_int4) {
    float* rscale = scratch2_k;
    for (int j = 0; j < dk; ++j) rscale[j] = 0.0f;
    for (int i = 0; i < dv; ++i)
      for (int j = 0; j < dk; ++j) {
        const float a = ws_bits_float(ws_float_bits(e_vk[i * dk + j]) & 0x7FFFFFFFu);
        rscale[j] = a > rscale[j] ? a : rscale[j];
      }
    for (int j = 0; j < dk; ++j) rscale[j] = ws_column_scale(rscale[j], 7.0f, f.bf16_scale);
    for (int i = 0; i < dv; ++i)
      for (int j = 0; j < dk; ++j) {
        float& e = e_vk[i * dk + j];
        e = ws_int_decode(ws_int4_rne(e, rscale[j]), rscale[j]);
      }
  }
}

}  // namespace statecheck
