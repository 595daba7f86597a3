// Gated delta rule (GDN and KDA) over a slot-indexed pool whose states are kept in a compressed
// working-state format between tokens (docs/working_state.md), on the GPU: int8 or fp8_e4m3 codes
// with one scale per key channel (round to nearest even or stochastic), or bf16 (round to nearest
// even or stochastic).
//
// One launch advances num_seqs sequences, each by its own number of tokens (decode: 1; recurrent
// prefill or speculative verify: T_s tokens through cu_seqlens), in place in pool slot
// slot_ids[s]. Per token t of sequence s and value head h (key head h / (HV / H)):
//   S_prev = decode(stored)      fp32 [d_v, d_k]: code * scale_j, or the bf16 value
//   q, k   <- L2-normalised over d_k (qk_l2norm; epsilon 1e-6 inside the square root), q * scale
//   S      <- S_prev * exp(g)    GDN: scalar g[t, h]; KDA: column j by exp(g[t, h, j])
//   S      <- S + beta (v - S k) k^T;  o_t = S q (from the fp32 S, before storage)
//   stored  = encode(S)          scale_j = ws_column_scale(max_i |S[i, j]|), codes
// with the element codecs of core/working_state/element_codec.h, and the stochastic roundings'
// words from Philox4x32-10 keyed by (seed, layer, h) at counter (element / 4, position, sequence,
// 0), element = i * d_k + j, position = positions[s] + (t - cu_seqlens[s]), sequence =
// seq_index[s] (core/working_state/philox.h). Every rounding of the fp32 step is fixed (the order
// of sums is that of the kernel's lane layout, written out in ws_decode_reference.h), so the CPU
// reference gives the same bits. int8 rounded to nearest even computes the same update and
// output on the stored codes with exact row dot products and encodes by rint(S fl(1 / scale_j))
// (the int8 step of ws_decode_reference.h; docs/working_state.md, "int8 in the CUDA decode"); its
// output o_t = fma(w, k.q, a S_prev q) does not read the new S.
//
// Shapes (outermost first, row-major, strides in elements):
//   codes       [pool_slots, HV, d_v, d_k]   int8 / E4M3 bytes, or bf16 bits; 16-byte aligned
//   scales      [pool_slots, HV, d_k]        fp32 or bf16 (bf16_scale); int8 and fp8 only
//   slot_ids    [num_seqs]                   int32, distinct, each in [0, pool_slots)
//   cu_seqlens  [num_seqs + 1]               int32 token offsets into the packed token arrays
//   positions   [num_seqs]                   int32 absolute position of each sequence's first token
//                                            of the launch (null: 0)
//   seq_index   [num_seqs]                   int32 index of each sequence in the run (null: s)
//   q, k        [total_T, H, d_k]            bf16 bits
//   v           [total_T, HV, d_v]           bf16 bits
//   g           [total_T, HV] (GDN) or [total_T, HV, d_k] (KDA)   fp32, log-space decay
//   beta        [total_T, HV]                fp32
//   o           [total_T, HV, d_v]           bf16 bits, RNE (may be null)
//   error_info  [4]                          int32, device, zero before the launch (may be null)
//   init_state  [num_seqs, HV, d_v, d_k]     fp32 initial states read instead of the slots (may be
//                                            null; see WsDecodeArgs)
// d_k in {32, 64, 128}, 1 <= d_v <= 128, HV % H == 0. A
// sequence without tokens keeps its slot bit for bit; slots not listed are not touched. Duplicate
// slot ids are a caller error (they race).
//
// Non-finite values are refused, as the checkpoint codec's stores refuse them: when a token's
// output or updated state of a head is not finite (in the float step a non-finite state always
// gives a non-finite output row: NaN and Inf survive the readout's multiply-adds; int8 RNE tests
// every column amax as well, and refuses a non-finite a sc_j, a sc_j k_j or a sc_j q_j before the
// step, writing that token's outputs as NaN), the head's stored state and scales stay as they
// were before the launch, its later tokens are not run (their outputs are not written), and
// error_info records {1, sequence, value head, token offset} of one such head
// (check_ws_decode_error turns it into an Error).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "core/state/gate.h"
#include "core/working_state/format.h"

namespace statecheck::cuda {

struct WsDecodeArgs {
  int num_seqs = 0;
  int H = 0, HV = 0, dk = 0, dv = 0;
  GateKind gate = GateKind::gdn;
  bool qk_l2norm = true;
  float scale = 0.0f;  // 0: d_k^-1/2
  // One of bf16, bf16_sr, int8, int8_sr, fp8_e4m3, fp8_e4m3_sr; bf16_scale for the scaled ones.
  WorkingStateFormat format;
  void* codes = nullptr;
  void* scales = nullptr;
  int64_t pool_slots = 0;
  const int32_t* slot_ids = nullptr;
  const int32_t* cu_seqlens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* seq_index = nullptr;
  uint64_t seed = 0;
  int layer = 0;  // the layer index of the Philox key (0 <= layer < 2^16)
  const uint16_t* q = nullptr;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  uint16_t* o = nullptr;
  int32_t* error_info = nullptr;
  // 0, or 1 when no sequence of the launch has more than one token (decode): then the
  // single-token kernel (ws_decode_token.cuh, the same bits) runs where it has a variant
  // (ws_decode_runs_token_kernel), and in every kernel a sequence with more tokens is refused, its
  // slot unchanged, through error_info {2, sequence, value head, its tokens}.
  int max_tokens = 0;
  // Optional [num_seqs, HV, d_v, d_k] fp32, 16-byte aligned: sequence s starts from
  // init_state[s] as given instead of decoding its slot (a state written from outside the format,
  // e.g. a prefill's fp32 result; its first token's update is then stored in the format as usual).
  const float* init_state = nullptr;
};

// True for the formats ws_decode runs (see WsDecodeArgs::format).
bool ws_decode_supports(const WorkingStateFormat& f);
// True when ws_decode(a) runs the single-token kernel: max_tokens 1, int8 or fp8_e4m3 rounded to
// nearest even, d_k 128, no init_state.
bool ws_decode_runs_token_kernel(const WsDecodeArgs& a);
// True for the head shapes ws_decode runs: d_k 32, 64 or 128, 1 <= d_v <= 128.
bool ws_decode_supports_head(int dk, int dv);

// Launches the kernel on `stream`. Throws statecheck::Error, before any device work, on an
// unsupported format, shapes outside the limits above (H, HV, d_v not positive, HV % H != 0, d_k
// not 32, 64 or 128, d_v > 128), num_seqs or pool_slots negative, max_tokens not 0 or 1,
// layer outside [0, 2^16), a null required pointer (named), codes, scales or init_state not 16-byte
// aligned, or a launch failure.
void ws_decode(const WsDecodeArgs& a, cudaStream_t stream = nullptr);

// Reads error_info (synchronising `stream`) and throws statecheck::Error naming the sequence,
// value head and token of a refused head (its offset in the launch plus `first_token`, the
// position of the launch's first token in the caller's run), or the sequence with more tokens than
// max_tokens; error_info holds the first refusal of the launch to be recorded (others are not
// reported, their slots unchanged too). Clears it for the next launch. Null: nothing.
void check_ws_decode_error(int32_t* error_info, cudaStream_t stream = nullptr, int first_token = 0);

// Copy-on-write of n int8 / fp8 / bf16 working slots inside one pool of the same format:
// dst[dst_slots[i]] = src[src_slots[i]], codes and scales byte for byte (a checkpoint held in the
// working format is restored by a plain copy; no decoding). codes / scales as in WsDecodeArgs
// (scales null for bf16 formats); src and dst may be the same pool; destination slots distinct and
// disjoint from the source slots. Throws statecheck::Error on null pointers, misalignment or a
// launch failure.
void ws_slot_copy(const WorkingStateFormat& f, int HV, int dk, int dv, const void* src_codes,
                  const void* src_scales, void* dst_codes, void* dst_scales,
                  const int32_t* src_slots, const int32_t* dst_slots, int n,
                  cudaStream_t stream = nullptr);

// Byte model of one ws_decode launch, each state byte counted once read and once written per
// sequence with tokens: codes (1 byte per element for int8 / fp8, 2 for bf16) and scales
// (4 or 2 bytes per key channel) of every head, plus every token's q, k (bf16, H d_k), v (bf16,
// HV d_v), g (fp32, HV or HV d_k), beta (fp32, HV) read and o (bf16, HV d_v) written, plus the slot
// ids, offsets, positions and sequence indices. Flops: 6 d_k d_v per head and token (the step;
// decode and encode are not counted).
double ws_decode_bytes(const WsDecodeArgs& a, int64_t total_tokens);
double ws_decode_flops(const WsDecodeArgs& a, int64_t total_tokens);

}  // namespace statecheck::cuda
