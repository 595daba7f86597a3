// The gated-delta pool launcher: argument checks, the choice of kernel (choose_kernel, shared by
// gated_delta_pool and gated_delta_pool_variant) and the launches. The kernels live one per file
// beside this one (gated_delta_pool.h lists them).
#include "kernels/gated_delta/gated_delta_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device.h"
#include "kernels/gated_delta/decode_packed_bf16.cuh"
#include "kernels/gated_delta/decode_staged.cuh"
#include "kernels/gated_delta/general.cuh"
#include "kernels/gated_delta/rows8.cuh"

namespace statecheck::cuda {

namespace {

// The staged kernel pays a set-up per block (barriers, the first loads, an empty ring at the end)
// that the row kernel does not; it is chosen when every block of its grid takes at least this
// many tiles (a measured crossover: docs/kernel_notes.md).
constexpr int kPipeMinTilesPerBlock = 16;

// How the staged kernel would run launch `a`: its grid (0 when the row kernel runs it) and tiles.
struct StagedPlan {
  int grid = 0, tiles = 0;
};

StagedPlan decode_staged_plan(const GatedDeltaPoolArgs& a) {
  if (a.max_seq_len != 1 || a.dk != 128 || a.dv % kPipeRows != 0 || a.state_dtype != Dtype::fp32 ||
      a.num_seqs <= 0)
    return {};
  // Also raises the kernel's shared-memory limit for the launch (resident_blocks).
  const void* kernel = a.gate == GateKind::kda
                           ? reinterpret_cast<const void*>(gated_delta_decode_staged_kernel<true>)
                           : reinterpret_cast<const void*>(gated_delta_decode_staged_kernel<false>);
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
    gated_delta_rows8_kernel<NCH, true, StateT, PREFETCH, RPL><<<grid, block, 0, stream>>>(p);
  else
    gated_delta_rows8_kernel<NCH, false, StateT, PREFETCH, RPL><<<grid, block, 0, stream>>>(p);
}

// The kernel launch `a` takes, given its staged plan: the one decision behind both
// gated_delta_pool and gated_delta_pool_variant. Decode launches (max_seq_len == 1) of fp32
// states run staged when the plan has a grid; of bf16 states with d_k <= 128, packed; other decode
// launches the rows8 variant without the one-token-ahead input registers; longer sequences the
// rows8 kernel with input prefetch; d_k outside {32, 64, 128, 256} the general kernel.
GatedDeltaKernel choose_kernel(const GatedDeltaPoolArgs& a, const StagedPlan& staged) {
  if (staged.grid > 0) return GatedDeltaKernel::decode_staged;
  if (a.dk != 32 && a.dk != 64 && a.dk != 128 && a.dk != 256) return GatedDeltaKernel::general;
  if (a.max_seq_len != 1) return GatedDeltaKernel::rows8;
  return a.state_dtype == Dtype::bf16 && a.dk <= 128 ? GatedDeltaKernel::decode_packed_bf16
                                                     : GatedDeltaKernel::decode_rows8;
}

// Launches rows8-layout kernel `k` for d_k = 32 NCH: rows8 with 2 rows per lane and input
// prefetch; decode_rows8 with 4 rows per lane (64 rows per block: more loads in flight per
// thread, half the blocks), 2 for d_k = 256; decode_packed_bf16 with 4 packed rows per lane.
template <int NCH, typename StateT>
void launch_rows8(const GatedDeltaPoolArgs& a, const Params& p, GatedDeltaKernel k,
                  cudaStream_t stream) {
  constexpr bool kBf16 = std::is_same_v<StateT, __nv_bfloat16>;
  switch (k) {
    case GatedDeltaKernel::rows8:
      return launch_rows8_variant<NCH, true, 2, StateT>(a, p, stream);
    case GatedDeltaKernel::decode_rows8:
      if constexpr (NCH > 4 || !kBf16)
        return launch_rows8_variant<NCH, false, (NCH > 4 ? 2 : 4), StateT>(a, p, stream);
      break;
    case GatedDeltaKernel::decode_packed_bf16:
      if constexpr (NCH <= 4 && kBf16) {
        const int rows_per_block = kWarps * 4 * kPackedRowsPerLane;
        const dim3 grid(a.num_seqs, a.HV, (a.dv + rows_per_block - 1) / rows_per_block);
        if (a.gate == GateKind::kda)
          gated_delta_decode_packed_bf16_kernel<NCH, true><<<grid, kWarps * 32, 0, stream>>>(p);
        else
          gated_delta_decode_packed_bf16_kernel<NCH, false><<<grid, kWarps * 32, 0, stream>>>(p);
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
    gated_delta_general_kernel<VEC, NCHUNK, true, float><<<grid, block, 0, stream>>>(p);
  else if (kda)
    gated_delta_general_kernel<VEC, NCHUNK, true, __nv_bfloat16><<<grid, block, 0, stream>>>(p);
  else if (f32)
    gated_delta_general_kernel<VEC, NCHUNK, false, float><<<grid, block, 0, stream>>>(p);
  else
    gated_delta_general_kernel<VEC, NCHUNK, false, __nv_bfloat16><<<grid, block, 0, stream>>>(p);
}

}  // namespace

void gated_delta_pool(const GatedDeltaPoolArgs& a, cudaStream_t stream) {
  check_pool_shape(a, "gated_delta_pool");
  if (a.dk > 256) fail("gated_delta_pool: d_k = {} > 256 is not supported", a.dk);
  if (a.max_blocks < 0) fail("gated_delta_pool: max_blocks = {} (0: no cap)", a.max_blocks);
  if (a.num_seqs == 0) return;
  const Params p = pool_params(a, "gated_delta_pool");
  const StagedPlan staged = decode_staged_plan(a);
  const GatedDeltaKernel k = choose_kernel(a, staged);
  if (k == GatedDeltaKernel::decode_staged) {
    if (a.gate == GateKind::kda)
      gated_delta_decode_staged_kernel<true>
          <<<staged.grid, kPipeWarps * 32, kPipeSharedBytes, stream>>>(p, staged.tiles);
    else
      gated_delta_decode_staged_kernel<false>
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
  return choose_kernel(a, decode_staged_plan(a));
}

const char* gated_delta_kernel_name(GatedDeltaKernel k) {
  switch (k) {
    case GatedDeltaKernel::decode_staged:
      return "staged_decode";
    case GatedDeltaKernel::decode_packed_bf16:
      return "packed_bf16_decode";
    case GatedDeltaKernel::decode_rows8:
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
