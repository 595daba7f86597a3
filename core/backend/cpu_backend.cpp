// The CPU recurrence backends: the fp32 Eigen reference and the fp64 loop over host states.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/backend/recurrence_backend.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

void check_range(const LayerInputs& in, int t0, int t1) {
  if (t0 < 0 || t1 < t0 || t1 > in.T)
    fail("advance: tokens [{}, {}) outside the bound {} tokens", t0, t1, in.T);
}

void check_state(int state, int states) {
  if (state < 0 || state >= states) fail("state {} outside the run's {} states", state, states);
}

// States as arrays of T (float or double) on the host.
template <typename T>
class HostLayerRun : public LayerRun {
 public:
  HostLayerRun(const RecurrenceShape& shape, const LayerInputs& in, int states)
      : shape_(shape), in_(in), size_(static_cast<size_t>(shape.HV) * shape.dv * shape.dk) {
    in_.check(shape_);
    if (states < 1) fail("a layer run needs at least one state, got {}", states);
    S_.assign(states, std::vector<T>(size_, T(0)));
  }
  int states() const override { return static_cast<int>(S_.size()); }
  void write(int s, const float* S_hvk) override {
    check_state(s, states());
    std::copy(S_hvk, S_hvk + size_, S_[s].begin());
  }
  void read(int s, float* S_hvk) const override {
    check_state(s, states());
    for (size_t e = 0; e < size_; ++e) S_hvk[e] = static_cast<float>(S_[s][e]);
  }
  void copy(int dst, int src) override {
    check_state(dst, states());
    check_state(src, states());
    S_[dst] = S_[src];
  }
  void roundtrip(int s, const Codec& codec, int layer) override {
    check_state(s, states());
    const size_t head = static_cast<size_t>(shape_.dv) * shape_.dk;
    std::vector<float> in(head), out(head);
    for (int h = 0; h < shape_.HV; ++h) {
      T* S_h = S_[s].data() + h * head;
      for (size_t e = 0; e < head; ++e) in[e] = static_cast<float>(S_h[e]);
      roundtrip_head(codec, in.data(), shape_.dv, shape_.dk, out.data(), {layer, h});
      std::copy(out.begin(), out.end(), S_h);
    }
  }

 protected:
  RecurrenceShape shape_;
  LayerInputs in_;
  size_t size_;
  std::vector<std::vector<T>> S_;
};

class Fp32Run : public HostLayerRun<float> {
 public:
  Fp32Run(const RecurrenceShape& shape, const LayerInputs& in, int states, Dtype storage)
      : HostLayerRun(shape, in, states), storage_(storage) {}
  void advance(int s, int t0, int t1, float* o) override {
    check_state(s, states());
    check_range(in_, t0, t1);
    gated_delta_layer_fp32(shape_, in_, t0, t1, S_[s].data(), o, storage_);
  }

 private:
  Dtype storage_;
};

class Fp64Run : public HostLayerRun<double> {
 public:
  using HostLayerRun::HostLayerRun;
  void advance(int s, int t0, int t1, float* o) override {
    check_state(s, states());
    check_range(in_, t0, t1);
    std::vector<double> o64(o ? static_cast<size_t>(t1 - t0) * shape_.HV * shape_.dv : 0);
    gated_delta_layer_fp64(shape_, in_, t0, t1, S_[s].data(), o ? o64.data() : nullptr);
    for (size_t e = 0; e < o64.size(); ++e) o[e] = static_cast<float>(o64[e]);
  }
};

class CpuFp32Backend : public RecurrenceBackend {
 public:
  explicit CpuFp32Backend(Dtype storage) : storage_(storage) {
    if (storage != Dtype::fp32 && storage != Dtype::bf16)
      fail("cpu-fp32 backend: state storage {} is not fp32 or bf16", dtype_name(storage));
  }
  std::string name() const override {
    return storage_ == Dtype::fp32 ? "cpu-fp32" : "cpu-fp32-bf16-state";
  }
  int max_threads() const override { return 1 << 12; }
  std::unique_ptr<LayerRun> bind(const RecurrenceShape& shape, const LayerInputs& in,
                                 int states) const override {
    return std::make_unique<Fp32Run>(shape, in, states, storage_);
  }

 private:
  Dtype storage_;
};

class CpuFp64Backend : public RecurrenceBackend {
 public:
  std::string name() const override { return "cpu-fp64"; }
  int max_threads() const override { return 1 << 12; }
  std::unique_ptr<LayerRun> bind(const RecurrenceShape& shape, const LayerInputs& in,
                                 int states) const override {
    return std::make_unique<Fp64Run>(shape, in, states);
  }
};

// A working-state run: states of T (float or double) plus their fp32 error-feedback residuals.
template <typename T>
class WorkingStateRunOf : public HostLayerRun<T> {
 public:
  WorkingStateRunOf(const RecurrenceShape& shape, const LayerInputs& in, int states,
                    const WorkingStateRun& ws)
      : HostLayerRun<T>(shape, in, states), ws_(ws) {
    e_.assign(states, std::vector<float>(ws.format.error_feedback() ? this->size_ : 0, 0.0f));
  }
  void write(int s, const float* S_hvk) override {
    HostLayerRun<T>::write(s, S_hvk);
    std::fill(e_[s].begin(), e_[s].end(), 0.0f);
  }
  void copy(int dst, int src) override {
    HostLayerRun<T>::copy(dst, src);
    e_[dst] = e_[src];
  }
  void advance(int s, int t0, int t1, float* o) override {
    check_state(s, this->states());
    check_range(this->in_, t0, t1);
    float* e = e_[s].empty() ? nullptr : e_[s].data();
    if constexpr (std::is_same_v<T, float>) {
      gated_delta_layer_fp32_ws(this->shape_, this->in_, t0, t1, this->S_[s].data(), e, o, ws_);
    } else {
      std::vector<double> o64(o ? static_cast<size_t>(t1 - t0) * this->shape_.HV * this->shape_.dv
                                : 0);
      gated_delta_layer_fp64_ws(this->shape_, this->in_, t0, t1, this->S_[s].data(), e,
                                o ? o64.data() : nullptr, ws_);
      for (size_t n = 0; n < o64.size(); ++n) o[n] = static_cast<float>(o64[n]);
    }
  }

 private:
  WorkingStateRun ws_;
  std::vector<std::vector<float>> e_;
};

class CpuWorkingStateBackend : public RecurrenceBackend {
 public:
  CpuWorkingStateBackend(WorkingStateFormat format, uint64_t seed, bool fp64)
      : format_(format), seed_(seed), fp64_(fp64) {}
  std::string name() const override {
    return std::string(fp64_ ? "cpu-fp64" : "cpu-fp32") + "-ws-" + format_.name();
  }
  int max_threads() const override { return 1 << 12; }
  WorkingStateFormat working_state() const override { return format_; }
  std::unique_ptr<LayerRun> bind(const RecurrenceShape& shape, const LayerInputs& in,
                                 int states) const override {
    return bind_at(shape, in, states, 0, 0);
  }
  std::unique_ptr<LayerRun> bind_at(const RecurrenceShape& shape, const LayerInputs& in, int states,
                                    int layer, int sequence) const override {
    if (layer < 0 || sequence < 0)
      fail("{}: layer {} and sequence {} must be >= 0", name(), layer, sequence);
    const WorkingStateRun ws{format_, seed_, layer, sequence};
    if (fp64_) return std::make_unique<WorkingStateRunOf<double>>(shape, in, states, ws);
    return std::make_unique<WorkingStateRunOf<float>>(shape, in, states, ws);
  }

 private:
  WorkingStateFormat format_;
  uint64_t seed_;
  bool fp64_;
};

}  // namespace

std::unique_ptr<RecurrenceBackend> cpu_working_state_backend(WorkingStateFormat format,
                                                             uint64_t seed, bool fp64) {
  return std::make_unique<CpuWorkingStateBackend>(format, seed, fp64);
}

std::unique_ptr<RecurrenceBackend> cpu_fp32_backend(Dtype storage) {
  return std::make_unique<CpuFp32Backend>(storage);
}

std::unique_ptr<RecurrenceBackend> cpu_fp64_backend() {
  return std::make_unique<CpuFp64Backend>();
}

LayerRecurrenceFn layer_recurrence(const RecurrenceBackend& backend) {
  return [&backend](int layer, const RecurrenceShape& shape, const LayerInputs& in, float* S,
                    float* o) {
    const std::unique_ptr<LayerRun> run = backend.bind_at(shape, in, 1, layer, 0);
    run->write(0, S);
    run->advance(0, 0, in.T, o);
    run->read(0, S);
  };
}

}  // namespace statecheck
