// The state pass of the chunked prefill's split form (chunked_prefill.h): with the per-chunk
// products of the transform pass in the workspace (chunk_workspace.h), what is left of a chunk
// is what depends on the state S [BV, 128] of a (sequence, value head, value tile):
//   O = Qx S^T (GDN: times e^G per row), U = U0 + (-Wk) S^T, O += P U, S = S e^Gn + U^T Kd
// (steps 4-6 of chunk_kernel.cuh without the state-independent products). Every product is
// the fused kernel's, on the same operands in the same order, so the two forms agree bit for bit.
//
// One block of 8 warps per (value tile, value head, sequence), two blocks per SM. A chunk's
// operands arrive by cp.async in two groups, each issued one phase ahead of its use: Qx, -Wk,
// U0 and e^G (phase A: O and U) while the chunk before runs its phase B, and P, Kd and e^Gn
// (phase B: O += P U and the state update) while this chunk runs its phase A.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/chunked_delta/chunk_workspace.h"
#include "kernels/chunked_delta/chunked_prefill.h"
#include "kernels/chunked_delta/state_tile.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/vector_io.cuh"
#include "kernels/gated_delta/pool_params.h"

namespace statecheck::cuda {
namespace {

// Shared-memory carve-up of a state-pass block, in bytes (16-byte aligned offsets).
template <int BV>
struct StatePassSmem {
  static constexpr int kLdK = 136;      // bf16 row stride of [64][128] tiles and of the state
  static constexpr int kLdC = 72;       // bf16 row stride of P
  static constexpr int kLdU0 = BV + 4;  // fp32 row stride of U0
  static constexpr int kLdU = BV + 8;   // bf16 row stride of U
  static constexpr int kTile = 64 * kLdK * 2;
  static constexpr int qx = 0;
  static constexpr int wk = qx + kTile;
  static constexpr int kd = wk + kTile;
  static constexpr int p = kd + kTile;
  static constexpr int u0 = p + 64 * kLdC * 2;
  static constexpr int eg = u0 + 64 * kLdU0 * 4;
  static constexpr int ds = eg + 64 * 4;
  static constexpr int s = ds + 128 * 4;
  static constexpr int u = s + BV * kLdK * 2;
  static constexpr int bytes = u + 64 * kLdU * 2;
};

template <int BV, bool KDA, typename StateT>
__global__ void __launch_bounds__(256, 2)
    chunked_state_pass_kernel(PoolParams p, const uint8_t* __restrict__ ws) {
  using L = StatePassSmem<BV>;
  constexpr int kC = kChunkedPrefillChunk, kDk = 128, kLdK = L::kLdK, kLdC = L::kLdC;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sqx = reinterpret_cast<__nv_bfloat16*>(smem + L::qx);
  __nv_bfloat16* swk = reinterpret_cast<__nv_bfloat16*>(smem + L::wk);
  __nv_bfloat16* skd = reinterpret_cast<__nv_bfloat16*>(smem + L::kd);
  __nv_bfloat16* sp = reinterpret_cast<__nv_bfloat16*>(smem + L::p);
  float* su0 = reinterpret_cast<float*>(smem + L::u0);
  float* seg = reinterpret_cast<float*>(smem + L::eg);
  float* sds = reinterpret_cast<float*>(smem + L::ds);
  __nv_bfloat16* ss = reinterpret_cast<__nv_bfloat16*>(smem + L::s);
  __nv_bfloat16* su = reinterpret_cast<__nv_bfloat16*>(smem + L::u);

  const int v0 = blockIdx.x * BV, h = blockIdx.y, seq = blockIdx.z;
  const int t_begin = p.cu[seq], t_end = p.cu[seq + 1];
  if (t_end <= t_begin) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g8 = lane >> 2, t4 = lane & 3;
  const size_t tile_bytes = ChunkTile::bytes(p.dv);
  // The workspace tile of the chunk at c0 (its slot: chunk_workspace.h).
  const uint8_t* const tile0 = ws + (chunk_slot(seq, t_begin, 0) * p.HV + h) * tile_bytes;
  auto tile_of = [&](int c0) {
    return tile0 + static_cast<size_t>((c0 - t_begin) / kC) * p.HV * tile_bytes;
  };
  // Phase A's operands of the chunk at c0: Qx, -Wk (1024 16-byte units each), U0's value tile
  // (64 rows of BV / 4 units), e^G (16 units). Unit i = tid + 256 j of a [64][128] bf16 tile is
  // row i / 16, column 8 (i % 16); the loops are unrolled so each address is a constant offset.
  const int row0 = tid >> 4, unit0 = tid & 15;
  constexpr int kUnitsU0 = BV / 4, kRowsU0 = 256 / kUnitsU0;  // U0 rows per pass of the block
  const int u0_row = tid / kUnitsU0, u0_unit = tid % kUnitsU0;
  auto issue_phase_a = [&](int c0) {
    const uint8_t* t = tile_of(c0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = tid + 256 * j, srow = (row0 + 16 * j) * kLdK + unit0 * 8;
      copy_async16(sqx + srow, t + ChunkTile::qx + i * 16, true);
      copy_async16(swk + srow, t + ChunkTile::wk + i * 16, true);
    }
#pragma unroll
    for (int j = 0; j < 64 / kRowsU0; ++j) {
      const int row = u0_row + kRowsU0 * j;
      copy_async16(su0 + row * L::kLdU0 + u0_unit * 4,
                   t + ChunkTile::u0 + (static_cast<size_t>(row) * p.dv + v0 + u0_unit * 4) * 4,
                   true);
    }
    if (tid < 16) copy_async16(seg + tid * 4, t + ChunkTile::eg + tid * 16, true);
  };
  // Phase B's: Kd (1024 units), P (512), e^Gn (32).
  auto issue_phase_b = [&](int c0) {
    const uint8_t* t = tile_of(c0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = tid + 256 * j;
      copy_async16(skd + (row0 + 16 * j) * kLdK + unit0 * 8, t + ChunkTile::kd + i * 16, true);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i = tid + 256 * j;
      copy_async16(sp + (i >> 3) * kLdC + (i & 7) * 8, t + ChunkTile::p + i * 16, true);
    }
    if (tid < 32) copy_async16(sds + tid * 4, t + ChunkTile::ds + tid * 16, true);
  };

  StateT* state = static_cast<StateT*>(p.pool) +
                  ((static_cast<size_t>(p.slot_ids[seq]) * p.HV + h) * p.dv + v0) * kDk;
  issue_phase_a(t_begin);

  // The state tile as accumulators (as in the fused kernel): row block sm, columns sn0 ..
  constexpr int kSRowBlocks = BV / 16, kNTS = 2 * kSRowBlocks;
  const int sm = (warp % kSRowBlocks) * 16, sn0 = (warp / kSRowBlocks) * kNTS * 8;
  float accS[kNTS][4];
  load_state_tile(accS, state, sm, sn0, lane);
  store_tile_bf16(accS, ss, kLdK, sm, sn0, lane, [](int) { return 1.0f; });

  // Token-row tiles [64, BV]: rows rm .. rm + 15, columns un0 .. un0 + BV / 2.
  const int rm = (warp & 3) * 16, un0 = (warp >> 2) * (BV / 2);
  constexpr int kNTU = BV / 16;

  for (int c0 = t_begin; c0 < t_end; c0 += kC) {
    const int n = min(kC, t_end - c0);
    wait_async_copies();
    __syncthreads();  // phase A's operands and the state copy are in; phase B's buffers are free
    issue_phase_b(c0);

    // Phase A: O = Qx S^T (GDN: e^G per row), U = U0 + (-Wk) S^T.
    float accO[kNTU][4] = {}, accU[kNTU][4];
#pragma unroll
    for (int nt = 0; nt < kNTU; ++nt) {
      const int col = un0 + nt * 8 + 2 * t4;
      accU[nt][0] = su0[(rm + g8) * L::kLdU0 + col],
      accU[nt][1] = su0[(rm + g8) * L::kLdU0 + col + 1];
      accU[nt][2] = su0[(rm + g8 + 8) * L::kLdU0 + col];
      accU[nt][3] = su0[(rm + g8 + 8) * L::kLdU0 + col + 1];
    }
    warp_mma<kNTU, kDk, false, false>(accO, sqx, kLdK, rm, ss, kLdK, un0, lane);
    if constexpr (!KDA) {
      const float e0 = seg[rm + g8], e1 = seg[rm + g8 + 8];
#pragma unroll
      for (int nt = 0; nt < kNTU; ++nt)
        accO[nt][0] *= e0, accO[nt][1] *= e0, accO[nt][2] *= e1, accO[nt][3] *= e1;
    }
    warp_mma<kNTU, kDk, false, false>(accU, swk, kLdK, rm, ss, kLdK, un0, lane);
    store_tile_bf16(accU, su, L::kLdU, rm, un0, lane, [](int) { return 1.0f; });
    wait_async_copies();
    __syncthreads();  // U and phase B's operands are in; phase A's buffers are free
    if (c0 + kC < t_end) issue_phase_a(c0 + kC);

    // Phase B: O += P U; S = S e^Gn + U^T Kd.
    warp_mma<kNTU, kC, false, true>(accO, sp, kLdC, rm, su, L::kLdU, un0, lane);
    if (p.o) store_output_rows(accO, p, c0, n, h, rm, v0 + un0, lane);
#pragma unroll
    for (int nt = 0; nt < kNTS; ++nt) {
      const int col = sn0 + nt * 8 + 2 * t4;
      const float d0 = sds[col], d1 = sds[col + 1];
      accS[nt][0] *= d0, accS[nt][1] *= d1, accS[nt][2] *= d0, accS[nt][3] *= d1;
    }
    warp_mma<kNTS, kC, true, true>(accS, su, L::kLdU, sm, skd, kLdK, sn0, lane);
    store_tile_bf16(accS, ss, kLdK, sm, sn0, lane, [](int) { return 1.0f; });
  }

  store_state_tile(accS, state, sm, sn0, lane);
}

}  // namespace
}  // namespace statecheck::cuda
