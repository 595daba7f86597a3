// Checkpoint codec kernels: donate (store) and copy-on-write (load) between the active state pool
// and the checkpoint pool, for all linear layers of N slots in one launch.
//
//   store: for i < n, every layer l: ckpt[l, ckpt_slots[i]] = encode(active[l, active_slots[i]])
//          and the conv window is copied unchanged;
//   load:  for i < n, every layer l: active[l, active_slots[i]] = decode(ckpt[l, ckpt_slots[i]])
//          in the active dtype, conv window copied back.
// Codec semantics are those of core/codec/codec.h (spec numerics.md section 3), bit for bit:
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
// Kernels (checkpoint_codec.cu): the int8 / fp8_e4m3 store of bf16 active states with 128 x 128
// heads runs one 128-thread block per head, which one bulk copy (TMA, sm_90) stages in shared
// memory; on other serving shapes (d_k % 32 == 0, d_v 128 or 256) one 128-thread block per strip
// of 32 or 64 key columns of a head. Both round the cheap exact way (a fused multiply-add with a
// magic number for int8, paired bracket conversions for E4M3) and divide only for the elements
// near a rounding boundary. The load on d_k / 4 dividing 128 runs one 128-thread block per run of
// rows with the scales in registers. A slot copy (the fp32 codec on fp32 active states, bf16 on
// bf16) whose heads are whole 16-byte units moves them unchanged, 256 threads per run of 8 KiB of
// a head, all loads of a thread before its stores. Other codecs and shapes take a per-head
// kernel. All paths give the CPU codec's bytes (tests/gpu/test_checkpoint_codec.cpp).
// A non-finite value refuses its strip, run or head; other parts of the same state may be
// written, so a caller must discard the destination slot when the store reports.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "core/codec/codec.h"
#include "kernels/gated_delta/gated_delta_pool.h"

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
