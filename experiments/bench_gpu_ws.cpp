// The working-state decode rows of `statecheck bench --device cuda` (bench_gpu_rows.h).
#ifdef STATECHECK_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/dtype/fp8_e4m3.h"
#include "core/util/error.h"
#include "core/util/rng.h"
#include "experiments/bench_gpu_rows.h"
#include "kernels/common/device.h"
#include "kernels/host/layer_upload.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_decode_reference.h"

namespace statecheck::bench_rows {

using namespace statecheck::cuda;

// One ws_decode launch of the batch hb (B sequences of one token) with max_tokens, checked bit
// for bit against the CPU reference from the same stored states, then timed as row `name`.
void bench_ws_launch(const HostWsBatch& hb, const DecodeShape& sh, int B, size_t slot_elems,
                     int max_tokens, const std::string& name, GpuTimer& timer,
                     std::vector<Row>& rows, int repeats) {
  const int dk = hb.dk, dv = hb.dv;
  const int cb = ws_code_bytes(hb.format), sb = ws_scale_bytes(hb.format);
  const int64_t slots = static_cast<int64_t>(hb.codes.size() / (slot_elems * cb));
  DeviceBuffer<uint8_t> d_codes = to_device(hb.codes), d_scales = to_device(hb.scales);
  DeviceBuffer<int32_t> d_ids = to_device(hb.slot_ids), d_cu = to_device(hb.cu_seqlens);
  DeviceBuffer<uint16_t> d_q = to_device(hb.q), d_k = to_device(hb.k), d_v = to_device(hb.v);
  DeviceBuffer<float> d_g = to_device(hb.g), d_beta = to_device(hb.beta);
  DeviceBuffer<uint16_t> d_o(static_cast<size_t>(B) * sh.HV * dv);
  d_o.fill_bytes(0xFF);
  DeviceBuffer<int32_t> d_err = to_device(std::vector<int32_t>(4, 0));
  WsDecodeArgs a;
  a.num_seqs = B, a.H = sh.H, a.HV = sh.HV, a.dk = dk, a.dv = dv, a.gate = sh.gate;
  a.format = hb.format;
  a.codes = d_codes.data(), a.scales = d_scales.data(), a.pool_slots = slots;
  a.slot_ids = d_ids.data(), a.cu_seqlens = d_cu.data(), a.seed = hb.seed;
  a.q = d_q.data(), a.k = d_k.data(), a.v = d_v.data(), a.g = d_g.data(), a.beta = d_beta.data(),
  a.o = d_o.data(), a.error_info = d_err.data();
  a.max_tokens = max_tokens;
  // Checked bit for bit against the CPU reference from the same stored states first.
  ws_decode(a);
  check_ws_decode_error(d_err.data());
  {
    const int nv = std::min(B, 8);
    HostWsBatch check = hb;
    check.slot_ids.resize(nv);
    check.cu_seqlens.resize(nv + 1);
    // The first nv sequences hold the first nv tokens (one token each).
    check.q.resize(static_cast<size_t>(nv) * sh.H * dk);
    check.k.resize(check.q.size());
    check.v.resize(static_cast<size_t>(nv) * sh.HV * dv);
    check.g.resize(static_cast<size_t>(nv) * sh.HV * (sh.gate == GateKind::kda ? dk : 1));
    check.beta.resize(static_cast<size_t>(nv) * sh.HV);
    std::vector<uint16_t> o_ref(static_cast<size_t>(nv) * sh.HV * dv, 0xFFFF);
    if (!ws_decode_reference(check, o_ref).empty())
      fail("bench: the working-state reference refused a head: no speed reported");
    const std::vector<uint16_t> o_gpu = d_o.download();
    const std::vector<uint8_t> codes = d_codes.download(), scales = d_scales.download();
    bool same = std::equal(o_ref.begin(), o_ref.end(), o_gpu.begin());
    for (int n = 0; n < nv; ++n) {
      const size_t cs = slot_elems * cb, ss = static_cast<size_t>(sh.HV) * dk * sb;
      const size_t s = check.slot_ids[n];
      same =
          same && std::memcmp(codes.data() + s * cs, check.codes.data() + s * cs, cs) == 0 &&
          (ss == 0 || std::memcmp(scales.data() + s * ss, check.scales.data() + s * ss, ss) == 0);
    }
    if (!same)
      fail(
          "bench: ws_decode {} {} B {} differs from the CPU reference bit for bit: no speed "
          "reported",
          sh.name, hb.format.name(), B);
  }
  Row r{name};
  r.set_times(timer.time([&](cudaStream_t s) { ws_decode(a, s); }, repeats));
  r.kernel = "ws_decode";
  r.bytes = ws_decode_bytes(a, B);
  r.flops = ws_decode_flops(a, B);
  r.tokens = B;
  rows.push_back(r);
}

void bench_working_state(const Options& o, GpuTimer& timer, std::vector<Row>& rows, int repeats) {
  const int dk = 128, dv = 128;
  const std::vector<int> batches = o.quick ? std::vector<int>{1, 32} : std::vector<int>{1, 32, 256};
  const WorkingStateKind kinds[] = {WorkingStateKind::int8, WorkingStateKind::int8_sr,
                                    WorkingStateKind::fp8_e4m3, WorkingStateKind::fp8_e4m3_sr,
                                    WorkingStateKind::bf16_sr};
  const int max_slots = *std::max_element(batches.begin(), batches.end()) + 1;
  for (const DecodeShape& sh : {DecodeShape{"gdn_H16_HV32", 16, 32, GateKind::gdn},
                                DecodeShape{"kda_H32_HV32", 32, 32, GateKind::kda}}) {
    // The stored states: states of 0.06 rms, drawn once per shape for the largest batch's slots and
    // stored in each format (the first B + 1 slots for batch B).
    const size_t slot_elems = static_cast<size_t>(sh.HV) * dv * dk;
    std::vector<float> states(static_cast<size_t>(max_slots) * slot_elems);
    Rng rng(mix_seed(o.seed, 11));
    for (float& x : states) x = static_cast<float>(0.06 * rng.normal());
    for (WorkingStateKind kind : kinds) {
      for (const int B : batches) {
        HostWsBatch hb;
        hb.H = sh.H, hb.HV = sh.HV, hb.dk = dk, hb.dv = dv, hb.gate = sh.gate;
        hb.format.kind = kind;
        hb.seed = o.seed;
        const int64_t slots = B + 1;
        const int cb = ws_code_bytes(hb.format), sb = ws_scale_bytes(hb.format);
        hb.codes.resize(slots * slot_elems * cb);
        hb.scales.resize(static_cast<size_t>(slots) * sh.HV * dk * sb);
        for (size_t e = 0; e < slots * slot_elems; ++e) {
          const float x = states[e];
          if (cb == 2) {
            const uint16_t bits = bf16_bits_from_float(x);
            std::memcpy(hb.codes.data() + 2 * e, &bits, 2);
          } else if (kind == WorkingStateKind::int8 || kind == WorkingStateKind::int8_sr) {
            hb.codes[e] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(
                std::max(-127.0, std::min(127.0, static_cast<double>(x) / 0.3 * 127.0)))));
          } else {
            hb.codes[e] = fp8_e4m3_from_float(x / 0.3f * 448.0f);
          }
        }
        for (size_t j = 0; j < hb.scales.size() / 4; ++j) {
          const float s = 0.3f / (cb == 1 && (kind == WorkingStateKind::int8 ||
                                              kind == WorkingStateKind::int8_sr)
                                      ? 127.0f
                                      : 448.0f);
          std::memcpy(hb.scales.data() + 4 * j, &s, 4);
        }
        hb.slot_ids = distinct_slots(B, slots, mix_seed(o.seed, 5));
        hb.cu_seqlens.resize(B + 1);
        for (int b = 0; b <= B; ++b) hb.cu_seqlens[b] = b;
        RecurrenceShape rs;
        rs.H = sh.H, rs.HV = sh.HV, rs.dk = dk, rs.dv = dv, rs.gate = sh.gate;
        const LayerInputs in =
            synthetic_inputs(sh.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda,
                             rs, mix_seed(o.seed, 3), 0, B);
        hb.q = bf16_bits(in.q), hb.k = bf16_bits(in.k), hb.v = bf16_bits(in.v), hb.g = in.g,
        hb.beta = in.beta;
        std::string fname = hb.format.name();
        std::replace(fname.begin(), fname.end(), '-', '_');
        // Decode declares one token per sequence (max_tokens 1), which takes the single-token
        // kernel where it has a variant; "_general" times the multi-token kernel on the same
        // launch for those formats.
        WsDecodeArgs decode;
        decode.dk = dk, decode.format = hb.format, decode.max_tokens = 1;
        const bool token_kernel = ws_decode_runs_token_kernel(decode);
        for (const int max_tokens : token_kernel ? std::vector<int>{1, 0} : std::vector<int>{1}) {
          const std::string row = fmt::format("decode_{}_ws_{}_B{}{}", sh.name, fname, B,
                                              token_kernel && max_tokens == 0 ? "_general" : "");
          bench_ws_launch(hb, sh, B, slot_elems, max_tokens, row, timer, rows, repeats);
        }
      }
    }
  }
}

}  // namespace statecheck::bench_rows

#endif  // STATECHECK_HAVE_CUDA
