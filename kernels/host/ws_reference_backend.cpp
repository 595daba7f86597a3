#include "kernels/host/ws_reference_backend.h"

#include <algorithm>
#include <vector>

#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "kernels/host/ws_format_backend.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_decode_reference.h"

namespace statecheck::cuda {

namespace {

class WsReferenceLayerRun : public LayerRun {
 public:
  WsReferenceLayerRun(const RecurrenceShape& shape, const LayerInputs& in, int states,
                      WorkingStateFormat f, uint64_t seed, int layer, int sequence)
      : shape_(shape),
        in_(in),
        states_(states),
        sequence_(sequence),
        pending_(std::max(states, 0)) {
    if (states < 1) fail("a layer run needs at least one state, got {}", states);
    b_.H = shape.H, b_.HV = shape.HV, b_.dk = shape.dk, b_.dv = shape.dv, b_.gate = shape.gate;
    b_.qk_l2norm = shape.qk_l2norm, b_.scale = shape.scale;
    b_.format = f, b_.seed = seed, b_.layer = layer;
    const size_t slot = static_cast<size_t>(shape.HV) * shape.dv * shape.dk;
    b_.codes.assign(slot * ws_code_bytes(f) * states, 0);
    b_.scales.assign(static_cast<size_t>(shape.HV) * shape.dk * ws_scale_bytes(f) * states, 0);
  }

  int states() const override { return states_; }

  void write(int s, const float* S_hvk) override {
    check(s);
    pending_[s].assign(S_hvk, S_hvk + elems());
  }

  void read(int s, float* S_hvk) const override {
    check(s);
    if (!pending_[s].empty()) {
      std::copy(pending_[s].begin(), pending_[s].end(), S_hvk);
      return;
    }
    ws_decode_slot(b_.format, shape_.HV, shape_.dv, shape_.dk, b_.codes.data() + s * slot_codes(),
                   b_.scales.data() + s * slot_scales(), S_hvk);
  }

  void copy(int dst, int src) override {
    check(dst);
    check(src);
    if (dst == src) return;
    pending_[dst] = pending_[src];
    std::copy_n(b_.codes.begin() + src * slot_codes(), slot_codes(),
                b_.codes.begin() + dst * slot_codes());
    std::copy_n(b_.scales.begin() + src * slot_scales(), slot_scales(),
                b_.scales.begin() + dst * slot_scales());
  }

  void advance(int s, int t0, int t1, float* o_thv) override {
    check(s);
    if (t0 < 0 || t1 < t0 || t1 > in_.T)
      fail("advance: tokens [{}, {}) outside the bound {} tokens", t0, t1, in_.T);
    if (t1 == t0) return;
    const size_t qk = static_cast<size_t>(shape_.H) * shape_.dk;
    const size_t vo = static_cast<size_t>(shape_.HV) * shape_.dv;
    const size_t gw = shape_.gate_width();
    auto bits = [](const std::vector<float>& x, size_t from, size_t n) {
      std::vector<uint16_t> out(n);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_bits_from_float(x[from + i]);
      return out;
    };
    const size_t n = static_cast<size_t>(t1 - t0);
    b_.q = bits(in_.q, t0 * qk, n * qk);
    b_.k = bits(in_.k, t0 * qk, n * qk);
    b_.v = bits(in_.v, t0 * vo, n * vo);
    b_.g.assign(in_.g.begin() + t0 * gw, in_.g.begin() + t1 * gw);
    b_.beta.assign(in_.beta.begin() + t0 * shape_.HV, in_.beta.begin() + t1 * shape_.HV);
    b_.slot_ids = {s};
    b_.cu_seqlens = {0, t1 - t0};
    b_.positions = {t0};
    b_.seq_index = {sequence_};
    b_.init_state = pending_[s];
    std::vector<uint16_t> o(n * vo, 0xFFFF);
    const std::vector<WsRefusal> refused = ws_decode_reference(b_, o);
    if (!refused.empty())
      fail(
          "working-state reference: non-finite state or output in sequence 0, value head {}, "
          "token {}; that head's slot was left unchanged",
          refused[0].head, t0 + refused[0].token);
    pending_[s].clear();
    if (o_thv)
      for (size_t e = 0; e < o.size(); ++e) o_thv[e] = float_from_bf16_bits(o[e]);
  }

  void roundtrip(int, const Codec&, int) override {
    fail(
        "the working-state reference backend ({}) has no checkpoint codec round trip: a "
        "checkpoint of a working-state slot is a slot copy",
        b_.format.name());
  }

 private:
  void check(int s) const {
    if (s < 0 || s >= states_) fail("state {} outside the run's {} states", s, states_);
  }
  size_t elems() const { return static_cast<size_t>(shape_.HV) * shape_.dv * shape_.dk; }
  size_t slot_codes() const { return elems() * ws_code_bytes(b_.format); }
  size_t slot_scales() const {
    return static_cast<size_t>(shape_.HV) * shape_.dk * ws_scale_bytes(b_.format);
  }

  RecurrenceShape shape_;
  LayerInputs in_;
  int states_, sequence_;
  HostWsBatch b_;                            // codes / scales [states, ...]; slot s is state s
  std::vector<std::vector<float>> pending_;  // [states]: a written fp32 state not yet advanced
};

}  // namespace

std::unique_ptr<RecurrenceBackend> ws_reference_backend(const WorkingStateFormat& format,
                                                        uint64_t seed) {
  if (!ws_decode_supports(format))
    fail("working-state reference backend: format '{}' has no CUDA kernel", format.name());
  return std::make_unique<WsFormatBackend<WsReferenceLayerRun>>(format, seed,
                                                                "cpu-kernel-reference-", 1 << 12);
}

}  // namespace statecheck::cuda
