// gated_delta_decode_packed_bf16_kernel (GatedDeltaKernel::decode_packed_bf16): decode over bf16
// states with the rows held packed in registers, and its packed token step. Included by
// gated_delta_pool.cu only.
#pragma once

#include "kernels/gated_delta/gated_delta_common.cuh"

namespace statecheck::cuda {
namespace {

constexpr int kPackedRowsPerLane = 4;  // bf16 packed decode: 64 rows per block

// bf16 state rows held packed in registers: four bf16 values per uint2 (two per word, the lower
// column in the low half). bf16 -> fp32 is exact (the bits moved up 16 places). The packed decode
// converts each piece once for u = S k and again for the write; the two conversions are spelled
// differently (shifts and masks, byte permutes) and volatile, so that no compiler pass can merge
// them into one whose fp32 values stay live across the reduction in between, which would take
// back the registers the packing saves (a precaution: docs/kernel_notes.md).
__device__ __forceinline__ void unpack_bf16x4(uint2 raw, float* s) {
  uint32_t lo0, hi0, lo1, hi1;
  asm volatile("shl.b32 %0, %1, 16;" : "=r"(lo0) : "r"(raw.x));
  asm volatile("and.b32 %0, %1, 0xffff0000;" : "=r"(hi0) : "r"(raw.x));
  asm volatile("shl.b32 %0, %1, 16;" : "=r"(lo1) : "r"(raw.y));
  asm volatile("and.b32 %0, %1, 0xffff0000;" : "=r"(hi1) : "r"(raw.y));
  s[0] = __uint_as_float(lo0), s[1] = __uint_as_float(hi0);
  s[2] = __uint_as_float(lo1), s[3] = __uint_as_float(hi1);
}

__device__ __forceinline__ void unpack_bf16x4_permuted(uint2 raw, float* s) {
  uint32_t lo0, hi0, lo1, hi1;
  asm volatile("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo0) : "r"(raw.x));
  asm volatile("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(hi0) : "r"(raw.x));
  asm volatile("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo1) : "r"(raw.y));
  asm volatile("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(hi1) : "r"(raw.y));
  s[0] = __uint_as_float(lo0), s[1] = __uint_as_float(hi0);
  s[2] = __uint_as_float(lo1), s[3] = __uint_as_float(hi1);
}

// fp32 -> four packed bf16, round to nearest even (as store_vec and the CPU bf16 codec).
__device__ __forceinline__ uint2 pack_bf16x4(const float* s) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(s[0], s[1]);
  const __nv_bfloat162 b = __floats2bfloat162_rn(s[2], s[3]);
  uint2 raw;
  raw.x = *reinterpret_cast<const uint32_t*>(&a);
  raw.y = *reinterpret_cast<const uint32_t*>(&b);
  return raw;
}

// token_step on packed bf16 rows (one token, then rounded to bf16): each 4-column piece is
// converted where it is used, once for u = S k and once for the write and readout, instead of
// being held as fp32 through the token. Same operations in the same order as token_step, so the
// state and outputs are bit for bit those of token_step followed by a bf16 store.
template <int NCH, bool KDA, int RPL>
__device__ __forceinline__ void token_step_packed(const Params& p, TokenRegs<NCH, KDA, RPL>& cur,
                                                  uint2 (&raw)[RPL][NCH], float (&out)[RPL]) {
  const float a = prepare_token(p, cur);
  const float* kk = cur.k;
  const float* qq = cur.q;
  float part[RPL], w[RPL];
#pragma unroll
  for (int r = 0; r < RPL; ++r) {
    part[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      float s[4];
      unpack_bf16x4(raw[r][c], s);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = c * 4 + e;
        part[r] = __fmaf_rn(__fmul_rn(s[e], KDA ? cur.g[KDA ? i : 0] : a), kk[i], part[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RPL; ++r) w[r] = __fmul_rn(cur.beta, cur.v[r] - row_sum(part[r]));
#pragma unroll
  for (int r = 0; r < RPL; ++r) {
    out[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      float s[4];
      unpack_bf16x4_permuted(raw[r][c], s);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = c * 4 + e;
        s[e] = __fmaf_rn(w[r], kk[i], __fmul_rn(s[e], KDA ? cur.g[KDA ? i : 0] : a));
        out[r] = __fmaf_rn(s[e], qq[i], out[r]);
      }
      raw[r][c] = pack_bf16x4(s);
    }
  }
#pragma unroll
  for (int r = 0; r < RPL; ++r) out[r] = row_sum(out[r]);
}

// Decode over bf16 states with d_k = 32 * NCH in {32, 64, 128}: the rows8 layout with 4 rows per
// lane (64 rows per block of 4 warps), the rows held packed (8 bytes per 4 columns) and converted
// where used (token_step_packed). The rows8 kernel holds them as fp32: with bf16 states a block
// then has half the bytes in flight of an fp32 one for the same registers. 4 blocks per SM are
// asked of the compiler (a register cap of 128). A sequence without tokens is left as it is; one
// with more tokens than the one-token hint said is run row by row in fp32 over all its tokens and
// rounded once at the end, as the rows8 kernel does, so every hint gives the same bits.
template <int NCH, bool KDA>
__global__ void __launch_bounds__(kWarps * 32, 4) gated_delta_decode_packed_bf16_kernel(Params p) {
  constexpr int RPL = kPackedRowsPerLane;
  constexpr int dk = NCH * 32;
  const int seq = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = (blockIdx.z * kWarps + warp) * (4 * RPL) + (lane >> 3);
  const int sub = lane & 7;
  const int dv = p.dv;
  const int kh = h / (p.HV / p.H);
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;
  __nv_bfloat16* S = reinterpret_cast<__nv_bfloat16*>(p.pool) +
                     (static_cast<size_t>(p.slot_ids[seq]) * p.HV + h) * dv * dk;
  int rows[RPL];
  bool row_ok[RPL];
#pragma unroll
  for (int i = 0; i < RPL; ++i) {
    rows[i] = row0 + 4 * i;
    row_ok[i] = rows[i] < dv;
  }
  auto piece = [&](int i, int c) {
    return reinterpret_cast<uint2*>(S + static_cast<size_t>(rows[i]) * dk + c * 32 + sub * 4);
  };
  uint2 raw[RPL][NCH];
  if (t1 - t0 == 1) {
#pragma unroll
    for (int i = 0; i < RPL; ++i)
#pragma unroll
      for (int c = 0; c < NCH; ++c) raw[i][c] = row_ok[i] ? *piece(i, c) : make_uint2(0u, 0u);
    TokenRegs<NCH, KDA, RPL> cur;
    load_token(p, t0, h, kh, sub, rows, row_ok, cur);
    float out[RPL];
    token_step_packed(p, cur, raw, out);
    store_outputs(p, t0, h, sub, rows, row_ok, out);
  } else {
#pragma unroll
    for (int i = 0; i < RPL; ++i) {
      const int row[1] = {rows[i]};
      const bool ok[1] = {row_ok[i]};
      float s[1][NCH * 4];
#pragma unroll
      for (int c = 0; c < NCH; ++c)
        unpack_bf16x4(ok[0] ? *piece(i, c) : make_uint2(0u, 0u), &s[0][c * 4]);
      for (int t = t0; t < t1; ++t) {
        TokenRegs<NCH, KDA, 1> cur;
        load_token(p, t, h, kh, sub, row, ok, cur);
        float out[1];
        token_step(p, cur, s, out);
        store_outputs(p, t, h, sub, row, ok, out);
      }
#pragma unroll
      for (int c = 0; c < NCH; ++c) raw[i][c] = pack_bf16x4(&s[0][c * 4]);
    }
  }
#pragma unroll
  for (int i = 0; i < RPL; ++i)
    if (row_ok[i])
#pragma unroll
      for (int c = 0; c < NCH; ++c) *piece(i, c) = raw[i][c];
}

}  // namespace
}  // namespace statecheck::cuda
