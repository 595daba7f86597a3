// The CUDA half of `chain --device cuda`: the chained-checkpoint protocol of experiments/chain.cpp
// on the GPU paths, next to the CPU run. Per layer the reference runs all T tokens in one launch
// of gated_delta_pool (fp32 state pool, bf16 q/k/v); each n in {1, ..., 128} runs its n segments
// of T / n tokens, and after each segment the running state goes through the checkpoint store and
// load kernels in place (a full encode/decode of the codec). Recorded: the relative error at T per
// n against the GPU reference, for the drive and for the no-contraction ablation.
#ifdef STATECHECK_HAVE_CUDA

#include <cmath>

#include <fmt/format.h>

#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "experiments/chain_cuda.h"
#include "kernels/codec/checkpoint_codec.h"
#include "kernels/common/device.h"
#include "kernels/gated_delta/gated_delta_pool.h"

namespace statecheck {

using namespace statecheck::cuda;

void run_chain_cuda(const ModelConfig& m, const StatesSource& source, const Codec& codec, int T,
                    int layers, double ablation_beta_factor, H5Writer& file, Summary& summary) {
  const RecurrenceShape rs = recurrence_shape(m);
  const int HV = rs.HV, dv = rs.dv, dk = rs.dk;
  std::vector<int> ns;
  for (int n = 1; n <= 128; n *= 2) ns.push_back(n);
  const int slots = 2 + static_cast<int>(ns.size());  // 0 reserved, 1 reference, 2.. one per n
  const size_t slot_elems = static_cast<size_t>(HV) * dv * dk;
  PoolGeometry geo{1, HV, dv, dk, 0};
  DeviceBuffer<float> pool(slots * slot_elems);
  DeviceBuffer<uint8_t> ck_values(slots * slot_elems * codec.value_bytes()),
      ck_scales(std::max<size_t>(1, static_cast<size_t>(slots) * HV * dk * codec.scale_bytes()));
  DeviceBuffer<int32_t> err(4);
  err.fill_bytes(0);
  std::vector<DeviceBuffer<int32_t>> slot_id;
  for (int s = 0; s < slots; ++s) slot_id.push_back(to_device(std::vector<int32_t>{s}));
  auto bits = [](const std::vector<float>& a) {
    std::vector<uint16_t> r(a.size());
    for (size_t i = 0; i < a.size(); ++i) r[i] = bf16_bits_from_float(a[i]);
    return r;
  };

  // [variant][n index] sums of squared error and squared reference at T.
  std::vector<std::vector<double>> e2(2, std::vector<double>(ns.size(), 0.0)), r2 = e2;
  for (int l = 0; l < layers; ++l) {
    const LayerInputs base = source.layer_inputs(0, l, T);
    const std::vector<float> initial = source.initial_layer_state(0, l);
    for (int variant = 0; variant < 2; ++variant) {
      LayerInputs in = base;
      if (variant == 1) {
        for (auto& x : in.g) x = 0.0f;
        for (auto& b : in.beta) b = static_cast<float>(b * ablation_beta_factor);
      }
      DeviceBuffer<uint16_t> q = to_device(bits(in.q)), k = to_device(bits(in.k)),
                             v = to_device(bits(in.v));
      DeviceBuffer<float> g = to_device(in.g), beta = to_device(in.beta);
      for (int s = 1; s < slots; ++s)
        STATECHECK_CUDA_CHECK(cudaMemcpy(pool.data() + s * slot_elems, initial.data(),
                                         slot_elems * 4, cudaMemcpyHostToDevice));
      DeviceBuffer<int32_t> cu(2);
      auto run = [&](int slot, int t0, int t1) {
        const std::vector<int32_t> cu_host = {0, t1 - t0};
        STATECHECK_CUDA_CHECK(cudaMemcpy(cu.data(), cu_host.data(), 8, cudaMemcpyHostToDevice));
        GatedDeltaPoolArgs a;
        a.num_seqs = 1, a.H = rs.H, a.HV = HV, a.dk = dk, a.dv = dv, a.gate = rs.gate;
        a.state_dtype = Dtype::fp32, a.state_pool = pool.data(), a.pool_slots = slots;
        a.slot_ids = slot_id[slot].data(), a.cu_seqlens = cu.data(), a.max_seq_len = t1 - t0;
        a.q = q.data() + static_cast<size_t>(t0) * rs.H * dk,
        a.k = k.data() + static_cast<size_t>(t0) * rs.H * dk;
        a.v = v.data() + static_cast<size_t>(t0) * HV * dv,
        a.g = g.data() + static_cast<size_t>(t0) * rs.gate_width();
        a.beta = beta.data() + static_cast<size_t>(t0) * HV;
        gated_delta_pool(a);
      };
      run(1, 0, T);
      StatePoolView av{pool.data(), nullptr, nullptr, slots};
      StatePoolView cv{ck_values.data(), codec.has_scales() ? ck_scales.data() : nullptr, nullptr,
                       slots};
      for (size_t i = 0; i < ns.size(); ++i) {
        const int slot = 2 + static_cast<int>(i), spacing = T / ns[i];
        for (int c = 0; c < ns[i]; ++c) {
          run(slot, c * spacing, (c + 1) * spacing);
          checkpoint_store(geo, av, Dtype::fp32, cv, codec, slot_id[slot].data(),
                           slot_id[slot].data(), 1, err.data());
          checkpoint_load(geo, cv, codec, av, Dtype::fp32, slot_id[slot].data(),
                          slot_id[slot].data(), 1);
        }
      }
      check_store_error(err.data(), geo);
      const std::vector<float> all = pool.download();
      const float* ref = all.data() + slot_elems;
      for (size_t i = 0; i < ns.size(); ++i) {
        const float* x = all.data() + (2 + i) * slot_elems;
        for (size_t e = 0; e < slot_elems; ++e) {
          const double d = double(x[e]) - ref[e];
          e2[variant][i] += d * d;
          r2[variant][i] += double(ref[e]) * ref[e];
        }
      }
    }
  }
  const std::string g = "chain/cuda";
  file.group(g);
  file.attr(g, "device", device_description());
  file.attr(g, "layers_measured", static_cast<int64_t>(layers));
  const char* names[2] = {"", "ablation_no_contraction."};
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<double> rel(ns.size());
    for (size_t i = 0; i < ns.size(); ++i) {
      rel[i] = r2[variant][i] > 0 ? std::sqrt(e2[variant][i] / r2[variant][i]) : 0.0;
      summary.set(fmt::format("cuda.chain.{}relerr_n{}", names[variant], ns[i]), rel[i]);
    }
    const double ratio = rel[5] > 0 ? rel[7] / rel[5] : std::nan("");
    summary.set(fmt::format("cuda.chain.{}saturation_ratio", names[variant]), ratio);
    file.write(g + (variant ? "/ablation_no_contraction" : "") + "/relerr", rel, {ns.size()}, "1",
               "GPU path: relative error at T after n chained checkpoints against the GPU "
               "reference, per n");
  }
  fmt::print(
      "chain (cuda): relerr n1 {:.4g}, n32 {:.4g}, n128 {:.4g}, saturation {:.3f}; ablation "
      "{:.3f}\n",
      summary.get("cuda.chain.relerr_n1"), summary.get("cuda.chain.relerr_n32"),
      summary.get("cuda.chain.relerr_n128"), summary.get("cuda.chain.saturation_ratio"),
      summary.get("cuda.chain.ablation_no_contraction.saturation_ratio"));
}

}  // namespace statecheck

#endif  // STATECHECK_HAVE_CUDA
