#include "kernels/working_state/ws_decode_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/util/error.h"
#include "core/working_state/element_codec.h"
#include "core/working_state/philox.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_step_math.h"

namespace statecheck::cuda {

namespace {

constexpr int kLanes = 8;

float sum8(const float (&x)[kLanes]) {
  return wsk::add(wsk::add(wsk::add(x[0], x[1]), wsk::add(x[2], x[3])),
                  wsk::add(wsk::add(x[4], x[5]), wsk::add(x[6], x[7])));
}

bool is_bf16(const WorkingStateFormat& f) {
  return f.kind == WorkingStateKind::bf16 || f.kind == WorkingStateKind::bf16_sr;
}
bool is_int8(const WorkingStateFormat& f) {
  return f.kind == WorkingStateKind::int8 || f.kind == WorkingStateKind::int8_sr;
}

}  // namespace

int ws_code_bytes(const WorkingStateFormat& f) {
  return is_bf16(f) ? 2 : 1;
}
int ws_scale_bytes(const WorkingStateFormat& f) {
  return is_bf16(f) ? 0 : (f.bf16_scale ? 2 : 4);
}

void ws_decode_slot(const WorkingStateFormat& f, int HV, int dv, int dk, const uint8_t* codes,
                    const uint8_t* scales, float* S_hvk) {
  const int cb = ws_code_bytes(f), sb = ws_scale_bytes(f);
  const size_t head = static_cast<size_t>(dv) * dk, n = head * HV;
  for (size_t e = 0; e < n; ++e) {
    if (cb == 2) {
      uint16_t bits;
      std::memcpy(&bits, codes + 2 * e, 2);
      S_hvk[e] = ws_bf16_decode(bits);
      continue;
    }
    const size_t col = e / head * dk + e % dk;
    float scale;
    if (sb == 4) {
      std::memcpy(&scale, scales + 4 * col, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, scales + 2 * col, 2);
      scale = ws_bf16_decode(bits);
    }
    S_hvk[e] = is_int8(f) ? ws_int_decode(static_cast<int8_t>(codes[e]), scale)
                          : ws_mul(ws_fp8_e4m3_decode(codes[e]), scale);
  }
}

std::vector<WsRefusal> ws_decode_reference(HostWsBatch& b, std::vector<uint16_t>& o) {
  const WorkingStateFormat f = b.format;
  if (!ws_decode_supports(f)) fail("ws reference: format '{}' not supported", f.name());
  if (b.H <= 0 || b.HV <= 0 || b.dv <= 0 || b.HV % b.H != 0 || b.dk <= 0 || b.dk % 32 != 0)
    fail("ws reference: invalid shape H {} HV {} d_k {} d_v {}", b.H, b.HV, b.dk, b.dv);
  const int num_seqs = static_cast<int>(b.slot_ids.size());
  if (static_cast<int>(b.cu_seqlens.size()) != num_seqs + 1)
    fail("ws reference: cu_seqlens needs num_seqs + 1 entries");
  const int dk = b.dk, dv = b.dv, CPL = dk / kLanes;
  const int cb = ws_code_bytes(f), sb = ws_scale_bytes(f);
  const size_t head_elems = static_cast<size_t>(dv) * dk;
  const size_t slot_bytes = head_elems * cb * b.HV;
  const int64_t pool_slots = static_cast<int64_t>(b.codes.size() / slot_bytes);
  if (b.codes.size() != pool_slots * slot_bytes ||
      b.scales.size() != static_cast<size_t>(pool_slots) * b.HV * dk * sb)
    fail("ws reference: codes / scales sizes do not match the shape");
  const int total_T = b.cu_seqlens.back();
  const bool kda = b.gate == GateKind::kda;
  if (o.size() != static_cast<size_t>(total_T) * b.HV * dv ||
      b.q.size() != static_cast<size_t>(total_T) * b.H * dk || b.k.size() != b.q.size() ||
      b.v.size() != static_cast<size_t>(total_T) * b.HV * dv ||
      b.g.size() != static_cast<size_t>(total_T) * b.HV * (kda ? dk : 1) ||
      b.beta.size() != static_cast<size_t>(total_T) * b.HV)
    fail("ws reference: token array sizes do not match total_T {}", total_T);
  const float scale =
      b.scale != 0.0f ? b.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  const float cmax = is_int8(f) ? 127.0f : 448.0f;
  const bool sr = f.stochastic();
  if (!b.init_state.empty() &&
      b.init_state.size() != static_cast<size_t>(num_seqs) * b.HV * head_elems)
    fail("ws reference: init_state needs num_seqs * HV * d_v * d_k values");

  std::vector<WsRefusal> refused;
  const bool int8_rne = f.kind == WorkingStateKind::int8;
  std::vector<float> S(head_elems), sc(dk), inv(dk), q(dk), k(dk), a(dk), amax(dk);
  std::vector<float> asc(dk), kx(dk), qx(dk);
  std::vector<int> kd(3 * static_cast<size_t>(dk)), qd(3 * static_cast<size_t>(dk));
  std::vector<uint8_t> codes(head_elems * cb);
  for (int n = 0; n < num_seqs; ++n) {
    const int slot = b.slot_ids[n];
    if (slot < 0 || slot >= pool_slots)
      fail("ws reference: slot id {} outside the pool of {} slots", slot, pool_slots);
    const int t0 = b.cu_seqlens[n], t1 = b.cu_seqlens[n + 1];
    const uint32_t pos0 = b.positions.empty() ? 0u : static_cast<uint32_t>(b.positions[n]);
    const uint32_t seq_id =
        b.seq_index.empty() ? static_cast<uint32_t>(n) : static_cast<uint32_t>(b.seq_index[n]);
    for (int h = 0; h < b.HV && t0 < t1; ++h) {
      const int kh = h / (b.HV / b.H);
      const size_t head = static_cast<size_t>(slot) * b.HV + h;
      uint8_t* pool_codes = b.codes.data() + head * head_elems * cb;
      uint8_t* pool_scales = b.scales.data() + head * dk * sb;
      // decode(stored)
      for (int j = 0; j < dk; ++j) {
        if (sb == 4) {
          std::memcpy(&sc[j], pool_scales + 4 * j, 4);
        } else if (sb == 2) {
          uint16_t bits;
          std::memcpy(&bits, pool_scales + 2 * j, 2);
          sc[j] = ws_bf16_decode(bits);
        }
      }
      std::memcpy(codes.data(), pool_codes, codes.size());
      auto decode = [&]() {
        for (size_t e = 0; e < head_elems; ++e) {
          const int j = static_cast<int>(e % dk);
          if (cb == 2) {
            uint16_t bits;
            std::memcpy(&bits, codes.data() + 2 * e, 2);
            S[e] = ws_bf16_decode(bits);
          } else if (is_int8(f)) {
            S[e] = ws_int_decode(static_cast<int8_t>(codes[e]), sc[j]);
          } else {
            S[e] = ws_mul(ws_fp8_e4m3_decode(codes[e]), sc[j]);
          }
        }
      };
      if (b.init_state.empty()) {
        decode();
      } else {
        const float* init = b.init_state.data() + (static_cast<size_t>(n) * b.HV + h) * head_elems;
        std::copy(init, init + head_elems, S.begin());
      }
      const Philox4x32Key key =
          rounding_key(b.seed, static_cast<uint32_t>(b.layer), static_cast<uint32_t>(h));
      // The int8 step on the codes (ws_decode_reference.h, "int8 RNE"): the dot products exact
      // on the digits, the new state S = fma(c, a sc, w k), its column amax. True when refused.
      auto int8_step = [&](const uint8_t* c, int t, int hv) {
        const float beta = b.beta[static_cast<size_t>(t) * b.HV + hv];
        bool colbad = false;
        float kmax = 0.0f, qmax = 0.0f;
        for (int j = 0; j < dk; ++j) {
          asc[j] = wsk::mul(a[j], sc[j]);
          kx[j] = wsk::mul(asc[j], k[j]);
          qx[j] = wsk::mul(asc[j], q[j]);
          colbad |= !(std::fabs(asc[j]) <= 3.40282347e38f) ||
                    !(std::fabs(kx[j]) <= 3.40282347e38f) || !(std::fabs(qx[j]) <= 3.40282347e38f);
          kmax = std::max(kmax, std::fabs(kx[j]));
          qmax = std::max(qmax, std::fabs(qx[j]));
        }
        uint16_t* ot = o.data() + (static_cast<size_t>(t) * b.HV + hv) * dv;
        if (colbad) {
          std::fill(ot, ot + dv, uint16_t{0x7FC0});
          return true;
        }
        float kq_lane[kLanes];
        for (int L = 0; L < kLanes; ++L) {
          kq_lane[L] = 0.0f;
          for (int e = 0; e < CPL; ++e)
            kq_lane[L] = wsk::fma(k[L * CPL + e], q[L * CPL + e], kq_lane[L]);
        }
        const float kq = sum8(kq_lane);
        const int ek = wsk::dot_shift(kmax), eq = wsk::dot_shift(qmax);
        for (int j = 0; j < dk; ++j) {
          wsk::dot_digits(kx[j], ek, kd[j], kd[dk + j], kd[2 * dk + j]);
          wsk::dot_digits(qx[j], eq, qd[j], qd[dk + j], qd[2 * dk + j]);
        }
        bool bad = false;
        for (int i = 0; i < dv; ++i) {
          const int8_t* row = reinterpret_cast<const int8_t*>(c) + static_cast<size_t>(i) * dk;
          int Dk[3] = {0, 0, 0}, Dq[3] = {0, 0, 0};
          for (int p = 0; p < 3; ++p)
            for (int j = 0; j < dk; ++j) {
              Dk[p] += row[j] * kd[p * dk + j];
              Dq[p] += row[j] * qd[p * dk + j];
            }
          const float part = wsk::dot_value(Dk[0], Dk[1], Dk[2], ek);
          const float qpart = wsk::dot_value(Dq[0], Dq[1], Dq[2], eq);
          const float v = ws_bf16_decode(b.v[(static_cast<size_t>(t) * b.HV + hv) * dv + i]);
          const float w = wsk::mul(beta, wsk::sub(v, part));
          const float out = wsk::fma(w, kq, qpart);
          ot[i] = ws_bf16_rne(out);
          bad |= !(std::fabs(out) <= 3.40282347e38f);
          float* srow = S.data() + static_cast<size_t>(i) * dk;
          for (int j = 0; j < dk; ++j) {
            srow[j] = wsk::fma(static_cast<float>(row[j]), asc[j], wsk::mul(w, k[j]));
            const float m = std::fabs(srow[j]);
            amax[j] = m > amax[j] ? m : amax[j];
          }
        }
        for (int j = 0; j < dk; ++j) bad |= !(amax[j] <= 3.40282347e38f);
        return bad;
      };
      bool head_refused = false;
      for (int t = t0; t < t1 && !head_refused; ++t) {
        for (int j = 0; j < dk; ++j) {
          q[j] = ws_bf16_decode(b.q[(static_cast<size_t>(t) * b.H + kh) * dk + j]);
          k[j] = ws_bf16_decode(b.k[(static_cast<size_t>(t) * b.H + kh) * dk + j]);
        }
        float qs[kLanes], ks[kLanes];
        for (int L = 0; L < kLanes; ++L) {
          qs[L] = 0.0f, ks[L] = 0.0f;
          for (int e = 0; e < CPL; ++e) {
            const int j = L * CPL + e;
            qs[L] = wsk::fma(q[j], q[j], qs[L]);
            ks[L] = wsk::fma(k[j], k[j], ks[L]);
          }
        }
        float qscale = scale, kscale = 1.0f;
        if (b.qk_l2norm) {
          qscale = ws_div(scale, wsk::sqrt(wsk::add(sum8(qs), 1e-6f)));
          kscale = ws_div(1.0f, wsk::sqrt(wsk::add(sum8(ks), 1e-6f)));
        }
        for (int j = 0; j < dk; ++j) {
          k[j] = wsk::mul(k[j], kscale);
          q[j] = wsk::mul(q[j], qscale);
          a[j] = kda ? wsk::exp(b.g[(static_cast<size_t>(t) * b.HV + h) * dk + j])
                     : (j == 0 ? wsk::exp(b.g[static_cast<size_t>(t) * b.HV + h]) : a[0]);
          amax[j] = 0.0f;
        }
        const float beta = b.beta[static_cast<size_t>(t) * b.HV + h];
        bool bad = false;
        if (int8_rne && (b.init_state.empty() || t > t0)) {
          bad = int8_step(codes.data(), t, h);
        } else {
          for (int i = 0; i < dv; ++i) {
            float* row = S.data() + static_cast<size_t>(i) * dk;
            float part[kLanes], acc[kLanes];
            for (int L = 0; L < kLanes; ++L) {
              part[L] = 0.0f;
              for (int e = 0; e < CPL; ++e) {
                const int j = L * CPL + e;
                row[j] = wsk::mul(row[j], a[j]);
                part[L] = wsk::fma(row[j], k[j], part[L]);
              }
            }
            const float v = ws_bf16_decode(b.v[(static_cast<size_t>(t) * b.HV + h) * dv + i]);
            const float w = wsk::mul(beta, wsk::sub(v, sum8(part)));
            for (int L = 0; L < kLanes; ++L) {
              acc[L] = 0.0f;
              for (int e = 0; e < CPL; ++e) {
                const int j = L * CPL + e;
                row[j] = wsk::fma(w, k[j], row[j]);
                acc[L] = wsk::fma(row[j], q[j], acc[L]);
                const float m = std::fabs(row[j]);
                amax[j] = m > amax[j] ? m : amax[j];
              }
            }
            const float out = sum8(acc);
            o[(static_cast<size_t>(t) * b.HV + h) * dv + i] = ws_bf16_rne(out);
            bad |= !(std::fabs(out) <= 3.40282347e38f);
          }
          if (int8_rne)
            for (int j = 0; j < dk; ++j) bad |= !(amax[j] <= 3.40282347e38f);
        }
        if (bad) {
          refused.push_back({n, h, t - t0});
          head_refused = true;
          break;
        }
        // encode(S)
        const uint32_t pos = pos0 + static_cast<uint32_t>(t - t0);
        if (cb == 1)
          for (int j = 0; j < dk; ++j) {
            sc[j] = ws_column_scale(amax[j], cmax, f.bf16_scale);
            inv[j] = ws_div(1.0f, sc[j]);
          }
        for (size_t e = 0; e < head_elems; ++e) {
          const int j = static_cast<int>(e % dk);
          const uint32_t r = sr ? rounding_word(key, static_cast<uint32_t>(e), pos, seq_id) : 0u;
          switch (f.kind) {
            case WorkingStateKind::bf16:
            case WorkingStateKind::bf16_sr: {
              const uint16_t bits = sr ? ws_bf16_sr(S[e], r) : ws_bf16_rne(S[e]);
              std::memcpy(codes.data() + 2 * e, &bits, 2);
              break;
            }
            case WorkingStateKind::int8:
              codes[e] = static_cast<uint8_t>(ws_int8_rne_recip(S[e], inv[j]));
              break;
            case WorkingStateKind::int8_sr:
              codes[e] = static_cast<uint8_t>(ws_int8_sr(S[e], sc[j], r));
              break;
            case WorkingStateKind::fp8_e4m3:
              codes[e] = ws_fp8_e4m3_rne(ws_div(S[e], sc[j]));
              break;
            default:
              codes[e] = ws_fp8_e4m3_sr(ws_div(S[e], sc[j]), r);
              break;
          }
        }
        decode();
      }
      if (head_refused) continue;
      std::memcpy(pool_codes, codes.data(), codes.size());
      for (int j = 0; j < dk; ++j) {
        if (sb == 4) {
          std::memcpy(pool_scales + 4 * j, &sc[j], 4);
        } else if (sb == 2) {
          const uint16_t bits = ws_bf16_rne(sc[j]);
          std::memcpy(pool_scales + 2 * j, &bits, 2);
        }
      }
    }
  }
  return refused;
}

}  // namespace statecheck::cuda
