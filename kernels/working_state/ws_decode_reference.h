// CPU reference of the working-state decode kernel (ws_decode.h), rounding for rounding: the same
// fp32 operations in the same order as the kernel's lane layout, and the element codecs of
// core/working_state/element_codec.h, so that kernel and reference agree bit for bit for the same
// seed. Per token, value head h (key head kh), with CPL = d_k / 8 and "lane" L in 0..7 owning key
// channels [L CPL, (L + 1) CPL):
//   qs_L = fma chain of q_j^2 over the lane's channels (j ascending, from 0); likewise ks_L
//   sum8(x) = ((x_0 + x_1) + (x_2 + x_3)) + ((x_4 + x_5) + (x_6 + x_7))
//   qscale = scale / sqrt(sum8(qs) + 1e-6), kscale = 1 / sqrt(sum8(ks) + 1e-6)  (if qk_l2norm;
//            else scale and 1); k_j *= kscale; q_j *= qscale
//   a = wsk::exp(g) (GDN) or a_j = wsk::exp(g_j) (KDA)   (ws_step_math.h, not libm)
//   per row i: S_ij *= a(_j); part_L = fma chain of S_ij k_j; w = beta * (v_i - sum8(part));
//              S_ij = fma(w, k_j, S_ij); acc_L = fma chain of S_ij q_j; o_i = bf16_rne(sum8(acc))
//   stored = encode(S) per format: scale_j = ws_column_scale(max_i |S_ij|, 127 or 448), codes by
//            ws_int8_rne_recip(S, fl(1 / scale)) / ws_int8_sr / ws_fp8_e4m3_rne(S / scale) /
//            ws_fp8_e4m3_sr / ws_bf16_rne /
//            ws_bf16_sr with Philox words rounding_word(rounding_key(seed, layer, h), i d_k + j,
//            position, sequence index); the next token reads decode(stored).
// int8 rounded to nearest even (fp32 or bf16 scales) steps on the codes instead, every token but
// the first one of an init_state: per key channel j, asc_j = a(_j) sc_j (the stored scale),
// x_j = asc_j k_j, y_j = asc_j q_j, and kq = sum8 of the lanes' fma chains of k_j q_j; per row i
// with codes c_ij, part = dot(c_i, x) and ypart = dot(c_i, y) with wsk::dot_shift / dot_digits /
// dot_value (ws_step_math.h: exact integer sums of base-256 digits, rounded once, so any order of
// summation gives the same bits); w = beta (v_i - part); o_i = bf16_rne(fma(w, kq, ypart));
// S_ij = fma(c_ij, asc_j, w k_j). That is o = (a S_prev + w k^T) q, the float step's value, with
// other roundings. Its encode is ws_int8_rne_recip(S, fl(1 / scale_j)): rint of the exact product
// S fl(1 / scale), not of the quotient S / scale (the two differ only where S / scale lies within
// about 2^-24 |S / scale| <= 2^-17 of a half-integer, docs/working_state.md). A non-finite asc, x
// or y refuses the head (that token's outputs are written as NaN 0x7FC0), as does a non-finite
// column amax (int8 RNE only). A head whose output row at some token is not finite is refused: its
// slot keeps its stored state, that token's outputs are written, later tokens' are not.
#pragma once

#include <cstdint>
#include <vector>

#include "core/state/gate.h"
#include "core/working_state/format.h"

namespace statecheck::cuda {

struct HostWsBatch {
  int H = 0, HV = 0, dk = 0, dv = 0;
  GateKind gate = GateKind::gdn;
  bool qk_l2norm = true;
  float scale = 0.0f;  // 0: d_k^-1/2
  WorkingStateFormat format;
  uint64_t seed = 0;
  int layer = 0;
  std::vector<uint8_t> codes;       // [pool_slots, HV, d_v, d_k] int8 / E4M3 bytes, or bf16 bits
                                    // (2 bytes each, little-endian)
  std::vector<uint8_t> scales;      // [pool_slots, HV, d_k] fp32 or bf16 bytes (scaled formats)
  std::vector<int32_t> slot_ids;    // [num_seqs]
  std::vector<int32_t> cu_seqlens;  // [num_seqs + 1]
  std::vector<int32_t> positions;   // [num_seqs] or empty (0)
  std::vector<int32_t> seq_index;   // [num_seqs] or empty (s)
  std::vector<uint16_t> q, k, v;    // bf16 bits, [total_T, H, d_k] / [total_T, HV, d_v]
  std::vector<float> g, beta;       // [total_T, HV (, d_k)] / [total_T, HV]
  std::vector<float> init_state;    // [num_seqs, HV, d_v, d_k] fp32 or empty (WsDecodeArgs)
};

// A head the reference refused: sequence, value head, token offset within the launch.
struct WsRefusal {
  int seq = 0, head = 0, token = 0;
};

// Bytes of one stored element (1 for int8 / fp8, 2 for bf16) and of one scale (4, 2 or 0).
int ws_code_bytes(const WorkingStateFormat& f);
int ws_scale_bytes(const WorkingStateFormat& f);

// The fp32 values of one slot's state stored in format f: codes [HV, d_v, d_k] (ws_code_bytes
// each) and scales [HV, d_k] (ws_scale_bytes each; ignored for bf16) decoded by the element codecs
// as the kernel decodes them, into S_hvk [HV, d_v, d_k].
void ws_decode_slot(const WorkingStateFormat& f, int HV, int dv, int dk, const uint8_t* codes,
                    const uint8_t* scales, float* S_hvk);

// Runs the reference in place on batch.codes / batch.scales; writes o [total_T, HV, d_v] (bf16
// bits, sized by the caller) where the kernel writes it and leaves the rest as it was. Returns
// the refused heads in (sequence, head) order. Throws statecheck::Error on an unsupported format
// (ws_decode_supports), d_k not a multiple of 32, inconsistent sizes or a slot id outside the
// pool.
std::vector<WsRefusal> ws_decode_reference(HostWsBatch& batch, std::vector<uint16_t>& o);

}  // namespace statecheck::cuda
