#include "core/drive/tinylm_drive.h"

#include <string>

#include <fmt/format.h>

#include "core/util/error.h"

namespace statecheck {

TinyLMDrive::TinyLMDrive(const std::string& config_path) : model_(TinyLM::load(config_path)) {
  const TinyLMConfig& c = model_.config();
  text_path_ = c.input_file("eval_text", c.eval_text_file);
  text_ = read_bytes(text_path_);
  const int need = (kTinyLMDriveSequences - 1) * kTinyLMDriveStride + kTinyLMDrivePrefix;
  if (static_cast<int>(text_.size()) < need)
    fail(
        "{}: {} bytes; the tinylm drive needs at least {} ({} sequences {} bytes apart, prefix {})",
        text_path_, text_.size(), need, kTinyLMDriveSequences, kTinyLMDriveStride,
        kTinyLMDrivePrefix);
  seqs_.resize(kTinyLMDriveSequences);
}

// Runs sequence n's prefix on first use; the caller holds the sequence's mutex.
void TinyLMDrive::ensure_prefix(Sequence& s, int n) const {
  if (s.prefix_done) return;
  ForwardOptions state_only;
  state_only.logits = false;
  s.at_prefix = TinyLMState::zeros(model_.config());
  model_.forward(text_.data() + static_cast<size_t>(n) * kTinyLMDriveStride, kTinyLMDrivePrefix,
                 s.at_prefix, state_only);
  s.prefix_done = true;
}

void TinyLMDrive::check_matches(const ModelConfig& m) const {
  const TinyLMConfig& c = model_.config();
  const bool same = m.linear_layer_count() == c.num_layers && m.key_heads_shard() == c.H &&
                    m.value_heads_shard() == c.HV && m.head_k_dim == c.dk && m.head_v_dim == c.dv &&
                    m.gate == c.gate;
  if (same) return;
  // The tiny model runs whole: when the shapes differ only by sharding, --tp is the cause.
  const bool tp_only = m.tp > 1 && m.name == c.name && m.linear_layer_count() == c.num_layers &&
                       m.num_key_heads == c.H && m.num_value_heads == c.HV;
  fail(
      "drive 'tinylm' produces states of the tiny model {} ({} layers, H {}, HV {}, d_k {}, d_v "
      "{}, {}) but model {} at TP {} has {} linear layers, H {}, HV {}, d_k {}, d_v {}, {}; {}",
      c.name, c.num_layers, c.H, c.HV, c.dk, c.dv, gate_kind_name(c.gate), m.name, m.tp,
      m.linear_layer_count(), m.key_heads_shard(), m.value_heads_shard(), m.head_k_dim,
      m.head_v_dim, gate_kind_name(m.gate),
      tp_only ? std::string("the tiny model runs whole: leave out --tp")
              : fmt::format("leave out --model (the drive implies {}) or pass that config",
                            c.config_path));
}

std::vector<float> TinyLMDrive::initial_layer_state(int n, int layer) const {
  const TinyLMConfig& c = model_.config();
  if (n < 0 || n >= count() || layer < 0 || layer >= c.num_layers)
    fail("tinylm drive: no sequence {} / layer {} ({} sequences, {} layers)", n, layer, count(),
         c.num_layers);
  Sequence& s = seqs_[n];
  std::lock_guard<std::mutex> lock(*s.mutex);
  ensure_prefix(s, n);
  const float* p = s.at_prefix.temporal.layer(layer);
  return std::vector<float>(p, p + c.state_shape().layer_size());
}

LayerInputs TinyLMDrive::layer_inputs(int n, int layer, int T) const {
  const TinyLMConfig& c = model_.config();
  if (n < 0 || n >= count() || layer < 0 || layer >= c.num_layers || T < 0)
    fail("tinylm drive: no sequence {} / layer {} / {} tokens", n, layer, T);
  const size_t begin = static_cast<size_t>(n) * kTinyLMDriveStride + kTinyLMDrivePrefix;
  if (begin + static_cast<size_t>(T) > text_.size())
    fail(
        "{}: sequence {} of the tinylm drive needs {} bytes after its prefix (bytes {}..{}) but "
        "the text "
        "has {} bytes",
        text_path_, n, T, begin, begin + T, text_.size());
  const RecurrenceShape shape = c.recurrence_shape();
  if (T == 0) return LayerInputs::zeros(shape, 0);
  Sequence& s = seqs_[n];
  std::lock_guard<std::mutex> lock(*s.mutex);
  ensure_prefix(s, n);
  if (s.computed < T) {
    TinyLMState st = s.at_prefix;
    ForwardOptions opt;
    opt.layer_inputs = &s.inputs;
    opt.logits = false;
    model_.forward(text_.data() + begin, T, st, opt);
    s.computed = T;
  }
  const LayerInputs& all = s.inputs[layer];
  LayerInputs out = LayerInputs::zeros(shape, T);
  auto head = [T](const std::vector<float>& src, std::vector<float>& dst, int total) {
    const size_t per = src.size() / static_cast<size_t>(total);
    std::copy(src.begin(), src.begin() + per * T, dst.begin());
  };
  head(all.q, out.q, all.T);
  head(all.k, out.k, all.T);
  head(all.v, out.v, all.T);
  head(all.g, out.g, all.T);
  head(all.beta, out.beta, all.T);
  return out;
}

}  // namespace statecheck
