// Experiment `inloop`: the working state kept in a compressed format between tokens
// (docs/working_state.md, docs/experiments.md "inloop").
//
// Protocol (every measurement runs over recurrence backends, core/backend/recurrence_backend.h:
// one backend per working-state format from a factory, so a device backend with the same formats
// runs the same code):
//   1. along time, per drive (seed-kda, init-kda on the KDA model, init-gdn on the GDN model,
//      tinylm on the tiny model's held-out text): `layers` layers, at most 8 value heads each
//      (the shape's first 8, with their key heads), T tokens (8192, tinylm 4096; quick 256) from
//      the drive's starting state. Each format's run is compared at log-spaced checkpoints with
//      the fp32 working state (the plain fp32 reference) and the plain fp64 loop fed the same
//      inputs: state relative error, and the output relative error over the tokens since the last
//      checkpoint. Next to it, the first-order contraction model of `chain` with an injection at
//      every token: energy(t) = sum_h eps_h(t)^2 (1 - exp(-rate_h t)) / (1 - exp(-rate_h)),
//      eps_h(t) the error one storage adds to the reference state at t, rate_h the head's mean
//      contraction rate (core/metrics/contraction_model.h); error feedback is modelled as one
//      storage error (its residual re-enters the next quantization instead of accumulating);
//   2. the tiny language model over the first N bytes of its held-out text (N = 4096; quick 512;
//      experiments/inloop_kl.cpp)
//      from a zero state, once with the plain fp32 recurrence and once per format:
//      per-position KL(p_fp32 || p_format) in nats, top-1 agreement, and both per position bin;
//   3. a decay sweep: init-gdn inputs with the log-decay of every head and token replaced by one
//      value from -1e-4 to -1e-1 (quick: three), 2048 tokens (quick 128), the same errors and the
//      model at the last token;
//   4. the verdict: the cheapest format (bytes per element of the tiny model's heads) whose mean
//      KL stays at or below the bf16 working state's, and whether int8 RNE diverges (KL growing
//      along the text: second half over first half above 2, or top-1 agreement below 0.9).
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "core/backend/recurrence_backend.h"
#include "core/metrics/contraction_model.h"
#include "core/metrics/error_metrics.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "core/working_state/column_store.h"
#include "experiments/experiment.h"
#include "experiments/inloop_cases.h"

namespace statecheck {

namespace {

using inloop::family_model;
using inloop::format_index;
using inloop::FormatBackendFactory;
using inloop::KlResult;
using inloop::LayerCase;
using inloop::log_checkpoints;
using inloop::measure_kl;
using inloop::percentile;
using inloop::record_kl;
using inloop::run_trace;
using inloop::synthetic_cases;
using inloop::tinylm_cases;
using inloop::Trace;

// Output relative error at which a format is called safe in the decay sweep: the public
// decode-error requirement after an int8 restore (docs/numerics.md), 1.5e-2.
constexpr double kSafeOutputRelerr = 1.5e-2;

// The error one storage in format f adds to the state S_hvk at token `token` of layer `layer`:
// ||store(S)[:, j] - S[:, j]||^2 per (head, key channel), [HV, d_k], the residual starting at zero.
std::vector<double> storage_energy(const WorkingStateFormat& f, const RecurrenceShape& s,
                                   const float* S_hvk, uint64_t seed, int layer, int token) {
  const size_t n = static_cast<size_t>(s.dv) * s.dk;
  std::vector<double> out(static_cast<size_t>(s.HV) * s.dk, 0.0);
  std::vector<float> x(n), e(n);
  for (int h = 0; h < s.HV; ++h) {
    std::copy(S_hvk + h * n, S_hvk + (h + 1) * n, x.begin());
    std::fill(e.begin(), e.end(), 0.0f);
    ws_store_head(f, x.data(), e.data(), s.dv, s.dk,
                  {rounding_key(seed, static_cast<uint32_t>(layer), static_cast<uint32_t>(h)),
                   static_cast<uint32_t>(token), 0u});
    for (size_t k = 0; k < n; ++k) {
      const double d = static_cast<double>(x[k]) - S_hvk[h * n + k];
      out[static_cast<size_t>(h) * s.dk + k % s.dk] += d * d;
    }
  }
  return out;
}

// The contraction model's error energy after `t` tokens with one storage per token: per (head,
// key channel) eps^2 (1 - exp(-rate t)) / (1 - exp(-rate)) (accumulated_checkpoints with spacing
// 1), summed; error feedback: eps^2 (its residual re-enters the next quantization).
double model_energy(const WorkingStateFormat& f, const std::vector<double>& eps,
                    const std::vector<double>& rates, int t) {
  if (f.kind == WorkingStateKind::fp32) return 0.0;
  double e = 0.0;
  for (size_t i = 0; i < eps.size(); ++i)
    e += f.error_feedback() ? eps[i] : eps[i] * accumulated_checkpoints(rates[i], t, 1);
  return e;
}

// Errors of one format along time, merged over layers: [C] each.
struct CurveStats {
  std::vector<ErrorStats> state, state_fp64, output, output_fp64;
  std::vector<double> model_energy, ref_energy;  // contraction model and ||S_fp32||^2
  std::vector<double> head_relerr;               // [L * HV] at T, against fp32
  void init(int C) {
    state.assign(C, {}), state_fp64.assign(C, {}), output.assign(C, {}), output_fp64.assign(C, {});
    model_energy.assign(C, 0.0), ref_energy.assign(C, 0.0);
  }
};

struct DriveResult {
  std::string drive, model;
  RecurrenceShape shape;
  int layers = 0, T = 0;
  std::vector<int> checkpoints;
  std::vector<CurveStats> formats;       // [F]
  std::vector<ErrorStats> fp32_vs_fp64;  // [C] plain fp32 against the fp64 loop (states)
  std::vector<double> checkpoint_int8;   // [C] one int8 storage of the fp32 state, relerr
};

// Measures one drive's layer cases on every format's backend against the fp32 and fp64 ones.
DriveResult measure_drive(const std::string& drive, const std::string& model,
                          const std::vector<LayerCase>& cases,
                          const std::vector<WorkingStateFormat>& formats,
                          const FormatBackendFactory& factory, const RecurrenceBackend& fp64,
                          uint64_t seed, int threads) {
  DriveResult r;
  r.drive = drive, r.model = model, r.shape = cases.at(0).shape;
  r.layers = static_cast<int>(cases.size()), r.T = cases[0].in.T;
  r.checkpoints = log_checkpoints(r.T);
  const int C = static_cast<int>(r.checkpoints.size()), F = static_cast<int>(formats.size());
  const int L = r.layers, HV = r.shape.HV;
  const size_t hv = static_cast<size_t>(HV) * r.shape.dv;
  const std::unique_ptr<RecurrenceBackend> fp32 = factory(WorkingStateFormat{});
  std::vector<Trace> ref32(L), ref64(L);
  std::vector<std::vector<double>> rates(L);  // [L][HV d_k] contraction rates
  Progress refs(fmt::format("inloop {} references", drive), 2 * L);
  parallel_for(2 * L, threads, [&](int i) {
    const LayerCase& c = cases[i / 2];
    if (i % 2 == 0) {
      ref32[i / 2] = run_trace(*fp32, c, r.checkpoints);
      rates[i / 2] = contraction_rates(c.shape, c.in);
    } else {
      ref64[i / 2] = run_trace(fp64, c, r.checkpoints);
    }
    refs.tick();
  });
  r.fp32_vs_fp64.assign(C, {});
  r.checkpoint_int8.assign(C, 0.0);
  for (int l = 0; l < L; ++l)
    for (int ci = 0; ci < C; ++ci)
      r.fp32_vs_fp64[ci].merge(compare(ref64[l].states[ci].data(), ref32[l].states[ci].data(),
                                       ref32[l].states[ci].size()));

  // [F][L] partial results, merged below.
  std::vector<std::vector<CurveStats>> part(F, std::vector<CurveStats>(L));
  Progress progress(fmt::format("inloop {} formats", drive), static_cast<long>(F) * L);
  parallel_for(F * L, threads, [&](int item) {
    const int fi = item / L, l = item % L;
    const WorkingStateFormat& f = formats[fi];
    const LayerCase& c = cases[l];
    const std::unique_ptr<RecurrenceBackend> b = factory(f);
    const Trace t = run_trace(*b, c, r.checkpoints);
    CurveStats& s = part[fi][l];
    s.init(C);
    int t0 = 0;
    for (int ci = 0; ci < C; ++ci) {
      const int cp = r.checkpoints[ci];
      const std::vector<float>& S32 = ref32[l].states[ci];
      for (int h = 0; h < HV; ++h) {
        const size_t n = static_cast<size_t>(c.shape.dv) * c.shape.dk;
        s.state[ci].merge(compare(S32.data() + h * n, t.states[ci].data() + h * n, n));
        s.state_fp64[ci].merge(
            compare(ref64[l].states[ci].data() + h * n, t.states[ci].data() + h * n, n));
      }
      const size_t o0 = static_cast<size_t>(t0) * hv, on = static_cast<size_t>(cp - t0) * hv;
      s.output[ci] = compare(ref32[l].outputs.data() + o0, t.outputs.data() + o0, on);
      s.output_fp64[ci] = compare(ref64[l].outputs.data() + o0, t.outputs.data() + o0, on);
      // The model: one storage's energy at the reference state, accumulated with contraction.
      s.model_energy[ci] = model_energy(
          f, storage_energy(f, c.shape, S32.data(), seed, c.layer, cp - 1), rates[l], cp);
      for (float x : S32) s.ref_energy[ci] += static_cast<double>(x) * x;
      t0 = cp;
    }
    const size_t n = static_cast<size_t>(c.shape.dv) * c.shape.dk;
    s.head_relerr.resize(HV);
    for (int h = 0; h < HV; ++h)
      s.head_relerr[h] =
          compare(ref32[l].states[C - 1].data() + h * n, t.states[C - 1].data() + h * n, n)
              .relerr();
    progress.tick();
  });
  // One int8 storage of the fp32 state: what a checkpoint-only int8 cache adds.
  const WorkingStateFormat int8{WorkingStateKind::int8, false};
  for (int ci = 0; ci < C; ++ci) {
    double err = 0.0, ref = 0.0;
    for (int l = 0; l < L; ++l) {
      const std::vector<double> e = storage_energy(int8, cases[l].shape, ref32[l].states[ci].data(),
                                                   seed, cases[l].layer, r.checkpoints[ci] - 1);
      err += std::accumulate(e.begin(), e.end(), 0.0);
      for (float x : ref32[l].states[ci]) ref += static_cast<double>(x) * x;
    }
    r.checkpoint_int8[ci] = ref > 0 ? std::sqrt(err / ref) : 0.0;
  }
  r.formats.resize(F);
  for (int fi = 0; fi < F; ++fi) {
    CurveStats& m = r.formats[fi];
    m.init(C);
    for (int l = 0; l < L; ++l) {
      const CurveStats& p = part[fi][l];
      for (int ci = 0; ci < C; ++ci) {
        m.state[ci].merge(p.state[ci]), m.state_fp64[ci].merge(p.state_fp64[ci]);
        m.output[ci].merge(p.output[ci]), m.output_fp64[ci].merge(p.output_fp64[ci]);
        m.model_energy[ci] += p.model_energy[ci], m.ref_energy[ci] += p.ref_energy[ci];
      }
      m.head_relerr.insert(m.head_relerr.end(), p.head_relerr.begin(), p.head_relerr.end());
    }
  }
  return r;
}

double model_relerr(const CurveStats& s, int ci) {
  return s.ref_energy[ci] > 0 ? std::sqrt(s.model_energy[ci] / s.ref_energy[ci]) : 0.0;
}

// ---- decay sweep ----------------------------------------------------------------------------

struct SweepResult {
  std::vector<double> decays;                             // [D] log-decay per token
  std::vector<std::vector<double>> state, output, model;  // [F][D]
  std::vector<double> safe_min_abs_decay;                 // [F]
  int T = 0;
};

SweepResult measure_sweep(const ModelConfig& gdn, const std::vector<WorkingStateFormat>& formats,
                          const FormatBackendFactory& factory, uint64_t seed, bool quick,
                          int threads) {
  SweepResult r;
  r.decays = quick ? std::vector<double>{-1e-4, -1e-2, -1e-1}
                   : std::vector<double>{-1e-4, -3e-4, -1e-3, -3e-3, -1e-2, -3e-2, -1e-1};
  r.T = quick ? 128 : 2048;
  const int D = static_cast<int>(r.decays.size()), F = static_cast<int>(formats.size());
  std::vector<LayerCase> cases;
  for (int d = 0; d < D; ++d) {
    LayerCase c = synthetic_cases(DriveKind::init_gdn, gdn, seed, 1, r.T)[0];
    std::fill(c.in.g.begin(), c.in.g.end(), static_cast<float>(r.decays[d]));
    cases.push_back(std::move(c));
  }
  const std::vector<int> cps = {r.T - r.T / 4, r.T};  // the output error over the last quarter
  const std::unique_ptr<RecurrenceBackend> fp32 = factory(WorkingStateFormat{});
  std::vector<Trace> refs(D);
  std::vector<std::vector<double>> rates(D);
  parallel_for(D, threads, [&](int d) {
    refs[d] = run_trace(*fp32, cases[d], cps);
    rates[d] = contraction_rates(cases[d].shape, cases[d].in);
  });
  r.state.assign(F, std::vector<double>(D)), r.output = r.state, r.model = r.state;
  Progress progress("inloop decay sweep", static_cast<long>(F) * D);
  parallel_for(F * D, threads, [&](int item) {
    const int fi = item / D, d = item % D;
    const LayerCase& c = cases[d];
    const std::unique_ptr<RecurrenceBackend> b = factory(formats[fi]);
    const Trace t = run_trace(*b, c, cps);
    const std::vector<float>& S = refs[d].states[1];
    r.state[fi][d] = compare(S.data(), t.states[1].data(), S.size()).relerr();
    const size_t hv = static_cast<size_t>(c.shape.HV) * c.shape.dv, o0 = cps[0] * hv;
    r.output[fi][d] =
        compare(refs[d].outputs.data() + o0, t.outputs.data() + o0, (r.T - cps[0]) * hv).relerr();
    const double energy =
        model_energy(formats[fi], storage_energy(formats[fi], c.shape, S.data(), seed, 0, r.T - 1),
                     rates[d], r.T);
    double ref = 0.0;
    for (float x : S) ref += static_cast<double>(x) * x;
    r.model[fi][d] = ref > 0 ? std::sqrt(energy / ref) : 0.0;
    progress.tick();
  });
  // Weakest decay from which on (towards stronger decay) the format stays safe.
  r.safe_min_abs_decay.assign(F, NAN);
  for (int fi = 0; fi < F; ++fi) {
    for (int d = D - 1; d >= 0; --d) {  // decays sorted weak (near 0) to strong
      if (!(r.output[fi][d] <= kSafeOutputRelerr)) break;
      r.safe_min_abs_decay[fi] = std::fabs(r.decays[d]);
    }
  }
  return r;
}

// ---- recording ------------------------------------------------------------------------------

std::vector<std::string> format_names(const std::vector<WorkingStateFormat>& formats) {
  std::vector<std::string> n;
  for (const auto& f : formats) n.push_back(f.name());
  return n;
}

void record_drive(const DriveResult& r, const std::vector<WorkingStateFormat>& formats,
                  H5Writer& file, Summary& summary) {
  const std::string g = "inloop/" + r.drive;
  const int F = static_cast<int>(formats.size()), C = static_cast<int>(r.checkpoints.size());
  file.group(g);
  file.attr(g, "model", r.model);
  file.attr(g, "layers", static_cast<int64_t>(r.layers));
  file.attr(g, "value_heads", static_cast<int64_t>(r.shape.HV));
  file.attr(g, "dk", static_cast<int64_t>(r.shape.dk));
  file.attr(g, "dv", static_cast<int64_t>(r.shape.dv));
  file.attr(g, "tokens", static_cast<int64_t>(r.T));
  file.write(g + "/checkpoints", std::vector<int64_t>(r.checkpoints.begin(), r.checkpoints.end()),
             {size_t(C)}, "tokens", "token counts t at which the errors are taken (log-spaced)");
  std::vector<double> st(F * C), st64(F * C), out(F * C), out64(F * C), model(F * C), heads;
  for (int fi = 0; fi < F; ++fi) {
    const CurveStats& s = r.formats[fi];
    for (int ci = 0; ci < C; ++ci) {
      st[fi * C + ci] = s.state[ci].relerr();
      st64[fi * C + ci] = s.state_fp64[ci].relerr();
      out[fi * C + ci] = s.output[ci].relerr();
      out64[fi * C + ci] = s.output_fp64[ci].relerr();
      model[fi * C + ci] = model_relerr(s, ci);
    }
    heads.insert(heads.end(), s.head_relerr.begin(), s.head_relerr.end());
  }
  const std::vector<size_t> fc{size_t(F), size_t(C)};
  file.write(g + "/state_relerr", st, fc, "1",
             "||S_F(t) - S_fp32(t)||_F / ||S_fp32(t)||_F over the layers and heads, per [format, "
             "checkpoint]");
  file.write(g + "/state_relerr_fp64", st64, fc, "1",
             "the same against the plain fp64 loop, per [format, checkpoint]");
  file.write(g + "/output_relerr", out, fc, "1",
             "relative Frobenius error of the outputs of the tokens since the previous checkpoint "
             "against the fp32 working state, per [format, checkpoint]");
  file.write(g + "/output_relerr_fp64", out64, fc, "1",
             "the same against the plain fp64 loop, per [format, checkpoint]");
  file.write(g + "/model_relerr", model, fc, "1",
             "contraction model with one storage error injected per token (error feedback: one "
             "storage error), per [format, checkpoint]");
  file.write(g + "/state_relerr_layer_head", heads,
             {size_t(F), size_t(r.layers), size_t(r.shape.HV)}, "1",
             "state relative error at the last token against fp32, per [format, layer, head]");
  std::vector<double> f64(C);
  for (int ci = 0; ci < C; ++ci) f64[ci] = r.fp32_vs_fp64[ci].relerr();
  file.write(g + "/fp32_vs_fp64_state_relerr", f64, {size_t(C)}, "1",
             "plain fp32 reference against the fp64 loop, per checkpoint");
  file.write(g + "/checkpoint_int8_relerr", r.checkpoint_int8, {size_t(C)}, "1",
             "one int8 storage of the fp32 state (a checkpoint-only int8 cache), per checkpoint");

  const std::string k = "inloop." + r.drive + ".";
  for (int fi = 0; fi < F; ++fi) {
    const std::string kf = k + formats[fi].name() + ".";
    summary.set(kf + "state_relerr", st[fi * C + C - 1]);
    summary.set(kf + "state_relerr_fp64", st64[fi * C + C - 1]);
    summary.set(kf + "output_relerr", out[fi * C + C - 1]);
    const double mod = model[fi * C + C - 1];
    if (formats[fi].kind != WorkingStateKind::fp32)
      summary.set(kf + "over_model", mod > 0 ? st[fi * C + C - 1] / mod : NAN);
  }
  const int i8 = format_index(formats, WorkingStateKind::int8);
  const int sr = format_index(formats, WorkingStateKind::int8_sr);
  const int ef = format_index(formats, WorkingStateKind::int8_ef);
  const int ef4 = format_index(formats, WorkingStateKind::int8_ef_int4);
  const double e8 = st[i8 * C + C - 1], esr = st[sr * C + C - 1], eef = st[ef * C + C - 1],
               eef4 = st[ef4 * C + C - 1];
  summary.set(k + "int8_over_checkpoint.state_relerr", e8 / r.checkpoint_int8[C - 1]);
  summary.set(k + "int8_sr_over_int8.state_relerr", esr / e8);
  summary.set(k + "int8_ef_over_int8.state_relerr", eef / e8);
  summary.set(k + "int8_ef_int4_over_int8.state_relerr", eef4 / e8);
  summary.set(k + "fp32_vs_fp64.state_relerr", f64[C - 1]);
  const std::string order = eef < e8 && e8 < esr    ? "ef < rne < sr"
                            : eef < esr && esr < e8 ? "ef < sr < rne"
                            : e8 < eef              ? "rne < ef"
                                                    : "other";
  file.attr(g, "order_int8_rne_sr_ef", order);

  fmt::print("\ninloop {} ({}, {} layers x {} heads, d_k {}, d_v {}, T {}):\n", r.drive, r.model,
             r.layers, r.shape.HV, r.shape.dk, r.shape.dv, r.T);
  fmt::print("  {:<14} {:>12} {:>12} {:>12} {:>12} {:>10}\n", "format", "state@T", "vs fp64",
             "output@T", "model@T", "meas/model");
  for (int fi = 0; fi < F; ++fi) {
    const double mod = model[fi * C + C - 1];
    fmt::print("  {:<14} {:>12.4g} {:>12.4g} {:>12.4g} {:>12.4g} {:>10.3g}\n", formats[fi].name(),
               st[fi * C + C - 1], st64[fi * C + C - 1], out[fi * C + C - 1], mod,
               mod > 0 ? st[fi * C + C - 1] / mod : NAN);
  }
  fmt::print(
      "  int8 working state {:.4g} vs one int8 checkpoint {:.4g} ({:.1f}x); int8 order: {}; plain "
      "fp32 vs fp64 {:.3g}\n",
      e8, r.checkpoint_int8[C - 1], e8 / r.checkpoint_int8[C - 1], order, f64[C - 1]);
}

void record_sweep(const SweepResult& r, const std::vector<WorkingStateFormat>& formats,
                  H5Writer& file, Summary& summary) {
  const std::string g = "inloop/decay_sweep";
  const int F = static_cast<int>(formats.size()), D = static_cast<int>(r.decays.size());
  file.group(g);
  file.attr(g, "tokens", static_cast<int64_t>(r.T));
  file.attr(g, "safe_output_relerr", kSafeOutputRelerr);
  file.write(g + "/log_decay", r.decays, {size_t(D)}, "1/token",
             "log-decay g of every head and token (init-gdn inputs otherwise)");
  auto flat = [](const std::vector<std::vector<double>>& v) {
    std::vector<double> out;
    for (const auto& row : v) out.insert(out.end(), row.begin(), row.end());
    return out;
  };
  const std::vector<size_t> fd{size_t(F), size_t(D)};
  file.write(g + "/state_relerr", flat(r.state), fd, "1",
             "state relative error at the last token against fp32, per [format, decay]");
  file.write(g + "/output_relerr", flat(r.output), fd, "1",
             "output relative error over the last quarter of the tokens, per [format, decay]");
  file.write(g + "/model_relerr", flat(r.model), fd, "1",
             "contraction model at the last token, per [format, decay]");
  file.write(g + "/safe_min_abs_decay", r.safe_min_abs_decay, {size_t(F)}, "1/token",
             "smallest |g| from which on (and at every stronger decay measured) the output error "
             "stays at or below safe_output_relerr; NaN: not even at the strongest");
  fmt::print("\ninloop decay sweep (init-gdn, one g for all heads, {} tokens), state relerr:\n",
             r.T);
  fmt::print("  {:<14}", "format");
  for (double d : r.decays) fmt::print(" {:>10.0e}", d);
  fmt::print(" {:>10}\n", "safe |g|>=");
  for (int fi = 0; fi < F; ++fi) {
    fmt::print("  {:<14}", formats[fi].name());
    for (int d = 0; d < D; ++d) fmt::print(" {:>10.3g}", r.state[fi][d]);
    fmt::print(" {:>10.3g}\n", r.safe_min_abs_decay[fi]);
    summary.set("inloop.decay." + formats[fi].name() + ".safe_min_abs_decay",
                r.safe_min_abs_decay[fi]);
    summary.set("inloop.decay." + formats[fi].name() + ".weakest.state_relerr", r.state[fi][0]);
    summary.set("inloop.decay." + formats[fi].name() + ".strongest.state_relerr",
                r.state[fi][D - 1]);
  }
}

}  // namespace

void run_inloop(const Options& o, const ModelConfig&, H5Writer& file, Summary& summary) {
  const int threads = o.thread_count();
  const std::vector<WorkingStateFormat> formats = all_working_state_formats();
  // The backends: the CPU reference with each format (a device factory plugs in here).
  const FormatBackendFactory factory = [&](const WorkingStateFormat& f) {
    return cpu_working_state_backend(f, o.seed);
  };
  const std::unique_ptr<RecurrenceBackend> fp64 = cpu_fp64_backend();
  const int T = o.quick ? 256 : 8192, layers = o.quick ? 1 : 2;
  const ModelConfig gdn = family_model(o, GateKind::gdn), kda = family_model(o, GateKind::kda);
  Progress total("inloop", 1);
  file.group("inloop");
  file.write_strings("inloop/formats", format_names(formats),
                     "working-state formats, in the order of the per-format arrays");
  std::vector<double> bytes;
  for (const auto& f : formats) bytes.push_back(f.bytes_per_element(128));
  file.write("inloop/bytes_per_element_dv128", bytes, {formats.size()}, "bytes",
             "bytes per state element for d_v = 128 (values, scales, residual)");
  for (size_t i = 0; i < formats.size(); ++i)
    summary.set("inloop." + formats[i].name() + ".bytes_per_element", bytes[i]);
  fmt::print("inloop: {} formats, {} threads, T {} (tinylm {}), {} layer(s) per synthetic drive\n",
             formats.size(), threads, T, o.quick ? 256 : 4096, layers);

  struct DriveCase {
    std::string name;
    std::string model;
    std::function<std::vector<LayerCase>()> cases;
  };
  const std::vector<DriveCase> drives = {
      {"seed-kda", kda.name,
       [&] { return synthetic_cases(DriveKind::seed_kda, kda, o.seed, layers, T); }},
      {"init-kda", kda.name,
       [&] { return synthetic_cases(DriveKind::init_kda, kda, o.seed, layers, T); }},
      {"init-gdn", gdn.name,
       [&] { return synthetic_cases(DriveKind::init_gdn, gdn, o.seed, layers, T); }},
      {"tinylm", "tiny model", [&] { return tinylm_cases(o, o.quick ? 256 : 4096); }},
  };
  for (const DriveCase& d : drives) {
    const DriveResult r =
        measure_drive(d.name, d.model, d.cases(), formats, factory, *fp64, o.seed, threads);
    record_drive(r, formats, file, summary);
  }
  record_kl(measure_kl(o, formats, factory, threads), formats, file, summary);
  record_sweep(measure_sweep(gdn, formats, factory, o.seed, o.quick, threads), formats, file,
               summary);
  if (o.device == Device::cuda) inloop::run_device(o, file, summary);
  fmt::print("inloop: {:.1f} s\n", total.elapsed());
}

}  // namespace statecheck
