// Shared by the GPU tests of the pool-indexed recurrence kernels (test_gated_delta_pool.cpp,
// test_chunked_prefill.cpp): a host batch of random pool states and drive inputs, its guarded
// device copy with the launch arguments over it, and reading a pool element whatever its dtype.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/rng.h"
#include "kernels/gated_delta/gated_delta_pool_reference.h"
#include "tests/gpu/gpu_test_util.h"

namespace statecheck::cuda::testing {

// A batch over a pool of `slots` slots of N(0, 0.06^2) states in `dtype`, one sequence per entry
// of `lengths` (tokens) on distinct random slot ids, inputs from the drive of the gate
// (init_gdn or seed_kda; their values are bf16-exact).
inline HostPoolBatch make_pool_batch(int H, int HV, int dk, int dv, GateKind gate, Dtype dtype,
                                     const std::vector<int>& lengths, bool qk_l2norm, int slots,
                                     uint64_t seed) {
  HostPoolBatch b;
  b.H = H, b.HV = HV, b.dk = dk, b.dv = dv, b.gate = gate, b.state_dtype = dtype;
  b.qk_l2norm = qk_l2norm;
  const size_t n = static_cast<size_t>(slots) * HV * dv * dk;
  Rng rng(seed);
  std::vector<float> pool(n);
  for (auto& x : pool) x = static_cast<float>(0.06 * rng.normal());
  if (dtype == Dtype::fp32)
    b.pool_fp32 = pool;
  else {
    b.pool_bf16.resize(n);
    for (size_t e = 0; e < n; ++e) b.pool_bf16[e] = bf16_bits_from_float(pool[e]);
  }
  std::vector<int32_t> ids(slots);
  std::iota(ids.begin(), ids.end(), 0);
  for (int i = slots - 1; i > 0; --i) std::swap(ids[i], ids[rng.below(i + 1)]);
  b.slot_ids.assign(ids.begin(), ids.begin() + static_cast<int>(lengths.size()));
  b.cu_seqlens = {0};
  for (int len : lengths) b.cu_seqlens.push_back(b.cu_seqlens.back() + len);
  RecurrenceShape s;
  s.H = H, s.HV = HV, s.dk = dk, s.dv = dv, s.gate = gate;
  const LayerInputs in =
      synthetic_inputs(gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::seed_kda, s, seed,
                       0, b.cu_seqlens.back());
  auto bits = [](const std::vector<float>& a) {
    std::vector<uint16_t> out(a.size());
    for (size_t i = 0; i < a.size(); ++i) out[i] = bf16_bits_from_float(a[i]);
    return out;
  };
  b.q = bits(in.q), b.k = bits(in.k), b.v = bits(in.v);
  b.g = in.g, b.beta = in.beta;
  return b;
}

// What a launch left on the device: the pool in its dtype, the outputs (0xFFFF, a bf16 NaN, where
// the kernel wrote nothing) and whether every guard after the pool and the outputs is intact.
struct LaunchResult {
  std::vector<float> pool32;
  std::vector<uint16_t> pool16, o;
  bool guards_intact = false;
};

// A batch on the device, every buffer guarded (gpu_test_util.h), the outputs prefilled with bf16
// NaN, and the launch arguments of its shapes over it.
class DevicePoolBatch {
 public:
  DevicePoolBatch(const HostPoolBatch& b, int64_t pool_slots)
      : b_(b),
        slots_(pool_slots),
        pool32_(b.pool_fp32),
        pool16_(b.pool_bf16),
        ids_(b.slot_ids),
        cu_(b.cu_seqlens),
        q_(b.q),
        k_(b.k),
        v_(b.v),
        g_(b.g),
        beta_(b.beta),
        o_(std::vector<uint16_t>(static_cast<size_t>(b.cu_seqlens.back()) * b.HV * b.dv, 0xFFFF)) {}

  GatedDeltaPoolArgs args(bool with_outputs) {
    GatedDeltaPoolArgs a;
    a.num_seqs = static_cast<int>(b_.slot_ids.size());
    a.H = b_.H, a.HV = b_.HV, a.dk = b_.dk, a.dv = b_.dv, a.gate = b_.gate;
    a.state_dtype = b_.state_dtype, a.qk_l2norm = b_.qk_l2norm, a.scale = b_.scale;
    a.state_pool = b_.state_dtype == Dtype::fp32 ? static_cast<void*>(pool32_.data())
                                                 : static_cast<void*>(pool16_.data());
    a.pool_slots = slots_;
    a.slot_ids = ids_.data(), a.cu_seqlens = cu_.data();
    a.q = q_.data(), a.k = k_.data(), a.v = v_.data(), a.g = g_.data(), a.beta = beta_.data();
    a.o = with_outputs ? o_.data() : nullptr;
    return a;
  }

  LaunchResult download() const {
    LaunchResult r;
    r.pool32 = pool32_.download(), r.pool16 = pool16_.download(), r.o = o_.download();
    r.guards_intact = pool32_.guard_intact() && pool16_.guard_intact() && o_.guard_intact();
    return r;
  }

 private:
  const HostPoolBatch& b_;
  int64_t slots_;
  Guarded<float> pool32_;
  Guarded<uint16_t> pool16_;
  Guarded<int32_t> ids_, cu_;
  Guarded<uint16_t> q_, k_, v_;
  Guarded<float> g_, beta_;
  Guarded<uint16_t> o_;
};

inline float pool_value(const HostPoolBatch& b, size_t e) {
  return b.state_dtype == Dtype::fp32 ? b.pool_fp32[e] : float_from_bf16_bits(b.pool_bf16[e]);
}

}  // namespace statecheck::cuda::testing
