// The workspace of the chunked prefill's split form (chunked_prefill.h): what its transform pass
// computes for every (chunk, value head) without the state, and its state pass reads back.
//
// A chunk of sequence s that starts at token cu_seqlens[s] + 64 c has the workspace slot
// s + cu_seqlens[s] / 64 + c (chunk_slot). Slots are distinct for all chunks of a launch (a
// sequence of C chunks starting at token t0 takes slots up to s + t0 / 64 + C - 1, and the next
// sequence starts at or after token t0 + 64 (C - 1) + 1) and fewer than
// chunk_slots(num_seqs, cu_seqlens[num_seqs]); some slots are unused. Slot j, value head h owns
// the tile of ChunkTile::bytes(d_v) bytes at ((j HV + h) ChunkTile::bytes(d_v)), laid out as below
// (rows are tokens of the chunk, row-major; rows past the chunk's end hold zeros, or values that
// only multiply zeros).
#pragma once

#include <cstddef>
#include <cstdint>

namespace statecheck::cuda {

struct ChunkTile {
  static constexpr size_t qx = 0;      // [64][128] bf16: q (GDN), q e^G (KDA), normalised, scaled
  static constexpr size_t wk = 16384;  // [64][128] bf16: -T diag(beta) (k e^G)
  static constexpr size_t kd = 32768;  // [64][128] bf16: k e^(Gn - G)
  static constexpr size_t p = 49152;   // [64][64] bf16: (Q K^T) decayed, lower triangle
  static constexpr size_t eg = 57344;  // [64] fp32: e^G of each row (GDN; KDA: unused)
  static constexpr size_t ds = 57600;  // [128] fp32: e^Gn per key channel (the state's decay)
  static constexpr size_t u0 = 58112;  // [64][d_v] fp32: T diag(beta) V
  static constexpr size_t bytes(int dv) { return u0 + static_cast<size_t>(dv) * 64 * 4; }
};

// The workspace slot of chunk c of a sequence whose first token is `cu_seq` (see above).
constexpr int64_t chunk_slot(int seq, int cu_seq, int c) {
  return static_cast<int64_t>(seq) + cu_seq / 64 + c;
}

// An upper bound on the slots of a launch of num_seqs sequences ending at token total_tokens.
constexpr int64_t chunk_slots(int num_seqs, int64_t total_tokens) {
  return total_tokens / 64 + num_seqs + 1;
}

}  // namespace statecheck::cuda
