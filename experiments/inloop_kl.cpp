// The tiny-model part of experiment `inloop` (experiments/inloop_cases.h): KL and top-1
// agreement of the whole model run with each working-state format, and the verdict.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/tinylm/logit_metrics.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/inloop_cases.h"

namespace statecheck::inloop {

KlResult measure_kl(const Options& o, const std::vector<WorkingStateFormat>& formats,
                    const FormatBackendFactory& factory, int threads) {
  const TinyLM model = TinyLM::load(tinylm_config_for(o.model));
  const TinyLMConfig& c = model.config();
  const std::vector<uint8_t> text = read_bytes(c.input_file("eval_text", c.eval_text_file));
  KlResult r;
  r.N = o.quick ? 512 : 4096;
  if (static_cast<int>(text.size()) < r.N)
    fail("{}: {} bytes, inloop needs {}", c.eval_text_file, text.size(), r.N);
  r.bytes_dv = c.dv;
  const int F = static_cast<int>(formats.size());
  std::vector<float> z_ref;
  std::vector<std::vector<float>> z(F);
  Progress progress("inloop tinylm KL", F + 1);
  parallel_for(F + 1, threads, [&](int i) {
    TinyLMState st = TinyLMState::zeros(c);
    if (i == F) {
      z_ref = model.forward(text.data(), r.N, st);
    } else {
      const std::unique_ptr<RecurrenceBackend> b = factory(formats[i]);
      ForwardOptions opt;
      opt.recurrence = layer_recurrence(*b);
      z[i] = model.forward(text.data(), r.N, st, opt);
    }
    progress.tick();
  });
  r.bins = log_checkpoints(r.N);
  const int B = static_cast<int>(r.bins.size());
  r.mean.resize(F), r.p99.resize(F), r.maxv.resize(F), r.top1.resize(F), r.growth.resize(F);
  r.mean_bin.assign(F, std::vector<double>(B, 0.0));
  r.top1_bin.assign(F, std::vector<double>(B, 0.0));
  for (int fi = 0; fi < F; ++fi) {
    std::vector<double> kl(r.N);
    std::vector<int> agree(r.N);
    for (int t = 0; t < r.N; ++t) {
      const float* zr = &z_ref[static_cast<size_t>(t) * 256];
      const float* zf = &z[fi][static_cast<size_t>(t) * 256];
      kl[t] = kl_nats(zr, zf, 256);
      agree[t] = argmax(zr, 256) == argmax(zf, 256) ? 1 : 0;
    }
    r.mean[fi] = std::accumulate(kl.begin(), kl.end(), 0.0) / r.N;
    r.p99[fi] = percentile(kl, 0.99);
    r.maxv[fi] = *std::max_element(kl.begin(), kl.end());
    r.top1[fi] = static_cast<double>(std::accumulate(agree.begin(), agree.end(), 0)) / r.N;
    const double first = std::accumulate(kl.begin(), kl.begin() + r.N / 2, 0.0);
    const double second = std::accumulate(kl.begin() + r.N / 2, kl.end(), 0.0);
    r.growth[fi] = first > 0 ? second / first : (second > 0 ? INFINITY : 1.0);
    int lo = 0;
    for (int bi = 0; bi < B; ++bi) {
      const int hi = r.bins[bi];
      double sk = 0, sa = 0;
      for (int t = lo; t < hi; ++t) sk += kl[t], sa += agree[t];
      r.mean_bin[fi][bi] = hi > lo ? sk / (hi - lo) : NAN;
      r.top1_bin[fi][bi] = hi > lo ? sa / (hi - lo) : NAN;
      lo = hi;
    }
  }
  return r;
}

void record_kl(const KlResult& r, const std::vector<WorkingStateFormat>& formats, H5Writer& file,
               Summary& summary) {
  const std::string g = "inloop/tinylm_kl";
  const int F = static_cast<int>(formats.size()), B = static_cast<int>(r.bins.size());
  file.group(g);
  file.attr(g, "text_bytes", static_cast<int64_t>(r.N));
  file.write(g + "/position_bins", std::vector<int64_t>(r.bins.begin(), r.bins.end()), {size_t(B)},
             "bytes", "upper ends of the position bins [previous end, end)");
  std::vector<double> mb, tb;
  for (int fi = 0; fi < F; ++fi) {
    mb.insert(mb.end(), r.mean_bin[fi].begin(), r.mean_bin[fi].end());
    tb.insert(tb.end(), r.top1_bin[fi].begin(), r.top1_bin[fi].end());
  }
  file.write(g + "/kl_mean_bin", mb, {size_t(F), size_t(B)}, "nats",
             "KL(p_fp32 || p_F) mean per [format, position bin]");
  file.write(g + "/top1_agreement_bin", tb, {size_t(F), size_t(B)}, "1",
             "greedy top-1 agreement with fp32 per [format, position bin]");
  file.write(g + "/mean_nats", r.mean, {size_t(F)}, "nats", "KL mean over every position");
  file.write(g + "/p99_nats", r.p99, {size_t(F)}, "nats", "KL 99th percentile (nearest rank)");
  file.write(g + "/max_nats", r.maxv, {size_t(F)}, "nats", "KL max over every position");
  file.write(g + "/top1_agreement", r.top1, {size_t(F)}, "1", "greedy top-1 agreement with fp32");
  file.write(g + "/growth", r.growth, {size_t(F)}, "1",
             "KL summed over the second half of the text over the first half");
  for (int fi = 0; fi < F; ++fi) {
    const std::string k = "inloop.tinylm_kl." + formats[fi].name() + ".";
    summary.set(k + "mean_nats", r.mean[fi]);
    summary.set(k + "p99_nats", r.p99[fi]);
    summary.set(k + "max_nats", r.maxv[fi]);
    summary.set(k + "top1_agreement", r.top1[fi]);
    summary.set(k + "growth", r.growth[fi]);
  }
  fmt::print("\ninloop tiny LM over {} bytes of held-out text:\n", r.N);
  fmt::print("  {:<14} {:>8} {:>12} {:>12} {:>12} {:>9} {:>8}\n", "format", "B/elem", "mean nats",
             "p99 nats", "max nats", "top-1", "growth");
  for (int fi = 0; fi < F; ++fi)
    fmt::print("  {:<14} {:>8.3f} {:>12.4g} {:>12.4g} {:>12.4g} {:>9.5f} {:>8.3g}\n",
               formats[fi].name(), formats[fi].bytes_per_element(static_cast<int>(r.bytes_dv)),
               r.mean[fi], r.p99[fi], r.maxv[fi], r.top1[fi], r.growth[fi]);

  // The verdict.
  const int b16 = format_index(formats, WorkingStateKind::bf16);
  int cheapest = -1;
  for (int fi = 0; fi < F; ++fi) {
    if (!(r.mean[fi] <= r.mean[b16])) continue;
    const double bytes = formats[fi].bytes_per_element(static_cast<int>(r.bytes_dv));
    if (cheapest < 0 || bytes < formats[cheapest].bytes_per_element(static_cast<int>(r.bytes_dv)))
      cheapest = fi;
  }
  if (cheapest < 0)  // only when bf16's own mean KL is NaN
    fail("inloop: the bf16 working state's mean KL is {}: no verdict", r.mean[b16]);
  const int i8 = format_index(formats, WorkingStateKind::int8);
  const bool diverges = r.growth[i8] > 2.0 || r.top1[i8] < 0.9;
  file.attr(g, "verdict_cheapest_at_or_below_bf16_kl", formats[cheapest].name());
  file.attr(g, "verdict_int8_rne_diverges", std::string(diverges ? "yes" : "no"));
  summary.set("inloop.verdict.cheapest_bytes_per_element",
              formats[cheapest].bytes_per_element(static_cast<int>(r.bytes_dv)));
  summary.set("inloop.verdict.int8_diverges", diverges ? 1.0 : 0.0);
  fmt::print(
      "  verdict: cheapest format with mean KL <= bf16's: {} ({:.3f} bytes/element); int8 RNE "
      "diverges: {} (growth {:.3g}, top-1 {:.4f})\n",
      formats[cheapest].name(), formats[cheapest].bytes_per_element(static_cast<int>(r.bytes_dv)),
      diverges ? "yes" : "no", r.growth[i8], r.top1[i8]);
}

}  // namespace statecheck::inloop
