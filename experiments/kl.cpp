// Experiment `kl`: how far restoring a language model's state from a checkpoint codec moves its
// next-byte predictions (docs/experiments.md, "kl").
//
// Model: the tiny byte-level gated-delta model of data/tinylm (core/tinylm/tinylm.h), or the
// tiny-model config given with --model. Text: its held-out evaluation text (eval.txt).
//
// Protocol, for every start s (evenly spaced over the text) and prefix length P in
// {128, 256, 512, 1024, 2048} (quick: two starts, P in {128, 256}):
//   1. run the fp32 model from a zero state over text[s, s + P) -> state (temporal + conv);
//   2. reference: continue teacher-forced over the next Tc = 256 bytes (quick 128) in fp32 from
//      that state -> logits z_ref[t];
//   3. each variant continues over the same bytes from a state that went through a codec:
//        <codec>            the temporal state at the prefix end is decode(encode(.))'d once;
//        <codec>_chained64  the same, and the running state is re-cached through the codec every
//                           64 bytes of the continuation (a restored state extended and re-cached);
//        bf16_state_pool    restore a bf16 state and keep the state in bf16 after every byte (a
//                           bf16 state pool), instead of recomputing the prefix and decoding in
//                           fp32;
//      codecs: fp32 (control: exactly 0), bf16, int8 with bf16 and with fp32 scales, fp8_e4m3 (fp32
//      scales). The conv state is restored exactly (serving never quantizes it);
//   4. per position t: KL(p_ref || p_variant) = sum_v p_ref[v] (log p_ref[v] - log p_var[v])
//      in nats (fp64, from the fp32 logits), and whether the greedy bytes argmax z agree.
// The forward pass is split-invariant bit for bit (tests/test_tinylm.cpp), so every difference
// comes from the state.
//
// --device cuda (CUDA builds) adds the variant cuda_recurrence: the continuation from the exact
// fp32 state with every layer's recurrence on the GPU (kernels/gated_delta/gated_delta_pool.h:
// bf16 q, k, v in, fp32 state, bf16 outputs, as a serving engine runs it); the rest of the model
// stays the fp32 CPU code. Its KL is the kernel's own effect on the predictions.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/backend/recurrence_backend.h"
#include "core/codec/codec.h"
#include "core/metrics/error_metrics.h"
#include "core/tinylm/logit_metrics.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "core/util/parallel.h"
#include "core/util/progress.h"
#include "experiments/experiment.h"

#ifdef STATECHECK_HAVE_CUDA
#include "kernels/common/device.h"
#include "kernels/host/cuda_backend.h"
#endif

namespace statecheck {

namespace {

constexpr int kChainInterval = 64;

struct Variant {
  std::string name;
  Codec codec;
  bool chained = false;
  bool bf16_state = false;  // the bf16 state pool baseline
  std::string description;
  bool cuda = false;  // the GPU recurrence from the exact state (codec: fp32)
};

std::vector<Variant> kl_variants(bool cuda) {
  std::vector<Variant> v;
  const std::vector<std::string> codecs = {"fp32", "bf16", "int8_bf16_scale", "int8_fp32_scale",
                                           "fp8_e4m3_fp32_scale"};
  for (bool chained : {false, true})
    for (const auto& name : codecs) {
      const Codec c = parse_codec(name);
      const std::string label =
          (c.kind == CodecKind::fp8_e4m3 ? std::string("fp8_e4m3") : codec_label(c, true)) +
          (chained ? fmt::format("_chained{}", kChainInterval) : "");
      const std::string what = chained
                                   ? fmt::format(
                                         "state restored through {} at the prefix end and "
                                         "re-cached through it every {} bytes",
                                         codec_label(c, true), kChainInterval)
                                   : fmt::format("state restored once through {} at the prefix end",
                                                 codec_label(c, true));
      v.push_back({label, c, chained, false, what});
    }
  v.push_back(
      {"bf16_state_pool", parse_codec("bf16"), false, true,
       "bf16 state restored and kept in bf16 after every byte (a bf16 state pool), instead of "
       "recomputing the prefix and continuing in fp32"});
  if (cuda)
    v.push_back({"cuda_recurrence", parse_codec("fp32"), false, false,
                 "exact state; every layer's recurrence on the GPU kernel (bf16 q, k, v and "
                 "outputs, fp32 state)",
                 true});
  return v;
}

// Nearest-rank percentile (q in (0, 1]) of a copy of `v`.
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

struct ItemResult {
  // [variant][t]
  std::vector<std::vector<double>> kl;
  std::vector<std::vector<uint8_t>> agree;
  std::vector<ErrorStats> state_err;  // [variant] restored state at the prefix end vs the exact one
  double ref_nats = 0.0;              // cross-entropy of the reference on the continuation bytes
  int ref_count = 0;
  int ref_correct = 0;  // reference argmax == the actual next byte
};

}  // namespace

void run_kl(const Options& o, const ModelConfig&, H5Writer& file, Summary& summary) {
  const bool cuda = o.device == Device::cuda;
  // The recurrence backends the variants continue on (core/backend/recurrence_backend.h).
  const std::unique_ptr<RecurrenceBackend> fp32 = cpu_fp32_backend(),
                                           bf16_state = cpu_fp32_backend(Dtype::bf16);
  std::unique_ptr<RecurrenceBackend> gpu;
#ifdef STATECHECK_HAVE_CUDA
  if (cuda) {
    fmt::print("kl (cuda): {}\n", cuda::device_description());
    gpu = cuda::cuda_backend();
  }
#else
  if (cuda) fail("kl: --device cuda: this build has no CUDA kernels (configure with nvcc on PATH)");
#endif
  const std::string config_path = tinylm_config_for(o.model);
  if (o.model_given && config_path != o.model)
    fail(
        "kl runs the tiny language model; --model {} is not a tiny-model config (leave --model "
        "out, or give a config.json written by scripts/train_tinylm.py)",
        o.model);
  const TinyLM model = TinyLM::load(config_path);
  const TinyLMConfig& c = model.config();
  if (o.tp > 1)  // suite passes its --tp to every experiment; this one has no shards
    fmt::print("kl: the tiny model runs whole (TP 1); --tp {} applies to the other experiments\n",
               o.tp);
  // The result file names the model that ran, not the serving model of the options.
  file.attr("/", "model", c.name + " (" + config_path + ")");
  file.attr("/", "tp", static_cast<int64_t>(1));
  const std::string text_path = c.input_file("eval_text", c.eval_text_file);
  const std::vector<uint8_t> text = read_bytes(text_path);

  const std::vector<int> prefixes =
      o.quick ? std::vector<int>{128, 256} : std::vector<int>{128, 256, 512, 1024, 2048};
  const int Tc = o.quick ? 128 : 256;
  const int starts = o.quick ? 2 : 8;
  const int maxP = *std::max_element(prefixes.begin(), prefixes.end());
  const int span = maxP + Tc + 1;  // + 1: the byte after the continuation scores its last position
  if (static_cast<int>(text.size()) < span)
    fail("{}: {} bytes, the kl protocol needs at least {} (prefix {} + continuation {} + 1)",
         text_path, text.size(), span, maxP, Tc);
  std::vector<int> start_pos(starts);
  for (int i = 0; i < starts; ++i)
    start_pos[i] =
        starts == 1 ? 0
                    : static_cast<int>((static_cast<long>(text.size()) - span) * i / (starts - 1));

  const std::vector<Variant> variants = kl_variants(cuda);
  const int V = static_cast<int>(variants.size());
  const int nP = static_cast<int>(prefixes.size());
  const int items = starts * nP;
  fmt::print("kl: model {} ({} layers, HV {}, d_k {}, d_v {}, D {}; {} parameters) from {}\n",
             c.name, c.num_layers, c.HV, c.dk, c.dv, c.d_model, model.parameter_count(),
             config_path);
  fmt::print(
      "kl: text {} ({} bytes), {} starts x prefixes {{{}}}, continuation {} bytes, {} variants, {} "
      "threads\n",
      text_path, text.size(), starts, fmt::join(prefixes, ", "), Tc, V, o.thread_count());

  std::vector<ItemResult> results(items);
  auto prefix_of = [&](int item) { return nP - 1 - item / starts; };
  Progress progress("kl prefixes", items);
  parallel_for(items, o.thread_count(), [&](int item) {
    // Longest prefixes first, so the last items handed to the threads are the short ones.
    const int pi = prefix_of(item), s = start_pos[item % starts], P = prefixes[pi];
    const uint8_t* prefix = text.data() + s;
    const uint8_t* cont = prefix + P;
    TinyLMState at_prefix = TinyLMState::zeros(c);
    model.forward(prefix, P, at_prefix);
    TinyLMState ref_state = at_prefix;
    const std::vector<float> z_ref = model.forward(cont, Tc, ref_state);

    ItemResult& r = results[item];
    r.kl.assign(V, std::vector<double>(Tc, 0.0));
    r.agree.assign(V, std::vector<uint8_t>(Tc, 0));
    r.state_err.resize(V);
    std::vector<double> lp_ref(256);
    for (int t = 0; t < Tc; ++t) {
      log_softmax(&z_ref[static_cast<size_t>(t) * 256], 256, lp_ref.data());
      const int next = cont[t + 1];
      r.ref_nats -= lp_ref[next];
      r.ref_count += 1;
      r.ref_correct += argmax(&z_ref[static_cast<size_t>(t) * 256], 256) == next ? 1 : 0;
    }

    for (int vi = 0; vi < V; ++vi) {
      const Variant& var = variants[vi];
      TinyLMState st = at_prefix;
      MultiLayerState restored;
      roundtrip(var.codec, st.temporal, restored);
      r.state_err[vi] =
          compare(at_prefix.temporal.data.data(), restored.data.data(), restored.data.size());
      st.temporal = restored;
      std::vector<float> z;
      if (var.chained) {
        z.reserve(static_cast<size_t>(Tc) * 256);
        for (int t0 = 0; t0 < Tc; t0 += kChainInterval) {
          if (t0 > 0) {
            roundtrip(var.codec, st.temporal, restored);
            st.temporal = restored;
          }
          const std::vector<float> seg =
              model.forward(cont + t0, std::min(kChainInterval, Tc - t0), st);
          z.insert(z.end(), seg.begin(), seg.end());
        }
      } else {
        ForwardOptions opt;
        opt.recurrence = layer_recurrence(var.cuda ? *gpu : var.bf16_state ? *bf16_state : *fp32);
        z = model.forward(cont, Tc, st, opt);
      }
      for (int t = 0; t < Tc; ++t) {
        const float* zr = &z_ref[static_cast<size_t>(t) * 256];
        const float* zt = &z[static_cast<size_t>(t) * 256];
        r.kl[vi][t] = kl_nats(zr, zt, 256);
        r.agree[vi][t] = argmax(zt, 256) == argmax(zr, 256) ? 1 : 0;
      }
    }
    progress.tick();
  });

  // Aggregates over all (start, prefix) items and positions.
  std::vector<double> mean(V), p99(V), maxv(V), top1(V), state_relerr(V);
  std::vector<double> mean_pos(static_cast<size_t>(V) * Tc, 0.0),
      max_pos(static_cast<size_t>(V) * Tc, 0.0);
  std::vector<double> mean_prefix(static_cast<size_t>(V) * nP, 0.0),
      top1_prefix(static_cast<size_t>(V) * nP, 0.0);
  for (int vi = 0; vi < V; ++vi) {
    std::vector<double> all;
    long agree = 0;
    ErrorStats se;
    for (int item = 0; item < items; ++item) {
      const ItemResult& r = results[item];
      se.merge(r.state_err[vi]);
      for (int t = 0; t < Tc; ++t) {
        const double k = r.kl[vi][t];
        all.push_back(k);
        agree += r.agree[vi][t];
        mean_pos[static_cast<size_t>(vi) * Tc + t] += k / items;
        max_pos[static_cast<size_t>(vi) * Tc + t] =
            std::max(max_pos[static_cast<size_t>(vi) * Tc + t], k);
        mean_prefix[static_cast<size_t>(vi) * nP + prefix_of(item)] +=
            k / (static_cast<double>(starts) * Tc);
        top1_prefix[static_cast<size_t>(vi) * nP + prefix_of(item)] +=
            r.agree[vi][t] / (static_cast<double>(starts) * Tc);
      }
    }
    mean[vi] = std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
    p99[vi] = percentile(all, 0.99);
    maxv[vi] = *std::max_element(all.begin(), all.end());
    top1[vi] = static_cast<double>(agree) / static_cast<double>(all.size());
    state_relerr[vi] = se.relerr();
  }
  double ref_nats = 0.0;
  long ref_count = 0, ref_correct = 0;
  for (const auto& r : results) {
    ref_nats += r.ref_nats;
    ref_count += r.ref_count;
    ref_correct += r.ref_correct;
  }
  const double ref_bpb = ref_nats / static_cast<double>(ref_count) / std::log(2.0);

  const std::string g = "kl";
  file.group(g);
  file.attr(g, "model", c.name);
  file.attr(g, "model_config", config_path);
  file.attr(g, "eval_text", text_path);
  file.attr(g, "continuation_bytes", static_cast<int64_t>(Tc));
  file.attr(g, "chain_interval_bytes", static_cast<int64_t>(kChainInterval));
  file.attr(g, "starts", static_cast<int64_t>(starts));
  file.attr(g, "device", std::string(device_name(o.device)));
  std::vector<std::string> names, descriptions;
  for (const auto& v : variants) {
    names.push_back(v.name);
    descriptions.push_back(v.name + ": " + v.description);
  }
  file.write_strings(g + "/variants", names, "variants, in the order of the per-variant arrays");
  file.write_strings(g + "/variant_descriptions", descriptions,
                     "what each variant does to the state");
  file.write(g + "/prefix_lengths", std::vector<int64_t>(prefixes.begin(), prefixes.end()),
             {size_t(nP)}, "bytes",
             "prefix lengths P: the state is cached at the end of text[s, s + P)");
  file.write(g + "/start_offsets", std::vector<int64_t>(start_pos.begin(), start_pos.end()),
             {size_t(starts)}, "bytes", "start offsets s of the prefixes in the evaluation text");
  const std::vector<size_t> vt{size_t(V), size_t(Tc)}, vp{size_t(V), size_t(nP)}, v1{size_t(V)};
  file.write(g + "/kl_mean_position", mean_pos, vt, "nats",
             "KL(p_ref || p_variant) per [variant, position in the continuation], mean over starts "
             "and prefixes");
  file.write(g + "/kl_max_position", max_pos, vt, "nats",
             "KL(p_ref || p_variant) per [variant, position in the continuation], max over starts "
             "and prefixes");
  file.write(g + "/kl_mean_prefix", mean_prefix, vp, "nats",
             "KL per [variant, prefix length], mean over starts and continuation positions");
  file.write(g + "/top1_agreement_prefix", top1_prefix, vp, "1",
             "fraction of positions whose greedy byte equals the reference's, per [variant, prefix "
             "length]");
  file.write(g + "/mean_nats", mean, v1, "nats",
             "KL mean over every position of every prefix, per variant");
  file.write(g + "/p99_nats", p99, v1, "nats",
             "KL 99th percentile (nearest rank) over every position, per variant");
  file.write(g + "/max_nats", maxv, v1, "nats", "KL max over every position, per variant");
  file.write(g + "/top1_agreement", top1, v1, "1",
             "fraction of positions whose greedy byte equals the reference's");
  file.write(g + "/state_relerr", state_relerr, v1, "1",
             "||S_restored - S||_F / ||S||_F of the temporal state at the prefix ends, per variant "
             "(before the continuation)");
  file.write_scalar(
      g + "/ref_bits_per_byte", ref_bpb, "bits/byte",
      "cross-entropy of the fp32 reference on the continuation bytes (held-out text)");
  file.write_scalar(g + "/ref_top1_accuracy", static_cast<double>(ref_correct) / ref_count, "1",
                    "fraction of continuation bytes the fp32 reference predicts greedily");

  for (int vi = 0; vi < V; ++vi) {
    const std::string k = "kl." + variants[vi].name + ".";
    summary.set(k + "mean_nats", mean[vi]);
    summary.set(k + "p99_nats", p99[vi]);
    summary.set(k + "max_nats", maxv[vi]);
    summary.set(k + "top1_agreement", top1[vi]);
  }
  summary.set("kl.ref_bits_per_byte", ref_bpb);
  auto ratio = [&](const std::string& a, const std::string& b) {
    const double den = summary.get("kl." + b + ".mean_nats");
    summary.set("kl." + a + "_over_" + b + ".mean_nats",
                den > 0 ? summary.get("kl." + a + ".mean_nats") / den : NAN);
  };
  ratio("bf16", "int8_bf16_scale");
  ratio("bf16", "int8_fp32_scale");
  ratio("int8_bf16_scale", "fp8_e4m3");
  ratio("int8_fp32_scale", "fp8_e4m3");
  ratio("int8_bf16_scale", "bf16_state_pool");

  fmt::print("\nkl: {:<28} {:>12} {:>12} {:>12} {:>9} {:>12}\n", "variant", "mean nats", "p99 nats",
             "max nats", "top-1", "state relerr");
  for (int vi = 0; vi < V; ++vi)
    fmt::print("kl: {:<28} {:>12.4g} {:>12.4g} {:>12.4g} {:>9.5f} {:>12.4g}\n", variants[vi].name,
               mean[vi], p99[vi], maxv[vi], top1[vi], state_relerr[vi]);
  fmt::print("kl: reference {:.4f} bits/byte, greedy accuracy {:.3f} on the continuations\n",
             ref_bpb, static_cast<double>(ref_correct) / ref_count);
  // The ordering expected in mean KL (docs/tinylm.md): fp32 <= bf16 < int8 < fp8_e4m3.
  const double f32 = summary.get("kl.fp32.mean_nats"), b16 = summary.get("kl.bf16.mean_nats"),
               f8 = summary.get("kl.fp8_e4m3.mean_nats");
  std::vector<std::string> broken;
  if (!(f32 <= b16)) broken.push_back("fp32 <= bf16");
  for (const char* i8 : {"int8_bf16_scale", "int8_fp32_scale"}) {
    const double v = summary.get(std::string("kl.") + i8 + ".mean_nats");
    if (!(b16 < v)) broken.push_back(fmt::format("bf16 < {}", i8));
    if (!(v < f8)) broken.push_back(fmt::format("{} < fp8_e4m3", i8));
  }
  const std::string ordering =
      broken.empty() ? "holds" : "does NOT hold: " + fmt::format("{}", fmt::join(broken, ", "));
  file.attr(g, "ordering_fp32_bf16_int8_fp8", ordering);
  fmt::print("kl: ordering fp32 <= bf16 < int8 (both scale dtypes) < fp8_e4m3 in mean KL: {}\n",
             ordering);
  fmt::print("kl: {:.1f} s\n", progress.elapsed());
}

}  // namespace statecheck
