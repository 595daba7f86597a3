// slot_copy_kernel (CheckpointKernel::slot_copy): store and load of a codec whose checkpoint
// bytes are the active bytes, in 16-byte units. Included by checkpoint_codec.cu only.
#pragma once

#include "kernels/codec/codec_common.cuh"

namespace statecheck::cuda {
namespace {

// Slot copy (the fp32 codec on fp32 active states, the bf16 codec on bf16 ones): the checkpoint
// bytes are the active bytes, so store and load move 16-byte units unchanged. One block of
// kCopyThreads per (part, layer, pair) in a 3-D grid, `part` being a (head, run of
// kCopyUnits * kCopyThreads units) or a conv chunk; every thread issues its kCopyUnits loads
// (unit u0 + i * kCopyThreads, coalesced per warp) before its first store. The store (CHECK) also
// refuses a run holding a non-finite element (exponent bits all ones, ElemT fp32 or bf16): it
// writes nothing and records the run's largest per-thread first offender, as the other store
// kernels do. Requires d_v * d_k * sizeof(ElemT) % 16 == 0; the pools' 16-byte alignment is checked
// by the host.
// Two units per thread, 8 KiB per block (the alternatives tried: docs/kernel_notes.md).
constexpr int kCopyThreads = 256;
constexpr int kCopyUnits = 2;  // 16-byte units per thread

// Index (0 .. 16 / sizeof(ElemT) - 1) of the first non-finite element of a 16-byte unit of ElemT
// values, or -1.
template <typename ElemT>
__device__ __forceinline__ int first_non_finite(const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(ElemT) == 4) {
      if ((w[i] & 0x7f800000u) == 0x7f800000u) return i;
    } else {
      if ((w[i] & 0x7f80u) == 0x7f80u) return 2 * i;
      if ((w[i] & 0x7f800000u) == 0x7f800000u) return 2 * i + 1;
    }
  }
  return -1;
}

template <typename ElemT, bool CHECK>
__global__ void __launch_bounds__(kCopyThreads) slot_copy_kernel(CodecParams p, int runs) {
  constexpr int kPerUnit = 16 / static_cast<int>(sizeof(ElemT));
  const Job job = grid_job();
  const int src_slot = p.src_ids[job.pair], dst_slot = p.dst_ids[job.pair];
  if (job.part >= p.HV * runs) return conv_job(p, job, src_slot, dst_slot, p.HV * runs);
  const int h = job.part / runs;
  const int64_t head_units = static_cast<int64_t>(p.dv) * p.dk / kPerUnit;
  const uint4* src =
      reinterpret_cast<const uint4*>(p.src_temporal) +
      ((static_cast<int64_t>(job.layer) * p.src_slots + src_slot) * p.HV + h) * head_units;
  uint4* dst = reinterpret_cast<uint4*>(p.dst_temporal) +
               ((static_cast<int64_t>(job.layer) * p.dst_slots + dst_slot) * p.HV + h) * head_units;
  const int64_t u0 =
      static_cast<int64_t>(job.part % runs) * kCopyUnits * kCopyThreads + threadIdx.x;
  uint4 v[kCopyUnits];
#pragma unroll
  for (int i = 0; i < kCopyUnits; ++i)
    if (u0 + i * kCopyThreads < head_units) v[i] = src[u0 + i * kCopyThreads];
  if constexpr (CHECK) {
    __shared__ int bad;
    int first_bad = -1;
#pragma unroll
    for (int i = 0; i < kCopyUnits; ++i) {
      const int64_t u = u0 + i * kCopyThreads;
      const int e = u < head_units ? first_non_finite<ElemT>(v[i]) : -1;
      if (e >= 0 && first_bad < 0) first_bad = static_cast<int>(u * kPerUnit + e);
    }
    if (threadIdx.x == 0) bad = -1;
    if (__syncthreads_or(first_bad >= 0)) {  // rare: the whole block takes this branch
      report_non_finite(p, job.layer, h, first_bad, bad);
      return;  // refuse: nothing is written for this run
    }
  }
#pragma unroll
  for (int i = 0; i < kCopyUnits; ++i)
    if (u0 + i * kCopyThreads < head_units) dst[u0 + i * kCopyThreads] = v[i];
}

}  // namespace
}  // namespace statecheck::cuda
