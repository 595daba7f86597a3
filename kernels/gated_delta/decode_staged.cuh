// gated_delta_decode_staged_kernel (GatedDeltaKernel::decode_staged): decode over fp32 states
// staged through shared memory by bulk copies, on a persistent grid. Included by
// gated_delta_pool.cu only.
#pragma once

#include "kernels/common/bulk_copy.cuh"
#include "kernels/gated_delta/gated_delta_common.cuh"

namespace statecheck::cuda {
namespace {

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
// kernel.
constexpr int kPipeRows = 32;
constexpr int kPipeStages = 4;
constexpr int kPipeWarps = 4;
constexpr int kPipeMinBlocksPerSm = 3;  // 3 x 64 KB of buffers per SM, registers capped to fit
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
    gated_delta_decode_staged_kernel(Params p, int num_tiles) {
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

}  // namespace
}  // namespace statecheck::cuda
