// The chunked prefill kernel (chunked_prefill.h; launched by chunked_prefill.cu). Per chunk of n <=
// 64 tokens starting from the block's state tile S [BV, 128] (fp32 in mma accumulators, and a bf16
// copy in shared memory), with q, k normalised, G the cumulative log decay of the chunk (per token
// for GDN, per token and key channel for KDA) and Gn = G of its last token
// (docs/chunked_prefill.md):
//   1. Kg = k e^G, Kd = k e^(Gn - G) (per row, or per element for KDA; KDA also Qg = q e^G)
//   2. A[r, s] = beta_r sum_j k_r k_s e^(G_r - G_s) (s < r), P[r, s] = sum_j q_r k_s e^(G_r - G_s)
//      (s <= r): GDN as K K^T and Q K^T on tensor cores with the per-token decay applied after;
//      KDA on tensor cores through a reference decay per 16-row block (elementwise where the
//      chunk's decays are too strong for it)
//   3. T = (I + A)^-1 (invert_unit_lower), Tb = T diag(beta) (bf16)
//   4. -Wk = -Tb Kg; U starts at Tb V; O starts at Qg S^T
//   5. U += -Wk S^T (= T diag(beta) (V - Kg S^T): the pseudo-values of chunked_delta.h)
//   6. O += P U (rows < n written as bf16); S = S e^Gn + U^T Kd
// Padding rows (r >= n) have zero q, k, v and beta, so they contribute nothing. GDN copies the next
// chunk's raw q, k and v rows into shared memory (cp.async) while step 6 runs.
// The same kernel with Form::transform is the split form's first pass (chunked_prefill.h): one
// chunk per block, steps 1-3 and the state-independent half of step 4 (-Wk, U0 = Tb V over all of
// d_v), written to the workspace (chunk_workspace.h); state_pass.cuh does the rest.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "kernels/chunked_delta/chunk_workspace.h"
#include "kernels/chunked_delta/chunked_prefill.h"
#include "kernels/chunked_delta/state_tile.cuh"
#include "kernels/chunked_delta/unit_lower_inverse.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/vector_io.cuh"
#include "kernels/gated_delta/pool_params.h"

namespace statecheck::cuda {
namespace {

constexpr int kC = kChunkedPrefillChunk;  // tokens per chunk
constexpr int kDk = 128;                  // key channels (the only d_k supported)
constexpr int kThreads = 256;             // 8 warps
constexpr int kLdK = kDk + 8;    // bf16 row stride of [64][128] tiles (ldmatrix, no conflicts)
constexpr int kLdKda = kDk + 2;  // KDA's raw k rows: 65 words, column reads without conflicts
constexpr int kLdC = kC + 8;     // bf16 row stride of [64][64] tiles
constexpr int kLdF = kC + 4;     // fp32 row stride of A and T
constexpr int kLdG = kDk + 1;    // fp32 row stride of KDA's cumulative decays
// KDA: the largest |G_r - G_m| (cumulative log decays of a row and its 16-row block's middle row)
// for which the intra-chunk products run on tensor cores (step 2).
constexpr float kSafeSpan = 40.0f;

// What a block of chunked_prefill_kernel computes: the whole recurrence of a (sequence, value
// head, value tile) (fused), or the state-independent products of one (chunk, value head) into
// the workspace (transform, the first pass of the split form; chunk_workspace.h).
enum class Form { fused, transform };

// Shared-memory carve-up of one block, in bytes from the start (all offsets 16-byte aligned).
// The transform form has no state, writes Kd to the workspace (KDA still stages step 2's factors
// in Kd's place) and loads the values into P's place once P is written out.
template <int BV, bool KDA, Form F = Form::fused>
struct Smem {
  static constexpr bool kFused = F == Form::fused;
  static constexpr int kTile = kC * kLdK * 2;                      // [64][136] bf16
  static constexpr int q = 0;                                      // normalised q (KDA: then Qg)
  static constexpr int k = q + kTile;                              // normalised k, then -Wk
  static constexpr int kg = k + kTile;                             // k e^G
  static constexpr int kd = kg + kTile;                            // k e^(Gn - G)
  static constexpr int s = kd + (kFused || KDA ? kTile : 0);       // state, bf16 [BV][136]
  static constexpr int v = s + (kFused ? BV * kLdK * 2 : 0);       // values [64][BV + 8]
  static constexpr int r1 = v + (kFused ? kC * (BV + 8) * 2 : 0);  // A fp32 [64][68], then U
  static constexpr int r1_bytes = std::max(kC * kLdF * 4, kC*(BV + 8) * 2);
  static constexpr int t = r1 + (r1_bytes + 15) / 16 * 16;  // T fp32 [64][68]
  static constexpr int p = t + kC * kLdF * 4;               // P bf16 [64][72]
  static constexpr int tb = p + kC * kLdC * 2;              // T diag(beta) bf16 [64][72]
  static constexpr int gb = tb + kC * kLdC * 2;             // GDN G [64]; beta [64]; q norms [64]
  static constexpr int gc = gb + 3 * kC * 4;                // KDA G [64][129]
  static constexpr int bytes = gc + (KDA ? kC * kLdG * 4 : 0);
};

__device__ __forceinline__ void bf16x8_to_float(const uint4& raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    f[2 * i] = x.x, f[2 * i + 1] = x.y;
  }
}

__device__ __forceinline__ uint4 float8_to_bf16x8(const float (&f)[8]) {
  return make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]),
                    pack_bf16x2(f[6], f[7]));
}

// Sum over the 16 lanes of a half warp.
__device__ __forceinline__ float half_warp_sum(float x) {
#pragma unroll
  for (int m = 1; m < 16; m <<= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// The transform form's block count per SM: two for GDN (106 KB of shared memory each), one for
// KDA (its cumulative decays per key channel take 33 KB more).
template <bool KDA, Form F>
constexpr int kMinBlocks = F == Form::transform && !KDA ? 2 : 1;

// Fused: block (sequence, value head, value tile). Transform: block (workspace slot, value head)
// with BV = 64, ws the workspace and num_seqs the launch's sequence count (unused when fused).
template <int BV, bool KDA, typename StateT, Form F = Form::fused>
__global__ void __launch_bounds__(kThreads, kMinBlocks<KDA, F>)
    chunked_prefill_kernel(PoolParams p, uint8_t* __restrict__ ws, int num_seqs) {
  using L = Smem<BV, KDA, F>;
  constexpr bool kX = F == Form::transform;
  static_assert(!kX || (BV == 64 && kC * (BV + 8) * 2 <= kC * kLdC * 2),
                "transform: value tiles of 64 in P's place");
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sq = reinterpret_cast<__nv_bfloat16*>(smem + L::q);
  __nv_bfloat16* sk = reinterpret_cast<__nv_bfloat16*>(smem + L::k);
  __nv_bfloat16* skg = reinterpret_cast<__nv_bfloat16*>(smem + L::kg);
  __nv_bfloat16* skd = reinterpret_cast<__nv_bfloat16*>(smem + L::kd);
  __nv_bfloat16* ss = reinterpret_cast<__nv_bfloat16*>(smem + L::s);
  __nv_bfloat16* sv = reinterpret_cast<__nv_bfloat16*>(smem + (kX ? L::p : L::v));
  float* sa = reinterpret_cast<float*>(smem + L::r1);
  __nv_bfloat16* su = reinterpret_cast<__nv_bfloat16*>(smem + L::r1);
  float* st = reinterpret_cast<float*>(smem + L::t);
  __nv_bfloat16* sp = reinterpret_cast<__nv_bfloat16*>(smem + L::p);
  __nv_bfloat16* stb = reinterpret_cast<__nv_bfloat16*>(smem + L::tb);
  float* sG = reinterpret_cast<float*>(smem + L::gb);
  float* sB = sG + kC;
  float* sQn = sB + kC;
  float* sGc = reinterpret_cast<float*>(smem + L::gc);
  constexpr int kLdV = BV + 8;

  const int h = blockIdx.y, v0 = kX ? 0 : blockIdx.z * BV;
  int seq = blockIdx.x, t_begin, t_end;
  if constexpr (kX) {  // the sequence and chunk of workspace slot blockIdx.x (chunk_workspace.h)
    const int64_t j = blockIdx.x;
    int lo = 0, hi = num_seqs - 1;  // the last sequence whose first slot is at or before j
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (chunk_slot(mid, p.cu[mid], 0) <= j)
        lo = mid;
      else
        hi = mid - 1;
    }
    seq = lo;
    const int64_t c = j - chunk_slot(seq, p.cu[seq], 0);
    t_end = p.cu[seq + 1];
    if (c < 0 || p.cu[seq] + c * kC >= t_end) return;  // an unused slot
    t_begin = p.cu[seq] + static_cast<int>(c) * kC;
  } else {
    t_begin = p.cu[seq], t_end = p.cu[seq + 1];
    if (t_end <= t_begin) return;
  }
  const int kh = h / (p.HV / p.H);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g8 = lane >> 2, t4 = lane & 3;
  // Transform: this chunk's workspace tile.
  uint8_t* tile = nullptr;
  __nv_bfloat16 *w_qx = nullptr, *w_kd = nullptr;
  if constexpr (kX) {
    tile = ws + (static_cast<size_t>(blockIdx.x) * p.HV + h) * ChunkTile::bytes(p.dv);
    w_qx = reinterpret_cast<__nv_bfloat16*>(tile + ChunkTile::qx);
    w_kd = reinterpret_cast<__nv_bfloat16*>(tile + ChunkTile::kd);
  }

  // The state tile [BV, 128] as accumulators: row block sm, columns sn0 .. sn0 + 8 NTS.
  constexpr int kSRowBlocks = BV / 16, kNTS = 2 * kSRowBlocks;
  const int sm = (warp % kSRowBlocks) * 16, sn0 = (warp / kSRowBlocks) * kNTS * 8;
  StateT* state = nullptr;
  float accS[kNTS][4];
  if constexpr (!kX) {
    state = static_cast<StateT*>(p.pool) +
            ((static_cast<size_t>(p.slot_ids[seq]) * p.HV + h) * p.dv + v0) * kDk;
    load_state_tile(accS, state, sm, sn0, lane);
    store_tile_bf16(accS, ss, kLdK, sm, sn0, lane, [](int) { return 1.0f; });
  }

  // Token-row tiles [64, N]: rows rm .. rm + 15, column half ch.
  const int rm = (warp & 3) * 16, ch = warp >> 2;
  constexpr int kNTU = BV / 16;  // n-tiles of a half of BV

  // GDN: the raw q, k and v rows of a chunk go to q's, k's and v's places by cp.async, and
  // warp 0's g and beta to registers, issued while the chunk before still computes (step 6);
  // rows past the chunk's end are zero-filled.
  constexpr int kSegsV = BV / 8;
  float g_lo = 0.0f, g_hi = 0.0f, b_lo = 0.0f, b_hi = 0.0f;
  auto prefetch_gdn_chunk = [&](int cs) {
    const int nn = min(kC, t_end - cs);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = tid + kThreads * i, row = idx >> 4, seg = idx & 15;
      const size_t off = row < nn ? (static_cast<size_t>(cs + row) * p.H + kh) * kDk + seg * 8 : 0;
      copy_async16(sq + row * kLdK + seg * 8, p.q + off, row < nn);
      copy_async16(sk + row * kLdK + seg * 8, p.k + off, row < nn);
    }
    if constexpr (!kX) {  // the transform form loads its value tiles in step 4
      for (int idx = tid; idx < kC * kSegsV; idx += kThreads) {
        const int row = idx / kSegsV, seg = idx % kSegsV;
        const size_t off =
            row < nn ? (static_cast<size_t>(cs + row) * p.HV + h) * p.dv + v0 + seg * 8 : 0;
        copy_async16(sv + row * kLdV + seg * 8, p.v + off, row < nn);
      }
    }
    if (warp == 0) {
      const size_t t_lo = static_cast<size_t>(cs + lane), t_hi = t_lo + 32;
      g_lo = lane < nn ? p.g[t_lo * p.HV + h] : 0.0f;
      g_hi = lane + 32 < nn ? p.g[t_hi * p.HV + h] : 0.0f;
      b_lo = lane < nn ? p.beta[t_lo * p.HV + h] : 0.0f;
      b_hi = lane + 32 < nn ? p.beta[t_hi * p.HV + h] : 0.0f;
    }
  };
  if constexpr (!KDA) prefetch_gdn_chunk(t_begin);

  for (int c0 = t_begin; c0 < t_end; c0 += kC) {
    const int n = min(kC, t_end - c0);
    if constexpr (!KDA) wait_async_copies();
    __syncthreads();  // the previous chunk is done with shared memory (and Ss is written)

    // 1a. q, k normalised (rows of 16 lanes x 8 channels), v, decays and beta.
    uint4 qraw[4], kraw[4];
    float kscale[4];
    bool g_positive = false;  // KDA: a decay above 0 (or not a number) in this thread's channel
    // KDA: every global load of the chunk is issued before any is used, so the chunk waits for
    // one memory latency, not one per row: q and k rows, v rows, and g of key channel
    // gcol = tid % 128 over rows grow0 .. grow0 + 31 (grow0 = 32 (tid / 128)), beta.
    constexpr int kVLoads = KDA ? kC * kSegsV / kThreads : 1;
    static_assert(!KDA || kC * kSegsV % kThreads == 0, "v rows split evenly over the threads");
    uint4 vraw[kVLoads];
    float graw[KDA ? 32 : 1];
    float braw = 0.0f;
    const int gcol = tid & (kDk - 1), grow0 = (tid >> 7) * 32;
    if constexpr (KDA) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int idx = tid + kThreads * i, row = idx >> 4, seg = idx & 15;
        const size_t off = (static_cast<size_t>(c0 + min(row, n - 1)) * p.H + kh) * kDk + seg * 8;
        const uint4 zero = make_uint4(0, 0, 0, 0);
        qraw[i] = row < n ? *reinterpret_cast<const uint4*>(p.q + off) : zero;
        kraw[i] = row < n ? *reinterpret_cast<const uint4*>(p.k + off) : zero;
      }
#pragma unroll
      for (int i = 0; i < kVLoads; ++i) {
        if constexpr (kX) break;
        const int idx = tid + kThreads * i, row = idx / kSegsV, seg = idx % kSegsV;
        const size_t off =
            (static_cast<size_t>(c0 + min(row, n - 1)) * p.HV + h) * p.dv + v0 + seg * 8;
        vraw[i] = row < n ? *reinterpret_cast<const uint4*>(p.v + off) : make_uint4(0, 0, 0, 0);
      }
      const float* gbase = p.g + (static_cast<size_t>(c0) * p.HV + h) * kDk + gcol;
#pragma unroll
      for (int r = 0; r < 32; ++r) {
        const int row = grow0 + r;
        graw[r] = row < n ? gbase[static_cast<size_t>(min(row, n - 1)) * p.HV * kDk] : 0.0f;
      }
      if (tid < kC) {
        const float b = p.beta[static_cast<size_t>(c0 + min(tid, n - 1)) * p.HV + h];
        braw = tid < n ? b : 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = tid + kThreads * i, row = idx >> 4, seg = idx & 15;
      if constexpr (!KDA) {  // prefetched; each thread reads back what it copied
        qraw[i] = *reinterpret_cast<const uint4*>(sq + row * kLdK + seg * 8);
        kraw[i] = *reinterpret_cast<const uint4*>(sk + row * kLdK + seg * 8);
      }
      float qf[8], kf[8], qs = 0.0f, ks = 0.0f;
      bf16x8_to_float(qraw[i], qf);
      bf16x8_to_float(kraw[i], kf);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        qs = __fmaf_rn(qf[e], qf[e], qs), ks = __fmaf_rn(kf[e], kf[e], ks);
      qs = half_warp_sum(qs), ks = half_warp_sum(ks);
      const float qscale = p.qk_l2norm ? p.scale / sqrtf(qs + 1e-6f) : p.scale;
      kscale[i] = p.qk_l2norm ? 1.0f / sqrtf(ks + 1e-6f) : 1.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        qf[e] = __fmul_rn(qf[e], qscale), kf[e] = __fmul_rn(kf[e], kscale[i]);
      *reinterpret_cast<uint4*>(sq + row * kLdK + seg * 8) = float8_to_bf16x8(qf);
      if constexpr (kX && !KDA)
        *reinterpret_cast<uint4*>(w_qx + row * kDk + seg * 8) = float8_to_bf16x8(qf);
      if constexpr (KDA) {
        uint32_t* dst = reinterpret_cast<uint32_t*>(sk + row * kLdKda + seg * 8);
#pragma unroll
        for (int e = 0; e < 4; ++e) dst[e] = pack_bf16x2(kf[2 * e], kf[2 * e + 1]);
        if (seg == 0) sQn[row] = qscale;
      } else {
        *reinterpret_cast<uint4*>(sk + row * kLdK + seg * 8) = float8_to_bf16x8(kf);
      }
    }
    if constexpr (KDA) {
#pragma unroll
      for (int i = 0; i < kVLoads; ++i) {
        if constexpr (kX) break;
        const int idx = tid + kThreads * i, row = idx / kSegsV, seg = idx % kSegsV;
        *reinterpret_cast<uint4*>(sv + row * kLdV + seg * 8) = vraw[i];
      }
      // Column scan of g over the thread's 32 rows (rows at or past n add 0); the second half
      // adds the first half's total after the barrier below.
      float acc = 0.0f;
#pragma unroll
      for (int r = 0; r < 32; ++r) {
        if (grow0 + r < n) g_positive |= !(graw[r] <= 0.0f);
        acc += graw[r];
        graw[r] = acc;
        sGc[(grow0 + r) * kLdG + gcol] = acc;
      }
      if (tid < kC) sB[tid] = braw;
    } else if (warp == 0) {  // inclusive scan of g over the chunk, two tokens per lane
      float lo = g_lo, hi = g_hi;
#pragma unroll
      for (int m = 1; m < 32; m <<= 1) {
        const float a = __shfl_up_sync(0xffffffffu, lo, m), b = __shfl_up_sync(0xffffffffu, hi, m);
        if (lane >= m) lo += a, hi += b;
      }
      hi += __shfl_sync(0xffffffffu, lo, 31);
      sG[lane] = lo, sG[lane + 32] = hi;
      sB[lane] = b_lo, sB[lane + 32] = b_hi;
    }
    __syncthreads();
    if constexpr (KDA) {  // rows 32 .. 63 of the scan: add the total of rows 0 .. 31
      if (grow0 > 0) {
        const float base = sGc[31 * kLdG + gcol];
#pragma unroll
        for (int r = 0; r < 32; ++r) sGc[(grow0 + r) * kLdG + gcol] = graw[r] + base;
      }
      __syncthreads();
    }

    // 1b. Kg = k e^G and Kd = k e^(Gn - G), from the unrounded normalised k (KDA: in step 3, as
    // step 2 stages its factors where they go).
    auto write_kg_kd = [&]() {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int idx = tid + kThreads * i, row = idx >> 4, seg = idx & 15;
        float kf[8], kg[8], kd[8];
        bf16x8_to_float(kraw[i], kf);
        float eg = 0.0f, ed = 0.0f;  // GDN: e^G and e^(Gn - G) of the row
        if constexpr (!KDA) eg = expf(sG[row]), ed = expf(sG[n - 1] - sG[row]);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float kn = __fmul_rn(kf[e], kscale[i]);
          if constexpr (KDA) {
            const float G = sGc[row * kLdG + seg * 8 + e], Gn = sGc[(n - 1) * kLdG + seg * 8 + e];
            eg = expf(G), ed = expf(Gn - G);
          }
          kg[e] = kn * eg, kd[e] = kn * ed;
        }
        *reinterpret_cast<uint4*>(skg + row * kLdK + seg * 8) = float8_to_bf16x8(kg);
        if constexpr (kX)
          *reinterpret_cast<uint4*>(w_kd + row * kDk + seg * 8) = float8_to_bf16x8(kd);
        else
          *reinterpret_cast<uint4*>(skd + row * kLdK + seg * 8) = float8_to_bf16x8(kd);
      }
    };
    if constexpr (!KDA) write_kg_kd();

    // 2. A (fp32) and P (bf16), lower triangles.
    if constexpr (KDA) {
      // On tensor cores when the chunk's decays allow it: row block I (16 rows) of A and P is
      // (x_r e^(G_r - G_m)) (k_s e^(G_m - G_s))^T over s < 16 (I + 1), m = 16 I + 8 its middle
      // row, for x = k, q. Each factor is at most e^kSafeSpan when every |G_r - G_m| is (rows of
      // earlier blocks have G_s >= G_m, as no decay is above 0), so nothing overflows; a factor
      // that underflows multiplies one below e^(kSafeSpan - 87). Otherwise elementwise.
      bool unsafe = g_positive;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int idx = tid + kThreads * i, row = idx >> 4, seg = idx & 15, m = (row & ~15) + 8;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          unsafe |=
              !(fabsf(sGc[row * kLdG + seg * 8 + e] - sGc[m * kLdG + seg * 8 + e]) <= kSafeSpan);
      }
      if (!__syncthreads_or(unsafe)) {
        // Left factors into Kg's and Kd's places; right factors R_I [16 (I + 1)][136]: R_0, R_1
        // in T's place, R_2, R_3 in q's and k's.
        __nv_bfloat16* slk = skg;
        __nv_bfloat16* slq = skd;
        __nv_bfloat16* rt = reinterpret_cast<__nv_bfloat16*>(smem + L::t);
        __nv_bfloat16* const right[4] = {rt, rt + 16 * kLdK, sq, sq + 48 * kLdK};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int idx = tid + kThreads * i, row = idx >> 4, seg = idx & 15, blk = row >> 4;
          float qf[8], kf[8], lk[8], lq[8];
          bf16x8_to_float(qraw[i], qf);
          bf16x8_to_float(kraw[i], kf);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            kf[e] = __fmul_rn(kf[e], kscale[i]), qf[e] = __fmul_rn(qf[e], sQn[row]);
            const float x =
                __expf(sGc[row * kLdG + seg * 8 + e] - sGc[(blk * 16 + 8) * kLdG + seg * 8 + e]);
            lk[e] = kf[e] * x, lq[e] = qf[e] * x;
          }
          *reinterpret_cast<uint4*>(slk + row * kLdK + seg * 8) = float8_to_bf16x8(lk);
          *reinterpret_cast<uint4*>(slq + row * kLdK + seg * 8) = float8_to_bf16x8(lq);
          for (int I = blk; I < 4; ++I) {
            float rk[8];
#pragma unroll
            for (int e = 0; e < 8; ++e)
              rk[e] = kf[e] * __expf(sGc[(I * 16 + 8) * kLdG + seg * 8 + e] -
                                     sGc[row * kLdG + seg * 8 + e]);
            *reinterpret_cast<uint4*>(right[I] + row * kLdK + seg * 8) = float8_to_bf16x8(rk);
          }
        }
        __syncthreads();
        // 20 units of 16 x 16: (A or P, row block I, column block c <= I).
        for (int u = warp; u < 20; u += 8) {
          const bool is_p = u >= 10;
          const int rem = u % 10, I = rem == 0 ? 0 : rem < 3 ? 1 : rem < 6 ? 2 : 3;
          const int cb = rem - I * (I + 1) / 2;
          float acc[2][4] = {};
          warp_mma<2, kDk, false, false>(acc, is_p ? slq : slk, kLdK, 16 * I, right[I], kLdK,
                                         16 * cb, lane);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = 16 * I + g8 + (e >> 1) * 8, s = 16 * cb + nt * 8 + 2 * t4 + (e & 1);
              if (is_p)
                sp[r * kLdC + s] = __float2bfloat16_rn(s <= r ? acc[nt][e] : 0.0f);
              else
                sa[r * kLdF + s] = s < r ? sB[r] * acc[nt][e] : 0.0f;
            }
        }
        for (int idx = tid; idx < kC * kC; idx += kThreads) {
          const int r = idx >> 6, s = idx & 63;
          if (s >= (r & ~15) + 16)
            sa[r * kLdF + s] = 0.0f, sp[r * kLdC + s] = __float2bfloat16_rn(0.0f);
        }
      } else {
        for (int r = warp; r < kC; r += 8) {
          const float beta_r = sB[r];
          for (int half = 0; half < 2; ++half) {
            const int s = lane + 32 * half;
            float a = 0.0f, pq = 0.0f;
            if (r < n && 32 * half <= r) {
              for (int j = 0; j < kDk; ++j) {
                const float gr = sGc[r * kLdG + j];
                const float kr = __bfloat162float(sk[r * kLdKda + j]);
                const float qr = __bfloat162float(sq[r * kLdK + j]);
                const float ks = __bfloat162float(sk[s * kLdKda + j]);
                // ex2.approx (relative error ~2^-22), far below the bf16 roundings of the products.
                const float e = s <= r ? __expf(gr - sGc[s * kLdG + j]) * ks : 0.0f;
                a = __fmaf_rn(kr, e, a), pq = __fmaf_rn(qr, e, pq);
              }
            }
            sa[r * kLdF + s] = s < r ? beta_r * a : 0.0f;
            sp[r * kLdC + s] = __float2bfloat16_rn(s <= r ? pq : 0.0f);
          }
        }
      }
    } else {
      float accA[4][4] = {}, accP[4][4] = {};
      const int cn0 = ch * 32;
      if (cn0 <= rm + 15) {
        warp_mma<4, kDk, false, false>(accA, sk, kLdK, rm, sk, kLdK, cn0, lane);
        warp_mma<4, kDk, false, false>(accP, sq, kLdK, rm, sk, kLdK, cn0, lane);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = rm + g8 + (e >> 1) * 8, s = cn0 + nt * 8 + 2 * t4 + (e & 1);
          const float dec = s <= r ? expf(sG[r] - sG[s]) : 0.0f;
          sa[r * kLdF + s] = s < r ? sB[r] * dec * accA[nt][e] : 0.0f;
          sp[r * kLdC + s] = __float2bfloat16_rn(dec * accP[nt][e]);
        }
    }
    __syncthreads();

    // Transform: the value tiles of step 4 go to two buffers, P's place and A's, by cp.async: tile
    // t into buffer t % 2, issued as soon as the buffer is free (the first once P is written out,
    // the second once the inverse is done with A, a later one once the tile two before is used).
    __nv_bfloat16* const vbuf[2] = {sv, reinterpret_cast<__nv_bfloat16*>(smem + L::r1)};
    const int vtiles = (p.dv + 63) / 64;
    auto issue_value_tile = [&](int t) {
      const int vt = t * 64;
      auto rows = [&](auto segs_tag) {  // 64 rows of `segs` 16-byte units, unrolled
        constexpr int kSegs = decltype(segs_tag)::value, kRows = kThreads / kSegs;
        const int row0 = tid / kSegs, seg = tid % kSegs;
#pragma unroll
        for (int j = 0; j < kC / kRows; ++j) {
          const int row = row0 + kRows * j;
          const size_t off =
              row < n ? (static_cast<size_t>(c0 + row) * p.HV + h) * p.dv + vt + seg * 8 : 0;
          copy_async16(vbuf[t % 2] + row * kLdV + seg * 8, p.v + off, row < n);
        }
      };
      if (p.dv - vt >= 64)
        rows(std::integral_constant<int, 8>{});
      else
        rows(std::integral_constant<int, 4>{});
    };
    if constexpr (kX) {  // P to the workspace; its place takes value tile 0 after the next barrier
      for (int i = tid; i < kC * kC / 8; i += kThreads)
        *reinterpret_cast<uint4*>(tile + ChunkTile::p + i * 16) =
            *reinterpret_cast<const uint4*>(sp + (i >> 3) * kLdC + (i & 7) * 8);
    }

    // 3. T = (I + A)^-1, Tb = T diag(beta); KDA: q becomes Qg = q e^G in place.
    invert_unit_lower<kLdF>(sa, st, warp, lane, [&] {
      if constexpr (kX) issue_value_tile(0);
    });
    if constexpr (kX)
      if (vtiles > 1) issue_value_tile(1);
    for (int idx = tid; idx < kC * kC / 2; idx += kThreads) {
      const int r = idx / (kC / 2), s = (idx % (kC / 2)) * 2;
      const float x0 = s < r ? st[r * kLdF + s] : (s == r ? 1.0f : 0.0f);
      const float x1 = s + 1 < r ? st[r * kLdF + s + 1] : (s + 1 == r ? 1.0f : 0.0f);
      *reinterpret_cast<uint32_t*>(stb + r * kLdC + s) = pack_bf16x2(x0 * sB[s], x1 * sB[s + 1]);
    }
    if constexpr (KDA) {
      write_kg_kd();
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int idx = tid + kThreads * i, row = idx >> 4, seg = idx & 15;
        float qf[8];
        bf16x8_to_float(qraw[i], qf);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          qf[e] = __fmul_rn(qf[e], sQn[row]) * expf(sGc[row * kLdG + seg * 8 + e]);
        if constexpr (kX)
          *reinterpret_cast<uint4*>(w_qx + row * kDk + seg * 8) = float8_to_bf16x8(qf);
        else
          *reinterpret_cast<uint4*>(sq + row * kLdK + seg * 8) = float8_to_bf16x8(qf);
      }
    }
    if constexpr (kX) {  // e^G and e^Gn to the workspace
      float* w_eg = reinterpret_cast<float*>(tile + ChunkTile::eg);
      float* w_ds = reinterpret_cast<float*>(tile + ChunkTile::ds);
      if (tid < kC) w_eg[tid] = KDA ? 0.0f : expf(sG[tid]);
      if (tid < kDk) w_ds[tid] = KDA ? expf(sGc[(n - 1) * kLdG + tid]) : expf(sG[n - 1]);
    }
    __syncthreads();

    if constexpr (kX) {  // 4. -Wk and U0 = Tb V, value tile by value tile, to the workspace
      float accW[8][4] = {};
      warp_mma<8, kC, false, true>(accW, stb, kLdC, rm, skg, kLdK, ch * 64, lane);
      store_tile_bf16(accW, reinterpret_cast<__nv_bfloat16*>(tile + ChunkTile::wk), kDk, rm,
                      ch * 64, lane, [](int) { return -1.0f; });
      float* w_u0 = reinterpret_cast<float*>(tile + ChunkTile::u0);
      for (int t = 0; t < vtiles; ++t) {
        const int vt = t * 64, width = min(64, p.dv - vt);
        wait_async_copies();
        __syncthreads();  // tile t is in
        auto tb_v = [&](auto nt_tag) {
          constexpr int NT = decltype(nt_tag)::value;
          float accU[NT][4] = {};
          const int un0 = ch * NT * 8;
          warp_mma<NT, kC, false, true>(accU, stb, kLdC, rm, vbuf[t % 2], kLdV, un0, lane);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int col = vt + un0 + nt * 8 + 2 * t4;
            float* r0 = w_u0 + static_cast<size_t>(rm + g8) * p.dv + col;
            float* r1 = r0 + 8 * static_cast<size_t>(p.dv);
            *reinterpret_cast<float2*>(r0) = make_float2(accU[nt][0], accU[nt][1]);
            *reinterpret_cast<float2*>(r1) = make_float2(accU[nt][2], accU[nt][3]);
          }
        };
        if (width == 64)
          tb_v(std::integral_constant<int, 4>{});
        else
          tb_v(std::integral_constant<int, 2>{});
        if (t + 2 < vtiles) {
          __syncthreads();  // every warp is done with tile t's buffer
          issue_value_tile(t + 2);
        }
      }
      break;  // one chunk per block
    }

    // 4. -Wk = -Tb Kg into k's place; U = Tb V; O = Qg S^T.
    {
      float accW[8][4] = {};
      warp_mma<8, kC, false, true>(accW, stb, kLdC, rm, skg, kLdK, ch * 64, lane);
      store_tile_bf16(accW, sk, kLdK, rm, ch * 64, lane, [](int) { return -1.0f; });
    }
    float accU[kNTU][4] = {}, accO[kNTU][4] = {};
    const int un0 = ch * (BV / 2);
    warp_mma<kNTU, kC, false, true>(accU, stb, kLdC, rm, sv, kLdV, un0, lane);
    warp_mma<kNTU, kDk, false, false>(accO, sq, kLdK, rm, ss, kLdK, un0, lane);
    if constexpr (!KDA) {
      const float e0 = expf(sG[rm + g8]), e1 = expf(sG[rm + g8 + 8]);
#pragma unroll
      for (int nt = 0; nt < kNTU; ++nt)
        accO[nt][0] *= e0, accO[nt][1] *= e0, accO[nt][2] *= e1, accO[nt][3] *= e1;
    }
    __syncthreads();

    // 5. U += -Wk S^T.
    warp_mma<kNTU, kDk, false, false>(accU, sk, kLdK, rm, ss, kLdK, un0, lane);
    store_tile_bf16(accU, su, kLdV, rm, un0, lane, [](int) { return 1.0f; });
    __syncthreads();

    // 6. O += P U; S = S e^Gn + U^T Kd. GDN: the next chunk's inputs start to arrive (q's, k's and
    // v's places were last read in steps 4 and 5).
    if constexpr (!KDA)
      if (c0 + kC < t_end) prefetch_gdn_chunk(c0 + kC);
    warp_mma<kNTU, kC, false, true>(accO, sp, kLdC, rm, su, kLdV, un0, lane);
    if (p.o) store_output_rows(accO, p, c0, n, h, rm, v0 + un0, lane);
#pragma unroll
    for (int nt = 0; nt < kNTS; ++nt) {
      float d0, d1;
      if constexpr (KDA) {
        const int col = sn0 + nt * 8 + 2 * t4;
        d0 = expf(sGc[(n - 1) * kLdG + col]), d1 = expf(sGc[(n - 1) * kLdG + col + 1]);
      } else {
        d0 = d1 = expf(sG[n - 1]);
      }
      accS[nt][0] *= d0, accS[nt][1] *= d1, accS[nt][2] *= d0, accS[nt][3] *= d1;
    }
    warp_mma<kNTS, kC, true, true>(accS, su, kLdV, sm, skd, kLdK, sn0, lane);
    store_tile_bf16(accS, ss, kLdK, sm, sn0, lane, [](int) { return 1.0f; });
  }

  if constexpr (!kX) {
    store_state_tile(accS, state, sm, sn0, lane);
  }
}

}  // namespace
}  // namespace statecheck::cuda
