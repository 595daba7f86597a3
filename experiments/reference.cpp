// Experiment `reference`: statecheck's two references run over every sequence and linear layer
// of an inputs file (drive 'inputs', docs/real_models.md), their outputs and final states written
// out, and checked against the reference tensors the exporting implementation stored beside the
// inputs (layers.{i}.o, layers.{i}.final_state).
//
// Per sequence n and linear layer l, from the file's initial state (or zero) over all T tokens:
//   fp64 scalar loop -> o64 [T, HV, d_v], S64 [HV, d_v, d_k];  fp32 Eigen -> o32, S32.
// Written under reference/layers.{i}/: fp64_outputs [N, T, HV, d_v], fp64_final_state
// [N, HV, d_v, d_k], fp32_outputs, fp32_final_state (float64 datasets; for the small configs of a
// cross-check: N L T HV d_v values each). Summary keys (relative Frobenius errors over all
// sequences and layers, and the largest of one layer):
//   reference.fp32_vs_fp64.output_relerr / final_state_relerr (/ _layer_max)
//   reference.file_vs_fp64.output_relerr / final_state_relerr (/ _layer_max)   with reference
//   tensors in the file
// A stored final state equal, bit for bit, to the starting state while the fp64 recurrence moved
// it is refused: the implementation that produced it did not write its state back (the
// flash-linear-attention `inplace_final_state` trap, docs/real_models.md).
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/drive/inputs_file.h"
#include "core/metrics/error_metrics.h"
#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/experiment.h"

namespace statecheck {

void run_reference(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  if (!o.drive || o.drive->kind != DriveKind::inputs)
    fail("reference: needs --drive inputs --inputs FILE (it checks a file's reference tensors)");
  const InputsFile in(o.drive->inputs_file, m);
  const RecurrenceShape& shape = in.shape();
  const int N = in.count(), T = in.tokens(), L = m.linear_layer_count();
  const int HV = shape.HV, dv = shape.dv, dk = shape.dk;
  const size_t out_size = static_cast<size_t>(T) * HV * dv,
               state_size = static_cast<size_t>(HV) * dv * dk;
  fmt::print(
      "reference: model {} (TP {}), {} sequence(s) x {} tokens x {} linear layers, q/k {}, scale "
      "{:.6g}, reference tensors {}\n",
      m.name, m.tp, N, T, L, shape.qk_l2norm ? "L2-normalised in the recurrence" : "as given",
      shape.effective_scale(), in.has_reference() ? "present" : "absent");
  fmt::print("reference: writes {:.3g} MB of fp64 outputs and states (meant for small configs)\n",
             2.0 * 8 * N * L * (out_size + state_size) / 1e6);

  struct Item {
    std::vector<double> o64, S64;
    std::vector<float> o32, S32;
    ErrorStats o32_err, S32_err, file_o_err, file_S_err;
  };
  std::vector<Item> items(static_cast<size_t>(N) * L);
  Progress progress("reference layers", static_cast<long>(items.size()));
  parallel_for(static_cast<int>(items.size()), o.thread_count(), [&](int item) {
    const int n = item / L, l = item % L;
    Item& it = items[item];
    const LayerInputs x = in.layer_inputs(n, l, T);
    const std::vector<float> S0 = in.initial_layer_state(n, l);
    it.S64.assign(S0.begin(), S0.end());
    it.o64.assign(out_size, 0.0);
    gated_delta_layer_fp64(shape, x, 0, T, it.S64.data(), it.o64.data());
    it.S32 = S0;
    it.o32.assign(out_size, 0.0f);
    gated_delta_layer_fp32(shape, x, 0, T, it.S32.data(), it.o32.data());
    it.o32_err = compare(it.o64.data(), it.o32.data(), out_size);
    it.S32_err = compare(it.S64.data(), it.S32.data(), state_size);
    if (in.has_reference()) {
      const std::vector<float> o_file = in.reference_outputs(n, l);
      const std::vector<float> S_file = in.reference_final_state(n, l);
      bool moved = false;
      for (size_t e = 0; e < state_size && !moved; ++e)
        moved = it.S64[e] != static_cast<double>(S0[e]);
      if (moved && std::memcmp(S_file.data(), S0.data(), state_size * sizeof(float)) == 0)
        fail(
            "{}: tensor 'layers.{}.final_state' of sequence {} equals its starting state bit for "
            "bit, but the recurrence over its {} tokens moves the state: the implementation that "
            "exported it did not write its final state back (see docs/real_models.md, "
            "\"inplace_final_state\")",
            in.path(), in.file_layer(l), n, T);
      it.file_o_err = compare(it.o64.data(), o_file.data(), out_size);
      it.file_S_err = compare(it.S64.data(), S_file.data(), state_size);
    }
    progress.tick();
  });

  const std::string g = "reference";
  file.group(g);
  file.attr(g, "inputs_file", in.path());
  file.attr(g, "sequences", static_cast<int64_t>(N));
  file.attr(g, "tokens", static_cast<int64_t>(T));
  file.attr(g, "qk_l2norm_in_recurrence", static_cast<int64_t>(shape.qk_l2norm ? 1 : 0));
  file.attr(g, "scale", static_cast<double>(shape.effective_scale()));
  ErrorStats o32_all, S32_all, fo_all, fS_all;
  double o32_max = 0, S32_max = 0, fo_max = 0, fS_max = 0;
  for (int l = 0; l < L; ++l) {
    ErrorStats o32_l, S32_l, fo_l, fS_l;
    std::vector<double> o64(N * out_size), S64(N * state_size), o32(N * out_size),
        S32(N * state_size);
    for (int n = 0; n < N; ++n) {
      const Item& it = items[static_cast<size_t>(n) * L + l];
      o32_l.merge(it.o32_err), S32_l.merge(it.S32_err), fo_l.merge(it.file_o_err),
          fS_l.merge(it.file_S_err);
      std::copy(it.o64.begin(), it.o64.end(), o64.begin() + n * out_size);
      std::copy(it.S64.begin(), it.S64.end(), S64.begin() + n * state_size);
      std::copy(it.o32.begin(), it.o32.end(), o32.begin() + n * out_size);
      std::copy(it.S32.begin(), it.S32.end(), S32.begin() + n * state_size);
    }
    const std::string lg = fmt::format("{}/layers.{}", g, in.file_layer(l));
    const std::vector<size_t> os{size_t(N), size_t(T), size_t(HV), size_t(dv)},
        ss{size_t(N), size_t(HV), size_t(dv), size_t(dk)};
    file.write(lg + "/fp64_outputs", o64, os, "1", "fp64 loop outputs o_t [N, T, HV, d_v]");
    file.write(lg + "/fp64_final_state", S64, ss, "1", "fp64 loop state after T tokens");
    file.write(lg + "/fp32_outputs", o32, os, "1", "fp32 Eigen outputs [N, T, HV, d_v]");
    file.write(lg + "/fp32_final_state", S32, ss, "1", "fp32 Eigen state after T tokens");
    file.write_scalar(lg + "/fp32_vs_fp64_output_relerr", o32_l.relerr(), "1",
                      "||o32 - o64||_F / ||o64||_F");
    if (in.has_reference()) {
      file.write_scalar(lg + "/file_vs_fp64_output_relerr", fo_l.relerr(), "1",
                        "||o_file - o64||_F / ||o64||_F");
      file.write_scalar(lg + "/file_vs_fp64_final_state_relerr", fS_l.relerr(), "1",
                        "||S_file - S64||_F / ||S64||_F");
    }
    o32_all.merge(o32_l), S32_all.merge(S32_l), fo_all.merge(fo_l), fS_all.merge(fS_l);
    o32_max = std::max(o32_max, o32_l.relerr()), S32_max = std::max(S32_max, S32_l.relerr());
    fo_max = std::max(fo_max, fo_l.relerr()), fS_max = std::max(fS_max, fS_l.relerr());
  }
  summary.set("reference.fp32_vs_fp64.output_relerr", o32_all.relerr());
  summary.set("reference.fp32_vs_fp64.final_state_relerr", S32_all.relerr());
  summary.set("reference.fp32_vs_fp64.output_relerr_layer_max", o32_max);
  summary.set("reference.fp32_vs_fp64.final_state_relerr_layer_max", S32_max);
  if (in.has_reference()) {
    summary.set("reference.file_vs_fp64.output_relerr", fo_all.relerr());
    summary.set("reference.file_vs_fp64.final_state_relerr", fS_all.relerr());
    summary.set("reference.file_vs_fp64.output_relerr_layer_max", fo_max);
    summary.set("reference.file_vs_fp64.final_state_relerr_layer_max", fS_max);
  }
  fmt::print("reference: {:.1f} s\n", progress.elapsed());
}

}  // namespace statecheck
