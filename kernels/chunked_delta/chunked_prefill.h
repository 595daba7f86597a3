// Chunked prefill of the gated delta rule (GDN and KDA) over a state pool indexed by slot, on
// tensor cores: the UT-transform form of core/recurrence/chunked_delta.h (docs/chunked_prefill.md
// derives it and says how the kernel maps it), in chunks of 64 tokens.
//
// Same launch contract as gated_delta_pool (gated_delta_pool.h: shapes, layouts, dtypes, slot
// ids, cu_seqlens offsets, GVA, in-kernel q/k L2 norm, the d_k^-1/2 default scale, o optional),
// with two restrictions: d_k = 128 and d_v a multiple of 32. Each sequence's state is read from
// its slot in fp32 or bf16, kept in fp32 across the chunks, and written back in the pool dtype
// (round to nearest even for bf16); a sequence without tokens leaves its slot bit-identical, as
// do slots not listed.
//
// Arithmetic: the matrix products run on bf16 operands with fp32 accumulation (mma.sync
// m16n8k16): normalised q and k, the decayed k, the value rows, the state (a bf16 copy of the
// fp32 state, per chunk), (I + A)^-1 diag(beta) and the chunk's pseudo-values U. A, the cumulative
// decays and the fp32 state are fp32; (I + A)^-1 has fp32 16 x 16 diagonal blocks (forward
// substitution) and off-diagonal blocks from tf32 products (mma.sync m16n8k8). These are the
// roundings of flash-linear-attention's chunk_gated_delta_rule; the results agree with the fp64
// token loop within the bf16 tolerance tol16 of docs/chunked_prefill.md, not bit for bit.
//
// Two forms, the same bits (every product on the same operands in the same order):
//   fused  one block of 256 threads per (sequence, value head, tile of value_tile rows of d_v)
//          walks its sequence's chunks in order and does all of a chunk's work;
//   split  a transform pass, one block per (chunk, value head), computes everything that does not
//          depend on the state (q, k normalised, decays, A, P, (I + A)^-1, -Wk, U0 = Tb V) into a
//          workspace (chunk_workspace.h), then a state pass, one block per (value tile, value
//          head, sequence), walks the chunks with only the products that involve the state
//          (kernels/chunked_delta/state_pass.cuh). Chunks of a sequence no longer wait for each
//          other's triangular inverse, and the state pass holds two blocks per SM.
// KDA's intra-chunk products A and Q K^T, whose decays differ per key channel, run on tensor cores
// through a reference decay per 16-row block when a chunk's decays keep every factor below e^40
// (and none is above 0); other chunks sum them elementwise, an exponential per term.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/gated_delta/gated_delta_pool.h"

namespace statecheck::cuda {

constexpr int kChunkedPrefillChunk = 64;  // tokens per chunk
// The most sequences the split form's state pass takes in one launch (its grid's z dimension).
constexpr int kChunkedSplitMaxSeqs = 65535;

enum class ChunkedForm { automatic, fused, split };

struct ChunkedPrefillOptions {
  // Rows of d_v per block (the fused kernel, or the split form's state pass): 32 or 64 (64
  // requires d_v % 64 == 0); 0 chooses: 64 when the launch then has at least as many blocks as
  // are resident on the device at once, else 32 (more blocks for few long sequences).
  int value_tile = 0;
  // automatic: split when total_tokens > 0 and num_seqs <= kChunkedSplitMaxSeqs, unless the
  // launch's max_seq_len hint says that no sequence has more than one chunk (64 tokens: nothing
  // for the split to run in parallel, and a second launch and the workspace's round trip to
  // pay), or the launcher's own workspace cannot be allocated; else fused.
  ChunkedForm form = ChunkedForm::automatic;
  // cu_seqlens[num_seqs] as the host knows it (the split form sizes its grid and workspace by
  // it). It must be exact: a value below the device's makes the state pass read past the
  // workspace, as a wrong cu_seqlens makes any kernel read past its inputs.
  int64_t total_tokens = 0;
  // Split form: a device buffer of at least chunked_prefill_workspace_bytes() bytes, 16-byte
  // aligned, not used by anything else until the launch completes; null: the launcher takes one
  // from the stream-ordered allocator (cudaMallocAsync) and frees it after the launch (about
  // 1.4 KB per token and value head at d_v = 128: 1.5 GB for 32768 tokens of 32 value heads).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Launches the chunked prefill on `stream`. Throws statecheck::Error (before any device work) on
// the argument errors gated_delta_pool refuses, on d_k != 128 or d_v % 32 != 0 (named), on a
// value_tile other than 0, 32, 64 or not dividing d_v, on the split form (asked for) without
// total_tokens, with more than kChunkedSplitMaxSeqs sequences or with a workspace smaller than
// needed or misaligned, or on a launch or allocation failure.
void chunked_prefill_pool(const GatedDeltaPoolArgs& a, const ChunkedPrefillOptions& opt = {},
                          cudaStream_t stream = nullptr);

// True when the kernel takes launch `a`'s shape: d_k = 128, d_v % 32 == 0, a fp32 or bf16 state.
bool chunked_prefill_supported(const GatedDeltaPoolArgs& a);

// The form chunked_prefill_pool runs launch `a` in with `opt` (fused or split).
ChunkedForm chunked_prefill_form(const GatedDeltaPoolArgs& a, const ChunkedPrefillOptions& opt);

// The value tile chunked_prefill_pool uses for launch `a` on the current device (32 or 64).
int chunked_prefill_value_tile(const GatedDeltaPoolArgs& a, const ChunkedPrefillOptions& opt = {});

// Bytes of the split form's workspace for launch `a` with cu_seqlens[num_seqs] = total_tokens:
// chunk_slots(num_seqs, total_tokens) x HV x ChunkTile::bytes(d_v) (chunk_workspace.h; about
// 89 KB per 64 tokens and value head at d_v = 128).
size_t chunked_prefill_workspace_bytes(const GatedDeltaPoolArgs& a, int64_t total_tokens);

// FLOP model of a launch with the given host cu_seqlens [num_seqs + 1]: per value head and
// sequence, chunked_delta_flops_per_head (core/recurrence/chunked_delta.h) with chunks of 64,
// summed. The d_v-independent products a value tile recomputes are counted once.
double chunked_prefill_flops(const GatedDeltaPoolArgs& a, const std::vector<int32_t>& cu_seqlens);

}  // namespace statecheck::cuda
