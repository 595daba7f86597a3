// Fused recurrent gated delta rule (GDN and KDA) over a state pool indexed by slot, on the GPU.
//
// One launch advances num_seqs sequences, each by its own number of tokens (decode: 1 token each;
// recurrent prefill: T_s tokens, variable lengths via cu_seqlens), reading and writing each
// sequence's state in place in the pool slot slot_ids[s]. Slots not listed stay bit-identical.
// Semantics are those of core/recurrence/gated_delta.h (the gated delta rule of docs/numerics.md):
// per token S <- S * exp(g); u = S k; S <- S + beta (v - u) k^T; o = S (scale q), q/k
// L2-normalised over d_k when qk_l2norm (epsilon 1e-6 inside the square root), GVA value head h
// reads key head h / (HV / H).
//
// Shapes (outermost first, row-major, strides in elements):
//   state_pool  [pool_slots, HV, d_v, d_k]   fp32 or bf16 (state_dtype), one layer, 16-byte aligned
//   slot_ids    [num_seqs]                   int32, distinct, each in [0, pool_slots)
//   cu_seqlens  [num_seqs + 1]               int32 token offsets into the packed token arrays
//   q, k        [total_T, H, d_k]            bf16 bits
//   v           [total_T, HV, d_v]           bf16 bits
//   g           [total_T, HV] (GDN) or [total_T, HV, d_k] (KDA)   fp32, log-space decay (<= 0)
//   beta        [total_T, HV]                fp32 in (0, 1)
//   o           [total_T, HV, d_v]           bf16 bits (may be null: state update only)
// Arithmetic is fp32; the state is held in registers across the tokens of one launch and stored
// in the pool dtype at the end (round to nearest even for bf16), as flash-linear-attention's
// fused_recurrent kernels do. All pointers are device pointers. Duplicate slot ids are a caller
// error (they race); the launcher checks sizes and shapes, not slot contents.
// CPU reference: gated_delta_pool_reference() in gated_delta_pool_reference.h.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "core/dtype/dtype.h"
#include "core/state/gate.h"

namespace statecheck::cuda {

struct GatedDeltaPoolArgs {
  int num_seqs = 0;
  int H = 0, HV = 0, dk = 0, dv = 0;
  GateKind gate = GateKind::gdn;
  bool qk_l2norm = true;
  float scale = 0.0f;  // 0: d_k^-1/2
  Dtype state_dtype = Dtype::fp32;
  void* state_pool = nullptr;
  int64_t pool_slots = 0;
  const int32_t* slot_ids = nullptr;
  const int32_t* cu_seqlens = nullptr;
  const uint16_t* q = nullptr;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  uint16_t* o = nullptr;
  // Optional hint: the longest sequence of the launch in tokens (0: unknown). 1 selects a decode
  // variant of the kernel (gated_delta_pool_variant): for fp32 states with d_k = 128 and
  // d_v % 32 == 0, when each block of its persistent grid takes at least 16 tiles of 32 rows
  // (tiles = num_seqs * HV * d_v / 32; the grid is as many blocks as are resident on the device,
  // capped by max_blocks), the state is staged through shared memory by bulk copies; bf16 states
  // with d_k in {32, 64, 128} are held packed in registers; otherwise no input prefetch and more
  // rows per lane. Every token is applied whatever the hint says, and results are bit for bit the
  // same.
  int max_seq_len = 0;
  // Optional cap on the staged decode variant's persistent grid (0: as many blocks as are resident
  // on the device at once; negative is an error). Fewer blocks take more tiles each.
  int max_blocks = 0;
};

// Launches the kernel on `stream`. Throws statecheck::Error on invalid shapes (H, HV, d_k, d_v
// not positive, HV % H != 0, d_k > 256), num_seqs or max_blocks negative, a null required
// pointer (named), a state_pool not 16-byte aligned, or a launch failure. These checks come
// before any device work.
void gated_delta_pool(const GatedDeltaPoolArgs& a, cudaStream_t stream = nullptr);

// The kernels behind gated_delta_pool, one file each beside gated_delta_pool.cu:
//   decode_staged       gated_delta_decode_staged_kernel (decode_staged.cuh): fp32 decode through
//                       shared memory, bulk copies, persistent grid
//   decode_packed_bf16  gated_delta_decode_packed_bf16_kernel (decode_packed_bf16.cuh): bf16
//                       decode, rows packed in registers
//   decode_rows8, rows8 gated_delta_rows8_kernel (rows8.cuh), d_k in {32, 64, 128, 256}: 8 lanes
//                       per state row; decode_rows8 without input prefetch, rows8 with it
//   general             gated_delta_general_kernel (general.cuh), any other d_k: a warp per 8 rows,
//                       warp-wide sums
// The first four apply the same roundings in the same order, so the max_seq_len hint, which only
// moves a launch among them, never changes a bit; general agrees with them within the reference
// tolerance. Every kernel leaves the state of a sequence without tokens as it is, bit for bit.
enum class GatedDeltaKernel { decode_staged, decode_packed_bf16, decode_rows8, rows8, general };

// Which kernel gated_delta_pool runs launch `a` on, on the current device, for a launch that
// passes gated_delta_pool's argument checks (this function does not repeat them); with
// num_seqs == 0 nothing is launched and the answer is the kernel a non-empty launch of the same
// shape would take. Throws statecheck::Error on a CUDA failure while asking the device.
GatedDeltaKernel gated_delta_pool_variant(const GatedDeltaPoolArgs& a);
// The kernel's name as result files record it: "staged_decode", "packed_bf16_decode",
// "rows8_decode", "rows8", "general" (the names of earlier results, kept as they were).
const char* gated_delta_kernel_name(GatedDeltaKernel k);

// Byte model of one launch: state read + written once per sequence, plus
// every token's q, k, v, g, beta read and o written. Flops: 6 d_k d_v per head and token.
double gated_delta_pool_bytes(const GatedDeltaPoolArgs& a, int64_t total_tokens);
double gated_delta_pool_flops(const GatedDeltaPoolArgs& a, int64_t total_tokens);

}  // namespace statecheck::cuda
