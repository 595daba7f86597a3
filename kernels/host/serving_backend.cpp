#include "kernels/host/serving_backend.h"

#include <algorithm>
#include <vector>

#include "core/drive/drive.h"
#include "core/util/error.h"
#include "kernels/chunked_delta/chunked_prefill.h"
#include "kernels/codec/checkpoint_codec.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device.h"
#include "kernels/common/mma_peak.h"
#include "kernels/host/layer_upload.h"

namespace statecheck::cuda {

namespace {

class CudaServingBackend : public ServingBackend {
 public:
  CudaServingBackend(const ServingShape& s, int64_t max_prompt, uint64_t seed)
      : s_(s),
        slots_(s.parallel + 2),
        slot_elems_(static_cast<size_t>(s.layer.HV) * s.layer.dv * s.layer.dk),
        layer_elems_(slot_elems_ * slots_),
        copy_(parse_codec(dtype_name(s.temporal))) {
    if (s.temporal != Dtype::fp32 && s.temporal != Dtype::bf16)
      fail("serving backend: temporal dtype {} is not fp32 or bf16", dtype_name(s.temporal));
    geo_.L = s.layers, geo_.HV = s.layer.HV, geo_.dv = s.layer.dv, geo_.dk = s.layer.dk;
    geo_.conv_elems = s.conv_elems;
    const size_t L = static_cast<size_t>(s.layers);
    active_.resize(L * layer_elems_ * dtype_bytes(s.temporal));
    active_.fill_bytes(0);
    active_conv_.resize(L * slots_ * s.conv_elems);
    ck_values_.resize(L * 2 * slot_elems_ * s.checkpoint.value_bytes());
    ck_scales_.resize(L * 2 * s.layer.HV * s.layer.dk * s.checkpoint.scale_bytes());
    ck_conv_.resize(L * 2 * s.conv_elems);
    av_ = {active_.data(), nullptr, active_conv_.data(), slots_};
    cv_ = {ck_values_.data(), ck_scales_.data(), ck_conv_.data(), 2};

    // One synthetic stream long enough for `parallel` of the longest prompt.
    const int64_t T_all = std::max<int64_t>(1, max_prompt) * s.parallel;
    const DriveKind kind =
        s.layer.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::init_kda;
    in_ = upload_layer_inputs(s.layer,
                              synthetic_inputs(kind, s.layer, seed, 0, static_cast<int>(T_all)));
    std::vector<int32_t> ids(s.parallel);
    for (int i = 0; i < s.parallel; ++i) ids[i] = i + 1;
    ids_ = to_device(ids);
    one_ = to_device(std::vector<int32_t>{1});
    cached_slot_ = to_device(std::vector<int32_t>{slots_ - 1});
    cu_.resize(s.parallel + 1);
    STATECHECK_CUDA_CHECK(cudaEventCreate(&e0_));
    STATECHECK_CUDA_CHECK(cudaEventCreate(&e1_));
    // The cached state, prefilled once and donated once, so that hits restore real numbers.
    prefill({std::max<int64_t>(1, max_prompt)}, cached_slot_.data());
    donate();
  }
  ~CudaServingBackend() override {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }

  std::string description() const override { return device_description(); }

  double donate_ms() override {
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    donate();
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    return elapsed_ms();
  }

  double serve_ms(const ServedRequest& r, RestoreFrom from) override {
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    if (r.cached_tokens > 0) {
      if (from == RestoreFrom::checkpoint_pool)
        checkpoint_load(geo_, cv_, s_.checkpoint, av_, s_.temporal, one_.data(), one_.data(), 1,
                        stream_);
      else
        checkpoint_load(geo_, av_, copy_, av_, s_.temporal, cached_slot_.data(), one_.data(), 1,
                        stream_);
    }
    prefill({r.prompt_len - r.cached_tokens}, one_.data());
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    return elapsed_ms();
  }

  double serve_batches_ms(const std::vector<ServedRequest>& requests, RestoreFrom from) override {
    const size_t parallel = static_cast<size_t>(s_.parallel);
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    for (size_t b = 0; b < requests.size(); b += parallel) {
      std::vector<int64_t> lens;
      std::vector<int32_t> hit_slots;
      for (size_t i = b; i < std::min(requests.size(), b + parallel); ++i) {
        lens.push_back(requests[i].prompt_len - requests[i].cached_tokens);
        if (requests[i].cached_tokens > 0) hit_slots.push_back(static_cast<int32_t>(i - b + 1));
      }
      if (!hit_slots.empty()) {
        DeviceBuffer<int32_t> dst = to_device(hit_slots);
        const bool ckpt = from == RestoreFrom::checkpoint_pool;
        DeviceBuffer<int32_t> src =
            to_device(std::vector<int32_t>(hit_slots.size(), ckpt ? 1 : slots_ - 1));
        const int nh = static_cast<int>(hit_slots.size());
        if (ckpt)
          checkpoint_load(geo_, cv_, s_.checkpoint, av_, s_.temporal, src.data(), dst.data(), nh,
                          stream_);
        else
          checkpoint_load(geo_, av_, copy_, av_, s_.temporal, src.data(), dst.data(), nh, stream_);
      }
      prefill(lens, ids_.data());
    }
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    return elapsed_ms();
  }

 private:
  void donate() {
    checkpoint_store(geo_, av_, s_.temporal, cv_, s_.checkpoint, cached_slot_.data(), one_.data(),
                     1, nullptr, stream_);
  }

  // Prefill of sequences of `lens` tokens (packed from the stream's start) into `slot_ids`, every
  // linear layer: the chunked kernel, as engines prefill (d_k = 128, d_v % 32 == 0), else the
  // recurrent one.
  void prefill(const std::vector<int64_t>& lens, const int32_t* slot_ids) {
    std::vector<int32_t> cu_host(lens.size() + 1, 0);
    int64_t longest = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      cu_host[i + 1] = cu_host[i] + static_cast<int32_t>(lens[i]);
      longest = std::max(longest, lens[i]);
    }
    if (cu_host.back() == 0) return;
    STATECHECK_CUDA_CHECK(cudaMemcpyAsync(cu_.data(), cu_host.data(), cu_host.size() * 4,
                                          cudaMemcpyHostToDevice, stream_));
    for (int l = 0; l < s_.layers; ++l) {
      uint8_t* pool =
          active_.data() + static_cast<size_t>(l) * layer_elems_ * dtype_bytes(s_.temporal);
      const GatedDeltaPoolArgs a =
          pool_args(s_.layer, s_.temporal, pool, slots_, in_, 0, static_cast<int>(lens.size()),
                    slot_ids, cu_.data(), nullptr, static_cast<int>(longest));
      if (chunked_prefill_supported(a))
        chunked_prefill_pool(a, {}, stream_);
      else
        gated_delta_pool(a, stream_);
    }
  }

  double matmul_tflops() override {
    if (matmul_tflops_ == 0.0) {
      GpuTimer timer;
      matmul_tflops_ = measure_mma_bf16_tflops(timer, 10);
    }
    return matmul_tflops_;
  }

  double elapsed_ms() {
    float ms = 0;
    STATECHECK_CUDA_CHECK(cudaEventSynchronize(e1_));
    STATECHECK_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
    return static_cast<double>(ms);
  }

  ServingShape s_;
  int slots_;  // 0 reserved, 1 .. parallel requests, the last the cached single-pool state
  size_t slot_elems_, layer_elems_;
  Codec copy_;  // the slot copy of the single-pool mode
  PoolGeometry geo_;
  DeviceBuffer<uint8_t> active_, ck_values_, ck_scales_;
  DeviceBuffer<uint16_t> active_conv_, ck_conv_;
  StatePoolView av_, cv_;
  DeviceLayerInputs in_;
  DeviceBuffer<int32_t> ids_, one_, cached_slot_, cu_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  double matmul_tflops_ = 0.0;
};

}  // namespace

std::unique_ptr<ServingBackend> cuda_serving_backend(const ServingShape& shape, int64_t max_prompt,
                                                     uint64_t seed) {
  return std::make_unique<CudaServingBackend>(shape, max_prompt, seed);
}

}  // namespace statecheck::cuda
