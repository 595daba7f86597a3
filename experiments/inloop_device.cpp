// `inloop --device cuda` (experiments/inloop_cases.h): the working-state decode kernels against
// their CPU reference, bit for bit, on inloop's own drives.
//
// Per drive (seed-kda, init-kda, init-gdn, tinylm; the layers and tokens of the CPU protocol) and
// per format with a kernel (int8, int8-sr, fp8_e4m3, fp8_e4m3-sr, bf16, bf16-sr), each layer case
// runs three times from the same starting state, read back at the same log-spaced checkpoints:
//   gpu  the CUDA working-state backend (one ws_decode launch per checkpoint interval);
//   ref  the kernel's CPU reference (ws_decode_reference: the kernel's rounding order, bf16 q, k,
//   v); cpu  inloop's CPU working-state backend (Eigen's summation order, fp32 q, k, v).
// gpu against ref: the fp32 elements whose bits differ, in the states at every checkpoint and in
// all outputs (the claim: none). gpu against cpu and against the fp64 loop: the final state's
// relative error (the cost of the kernel's bf16 inputs and other summation order, next to the
// format's own error).
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "core/metrics/error_metrics.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/inloop_cases.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/common/device.h"
#include "kernels/host/ws_cuda_backend.h"
#include "kernels/host/ws_reference_backend.h"
#include "kernels/working_state/ws_decode.h"
#endif

namespace statecheck::inloop {

#ifdef STATECHECK_HAVE_CUDA
namespace {

// Elements of a and b (same size) whose fp32 bit patterns differ.
int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) fail("inloop --device cuda: traces of different sizes");
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

}  // namespace
#endif

void run_device(const Options& o, H5Writer& file, Summary& summary) {
#ifndef STATECHECK_HAVE_CUDA
  (void)o, (void)file, (void)summary;
  fail("--device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#else
  std::vector<WorkingStateFormat> formats;
  for (const WorkingStateFormat& f : all_working_state_formats())
    if (cuda::ws_decode_supports(f)) formats.push_back(f);
  const int F = static_cast<int>(formats.size());
  const int T = o.quick ? 256 : 8192, layers = o.quick ? 1 : 2, threads = o.thread_count();
  const ModelConfig gdn = family_model(o, GateKind::gdn), kda = family_model(o, GateKind::kda);
  struct DriveCases {
    std::string name;
    std::vector<LayerCase> cases;
  };
  const std::vector<DriveCases> drives = {
      {"seed-kda", synthetic_cases(DriveKind::seed_kda, kda, o.seed, layers, T)},
      {"init-kda", synthetic_cases(DriveKind::init_kda, kda, o.seed, layers, T)},
      {"init-gdn", synthetic_cases(DriveKind::init_gdn, gdn, o.seed, layers, T)},
      {"tinylm", tinylm_cases(o, o.quick ? 256 : 4096)},
  };
  const std::string device = cuda::device_description();
  fmt::print(
      "inloop --device cuda: {}, {} formats with a kernel, against the kernel's CPU "
      "reference\n",
      device, F);
  file.group("inloop/cuda");
  file.attr("inloop/cuda", "device", device);
  std::vector<std::string> names;
  for (const auto& f : formats) names.push_back(f.name());
  file.write_strings("inloop/cuda/formats", names, "formats with a decode kernel, in array order");
  const std::unique_ptr<RecurrenceBackend> fp64 = cpu_fp64_backend();
  int64_t total = 0;
  fmt::print("  {:<9} {:<13} {:>12} {:>12} {:>14} {:>14} {:>14}\n", "drive", "format",
             "state diffs", "output diffs", "gpu vs cpu-ws", "gpu vs fp64", "cpu-ws vs fp64");
  for (const DriveCases& d : drives) {
    const int L = static_cast<int>(d.cases.size());
    const std::vector<int> cps = log_checkpoints(d.cases[0].in.T);
    std::vector<Trace> gpu(F * L), ref(F * L), cpu(F * L), exact(L);
    Progress progress(fmt::format("inloop cuda {}", d.name), 3L * F * L + L);
    for (int i = 0; i < F * L; ++i) {  // one device: the GPU runs one after another
      gpu[i] = run_trace(*cuda::cuda_ws_backend(formats[i / L], o.seed), d.cases[i % L], cps);
      progress.tick();
    }
    parallel_for(2 * F * L + L, threads, [&](int j) {
      if (j < F * L) {
        ref[j] =
            run_trace(*cuda::ws_reference_backend(formats[j / L], o.seed), d.cases[j % L], cps);
      } else if (j < 2 * F * L) {
        const int i = j - F * L;
        cpu[i] = run_trace(*cpu_working_state_backend(formats[i / L], o.seed), d.cases[i % L], cps);
      } else {
        exact[j - 2 * F * L] = run_trace(*fp64, d.cases[j - 2 * F * L], cps);
      }
      progress.tick();
    });
    std::vector<int64_t> state_diffs(F), output_diffs(F);
    std::vector<double> vs_cpu(F), vs_fp64(F), cpu_vs_fp64(F);
    for (int fi = 0; fi < F; ++fi) {
      ErrorStats a, b, c;
      for (int l = 0; l < L; ++l) {
        const int i = fi * L + l;
        for (size_t ci = 0; ci < cps.size(); ++ci)
          state_diffs[fi] += differing(gpu[i].states[ci], ref[i].states[ci]);
        output_diffs[fi] += differing(gpu[i].outputs, ref[i].outputs);
        const std::vector<float>& S = gpu[i].states.back();
        a.merge(compare(cpu[i].states.back().data(), S.data(), S.size()));
        b.merge(compare(exact[l].states.back().data(), S.data(), S.size()));
        c.merge(compare(exact[l].states.back().data(), cpu[i].states.back().data(), S.size()));
      }
      vs_cpu[fi] = a.relerr(), vs_fp64[fi] = b.relerr(), cpu_vs_fp64[fi] = c.relerr();
      const std::string key = fmt::format("inloop.cuda.{}.{}", d.name, names[fi]);
      summary.set(key + ".mismatches", static_cast<double>(state_diffs[fi] + output_diffs[fi]));
      summary.set(key + ".state_relerr_vs_cpu_ws", vs_cpu[fi]);
      summary.set(key + ".state_relerr_vs_fp64", vs_fp64[fi]);
      total += state_diffs[fi] + output_diffs[fi];
      fmt::print("  {:<9} {:<13} {:>12} {:>12} {:>14.3g} {:>14.3g} {:>14.3g}\n", d.name, names[fi],
                 state_diffs[fi], output_diffs[fi], vs_cpu[fi], vs_fp64[fi], cpu_vs_fp64[fi]);
    }
    const std::string g = "inloop/cuda/" + d.name;
    const std::vector<size_t> fd = {static_cast<size_t>(F)};
    file.write(g + "/state_mismatches", state_diffs, fd, "elements",
               "fp32 state elements, over all layers and checkpoints, whose bits differ between "
               "the GPU and the kernel's CPU reference, per format");
    file.write(g + "/output_mismatches", output_diffs, fd, "elements",
               "outputs whose bits differ between the GPU and the kernel's CPU reference");
    file.write(g + "/state_relerr_vs_cpu_ws", vs_cpu, fd, "1",
               "final state, GPU against inloop's CPU working-state backend (bf16 inputs, "
               "summation order)");
    file.write(g + "/state_relerr_vs_fp64", vs_fp64, fd, "1",
               "final state, GPU against the plain fp64 loop");
    file.write(g + "/cpu_ws_state_relerr_vs_fp64", cpu_vs_fp64, fd, "1",
               "final state, inloop's CPU working-state backend against the plain fp64 loop");
  }
  summary.set("inloop.cuda.mismatches", static_cast<double>(total));
  fmt::print("inloop --device cuda: {} differing elements between the GPU and its CPU reference\n",
             total);
#endif
}

}  // namespace statecheck::inloop
