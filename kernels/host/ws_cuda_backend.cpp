#include "kernels/host/ws_cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device.h"
#include "kernels/host/layer_upload.h"
#include "kernels/host/ws_format_backend.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_decode_reference.h"

namespace statecheck::cuda {

namespace {

class WsLayerRun : public LayerRun {
 public:
  WsLayerRun(const RecurrenceShape& shape, const LayerInputs& in, int states, WorkingStateFormat f,
             uint64_t seed, int layer, int sequence)
      : shape_(shape),
        f_(f),
        seed_(seed),
        layer_(layer),
        sequence_(sequence),
        states_(states),
        head_(static_cast<size_t>(shape.dv) * shape.dk),
        cb_(ws_code_bytes(f)),
        sb_(ws_scale_bytes(f)),
        in_(upload_layer_inputs(shape, in)),
        codes_(static_cast<size_t>(states + 1) * shape.HV * head_ * cb_),
        scales_(std::max<size_t>(16, static_cast<size_t>(states + 1) * shape.HV * shape.dk * sb_)),
        slot_ids_(states + 1),
        cu_(2),
        pos_(1),
        seq_(1),
        error_(4),
        pending_(std::max(states, 0)) {
    if (states < 1) fail("a layer run needs at least one state, got {}", states);
    codes_.fill_bytes(0);
    scales_.fill_bytes(0);
    error_.fill_bytes(0);
    std::vector<int32_t> ids(states + 1);
    for (int i = 0; i <= states; ++i) ids[i] = i;
    slot_ids_.upload(ids);
  }

  int states() const override { return states_; }

  // The state as given; the next advance starts from it (init_state), as a state already stored.
  void write(int s, const float* S_hvk) override {
    check(s);
    pending_[s].assign(S_hvk, S_hvk + shape_.HV * head_);
  }

  void read(int s, float* S_hvk) const override {
    check(s);
    if (!pending_[s].empty()) {
      std::copy(pending_[s].begin(), pending_[s].end(), S_hvk);
      return;
    }
    std::vector<uint8_t> codes(slot_codes()), scales(slot_scales());
    STATECHECK_CUDA_CHECK(cudaMemcpy(codes.data(), codes_.data() + (s + 1) * slot_codes(),
                                     codes.size(), cudaMemcpyDeviceToHost));
    if (sb_)
      STATECHECK_CUDA_CHECK(cudaMemcpy(scales.data(), scales_.data() + (s + 1) * slot_scales(),
                                       scales.size(), cudaMemcpyDeviceToHost));
    ws_decode_slot(f_, shape_.HV, shape_.dv, shape_.dk, codes.data(), scales.data(), S_hvk);
  }

  void copy(int dst, int src) override {
    check(dst);
    check(src);
    if (dst == src) return;
    pending_[dst] = pending_[src];
    if (!pending_[src].empty()) return;
    ws_slot_copy(f_, shape_.HV, shape_.dk, shape_.dv, codes_.data(), sb_ ? scales_.data() : nullptr,
                 codes_.data(), sb_ ? scales_.data() : nullptr, slot_ids_.data() + src + 1,
                 slot_ids_.data() + dst + 1, 1);
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  }

  void advance(int s, int t0, int t1, float* o_thv) override {
    check(s);
    if (t0 < 0 || t1 < t0 || t1 > in_.T)
      fail("advance: tokens [{}, {}) outside the bound {} tokens", t0, t1, in_.T);
    const int32_t cu_host[2] = {0, t1 - t0};
    cu_.upload(std::vector<int32_t>(cu_host, cu_host + 2));
    pos_.upload(std::vector<int32_t>{t0});
    seq_.upload(std::vector<int32_t>{sequence_});
    const size_t outputs = static_cast<size_t>(t1 - t0) * shape_.HV * shape_.dv;
    DeviceBuffer<uint16_t> o(o_thv ? outputs : 0);
    o.fill_bytes(0xFF);
    WsDecodeArgs a;
    a.num_seqs = 1, a.H = shape_.H, a.HV = shape_.HV, a.dk = shape_.dk, a.dv = shape_.dv;
    a.gate = shape_.gate, a.qk_l2norm = shape_.qk_l2norm, a.scale = shape_.scale;
    a.format = f_;
    a.codes = codes_.data(), a.scales = sb_ ? scales_.data() : nullptr;
    a.pool_slots = states_ + 1;
    a.slot_ids = slot_ids_.data() + s + 1, a.cu_seqlens = cu_.data();
    a.positions = pos_.data(), a.seq_index = seq_.data();
    a.seed = seed_, a.layer = layer_;
    const size_t t = static_cast<size_t>(t0);
    a.q = in_.q.data() + t * shape_.H * shape_.dk;
    a.k = in_.k.data() + t * shape_.H * shape_.dk;
    a.v = in_.v.data() + t * shape_.HV * shape_.dv;
    a.g = in_.g.data() + t * shape_.gate_width();
    a.beta = in_.beta.data() + t * shape_.HV;
    a.o = o_thv ? o.data() : nullptr;
    a.error_info = error_.data();
    a.max_tokens = t1 - t0 <= 1 ? 1 : 0;
    DeviceBuffer<float> init;
    if (!pending_[s].empty() && t1 > t0) {
      init.upload(pending_[s]);
      a.init_state = init.data();
    }
    ws_decode(a);
    check_ws_decode_error(error_.data(), nullptr, t0);
    if (t1 > t0) pending_[s].clear();
    if (!o_thv) return;
    const std::vector<uint16_t> bits = o.download();
    for (size_t e = 0; e < outputs; ++e) o_thv[e] = float_from_bf16_bits(bits[e]);
  }

  void roundtrip(int, const Codec&, int) override {
    fail(
        "the working-state backend ({}) has no checkpoint codec round trip: a checkpoint of a "
        "working-state slot is a slot copy",
        f_.name());
  }

 private:
  void check(int s) const {
    if (s < 0 || s >= states_) fail("state {} outside the run's {} states", s, states_);
  }
  size_t slot_codes() const { return shape_.HV * head_ * cb_; }
  size_t slot_scales() const { return static_cast<size_t>(shape_.HV) * shape_.dk * sb_; }

  RecurrenceShape shape_;
  WorkingStateFormat f_;
  uint64_t seed_;
  int layer_;
  int sequence_;
  int states_;
  size_t head_;
  int cb_, sb_;
  DeviceLayerInputs in_;
  DeviceBuffer<uint8_t> codes_, scales_;
  DeviceBuffer<int32_t> slot_ids_, cu_, pos_, seq_, error_;
  std::vector<std::vector<float>> pending_;  // [states]: a written fp32 state not yet advanced
};

}  // namespace

std::unique_ptr<RecurrenceBackend> cuda_ws_backend(const WorkingStateFormat& format,
                                                   uint64_t seed) {
  if (!ws_decode_supports(format))
    fail("working-state backend: format '{}' has no CUDA kernel", format.name());
  return std::make_unique<WsFormatBackend<WsLayerRun>>(format, seed, "cuda-", 1);
}

}  // namespace statecheck::cuda
