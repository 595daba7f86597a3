#include "kernels/gated_delta/gated_delta_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device.h"
#include "kernels/common/vector_io.cuh"

namespace statecheck::cuda {

namespace {

constexpr int kWarps = 4;        // warps per block
constexpr int kRowsPerWarp = 8;  // state rows (value channels) each warp keeps in registers
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kPackedRowsPerLane = 4;  // bf16 packed decode: 64 rows per block

struct Params {
  int H, HV, dk, dv;
  bool qk_l2norm;
  float scale;
  void* pool;
  const int32_t* slot_ids;
  const int32_t* cu;
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const float* g;
  const float* beta;
  __nv_bfloat16* o;
};

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Grid (num_seqs, HV, ceil(d_v / 32)), block 128 threads. Each warp owns 8 state rows of one
// (sequence, value head) and keeps them in registers over all of the sequence's tokens; lane l
// owns key columns (c * 32 + l) * VEC + e. Row dot products (u = S k, o = S q) are warp sums.
template <int VEC, int NCHUNK, bool KDA, typename StateT>
__global__ void __launch_bounds__(kWarps * 32) gated_delta_pool_kernel(Params p) {
  constexpr int NCOL = VEC * NCHUNK;
  const int seq = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = (blockIdx.z * kWarps + warp) * kRowsPerWarp;
  if (row0 >= p.dv) return;  // whole warp idle; the kernel uses no block-wide barrier
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;  // no token: the state is left as it is, bits and all (NaN payloads too)
  const int dk = p.dk, dv = p.dv;
  const int kh = h / (p.HV / p.H);
  const int slot = p.slot_ids[seq];
  StateT* S = reinterpret_cast<StateT*>(p.pool) + (static_cast<size_t>(slot) * p.HV + h) * dv * dk;

  int col[NCHUNK];
  bool col_ok[NCHUNK];
#pragma unroll
  for (int c = 0; c < NCHUNK; ++c) {
    col[c] = (c * 32 + lane) * VEC;
    col_ok[c] = col[c] < dk;  // VEC divides d_k, so a vector is wholly in or out
  }

  float s[kRowsPerWarp][NCOL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c) {
      if (row < dv && col_ok[c]) {
        load_vec<VEC>(S + static_cast<size_t>(row) * dk + col[c], &s[r][c * VEC]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[r][c * VEC + e] = 0.0f;
      }
    }
  }

  for (int t = t0; t < t1; ++t) {
    float kk[NCOL], qq[NCOL], dec[NCOL];
    const __nv_bfloat16* qt = p.q + (static_cast<size_t>(t) * p.H + kh) * dk;
    const __nv_bfloat16* kt = p.k + (static_cast<size_t>(t) * p.H + kh) * dk;
    float qsum = 0.0f, ksum = 0.0f;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int j = col[c] + e;
        const float qv = col_ok[c] ? __bfloat162float(qt[j]) : 0.0f;
        const float kv = col_ok[c] ? __bfloat162float(kt[j]) : 0.0f;
        qq[c * VEC + e] = qv;
        kk[c * VEC + e] = kv;
        qsum += qv * qv;
        ksum += kv * kv;
      }
    float qscale = p.scale, kscale = 1.0f;
    if (p.qk_l2norm) {
      qscale = p.scale / sqrtf(warp_sum(qsum) + 1e-6f);
      kscale = 1.0f / sqrtf(warp_sum(ksum) + 1e-6f);
    }
    if constexpr (KDA) {
      const float* gt = p.g + (static_cast<size_t>(t) * p.HV + h) * dk;
#pragma unroll
      for (int c = 0; c < NCHUNK; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) dec[c * VEC + e] = col_ok[c] ? expf(gt[col[c] + e]) : 0.0f;
    } else {
      const float a = expf(p.g[static_cast<size_t>(t) * p.HV + h]);
#pragma unroll
      for (int i = 0; i < NCOL; ++i) dec[i] = a;
    }
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      qq[i] *= qscale;
      kk[i] *= kscale;
    }
    const float beta = p.beta[static_cast<size_t>(t) * p.HV + h];
    const __nv_bfloat16* vt = p.v + (static_cast<size_t>(t) * p.HV + h) * dv;
    __nv_bfloat16* ot = p.o ? p.o + (static_cast<size_t>(t) * p.HV + h) * dv : nullptr;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = row0 + r;
      if (row >= dv) break;  // uniform across the warp
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < NCOL; ++i) {
        s[r][i] *= dec[i];
        part += s[r][i] * kk[i];
      }
      const float u = warp_sum(part);
      const float w = beta * (__bfloat162float(vt[row]) - u);
      float out = 0.0f;
#pragma unroll
      for (int i = 0; i < NCOL; ++i) {
        s[r][i] += w * kk[i];
        out += s[r][i] * qq[i];
      }
      out = warp_sum(out);
      if (ot && lane == r) ot[row] = __float2bfloat16_rn(out);
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
    if (row >= dv) break;
#pragma unroll
    for (int c = 0; c < NCHUNK; ++c)
      if (col_ok[c]) store_vec<VEC>(S + static_cast<size_t>(row) * dk + col[c], &s[r][c * VEC]);
  }
}

// Token inputs one lane needs, loaded one token ahead of their use (software pipelining).
template <int NCH, bool KDA, int RPL>
struct TokenRegs {
  float q[NCH * 4], k[NCH * 4], g[KDA ? NCH * 4 : 1], v[RPL], beta;
};

__device__ __forceinline__ void load_bf16x4(const __nv_bfloat16* p, float* out) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
}

// Sum over the 8 lanes that share a row (lanes differing in their low 3 bits).
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  return x;
}

// The inputs of token t that a lane of the rows8 layout (below) reads for value head h: its key
// columns c * 32 + sub * 4 + e of q and k (key head kh) and, for KDA, of g; v at its rows; beta.
template <int NCH, bool KDA, int RPL>
__device__ __forceinline__ void load_token(const Params& p, int t, int h, int kh, int sub,
                                           const int (&rows)[RPL], const bool (&row_ok)[RPL],
                                           TokenRegs<NCH, KDA, RPL>& r) {
  constexpr int dk = NCH * 32;
  const __nv_bfloat16* qt = p.q + (static_cast<size_t>(t) * p.H + kh) * dk;
  const __nv_bfloat16* kt = p.k + (static_cast<size_t>(t) * p.H + kh) * dk;
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    load_bf16x4(qt + c * 32 + sub * 4, &r.q[c * 4]);
    load_bf16x4(kt + c * 32 + sub * 4, &r.k[c * 4]);
  }
  if constexpr (KDA) {
    const float* gt = p.g + (static_cast<size_t>(t) * p.HV + h) * dk;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const float4 x = *reinterpret_cast<const float4*>(gt + c * 32 + sub * 4);
      r.g[c * 4] = x.x, r.g[c * 4 + 1] = x.y, r.g[c * 4 + 2] = x.z, r.g[c * 4 + 3] = x.w;
    }
  } else {
    r.g[0] = p.g[static_cast<size_t>(t) * p.HV + h];
  }
  const __nv_bfloat16* vt = p.v + (static_cast<size_t>(t) * p.HV + h) * p.dv;
#pragma unroll
  for (int i = 0; i < RPL; ++i) r.v[i] = row_ok[i] ? __bfloat162float(vt[rows[i]]) : 0.0f;
  r.beta = p.beta[static_cast<size_t>(t) * p.HV + h];
}

// The token-wide part of a step, in place in the token registers: q and k L2-normalised over
// the row's 8 lanes (if p.qk_l2norm) and scaled (q by p.scale), KDA's per-channel g replaced by
// exp(g). Returns GDN's decay exp(g) (0 for KDA). Shared by token_step and token_step_packed, so
// that both start from the same bits.
template <int NCH, bool KDA, int RPL>
__device__ __forceinline__ float prepare_token(const Params& p, TokenRegs<NCH, KDA, RPL>& cur) {
  constexpr int NCOL = NCH * 4;
  float qsum = 0.0f, ksum = 0.0f;
#pragma unroll
  for (int i = 0; i < NCOL; ++i) {
    qsum = __fmaf_rn(cur.q[i], cur.q[i], qsum);
    ksum = __fmaf_rn(cur.k[i], cur.k[i], ksum);
  }
  float qscale = p.scale, kscale = 1.0f;
  if (p.qk_l2norm) {
    qscale = p.scale / sqrtf(row_sum(qsum) + 1e-6f);
    kscale = 1.0f / sqrtf(row_sum(ksum) + 1e-6f);
  }
#pragma unroll
  for (int i = 0; i < NCOL; ++i) {
    cur.k[i] = __fmul_rn(cur.k[i], kscale);
    cur.q[i] = __fmul_rn(cur.q[i], qscale);
    if constexpr (KDA) cur.g[i] = expf(cur.g[i]);
  }
  return KDA ? 0.0f : expf(cur.g[0]);
}

// One token of the recurrence on a lane's RPL state rows s (rows8 layout): q and k normalised,
// decay, delta-rule write, readout. out[r] is row r's output, summed over the row's 8 lanes. The
// token registers are consumed (q, k and g are scaled in place). Every rounding is spelled out
// (__fmul_rn, __fmaf_rn: no contraction left to the compiler), so that the packed bf16 decode
// (token_step_packed) repeats it bit for bit.
template <int NCH, bool KDA, int RPL>
__device__ __forceinline__ void token_step(const Params& p, TokenRegs<NCH, KDA, RPL>& cur,
                                           float (&s)[RPL][NCH * 4], float (&out)[RPL]) {
  constexpr int NCOL = NCH * 4;
  const float a = prepare_token(p, cur);
  const float* kk = cur.k;
  const float* qq = cur.q;
  float part[RPL], w[RPL];
#pragma unroll
  for (int r = 0; r < RPL; ++r) {
    part[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      s[r][i] = __fmul_rn(s[r][i], KDA ? cur.g[KDA ? i : 0] : a);
      part[r] = __fmaf_rn(s[r][i], kk[i], part[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < RPL; ++r) w[r] = __fmul_rn(cur.beta, cur.v[r] - row_sum(part[r]));
#pragma unroll
  for (int r = 0; r < RPL; ++r) {
    out[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < NCOL; ++i) {
      s[r][i] = __fmaf_rn(w[r], kk[i], s[r][i]);
      out[r] = __fmaf_rn(s[r][i], qq[i], out[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < RPL; ++r) out[r] = row_sum(out[r]);
}

// bf16 state rows held packed in registers: four bf16 values per uint2 (two per word, the lower
// column in the low half). bf16 -> fp32 is exact (the bits moved up 16 places). The packed decode
// converts each piece once for u = S k and again for the write; the two conversions are spelled
// differently (shifts and masks, byte permutes) and volatile, so that no compiler pass can merge
// them into one whose fp32 values stay live across the reduction in between, which would take
// back the registers the packing saves. A precaution: at 4 rows per lane the kernel timed the
// same with one spelling (results/gpu/2026-11-29_nvidia-h200_run8/variants/, v1 against v2).
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

// Loads a lane's RPL state rows (rows8 layout: key columns c * 32 + sub * 4 + e) of a head whose
// rows of d_k = NCH * 32 elements start at `head`; rows that do not exist read as zeros.
template <int NCH, int RPL, typename StateT>
__device__ __forceinline__ void load_lane_rows(const StateT* head, const int (&rows)[RPL],
                                               const bool (&row_ok)[RPL], int sub,
                                               float (&s)[RPL][NCH * 4]) {
#pragma unroll
  for (int i = 0; i < RPL; ++i)
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      if (row_ok[i]) {
        load_vec<4>(head + static_cast<size_t>(rows[i]) * (NCH * 32) + c * 32 + sub * 4,
                    &s[i][c * 4]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[i][c * 4 + e] = 0.0f;
      }
    }
}

// Stores what load_lane_rows loaded (existing rows only), rounding to the state dtype.
template <int NCH, int RPL, typename StateT>
__device__ __forceinline__ void store_lane_rows(StateT* head, const int (&rows)[RPL],
                                                const bool (&row_ok)[RPL], int sub,
                                                const float (&s)[RPL][NCH * 4]) {
#pragma unroll
  for (int i = 0; i < RPL; ++i)
    if (row_ok[i])
#pragma unroll
      for (int c = 0; c < NCH; ++c)
        store_vec<4>(head + static_cast<size_t>(rows[i]) * (NCH * 32) + c * 32 + sub * 4,
                     &s[i][c * 4]);
}

// Writes token t's outputs of a lane's rows (lane sub == 0 of each row) as bf16, if o is wanted.
template <int RPL>
__device__ __forceinline__ void store_outputs(const Params& p, int t, int h, int sub,
                                              const int (&rows)[RPL], const bool (&row_ok)[RPL],
                                              const float (&out)[RPL]) {
  if (!p.o || sub != 0) return;
  __nv_bfloat16* ot = p.o + (static_cast<size_t>(t) * p.HV + h) * p.dv;
#pragma unroll
  for (int r = 0; r < RPL; ++r)
    if (row_ok[r]) ot[rows[r]] = __float2bfloat16_rn(out[r]);
}

// Fast layout for d_k = 32 * NCH (32, 64, 128, 256): 8 lanes per state row, 4 rows per warp
// instruction; lane l owns rows row0 + (l >> 3) + 4 i (i < RPL) and key columns
// c * 32 + (l & 7) * 4 + e, so every warp load or store is four full 128-byte row segments and a
// row dot product is a 3-step shuffle among 8 lanes (the RPL rows' reductions are independent and
// interleave). A block covers 4 warps x 4 RPL rows. Semantics as gated_delta_pool_kernel; with
// PREFETCH the inputs of token t + 1 are loaded while token t is computed. Blocks per SM asked of
// the compiler: 3 (a register cap of 168) where prefetch or 4 fp32 rows per lane need the
// registers, else 4 (cap 128). A sequence without tokens is left as it is (no load, no store).
template <int NCH, bool KDA, typename StateT, bool PREFETCH, int RPL>
__global__ void __launch_bounds__(kWarps * 32,
                                  (PREFETCH || (RPL > 2 && sizeof(StateT) == 4)) ? 3 : 4)
    gated_delta_pool_rows8_kernel(Params p) {
  constexpr int NCOL = NCH * 4;
  const int seq = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = (blockIdx.z * kWarps + warp) * (4 * RPL) + (lane >> 3);
  const int sub = lane & 7;
  const int dk = NCH * 32, dv = p.dv;
  const int kh = h / (p.HV / p.H);
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;  // whole block: no token, the state is left as it is
  const int slot = p.slot_ids[seq];
  StateT* S = reinterpret_cast<StateT*>(p.pool) + (static_cast<size_t>(slot) * p.HV + h) * dv * dk;
  int rows[RPL];
  bool row_ok[RPL];
#pragma unroll
  for (int i = 0; i < RPL; ++i) {
    rows[i] = row0 + 4 * i;
    row_ok[i] = rows[i] < dv;
  }

  float s[RPL][NCOL];
  load_lane_rows<NCH>(S, rows, row_ok, sub, s);

  TokenRegs<NCH, KDA, RPL> cur, nxt;
  load_token(p, t0, h, kh, sub, rows, row_ok, cur);
  for (int t = t0; t < t1; ++t) {
    if constexpr (PREFETCH) {
      if (t + 1 < t1) load_token(p, t + 1, h, kh, sub, rows, row_ok, nxt);
    }
    float out[RPL];
    token_step(p, cur, s, out);
    store_outputs(p, t, h, sub, rows, row_ok, out);
    if constexpr (PREFETCH) {
      if (t + 1 < t1) cur = nxt;
    } else {
      if (t + 1 < t1) load_token(p, t + 1, h, kh, sub, rows, row_ok, cur);
    }
  }

  store_lane_rows<NCH>(S, rows, row_ok, sub, s);
}

// Decode over bf16 states with d_k = 32 * NCH in {32, 64, 128}: the rows8 layout with 4 rows per
// lane (64 rows per block of 4 warps), the rows held packed (8 bytes per 4 columns) and converted
// where used (token_step_packed). The rows8 kernel holds them as fp32: with bf16 states a block
// then has half the bytes in flight of an fp32 one for the same registers (4 rows per lane, 4
// blocks per SM; KDA's per-channel gates needed a cap of 128 registers to get there, run 6
// decode_min_blocks_per_sm.log), and at batch 256 it reached 79-80% (GDN) and 73% (KDA) of the
// copy rate against 82-83% and 82% for this kernel (H200, results/gpu/2026-11-29_nvidia-h200_run8/
// variants/decode_bf16_packed_v*.log; 2 or 8 rows per lane, 5-8 blocks per SM, q and k staged in
// shared memory or held as bf16 too were slower or at most 0.7 points ahead). A sequence without
// tokens is left as it is; one with more tokens than the one-token hint said is run row by row in
// fp32 over all its tokens and rounded once at the end, as the rows8 kernel does, so every hint
// gives the same bits.
template <int NCH, bool KDA>
__global__ void __launch_bounds__(kWarps * 32, 4) gated_delta_decode_bf16_packed_kernel(Params p) {
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

// Decode over fp32 states with d_k = 128 and d_v % 32 == 0, staged through shared memory by bulk
// copies so that the loads, arithmetic and stores of different tiles overlap in every block.
// A tile is kPipeRows consecutive state rows (16 KB) of one (sequence, value head); tiles are
// numbered (sequence, head, part), so consecutive tiles of a sequence are consecutive in its slot.
// The grid is persistent: block b takes tiles b, b + gridDim.x, ... in a ring of kPipeStages
// shared buffers, one transaction barrier each. Thread 0 loads the first kPipeStages tiles, writes
// each finished tile back with a bulk copy and then refills the previous tile's buffer with the
// tile kPipeStages after it as soon as that buffer's store has read it: while a tile is computed,
// the next one or two are loading or loaded and the last one or two are being stored. All threads
// compute a tile in the rows8 layout (2 rows per lane) on shared memory, with the inputs of the
// next tile's first token loaded while the current tile is computed. Every token of a sequence is
// applied (the max_seq_len hint only selects this kernel); a sequence without tokens is written
// back unchanged. The arithmetic is token_step's, so results are bit for bit those of the rows8
// kernel. Measured against it on the H200 in results/gpu/2026-11-29_nvidia-h200_run5/variants/.
constexpr int kPipeRows = 32;
constexpr int kPipeStages = 4;
constexpr int kPipeWarps = 4;
constexpr int kPipeMinBlocksPerSm = 3;  // 3 x 64 KB of buffers per SM, registers capped to fit
// The staged kernel pays a set-up per block (barriers, the first loads, an empty ring at the end)
// that the row kernel does not; it is chosen when every block of its grid takes at least this
// many tiles. Measured crossover on the H200 (batch sweep, run 5 variants): between 16 (batch 48,
// equal) and 21 (batch 64, staged 2-3% faster) tiles per block for GDN and KDA shapes.
constexpr int kPipeMinTilesPerBlock = 16;
constexpr size_t kPipeTileBytes = size_t(kPipeRows) * 128 * sizeof(float);
constexpr size_t kPipeSharedBytes = kPipeStages * (kPipeTileBytes + sizeof(uint64_t));

// Where a tile lies: sequence, value head, its key head (GVA) and the part of the head's rows.
struct PipeTile {
  int seq, h, kh, part;
};

__device__ __forceinline__ PipeTile pipe_tile(const Params& p, int tile) {
  const int parts = p.dv / kPipeRows;
  PipeTile t;
  t.part = tile % parts;
  t.h = (tile / parts) % p.HV;
  t.seq = tile / (parts * p.HV);
  t.kh = t.h / (p.HV / p.H);
  return t;
}

__device__ __forceinline__ float* pipe_tile_state(const Params& p, const PipeTile& t) {
  return static_cast<float*>(p.pool) +
         ((static_cast<size_t>(p.slot_ids[t.seq]) * p.HV + t.h) * p.dv +
          static_cast<size_t>(t.part) * kPipeRows) *
             128;
}

template <bool KDA>
__global__ void __launch_bounds__(kPipeWarps * 32, kPipeMinBlocksPerSm)
    gated_delta_decode_pipelined_kernel(Params p, int num_tiles) {
  constexpr int NCH = 4, NCOL = NCH * 4;
  constexpr int RPL = kPipeRows / (kPipeWarps * 4);
  constexpr int kTileFloats = kPipeRows * NCH * 32;
  extern __shared__ __align__(128) unsigned char smem[];
  float* const ring = reinterpret_cast<float*>(smem);
  uint64_t* const landed = reinterpret_cast<uint64_t*>(smem + kPipeStages * kPipeTileBytes);
  const int grid = static_cast<int>(gridDim.x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane & 7;
  int local_rows[RPL];  // the lane's rows within a tile
  bool all_rows[RPL];   // every row of a tile exists (d_v % kPipeRows == 0)
#pragma unroll
  for (int r = 0; r < RPL; ++r) {
    local_rows[r] = warp * 4 * RPL + (lane >> 3) + 4 * r;
    all_rows[r] = true;
  }
  // A tile's place, token range and the lane's rows within its head; loads its first token.
  struct TileTokens {
    PipeTile at;
    int t0, t1;
    int rows[RPL];
  };
  auto prepare = [&](int tile, TileTokens& tt, TokenRegs<NCH, KDA, RPL>& regs) {
    tt.at = pipe_tile(p, tile);
    tt.t0 = p.cu[tt.at.seq], tt.t1 = p.cu[tt.at.seq + 1];
#pragma unroll
    for (int r = 0; r < RPL; ++r) tt.rows[r] = tt.at.part * kPipeRows + local_rows[r];
    if (tt.t0 < tt.t1) load_token(p, tt.t0, tt.at.h, tt.at.kh, sub, tt.rows, all_rows, regs);
  };

  if (threadIdx.x == 0)
    for (int st = 0; st < kPipeStages; ++st) init_copy_barrier(&landed[st]);
  __syncthreads();
  if (threadIdx.x == 0)
    for (int st = 0; st < kPipeStages; ++st) {
      const int tile = blockIdx.x + st * grid;
      if (tile < num_tiles)
        bulk_copy_to_shared(ring + st * kTileFloats, pipe_tile_state(p, pipe_tile(p, tile)),
                            kPipeTileBytes, &landed[st]);
    }

  TileTokens cur_tt, next_tt;
  TokenRegs<NCH, KDA, RPL> cur, next;
  int tile = blockIdx.x;
  if (tile < num_tiles) prepare(tile, cur_tt, cur);
  for (int i = 0; tile < num_tiles; ++i, tile += grid) {
    const int stage = i % kPipeStages;
    const bool has_next = tile + grid < num_tiles;
    if (has_next) prepare(tile + grid, next_tt, next);
    wait_copy_barrier(&landed[stage], (i / kPipeStages) & 1);
    float* const buf = ring + stage * kTileFloats;
    if (cur_tt.t0 < cur_tt.t1) {
      float s[RPL][NCOL];
      load_lane_rows<NCH>(buf, local_rows, all_rows, sub, s);
      for (int t = cur_tt.t0; t < cur_tt.t1; ++t) {
        if (t > cur_tt.t0)
          load_token(p, t, cur_tt.at.h, cur_tt.at.kh, sub, cur_tt.rows, all_rows, cur);
        float out[RPL];
        token_step(p, cur, s, out);
        store_outputs(p, t, cur_tt.at.h, sub, cur_tt.rows, all_rows, out);
      }
      store_lane_rows<NCH>(buf, local_rows, all_rows, sub, s);
      fence_shared_to_async();
    }
    __syncthreads();  // the tile is complete in shared memory
    if (threadIdx.x == 0) {
      bulk_copy_to_global(pipe_tile_state(p, cur_tt.at), buf, kPipeTileBytes);
      // The previous tile's buffer takes the tile kPipeStages after it, once its store has read it.
      const int refill = tile + (kPipeStages - 1) * grid;
      if (i > 0 && refill < num_tiles) {
        wait_bulk_stores_read<1>();
        const int prev = (i - 1) % kPipeStages;
        bulk_copy_to_shared(ring + prev * kTileFloats, pipe_tile_state(p, pipe_tile(p, refill)),
                            kPipeTileBytes, &landed[prev]);
      }
    }
    if (has_next) {
      cur = next;
      cur_tt = next_tt;
    }
  }
  if (threadIdx.x == 0) wait_bulk_stores();
}

// How the staged kernel would run launch `a`: its grid (0 when the row kernel runs it) and tiles.
struct StagedPlan {
  int grid = 0, tiles = 0;
};

StagedPlan staged_decode_plan(const GatedDeltaPoolArgs& a) {
  if (a.max_seq_len != 1 || a.dk != 128 || a.dv % kPipeRows != 0 || a.state_dtype != Dtype::fp32 ||
      a.num_seqs <= 0)
    return {};
  // Also raises the kernel's shared-memory limit for the launch (resident_blocks).
  const void* kernel =
      a.gate == GateKind::kda
          ? reinterpret_cast<const void*>(gated_delta_decode_pipelined_kernel<true>)
          : reinterpret_cast<const void*>(gated_delta_decode_pipelined_kernel<false>);
  const int resident = resident_blocks(kernel, kPipeWarps * 32, kPipeSharedBytes);
  const int64_t tiles = static_cast<int64_t>(a.num_seqs) * a.HV * (a.dv / kPipeRows);
  int64_t grid = std::min<int64_t>(tiles, resident);
  if (a.max_blocks > 0) grid = std::min<int64_t>(grid, a.max_blocks);
  if (grid == 0 || tiles < kPipeMinTilesPerBlock * grid || tiles > std::numeric_limits<int>::max())
    return {};
  return {static_cast<int>(grid), static_cast<int>(tiles)};
}

template <int NCH, bool PREFETCH, int RPL, typename StateT>
void launch_rows8_variant(const GatedDeltaPoolArgs& a, const Params& p, cudaStream_t stream) {
  const int rows_per_block = kWarps * 4 * RPL;
  const dim3 grid(a.num_seqs, a.HV, (a.dv + rows_per_block - 1) / rows_per_block);
  const dim3 block(kWarps * 32);
  if (a.gate == GateKind::kda)
    gated_delta_pool_rows8_kernel<NCH, true, StateT, PREFETCH, RPL><<<grid, block, 0, stream>>>(p);
  else
    gated_delta_pool_rows8_kernel<NCH, false, StateT, PREFETCH, RPL><<<grid, block, 0, stream>>>(p);
}

// The kernel launch `a` takes, given its staged plan: the one decision behind both
// gated_delta_pool and gated_delta_pool_variant. Decode launches (max_seq_len == 1) of fp32
// states run staged when the plan has a grid; of bf16 states with d_k <= 128, packed; other decode
// launches the rows8 variant without the one-token-ahead input registers; longer sequences the
// rows8 kernel with input prefetch; d_k outside {32, 64, 128, 256} the general kernel.
GatedDeltaKernel choose_kernel(const GatedDeltaPoolArgs& a, const StagedPlan& staged) {
  if (staged.grid > 0) return GatedDeltaKernel::staged_decode;
  if (a.dk != 32 && a.dk != 64 && a.dk != 128 && a.dk != 256) return GatedDeltaKernel::general;
  if (a.max_seq_len != 1) return GatedDeltaKernel::rows8;
  return a.state_dtype == Dtype::bf16 && a.dk <= 128 ? GatedDeltaKernel::packed_bf16_decode
                                                     : GatedDeltaKernel::rows8_decode;
}

// Launches rows8-layout kernel `k` for d_k = 32 NCH: rows8 with 2 rows per lane and input
// prefetch; rows8_decode with 4 rows per lane (64 rows per block: more loads in flight per
// thread, half the blocks), 2 for d_k = 256; packed_bf16_decode with 4 packed rows per lane.
template <int NCH, typename StateT>
void launch_rows8(const GatedDeltaPoolArgs& a, const Params& p, GatedDeltaKernel k,
                  cudaStream_t stream) {
  constexpr bool kBf16 = std::is_same_v<StateT, __nv_bfloat16>;
  switch (k) {
    case GatedDeltaKernel::rows8:
      return launch_rows8_variant<NCH, true, 2, StateT>(a, p, stream);
    case GatedDeltaKernel::rows8_decode:
      if constexpr (NCH > 4 || !kBf16)
        return launch_rows8_variant<NCH, false, (NCH > 4 ? 2 : 4), StateT>(a, p, stream);
      break;
    case GatedDeltaKernel::packed_bf16_decode:
      if constexpr (NCH <= 4 && kBf16) {
        const int rows_per_block = kWarps * 4 * kPackedRowsPerLane;
        const dim3 grid(a.num_seqs, a.HV, (a.dv + rows_per_block - 1) / rows_per_block);
        if (a.gate == GateKind::kda)
          gated_delta_decode_bf16_packed_kernel<NCH, true><<<grid, kWarps * 32, 0, stream>>>(p);
        else
          gated_delta_decode_bf16_packed_kernel<NCH, false><<<grid, kWarps * 32, 0, stream>>>(p);
        return;
      }
      break;
    default:
      break;
  }
  fail("gated_delta_pool: no {} kernel for d_k = {} and {} states", gated_delta_kernel_name(k),
       NCH * 32, kBf16 ? "bf16" : "fp32");
}

template <int NCH>
void launch_rows8(const GatedDeltaPoolArgs& a, const Params& p, GatedDeltaKernel k,
                  cudaStream_t stream) {
  if (a.state_dtype == Dtype::fp32)
    launch_rows8<NCH, float>(a, p, k, stream);
  else
    launch_rows8<NCH, __nv_bfloat16>(a, p, k, stream);
}

template <int VEC, int NCHUNK>
void launch_shape(const GatedDeltaPoolArgs& a, const Params& p, cudaStream_t stream) {
  const dim3 grid(a.num_seqs, a.HV, (a.dv + kRowsPerBlock - 1) / kRowsPerBlock);
  const dim3 block(kWarps * 32);
  const bool kda = a.gate == GateKind::kda;
  const bool f32 = a.state_dtype == Dtype::fp32;
  if (kda && f32)
    gated_delta_pool_kernel<VEC, NCHUNK, true, float><<<grid, block, 0, stream>>>(p);
  else if (kda)
    gated_delta_pool_kernel<VEC, NCHUNK, true, __nv_bfloat16><<<grid, block, 0, stream>>>(p);
  else if (f32)
    gated_delta_pool_kernel<VEC, NCHUNK, false, float><<<grid, block, 0, stream>>>(p);
  else
    gated_delta_pool_kernel<VEC, NCHUNK, false, __nv_bfloat16><<<grid, block, 0, stream>>>(p);
}

}  // namespace

void gated_delta_pool(const GatedDeltaPoolArgs& a, cudaStream_t stream) {
  if (a.H <= 0 || a.HV <= 0 || a.dk <= 0 || a.dv <= 0)
    fail("gated_delta_pool: H, HV, d_k, d_v must be positive (got {}, {}, {}, {})", a.H, a.HV, a.dk,
         a.dv);
  if (a.HV % a.H != 0) fail("gated_delta_pool: HV ({}) is not a multiple of H ({})", a.HV, a.H);
  if (a.dk > 256) fail("gated_delta_pool: d_k = {} > 256 is not supported", a.dk);
  if (a.num_seqs < 0) fail("gated_delta_pool: num_seqs = {}", a.num_seqs);
  if (a.max_blocks < 0) fail("gated_delta_pool: max_blocks = {} (0: no cap)", a.max_blocks);
  if (a.num_seqs == 0) return;
  const std::pair<const void*, const char*> required[] = {{a.state_pool, "state_pool"},
                                                          {a.slot_ids, "slot_ids"},
                                                          {a.cu_seqlens, "cu_seqlens"},
                                                          {a.q, "q"},
                                                          {a.k, "k"},
                                                          {a.v, "v"},
                                                          {a.g, "g"},
                                                          {a.beta, "beta"}};
  for (const auto& [pointer, name] : required)
    if (!pointer) fail("gated_delta_pool: {} is null (a required device pointer)", name);
  if (reinterpret_cast<uintptr_t>(a.state_pool) % 16 != 0)
    fail(
        "gated_delta_pool: state_pool is not 16-byte aligned (the kernels move state rows in "
        "16-byte vectors)");
  Params p;
  p.H = a.H, p.HV = a.HV, p.dk = a.dk, p.dv = a.dv;
  p.qk_l2norm = a.qk_l2norm;
  p.scale =
      a.scale != 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.dk)));
  p.pool = a.state_pool;
  p.slot_ids = a.slot_ids;
  p.cu = a.cu_seqlens;
  p.q = reinterpret_cast<const __nv_bfloat16*>(a.q);
  p.k = reinterpret_cast<const __nv_bfloat16*>(a.k);
  p.v = reinterpret_cast<const __nv_bfloat16*>(a.v);
  p.g = a.g;
  p.beta = a.beta;
  p.o = reinterpret_cast<__nv_bfloat16*>(a.o);
  const StagedPlan staged = staged_decode_plan(a);
  const GatedDeltaKernel k = choose_kernel(a, staged);
  if (k == GatedDeltaKernel::staged_decode) {
    if (a.gate == GateKind::kda)
      gated_delta_decode_pipelined_kernel<true>
          <<<staged.grid, kPipeWarps * 32, kPipeSharedBytes, stream>>>(p, staged.tiles);
    else
      gated_delta_decode_pipelined_kernel<false>
          <<<staged.grid, kPipeWarps * 32, kPipeSharedBytes, stream>>>(p, staged.tiles);
  } else if (k != GatedDeltaKernel::general) {
    if (a.dk == 128)
      launch_rows8<4>(a, p, k, stream);
    else if (a.dk == 64)
      launch_rows8<2>(a, p, k, stream);
    else if (a.dk == 256)
      launch_rows8<8>(a, p, k, stream);
    else
      launch_rows8<1>(a, p, k, stream);
  } else if (a.dk % 4 == 0 && a.dk <= 128)
    launch_shape<4, 1>(a, p, stream);
  else if (a.dk % 4 == 0)
    launch_shape<4, 2>(a, p, stream);
  else if (a.dk <= 128)
    launch_shape<1, 4>(a, p, stream);
  else
    launch_shape<1, 8>(a, p, stream);
  STATECHECK_CUDA_CHECK_LAUNCH("gated_delta_pool");
}

GatedDeltaKernel gated_delta_pool_variant(const GatedDeltaPoolArgs& a) {
  return choose_kernel(a, staged_decode_plan(a));
}

const char* gated_delta_kernel_name(GatedDeltaKernel k) {
  switch (k) {
    case GatedDeltaKernel::staged_decode:
      return "staged_decode";
    case GatedDeltaKernel::packed_bf16_decode:
      return "packed_bf16_decode";
    case GatedDeltaKernel::rows8_decode:
      return "rows8_decode";
    case GatedDeltaKernel::rows8:
      return "rows8";
    case GatedDeltaKernel::general:
      return "general";
  }
  return "?";
}

double gated_delta_pool_bytes(const GatedDeltaPoolArgs& a, int64_t T) {
  const double state =
      2.0 * a.num_seqs * a.HV * static_cast<double>(a.dv) * a.dk * dtype_bytes(a.state_dtype);
  const double per_token = 2.0 * (2.0 * a.H * a.dk + a.HV * a.dv) +  // q, k, v bf16
                           4.0 * (a.gate == GateKind::gdn ? a.HV : a.HV * a.dk) +
                           4.0 * a.HV +                      // g, beta
                           (a.o ? 2.0 * a.HV * a.dv : 0.0);  // o
  return state + per_token * static_cast<double>(T) + 4.0 * (2 * a.num_seqs + 1);
}

double gated_delta_pool_flops(const GatedDeltaPoolArgs& a, int64_t T) {
  return 6.0 * a.dk * a.dv * a.HV * static_cast<double>(T);
}

}  // namespace statecheck::cuda
