// The CUDA half of `codec --device cuda`: the same protocol as experiments/codec.cpp run through
// the GPU paths (bf16 q/k/v, fp32 state pool): recurrent prefill with the pool-indexed gated-delta
// kernel, donate through the checkpoint store kernel, copy-on-write through the load kernel,
// decode from the original and from the restored state with bf16 outputs -- next to the fp32
// CPU reference, in the same run. Recorded under codec/cuda/ and as summary keys cuda.*:
//   cuda.<codec>.state_relerr / decode_relerr   errors of the CUDA path (decode outputs are bf16,
//                                               as a serving engine returns them)
//   cuda.<codec>.codec_mismatches               heads whose restored state differs from the CPU
//                                               codec applied to the same GPU state (must be 0)
//   cuda.prefill_state_relerr_vs_cpu            GPU prefill state against the fp32 CPU reference
//   cuda.decode_output_relerr_vs_cpu            GPU decode outputs against the CPU reference
#ifdef STATECHECK_HAVE_CUDA

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/codec/codec.h"
#include "core/dtype/bf16.h"
#include "core/metrics/error_metrics.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "experiments/codec_cuda.h"
#include "kernels/codec/checkpoint_codec.h"
#include "kernels/common/device.h"
#include "kernels/gated_delta/gated_delta_pool.h"

namespace statecheck {

using namespace statecheck::cuda;

namespace {

std::vector<uint16_t> to_bits(const std::vector<float>& a) {
  std::vector<uint16_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = bf16_bits_from_float(a[i]);
  return out;
}

}  // namespace

void run_codec_cuda(const ModelConfig& m, const StatesSource& source, int Tp, int Td,
                    const std::vector<Codec>& codecs, H5Writer& file, Summary& summary) {
  const RecurrenceShape shape = recurrence_shape(m);
  const int L = m.linear_layer_count(), HV = shape.HV, dv = shape.dv, dk = shape.dk,
            N = source.count();
  const size_t head = static_cast<size_t>(dv) * dk, slot = head * HV;
  const int C = static_cast<int>(codecs.size());
  fmt::print("codec (cuda): {}\n", device_description());

  // Active pool of 4 slots: 0 reserved, 1 the prefilled state, 2 the restored state, 3 a copy of
  // slot 1 that the reference decode advances. Checkpoint pool of 2 slots per codec.
  DeviceBuffer<float> pool(4 * slot);
  DeviceBuffer<uint8_t> ckpt_values(2 * slot * 4), ckpt_scales(2 * HV * dk * 4);
  const std::vector<int32_t> one = {1}, two = {2}, three = {3}, cu_pre = {0, Tp}, cu_dec = {0, Td};
  DeviceBuffer<int32_t> d_one = to_device(one), d_two = to_device(two), d_three = to_device(three),
                        d_cu_pre = to_device(cu_pre), d_cu_dec = to_device(cu_dec);
  DeviceBuffer<int32_t> err(4);
  err.fill_bytes(0);
  PoolGeometry geo{1, HV, dv, dk, 0};

  std::vector<ErrorStats> state_err(C), decode_err(C);
  std::vector<long> mismatches(C, 0);
  ErrorStats prefill_vs_cpu, decode_vs_cpu;
  std::vector<float> host_state(slot), restored(slot), cpu_roundtrip(head);
  for (int n = 0; n < N; ++n) {
    for (int l = 0; l < L; ++l) {
      const LayerInputs in = source.layer_inputs(n, l, Tp + Td);
      const std::vector<float> initial = source.initial_layer_state(n, l);
      DeviceBuffer<uint16_t> q = to_device(to_bits(in.q)), k = to_device(to_bits(in.k)),
                             v = to_device(to_bits(in.v));
      DeviceBuffer<float> g = to_device(in.g), beta = to_device(in.beta);
      DeviceBuffer<uint16_t> o_ref(static_cast<size_t>(Td) * HV * dv),
          o_hat(static_cast<size_t>(Td) * HV * dv);
      STATECHECK_CUDA_CHECK(
          cudaMemcpy(pool.data() + slot, initial.data(), slot * 4, cudaMemcpyHostToDevice));

      GatedDeltaPoolArgs a;
      a.num_seqs = 1, a.H = shape.H, a.HV = HV, a.dk = dk, a.dv = dv, a.gate = shape.gate;
      a.state_dtype = Dtype::fp32, a.state_pool = pool.data(), a.pool_slots = 4;
      a.q = q.data(), a.k = k.data(), a.v = v.data(), a.g = g.data(), a.beta = beta.data();
      if (Tp > 0) {
        a.slot_ids = d_one.data(), a.cu_seqlens = d_cu_pre.data(), a.o = nullptr,
        a.max_seq_len = Tp;
        gated_delta_pool(a);
      }
      // Reference decode on a copy of the prefilled state (slot 3).
      STATECHECK_CUDA_CHECK(cudaMemcpy(pool.data() + 3 * slot, pool.data() + slot, slot * 4,
                                       cudaMemcpyDeviceToDevice));
      GatedDeltaPoolArgs d = a;
      const size_t off = static_cast<size_t>(Tp);
      d.q = q.data() + off * shape.H * dk, d.k = k.data() + off * shape.H * dk,
      d.v = v.data() + off * HV * dv;
      d.g = g.data() + off * shape.gate_width(), d.beta = beta.data() + off * HV;
      d.cu_seqlens = d_cu_dec.data(), d.slot_ids = d_three.data(), d.o = o_ref.data(),
      d.max_seq_len = Td;
      gated_delta_pool(d);
      STATECHECK_CUDA_CHECK(
          cudaMemcpy(host_state.data(), pool.data() + slot, slot * 4, cudaMemcpyDeviceToHost));
      const std::vector<uint16_t> o_ref_host = o_ref.download();

      // CPU reference for the same layer: prefill state and decode outputs.
      std::vector<float> S_cpu = initial, o_cpu(static_cast<size_t>(Td) * HV * dv);
      if (Tp > 0) gated_delta_layer_fp32(shape, in, 0, Tp, S_cpu.data(), nullptr);
      prefill_vs_cpu.merge(compare(S_cpu.data(), host_state.data(), slot));
      gated_delta_layer_fp32(shape, in, Tp, Tp + Td, S_cpu.data(), o_cpu.data());
      std::vector<float> o_ref_f(o_ref_host.size());
      for (size_t e = 0; e < o_ref_host.size(); ++e)
        o_ref_f[e] = float_from_bf16_bits(o_ref_host[e]);
      decode_vs_cpu.merge(compare(o_cpu.data(), o_ref_f.data(), o_cpu.size()));

      for (int c = 0; c < C; ++c) {
        const Codec& codec = codecs[c];
        StatePoolView active{pool.data(), nullptr, nullptr, 4};
        StatePoolView ck{ckpt_values.data(), codec.has_scales() ? ckpt_scales.data() : nullptr,
                         nullptr, 2};
        checkpoint_store(geo, active, Dtype::fp32, ck, codec, d_one.data(), d_one.data(), 1,
                         err.data());
        check_store_error(err.data(), geo);
        checkpoint_load(geo, ck, codec, active, Dtype::fp32, d_one.data(), d_two.data(), 1);
        STATECHECK_CUDA_CHECK(
            cudaMemcpy(restored.data(), pool.data() + 2 * slot, slot * 4, cudaMemcpyDeviceToHost));
        for (int h = 0; h < HV; ++h) {
          roundtrip_head(codec, host_state.data() + h * head, dv, dk, cpu_roundtrip.data(), {l, h});
          mismatches[c] +=
              std::memcmp(cpu_roundtrip.data(), restored.data() + h * head, head * 4) != 0;
          state_err[c].merge(
              compare(host_state.data() + h * head, restored.data() + h * head, head));
        }
        d.slot_ids = d_two.data(), d.o = o_hat.data();
        gated_delta_pool(d);
        const std::vector<uint16_t> o_hat_host = o_hat.download();
        std::vector<float> o_hat_f(o_hat_host.size());
        for (size_t e = 0; e < o_hat_host.size(); ++e)
          o_hat_f[e] = float_from_bf16_bits(o_hat_host[e]);
        decode_err[c].merge(compare(o_ref_f.data(), o_hat_f.data(), o_ref_f.size()));
      }
    }
  }
  STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());

  const std::string g = "codec/cuda";
  file.group(g);
  file.attr(g, "device", device_description());
  file.attr(
      g, "path",
      std::string("bf16 q/k/v, fp32 state pool; prefill and decode with gated_delta_pool, "
                  "donate/copy-on-write with checkpoint_store/checkpoint_load; bf16 outputs"));
  for (int c = 0; c < C; ++c) {
    const std::string name = codecs[c].kind_name();
    file.write_scalar(g + "/" + name + "/state_relerr", state_err[c].relerr(), "1",
                      "restored vs prefilled GPU state");
    file.write_scalar(g + "/" + name + "/decode_relerr", decode_err[c].relerr(), "1",
                      "bf16 decode outputs from the restored vs the original GPU state");
    file.write_scalar(
        g + "/" + name + "/codec_mismatches", static_cast<double>(mismatches[c]), "heads",
        "heads whose GPU-restored state differs from the CPU codec on the same state");
    summary.set("cuda." + name + ".state_relerr", state_err[c].relerr());
    summary.set("cuda." + name + ".decode_relerr", decode_err[c].relerr());
    summary.set("cuda." + name + ".codec_mismatches", static_cast<double>(mismatches[c]));
  }
  file.write_scalar(g + "/prefill_state_relerr_vs_cpu", prefill_vs_cpu.relerr(), "1",
                    "GPU prefill state against the fp32 CPU reference");
  file.write_scalar(g + "/decode_output_relerr_vs_cpu", decode_vs_cpu.relerr(), "1",
                    "GPU bf16 decode outputs against the fp32 CPU reference outputs");
  summary.set("cuda.prefill_state_relerr_vs_cpu", prefill_vs_cpu.relerr());
  summary.set("cuda.decode_output_relerr_vs_cpu", decode_vs_cpu.relerr());
}

}  // namespace statecheck

#endif  // STATECHECK_HAVE_CUDA
