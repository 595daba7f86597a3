#include "kernels/host/cuda_backend.h"

#include <algorithm>
#include <vector>

#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "kernels/codec/checkpoint_codec.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device.h"
#include "kernels/host/layer_upload.h"

namespace statecheck::cuda {

namespace {

class CudaLayerRun : public LayerRun {
 public:
  CudaLayerRun(const RecurrenceShape& shape, const LayerInputs& in, int states)
      : shape_(shape),
        states_(states),
        slot_(static_cast<size_t>(shape.HV) * shape.dv * shape.dk),
        in_(upload_layer_inputs(shape, in)),
        pool_(static_cast<size_t>(states + 1) * slot_),
        ckpt_values_(2 * slot_ * 4),
        ckpt_scales_(2 * static_cast<size_t>(shape.HV) * shape.dk * 4),
        slot_ids_(states + 1),
        cu_(2),
        error_(4) {
    if (states < 1) fail("a layer run needs at least one state, got {}", states);
    pool_.fill_bytes(0);
    error_.fill_bytes(0);
    std::vector<int32_t> ids(states + 1);
    for (int i = 0; i <= states; ++i) ids[i] = i;
    STATECHECK_CUDA_CHECK(cudaMemcpy(slot_ids_.data(), ids.data(), ids.size() * sizeof(int32_t),
                                     cudaMemcpyHostToDevice));
  }

  int states() const override { return states_; }

  void write(int s, const float* S_hvk) override {
    STATECHECK_CUDA_CHECK(
        cudaMemcpy(slot(s), S_hvk, slot_ * sizeof(float), cudaMemcpyHostToDevice));
  }
  void read(int s, float* S_hvk) const override {
    STATECHECK_CUDA_CHECK(
        cudaMemcpy(S_hvk, slot(s), slot_ * sizeof(float), cudaMemcpyDeviceToHost));
  }
  void copy(int dst, int src) override {
    STATECHECK_CUDA_CHECK(
        cudaMemcpy(slot(dst), slot(src), slot_ * sizeof(float), cudaMemcpyDeviceToDevice));
  }

  void advance(int s, int t0, int t1, float* o_thv) override {
    slot(s);
    if (t0 < 0 || t1 < t0 || t1 > in_.T)
      fail("advance: tokens [{}, {}) outside the bound {} tokens", t0, t1, in_.T);
    const int32_t cu_host[2] = {0, t1 - t0};
    STATECHECK_CUDA_CHECK(cudaMemcpy(cu_.data(), cu_host, sizeof cu_host, cudaMemcpyHostToDevice));
    const size_t outputs = static_cast<size_t>(t1 - t0) * shape_.HV * shape_.dv;
    DeviceBuffer<uint16_t> o(o_thv ? outputs : 0);
    o.fill_bytes(0xFF);  // NaN until the kernel writes
    gated_delta_pool(pool_args(shape_, Dtype::fp32, pool_.data(), states_ + 1, in_, t0, 1,
                               slot_ids_.data() + s + 1, cu_.data(), o_thv ? o.data() : nullptr,
                               t1 - t0));
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
    if (!o_thv) return;
    const std::vector<uint16_t> bits = o.download();
    for (size_t e = 0; e < outputs; ++e) o_thv[e] = float_from_bf16_bits(bits[e]);
  }

  void roundtrip(int s, const Codec& codec, int layer) override {
    slot(s);
    const PoolGeometry geo{1, shape_.HV, shape_.dv, shape_.dk, 0};
    const StatePoolView active{pool_.data(), nullptr, nullptr, states_ + 1};
    const StatePoolView ckpt{ckpt_values_.data(),
                             codec.has_scales() ? ckpt_scales_.data() : nullptr, nullptr, 2};
    const int32_t* state_slot = slot_ids_.data() + s + 1;
    const int32_t* ckpt_slot = slot_ids_.data() + 1;
    checkpoint_store(geo, active, Dtype::fp32, ckpt, codec, state_slot, ckpt_slot, 1,
                     error_.data());
    try {
      check_store_error(error_.data(), geo);
    } catch (const Error& e) {
      fail("{} (layer {} of the model)", e.what(), layer);
    }
    checkpoint_load(geo, ckpt, codec, active, Dtype::fp32, ckpt_slot, state_slot, 1);
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  float* slot(int s) const {
    if (s < 0 || s >= states_) fail("state {} outside the run's {} states", s, states_);
    return const_cast<float*>(pool_.data()) + static_cast<size_t>(s + 1) * slot_;
  }

  RecurrenceShape shape_;
  int states_;
  size_t slot_;
  DeviceLayerInputs in_;
  DeviceBuffer<float> pool_;
  DeviceBuffer<uint8_t> ckpt_values_, ckpt_scales_;
  DeviceBuffer<int32_t> slot_ids_, cu_, error_;
};

class CudaBackend : public RecurrenceBackend {
 public:
  std::string name() const override { return "cuda"; }
  int max_threads() const override { return 1; }
  std::unique_ptr<LayerRun> bind(const RecurrenceShape& shape, const LayerInputs& in,
                                 int states) const override {
    return std::make_unique<CudaLayerRun>(shape, in, states);
  }
};

}  // namespace

std::unique_ptr<RecurrenceBackend> cuda_backend() {
  return std::make_unique<CudaBackend>();
}

}  // namespace statecheck::cuda
