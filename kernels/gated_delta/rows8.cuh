// gated_delta_rows8_kernel (GatedDeltaKernel::rows8 with input prefetch, decode_rows8 without):
// the rows8 layout for d_k in {32, 64, 128, 256}. Included by gated_delta_pool.cu only.
#pragma once

#include "kernels/gated_delta/gated_delta_common.cuh"

namespace statecheck::cuda {
namespace {

// Fast layout for d_k = 32 * NCH (32, 64, 128, 256): 8 lanes per state row, 4 rows per warp
// instruction; lane l owns rows row0 + (l >> 3) + 4 i (i < RPL) and key columns
// c * 32 + (l & 7) * 4 + e, so every warp load or store is four full 128-byte row segments and a
// row dot product is a 3-step shuffle among 8 lanes (the RPL rows' reductions are independent and
// interleave). A block covers 4 warps x 4 RPL rows. Semantics as gated_delta_general_kernel; with
// PREFETCH the inputs of token t + 1 are loaded while token t is computed. Blocks per SM asked of
// the compiler: 3 (a register cap of 168) where prefetch or 4 fp32 rows per lane need the
// registers, else 4 (cap 128). A sequence without tokens is left as it is (no load, no store).
template <int NCH, bool KDA, typename StateT, bool PREFETCH, int RPL>
__global__ void __launch_bounds__(kWarps * 32,
                                  (PREFETCH || (RPL > 2 && sizeof(StateT) == 4)) ? 3 : 4)
    gated_delta_rows8_kernel(Params p) {
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

}  // namespace
}  // namespace statecheck::cuda
