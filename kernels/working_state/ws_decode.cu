// The working-state decode kernel (ws_decode.h) and the working-slot copy, with their launchers.
// Layout: one block per (sequence, value head) holds the whole head in registers, because the
// per-key-channel scale is the amax of a column over all d_v rows. 8 lanes share a state row, each
// owning CPL = d_k / 8 consecutive key channels (one 16-byte load of int8 / E4M3 codes at d_k =
// 128), so a warp reads four whole rows per access; a thread holds 4 rows (rows rg + 32 r of
// row group rg for the 256 threads of d_v = 128). Row sums are 3-step butterflies over the 8 lanes;
// the column amax is a 2-step butterfly over the warp's row groups, then one thread per column
// reduces the warps' partial maxima from shared memory and forms the scale once. Two barriers per
// token; the shared arrays are double-buffered across tokens, so no third is needed. The order of
// every fp32 rounding is written out in ws_decode_reference.h, which repeats it on the host.
#include "kernels/working_state/ws_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "core/util/error.h"
#include "core/working_state/element_codec.h"
#include "core/working_state/philox.h"
#include "kernels/codec/rounding.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/working_state/ws_decode_chunks.cuh"
#include "kernels/working_state/ws_decode_token.cuh"
#include "kernels/working_state/ws_decode_token_int8.cuh"
#include "kernels/working_state/ws_step_math.h"

namespace statecheck::cuda {
namespace {

// One block per (sequence, value head), grid (num_seqs, HV): RPT = 4 rows per thread (256
// threads at d_v = 128, two blocks per SM) read from the head's slot in the pool, decoded, stepped,
// encoded and written back to it. FULL: every thread's 4 rows exist (d_v = 4 x row groups, i.e. d_v
// a multiple of 16), so no row is tested: the round-to-nearest int8 and fp8 stores on the real
// models' heads (d_k = d_v = 128). int8 rounded to nearest even keeps the codes between tokens and
// not the fp32 state: the step reads the codes, and the encode forms the new state again from them
// (exact_int8_rows), so only the first token of an init_state launch holds an fp32 state.
template <Store ST, int CPL, bool KDA, bool SR, bool FULL>
__global__ void __launch_bounds__(kLanesPerRow* kMaxDv / 4, 2) ws_decode_kernel(WsParams p) {
  constexpr int RPT = 4;
  constexpr int NW = Packed<ST, CPL>::kWords;
  constexpr int EB = ST == Store::bf16 ? 2 : 1;  // bytes per element
  constexpr bool kScaled = ST != Store::bf16;
  // int8 rounded to nearest even: the step on the codes (exact dot products, ws_decode_reference.h)
  constexpr bool kExact = ST == Store::int8 && !SR;
  extern __shared__ __align__(16) float smem[];
  const int seq = blockIdx.x, h = blockIdx.y;
  const int t0 = p.cu[seq], t1 = p.cu[seq + 1];
  if (t0 >= t1) return;  // uniform over the block: no barrier is skipped by part of it
  if (refuse_extra_tokens(p, seq, h, t1 - t0)) return;
  const int dk = p.dk, dv = p.dv;
  const int sub = threadIdx.x & 7, rg = threadIdx.x >> 3;
  const int nrg = blockDim.x >> 3;
  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int j0 = sub * CPL;
  const int kh = h / (p.HV / p.H);
  const int64_t head = static_cast<int64_t>(p.slot_ids[seq]) * p.HV + h;
  uint8_t* codes = p.codes + head * dv * dk * EB;
  const void* src_scales =
      static_cast<const uint8_t*>(p.scales) + head * head_scale_bytes<ST>(dk, p.bf16_scale);
  int rows[RPT];
  bool row_ok[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    rows[r] = rg + nrg * r;
    row_ok[r] = FULL || rows[r] < dv;
  }
  // Per-column values in shared memory sit at column_slot(j) of their row.
  float* sm_amax = smem;                     // [2][nwarps][dk]
  float* sm_scale = smem + 2 * nwarps * dk;  // [2][dk]
  float* sm_inv = sm_scale + 2 * dk;         // [2][dk]

  // The stored state, decoded.
  float sc[CPL], inv[CPL];  // this lane's column scales and their reciprocals (scaled formats)
#pragma unroll
  for (int e = 0; e < CPL; ++e) sc[e] = inv[e] = 1.0f;
  if constexpr (kScaled) {
    if (p.bf16_scale) {
      load_bf16<CPL>(static_cast<const uint16_t*>(src_scales) + j0, sc);
    } else {
      load_f32<CPL>(static_cast<const float*>(src_scales) + j0, sc);
    }
  }
  float s[RPT][CPL];  // the fp32 state (kExact: only an init_state launch's first token)
  uint32_t cw[kExact ? RPT : 1][kExact ? NW : 1];  // kExact: the state's codes, as stored
  if (p.init_state) {
    // An fp32 state given for this launch (init_state): read as it is, not decoded.
    const float* init = p.init_state + (static_cast<int64_t>(seq) * p.HV + h) * dv * dk;
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      if (row_ok[r]) {
        load_f32<CPL>(init + static_cast<int64_t>(rows[r]) * dk + j0, s[r]);
      } else {
#pragma unroll
        for (int e = 0; e < CPL; ++e) s[r][e] = 0.0f;
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      uint32_t w[NW];
      if (row_ok[r]) {
        load_words<NW>(codes + (rows[r] * dk + j0) * EB, w);
      } else {
#pragma unroll
        for (int c = 0; c < NW; ++c) w[c] = 0u;
      }
      if constexpr (kExact) {
#pragma unroll
        for (int c = 0; c < NW; ++c) cw[r][c] = w[c];
      } else {
        decode_chunk<ST, CPL>(w, sc, s[r]);
      }
    }
  }

  const Philox4x32Key key = rounding_key(p.seed, p.layer, static_cast<uint32_t>(h));
  const uint32_t pos0 = p.positions ? static_cast<uint32_t>(p.positions[seq]) : 0u;
  const uint32_t seq_id = p.seq_index ? static_cast<uint32_t>(p.seq_index[seq]) : uint32_t(seq);
  const float cmax = ST == Store::int8 ? 127.0f : 448.0f;

  // Token t: the step, the output, the new scales and the encode (written back after the last
  // token, else kept for the next). CODES (kExact only): the step on the codes cw; otherwise on the
  // fp32 state s. False when the head is refused (the stored state and scales are left as they
  // were), uniformly over the block.
  auto token = [&](const int t, auto codes_step) -> bool {
    constexpr bool CODES = decltype(codes_step)::value;
    [[maybe_unused]] const int buf = (t - t0) & 1;
    // Token inputs: this lane's key channels of q, k (and KDA's g), the rows' v, beta.
    float q[CPL], kk[CPL], a[KDA ? CPL : 1];
    load_bf16<CPL>(p.q + (static_cast<int64_t>(t) * p.H + kh) * dk + j0, q);
    load_bf16<CPL>(p.k + (static_cast<int64_t>(t) * p.H + kh) * dk + j0, kk);
    constexpr int kQuarter = CPL / 4;  // KDA: gates each of a warp's 4 row groups exponentiates
    [[maybe_unused]] float g_mine[kQuarter];
    if constexpr (KDA) {
      // The 4 row groups of a warp share the lane's key channels: row group w = (lane >> 3) & 3
      // loads and exponentiates channels j0 + w kQuarter .. + kQuarter, and the rest arrive by
      // shuffles below (a quarter of the exponentials; the same values in every lane).
      const float* gt = p.g + (static_cast<int64_t>(t) * p.HV + h) * dk + j0 +
                        ((threadIdx.x >> 3) & 3) * kQuarter;
#pragma unroll
      for (int e = 0; e < kQuarter; ++e) g_mine[e] = gt[e];
    } else {
      a[0] = p.g[static_cast<int64_t>(t) * p.HV + h];
    }
    float vr[RPT];
    const uint16_t* vt = p.v + (static_cast<int64_t>(t) * p.HV + h) * dv;
#pragma unroll
    for (int r = 0; r < RPT; ++r) vr[r] = row_ok[r] ? bf16_value(vt[rows[r]]) : 0.0f;
    const float beta = p.beta[static_cast<int64_t>(t) * p.HV + h];

    // q, k normalised and scaled; the decay.
    float qs = 0.0f, ks = 0.0f;
#pragma unroll
    for (int e = 0; e < CPL; ++e) {
      qs = wsk::fma(q[e], q[e], qs);
      ks = wsk::fma(kk[e], kk[e], ks);
    }
    float qscale = p.scale, kscale = 1.0f;
    if (p.qk_l2norm) {
      qscale = ws_div(p.scale, wsk::sqrt(wsk::add(row_sum(qs), 1e-6f)));
      kscale = ws_div(1.0f, wsk::sqrt(wsk::add(row_sum(ks), 1e-6f)));
    }
#pragma unroll
    for (int e = 0; e < CPL; ++e) {
      kk[e] = wsk::mul(kk[e], kscale);
      q[e] = wsk::mul(q[e], qscale);
    }
    if constexpr (KDA) {
#pragma unroll
      for (int e = 0; e < kQuarter; ++e) g_mine[e] = wsk::exp(g_mine[e]);
#pragma unroll
      for (int e = 0; e < CPL; ++e)
        a[e] = __shfl_sync(0xffffffffu, g_mine[e % kQuarter], ((e / kQuarter) << 3) | sub);
    } else {
      a[0] = wsk::exp(a[0]);
    }

    // The delta rule on the rows and the readout; m: the thread's part of the column amax.
    float out[RPT], m[CPL];
    [[maybe_unused]] float asc[CODES ? CPL : 1], wgt[CODES ? RPT : 1];
    bool bad = false;
    if constexpr (CODES) {
      exact_int8_rows<RPT, CPL, KDA>(cw, sc, a, kk, q, beta, vr, row_ok, asc, wgt, m, out, bad);
    } else {
      delta_rule_rows<RPT, CPL, KDA>(s, a, kk, q, beta, vr, row_ok, out, bad);
      if constexpr (kScaled) row_maxima(s, row_ok, m);
    }
    if (p.o && sub == 0) {
      uint16_t* ot = p.o + (static_cast<int64_t>(t) * p.HV + h) * dv;
#pragma unroll
      for (int r = 0; r < RPT; ++r)
        if (row_ok[r]) ot[rows[r]] = ws_bf16_rne(out[r]);
    }
    if constexpr (kScaled) {
      // The column amax over the warp's row groups (exact, so in any order), then over the warps.
#pragma unroll
      for (int e = 0; e < CPL; ++e) {
        m[e] = fmaxf(m[e], __shfl_xor_sync(0xffffffffu, m[e], 8));
        m[e] = fmaxf(m[e], __shfl_xor_sync(0xffffffffu, m[e], 16));
      }
      if ((threadIdx.x & 31) < kLanesPerRow) {
        float* dst = sm_amax + (buf * nwarps + warp) * dk;
#pragma unroll
        for (int e = 0; e < CPL; e += 4)
          *reinterpret_cast<float4*>(dst + column_slot<CPL>(j0 + e)) =
              make_float4(m[e], m[e + 1], m[e + 2], m[e + 3]);
      }
    }
    if (__syncthreads_or(bad)) {
      record_refusal(p, 1, seq, h, t - t0);
      return false;
    }
    const bool last = t + 1 == t1;
    if constexpr (kScaled) {
      // kExact: a column amax that is not finite refuses the head.
      [[maybe_unused]] bool col_bad = false;
      for (int j = threadIdx.x; j < dk; j += blockDim.x) {
        const int slot = column_slot<CPL>(j);
        const float* col_max = sm_amax + buf * nwarps * dk + slot;
        float amax = 0.0f;
        for (int w = 0; w < nwarps; ++w, col_max += dk) amax = fmaxf(amax, *col_max);
        if constexpr (kExact) col_bad |= !(amax <= 3.40282347e38f);
        const float col = ws_column_scale(amax, cmax, p.bf16_scale);
        sm_scale[buf * dk + slot] = col;
        sm_inv[buf * dk + slot] = __fdiv_rn(1.0f, col);
        if (!kExact && last) {
          if (p.bf16_scale)
            reinterpret_cast<uint16_t*>(p.scales)[head * dk + j] = ws_bf16_rne(col);
          else
            reinterpret_cast<float*>(p.scales)[head * dk + j] = col;
        }
      }
      if constexpr (kExact) {
        if (__syncthreads_or(col_bad)) {
          record_refusal(p, 1, seq, h, t - t0);
          return false;
        }
        if (last)
          for (int j = threadIdx.x; j < dk; j += blockDim.x) {
            const float col = sm_scale[buf * dk + column_slot<CPL>(j)];
            if (p.bf16_scale)
              reinterpret_cast<uint16_t*>(p.scales)[head * dk + j] = ws_bf16_rne(col);
            else
              reinterpret_cast<float*>(p.scales)[head * dk + j] = col;
          }
      } else {
        __syncthreads();
      }
#pragma unroll
      for (int e = 0; e < CPL; e += 4) {
        const int slot = buf * dk + column_slot<CPL>(j0 + e);
        const float4 a4 = *reinterpret_cast<const float4*>(sm_scale + slot);
        const float4 b4 = *reinterpret_cast<const float4*>(sm_inv + slot);
        sc[e] = a4.x, sc[e + 1] = a4.y, sc[e + 2] = a4.z, sc[e + 3] = a4.w;
        inv[e] = b4.x, inv[e + 1] = b4.y, inv[e + 2] = b4.z, inv[e + 3] = b4.w;
      }
    }
    [[maybe_unused]] const uint32_t pos = pos0 + static_cast<uint32_t>(t - t0);
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      uint32_t w[NW];
      if constexpr (CODES)
        encode_int8_new_state<CPL>(cw[r], asc, wgt[r], kk, inv, w);
      else if constexpr (kExact)
        encode_int8_recip<CPL>(s[r], inv, w);
      else
        encode_chunk<ST, CPL, SR>(p, s[r], sc, inv, key, static_cast<uint32_t>(rows[r] * dk + j0),
                                  pos, seq_id, w);
      if (last) {
        if (row_ok[r]) store_words<NW>(codes + (static_cast<int64_t>(rows[r]) * dk + j0) * EB, w);
      } else if constexpr (kExact) {
#pragma unroll
        for (int c = 0; c < NW; ++c) cw[r][c] = w[c];
      } else {
        decode_chunk<ST, CPL>(w, sc, s[r]);
      }
    }
    return true;
  };

  int t = t0;
  if constexpr (kExact) {
    // The first token of an init_state launch steps the given fp32 state; the rest, the codes.
    if (p.init_state && !token(t++, std::false_type{})) return;
    for (; t < t1; ++t)
      if (!token(t, std::true_type{})) return;
  } else {
    for (; t < t1; ++t)
      if (!token(t, std::false_type{})) return;
  }
}

// Byte-for-byte copy of n slot pairs: blockIdx.y is the pair; 16-byte units, grid-stride in x.
__global__ void ws_slot_copy_kernel(const uint4* src_codes, const uint4* src_scales,
                                    uint4* dst_codes, uint4* dst_scales, const int32_t* src_slots,
                                    const int32_t* dst_slots, int64_t code_units,
                                    int64_t scale_units) {
  const int64_t from = src_slots[blockIdx.y], to = dst_slots[blockIdx.y];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < code_units;
       u += stride)
    dst_codes[to * code_units + u] = src_codes[from * code_units + u];
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < scale_units;
       u += stride)
    dst_scales[to * scale_units + u] = src_scales[from * scale_units + u];
}

Store store_of(WorkingStateKind k) {
  switch (k) {
    case WorkingStateKind::bf16:
    case WorkingStateKind::bf16_sr:
      return Store::bf16;
    case WorkingStateKind::int8:
    case WorkingStateKind::int8_sr:
      return Store::int8;
    case WorkingStateKind::fp8_e4m3:
    case WorkingStateKind::fp8_e4m3_sr:
      return Store::fp8;
    default:
      fail("working-state decode: format '{}' has no CUDA kernel", WorkingStateFormat{k}.name());
  }
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

// Threads of a block: 8 lanes per state row, 4 rows per thread, whole warps.
int block_threads(int dv) {
  const int threads = kLanesPerRow * ((dv + 3) / 4);
  return (threads + 31) / 32 * 32;
}

template <Store ST, int CPL, bool KDA, bool SR>
void launch_variant(const WsDecodeArgs& a, const WsParams& p, cudaStream_t stream) {
  const int threads = block_threads(a.dv);
  const int reduction = 2 * (threads / 32) * a.dk + 4 * a.dk;  // floats
  const dim3 grid(a.num_seqs, a.HV);
  const size_t shared = reduction * sizeof(float);
  // FULL for the round-to-nearest int8 and fp8 stores, where it measured faster; with it the bf16
  // stores spill heavily and int8-sr ran slower (docs/kernel_notes.md has the timings).
  constexpr bool kFull = CPL == 16 && !SR && ST != Store::bf16;
  if (kFull && a.dv % 16 == 0)
    ws_decode_kernel<ST, CPL, KDA, SR, kFull><<<grid, threads, shared, stream>>>(p);
  else
    ws_decode_kernel<ST, CPL, KDA, SR, false><<<grid, threads, shared, stream>>>(p);
}

template <Store ST, int CPL>
void launch(const WsDecodeArgs& a, const WsParams& p, cudaStream_t stream) {
  const bool kda = a.gate == GateKind::kda;
  if (kda && p.sr)
    launch_variant<ST, CPL, true, true>(a, p, stream);
  else if (kda)
    launch_variant<ST, CPL, true, false>(a, p, stream);
  else if (p.sr)
    launch_variant<ST, CPL, false, true>(a, p, stream);
  else
    launch_variant<ST, CPL, false, false>(a, p, stream);
}

// The single-token kernel (for launches ws_decode_runs_token_kernel accepts: int8 or fp8).
void launch_token(const WsDecodeArgs& a, const WsParams& p, Store st, cudaStream_t stream) {
  const dim3 grid(a.num_seqs, a.HV);
  const bool kda = a.gate == GateKind::kda, full = a.dv == kMaxDv;
  auto go = [&](auto kernel) { kernel<<<grid, kTokenThreads, 0, stream>>>(p); };
  if (st == Store::int8) {
    // Two row tiles per warp (docs/kernel_notes.md: faster than one at batch 32 and 256).
    constexpr int kTiles = 2;
    auto go8 = [&](auto kernel) { kernel<<<grid, int8_token_threads<kTiles>(), 0, stream>>>(p); };
    if (kda)
      full ? go8(ws_decode_token_int8_kernel<true, true, kTiles>)
           : go8(ws_decode_token_int8_kernel<true, false, kTiles>);
    else
      full ? go8(ws_decode_token_int8_kernel<false, true, kTiles>)
           : go8(ws_decode_token_int8_kernel<false, false, kTiles>);
  } else {
    if (kda)
      full ? go(ws_decode_token_kernel<Store::fp8, true, true>)
           : go(ws_decode_token_kernel<Store::fp8, true, false>);
    else
      full ? go(ws_decode_token_kernel<Store::fp8, false, true>)
           : go(ws_decode_token_kernel<Store::fp8, false, false>);
  }
}

template <Store ST>
void launch_store(const WsDecodeArgs& a, const WsParams& p, cudaStream_t stream) {
  if (a.dk == 32)
    launch<ST, 4>(a, p, stream);
  else if (a.dk == 64)
    launch<ST, 8>(a, p, stream);
  else
    launch<ST, 16>(a, p, stream);
}

}  // namespace

bool ws_decode_supports(const WorkingStateFormat& f) {
  switch (f.kind) {
    case WorkingStateKind::bf16:
    case WorkingStateKind::bf16_sr:
    case WorkingStateKind::int8:
    case WorkingStateKind::int8_sr:
    case WorkingStateKind::fp8_e4m3:
    case WorkingStateKind::fp8_e4m3_sr:
      return true;
    default:
      return false;
  }
}

bool ws_decode_runs_token_kernel(const WsDecodeArgs& a) {
  const WorkingStateKind k = a.format.kind;
  return a.max_tokens == 1 && !a.init_state && a.dk == kTokenDk &&
         (k == WorkingStateKind::int8 || k == WorkingStateKind::fp8_e4m3);
}

bool ws_decode_supports_head(int dk, int dv) {
  return (dk == 32 || dk == 64 || dk == 128) && dv >= 1 && dv <= kMaxDv;
}

void ws_decode(const WsDecodeArgs& a, cudaStream_t stream) {
  if (!ws_decode_supports(a.format))
    fail("working-state decode: format '{}' has no CUDA kernel", a.format.name());
  if (a.H <= 0 || a.HV <= 0 || a.dv <= 0 || a.HV % a.H != 0)
    fail("working-state decode: invalid shape H {} HV {} d_v {} (positive, HV % H == 0)", a.H, a.HV,
         a.dv);
  if (a.dk != 32 && a.dk != 64 && a.dk != 128)
    fail("working-state decode: d_k {} (expected 32, 64 or 128)", a.dk);
  if (a.dv > kMaxDv) fail("working-state decode: d_v {} above {}", a.dv, kMaxDv);
  if (a.num_seqs < 0 || a.pool_slots < 0)
    fail("working-state decode: num_seqs {} and pool_slots {} must be >= 0", a.num_seqs,
         a.pool_slots);
  if (a.layer < 0 || a.layer >= 65536)
    fail("working-state decode: layer {} outside [0, 65536)", a.layer);
  if (a.max_tokens != 0 && a.max_tokens != 1)
    fail("working-state decode: max_tokens {} (expected 0, unknown, or 1)", a.max_tokens);
  const Store st = store_of(a.format.kind);
  if (a.num_seqs == 0) return;
  auto need = [](const void* ptr, const char* name) {
    if (!ptr) fail("working-state decode: {} is null", name);
  };
  need(a.codes, "codes");
  if (st != Store::bf16) need(a.scales, "scales");
  need(a.slot_ids, "slot_ids");
  need(a.cu_seqlens, "cu_seqlens");
  need(a.q, "q");
  need(a.k, "k");
  need(a.v, "v");
  need(a.g, "g");
  need(a.beta, "beta");
  if (!aligned16(a.codes) || (st != Store::bf16 && !aligned16(a.scales)) ||
      !aligned16(a.init_state))
    fail("working-state decode: codes, scales and init_state must be 16-byte aligned");
  WsParams p;
  p.num_seqs = a.num_seqs, p.H = a.H, p.HV = a.HV, p.dk = a.dk, p.dv = a.dv;
  p.max_tokens = a.max_tokens;
  p.qk_l2norm = a.qk_l2norm;
  p.sr = a.format.stochastic();
  p.bf16_scale = a.format.bf16_scale;
  p.scale =
      a.scale != 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.dk)));
  p.codes = static_cast<uint8_t*>(a.codes);
  p.scales = a.scales;
  p.slot_ids = a.slot_ids, p.cu = a.cu_seqlens, p.positions = a.positions,
  p.seq_index = a.seq_index;
  p.seed = a.seed, p.layer = static_cast<uint32_t>(a.layer);
  p.q = a.q, p.k = a.k, p.v = a.v, p.g = a.g, p.beta = a.beta, p.o = a.o;
  p.error_info = a.error_info;
  p.init_state = a.init_state;
  if (ws_decode_runs_token_kernel(a))
    launch_token(a, p, st, stream);
  else if (st == Store::bf16)
    launch_store<Store::bf16>(a, p, stream);
  else if (st == Store::int8)
    launch_store<Store::int8>(a, p, stream);
  else
    launch_store<Store::fp8>(a, p, stream);
  STATECHECK_CUDA_CHECK(cudaGetLastError());
}

void check_ws_decode_error(int32_t* error_info, cudaStream_t stream, int first_token) {
  if (!error_info) return;
  int32_t host[4];
  STATECHECK_CUDA_CHECK(
      cudaMemcpyAsync(host, error_info, sizeof host, cudaMemcpyDeviceToHost, stream));
  STATECHECK_CUDA_CHECK(cudaStreamSynchronize(stream));
  STATECHECK_CUDA_CHECK(cudaMemsetAsync(error_info, 0, sizeof host, stream));
  if (host[0] == 2)
    fail(
        "working-state decode: sequence {} has {} tokens in a launch declared max_tokens 1; its "
        "slots were left unchanged",
        host[1], host[3]);
  if (host[0] != 0)
    fail(
        "working-state decode: non-finite state or output in sequence {}, value head {}, token "
        "{}; that head's slot was left unchanged",
        host[1], host[2], first_token + host[3]);
}

void ws_slot_copy(const WorkingStateFormat& f, int HV, int dk, int dv, const void* src_codes,
                  const void* src_scales, void* dst_codes, void* dst_scales,
                  const int32_t* src_slots, const int32_t* dst_slots, int n, cudaStream_t stream) {
  const Store st = store_of(f.kind);
  if (HV <= 0 || dk <= 0 || dv <= 0 || dk % 16 != 0 || n < 0)
    fail("working-slot copy: invalid shape HV {} d_k {} d_v {} n {} (d_k % 16 == 0)", HV, dk, dv,
         n);
  if (n == 0) return;
  const bool scaled = st != Store::bf16;
  if (!src_codes || !dst_codes || !src_slots || !dst_slots ||
      (scaled && (!src_scales || !dst_scales)))
    fail("working-slot copy: a required pointer is null");
  if (!aligned16(src_codes) || !aligned16(dst_codes) ||
      (scaled && (!aligned16(src_scales) || !aligned16(dst_scales))))
    fail("working-slot copy: codes and scales must be 16-byte aligned");
  const int64_t code_units = static_cast<int64_t>(HV) * dv * dk * (st == Store::bf16 ? 2 : 1) / 16;
  const int64_t scale_units =
      scaled ? static_cast<int64_t>(HV) * dk * (f.bf16_scale ? 2 : 4) / 16 : 0;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((code_units + threads - 1) / threads, 64));
  ws_slot_copy_kernel<<<dim3(blocks, n), threads, 0, stream>>>(
      static_cast<const uint4*>(src_codes), static_cast<const uint4*>(src_scales),
      static_cast<uint4*>(dst_codes), static_cast<uint4*>(dst_scales), src_slots, dst_slots,
      code_units, scale_units);
  STATECHECK_CUDA_CHECK(cudaGetLastError());
}

double ws_decode_bytes(const WsDecodeArgs& a, int64_t total_tokens) {
  const bool scaled = a.format.has_scales();
  const double code_bytes =
      a.format.kind == WorkingStateKind::bf16 || a.format.kind == WorkingStateKind::bf16_sr ? 2.0
                                                                                            : 1.0;
  const double state =
      static_cast<double>(a.HV) * a.dv * a.dk * code_bytes +
      (scaled ? static_cast<double>(a.HV) * a.dk * (a.format.bf16_scale ? 2 : 4) : 0.0);
  const double gate = a.gate == GateKind::kda ? static_cast<double>(a.HV) * a.dk : a.HV;
  const double per_token =
      2.0 * 2 * a.H * a.dk + 2.0 * a.HV * a.dv + 4.0 * gate + 4.0 * a.HV + 2.0 * a.HV * a.dv;
  return 2.0 * state * a.num_seqs + per_token * static_cast<double>(total_tokens) +
         4.0 * (4.0 * a.num_seqs + 1);
}

double ws_decode_flops(const WsDecodeArgs& a, int64_t total_tokens) {
  return 6.0 * a.dk * a.dv * a.HV * static_cast<double>(total_tokens);
}

}  // namespace statecheck::cuda
