// Checkpoint codec kernels: donate (store) and copy-on-write (load) between the active state pool
// and the checkpoint pool, for all linear layers of N slots in one launch.
//
//   store: for i < n, every layer l: ckpt[l, ckpt_slots[i]] = encode(active[l, active_slots[i]])
//          and the conv window is copied unchanged;
//   load:  for i < n, every layer l: active[l, active_slots[i]] = decode(ckpt[l, ckpt_slots[i]])
//          in the active dtype, conv window copied back.
// Codec semantics are those of core/codec/codec.h (docs/codecs.md), bit for bit:
// int8 and fp8_e4m3 with per-(layer, slot, head, key-channel) scales reduced over d_v, in bf16 or
// fp32; fp8_e4m3_raw; bf16 (round to nearest even); fp32 (plain copy). A bf16 active state is
// widened exactly to fp32 before encoding; decode results are rounded to the active dtype.
//
// Pool layouts (device memory, outermost first, row-major):
//   temporal  [L, slots_total, HV, d_v, d_k]  active: fp32 or bf16; checkpoint: the codec's
//             value bytes (int8, E4M3 codes, bf16 bits or fp32)
//   scales    [L, slots_total, HV, d_k]       checkpoint pools of int8 / fp8_e4m3 only, scale dtype
//   conv      [L, slots_total, conv_elems]    bf16 bits, conv_elems = conv_dim * (W - 1)
// Slot lists are device int32 arrays of n entries; destination slots must be distinct.
// A non-finite active value is not stored silently: when `error_info` (device int32[4]) is given,
// an offender is recorded there as {1, layer, head, i * d_k + j} (of the first refused strip or
// head to report: the largest of its threads' first offenders); the host checks it with
// check_store_error(). CPU reference: core/codec encode_head / decode_head per head.
// Temporal and scales buffers must be 16-byte aligned (cudaMalloc's are); otherwise, and for a
// null required pointer or an unsupported geometry, store and load throw statecheck::Error.
//
// Kernels: see CheckpointKernel below. All of them give the CPU codec's bytes
// (tests/gpu/test_checkpoint_codec.cpp). A non-finite value refuses its strip, run or head; other
// parts of the same state may be written, so a caller must discard the destination slot when the
// store reports.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "core/codec/codec.h"
#include "core/dtype/dtype.h"

namespace statecheck::cuda {

struct PoolGeometry {
  int L = 0, HV = 0, dv = 0, dk = 0;
  int64_t conv_elems = 0;  // bf16 conv values per layer and slot (0: no conv state)
};

struct StatePoolView {
  void* temporal = nullptr;
  void* scales = nullptr;
  uint16_t* conv = nullptr;
  int64_t slots_total = 0;  // usable slots + the reserved slot 0
};

void checkpoint_store(const PoolGeometry& geo, const StatePoolView& active, Dtype active_dtype,
                      const StatePoolView& ckpt, const Codec& codec, const int32_t* active_slots,
                      const int32_t* ckpt_slots, int n, int32_t* error_info = nullptr,
                      cudaStream_t stream = nullptr);

void checkpoint_load(const PoolGeometry& geo, const StatePoolView& ckpt, const Codec& codec,
                     const StatePoolView& active, Dtype active_dtype, const int32_t* ckpt_slots,
                     const int32_t* active_slots, int n, cudaStream_t stream = nullptr);

// The kernels behind checkpoint_store and checkpoint_load, one file each beside
// checkpoint_codec.cu (kernel <name>_kernel in <name>.cuh). An active dtype other than fp32 is
// taken as bf16. The store takes, in this order:
//   store_staged_bf16  int8 / fp8_e4m3 codecs, bf16 active states, d_k = d_v = 128: one
//                      128-thread block per head, which one bulk copy (TMA, sm_90) stages in
//                      shared memory
//   store_strips       int8 / fp8_e4m3 codecs, d_v 128 or 256 and d_k % (8 c) == 0, with c = 8
//                      key columns per thread for fp32 active states and d_k % 64 == 0, else
//                      c = 4: one 128-thread block per strip of 8 c key columns of a head
//   slot_copy          the fp32 codec on fp32 active states or bf16 on bf16 (checkpoint bytes =
//                      active bytes), heads of whole 16-byte units (d_v d_k * active bytes % 16
//                      == 0): 256 threads per run of 8 KiB of a head, all loads of a thread
//                      before its stores, moved unchanged
//   store_per_head     everything else: one 512-thread block per head
// store_staged_bf16 and store_strips round the cheap exact way (rounding.cuh: a fused
// multiply-add with a magic number for int8, paired bracket conversions for E4M3) and divide only
// for the elements near a rounding boundary. The load takes, in this order:
//   slot_copy          as for the store
//   load_rows          d_k % 4 == 0 and d_k / 4 dividing 128 (d_k in {4, 8, 16, 32, 64, 128,
//                      256}): one 128-thread block per run of rows, scales in registers
//   load_per_head      everything else: one 512-thread block per head
enum class CheckpointKernel {
  store_staged_bf16,
  store_strips,
  store_per_head,
  slot_copy,
  load_rows,
  load_per_head
};

// Which kernel checkpoint_store / checkpoint_load runs for a launch of this geometry, active dtype
// and codec, without launching anything (no device needed). The launches take their kernel from
// these same functions. For a geometry that passes the launch's checks (not repeated here).
CheckpointKernel checkpoint_store_variant(const PoolGeometry& geo, Dtype active_dtype,
                                          const Codec& codec);
CheckpointKernel checkpoint_load_variant(const PoolGeometry& geo, const Codec& codec,
                                         Dtype active_dtype);
// The name of a kernel: the enum value's name ("store_strips", ...).
const char* checkpoint_kernel_name(CheckpointKernel k);

// Reads error_info (synchronising `stream`) and throws statecheck::Error naming layer, head and
// [i, j] when a store met a non-finite value; resets the record.
void check_store_error(int32_t* error_info, const PoolGeometry& geo, cudaStream_t stream = nullptr);

// Byte models (bytes read + written by one launch for n slots).
double checkpoint_store_bytes(const PoolGeometry& geo, Dtype active_dtype, const Codec& codec,
                              int n);
double checkpoint_load_bytes(const PoolGeometry& geo, Dtype active_dtype, const Codec& codec,
                             int n);
// The part of checkpoint_store_bytes that a store reads: the active values, the conv window once
// and the two slot lists (4 n bytes each); the rest is written.
double checkpoint_store_read_bytes(const PoolGeometry& geo, Dtype active_dtype, int n);
// The part of checkpoint_load_bytes that a load reads: what the store writes (the checkpoint
// values, scales and conv window) plus the two slot lists; the rest is written.
double checkpoint_load_read_bytes(const PoolGeometry& geo, Dtype active_dtype, const Codec& codec,
                                  int n);

}  // namespace statecheck::cuda
