#include "core/tinylm/tinylm.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/io/paths.h"
#include "core/io/safetensors.h"
#include "core/tinylm/linear.h"
#include "core/util/error.h"
#include "core/util/json_int.h"

namespace statecheck {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The reference recurrence normalises q and k with this epsilon inside the square root
// (core/recurrence/gated_delta.cpp); a model trained with another one cannot run on it.
constexpr double kReferenceL2NormEps = 1e-6;

// PyTorch's F.softplus (beta 1, threshold 20): x above the threshold is returned as is.
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}
inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float silu(float x) {
  return x * sigmoid(x);
}

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight, mean accumulated in fp64.
// `what` and `layer` (-1: none) name the norm in errors.
void rms_norm_rows(const float* x, int T, int D, const float* weight, float eps, float* out,
                   const char* what, int layer) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<size_t>(t) * D;
    double ss = 0.0;
    for (int i = 0; i < D; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    // A mean square beyond fp32 would make the norm 0 and every prediction uniform: finite but
    // meaningless weights (not a trained model's), refused rather than scored.
    if (!(ss / D <= std::numeric_limits<float>::max()))
      fail(
          "tiny model: activations overflow fp32 (or are NaN) before the {}{} ({}mean square "
          "{:.3g}); the weights are not a trained model's",
          what, layer >= 0 ? fmt::format(" of layer {}", layer) : std::string(),
          T > 1 ? fmt::format("row {}, ", t) : std::string(), ss / D);
    const float r = 1.0f / std::sqrt(static_cast<float>(ss / D) + eps);
    float* o = out + static_cast<size_t>(t) * D;
    for (int i = 0; i < D; ++i) o[i] = (xr[i] * r) * weight[i];
  }
}

std::string shape_str(const std::vector<size_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class WeightReader {
 public:
  explicit WeightReader(std::string path) : path_(std::move(path)) {
    for (auto& n : safetensors_tensor_names(path_)) names_.insert(std::move(n));
  }

  // Reads tensor `name`, checks its shape and that every value is finite.
  std::vector<float> get(const std::string& name, const std::vector<size_t>& shape,
                         const std::string& why) {
    if (!names_.count(name))
      fail("{}: missing tensor '{}' (expected shape {}: {})", path_, name, shape_str(shape), why);
    FloatArray a = read_safetensors(path_, name);
    if (a.shape != shape)
      fail("{}: tensor '{}' has shape {}, expected {} ({})", path_, name, shape_str(a.shape),
           shape_str(shape), why);
    for (size_t i = 0; i < a.data.size(); ++i)
      if (!std::isfinite(a.data[i]))
        fail("{}: tensor '{}' holds a non-finite value at flat index {}", path_, name, i);
    used_.insert(name);
    return std::move(a.data);
  }

  bool has(const std::string& name) const { return names_.count(name) != 0; }

  // Every tensor of the file must have been read.
  void check_all_used(const std::string& hint) const {
    for (const auto& n : names_)
      if (!used_.count(n)) fail("{}: unexpected tensor '{}' ({})", path_, n, hint);
  }

 private:
  std::string path_;
  std::set<std::string> names_, used_;
};

void append(std::vector<float>& dst, const std::vector<float>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

// A size of the tiny model: an integer in [1, 2^20], read without wrapping (4294967552 is not 256).
int get_positive(const json& j, const char* key, const std::string& origin) {
  constexpr int64_t kMax = int64_t{1} << 20;
  if (!j.contains(key)) fail("{}: missing field 'tinylm.{}'", origin, key);
  const json& v = j[key];
  if (!v.is_number_integer() || json_int64(v) < 1 || json_int64(v) > kMax)
    fail("{}: field 'tinylm.{}' must be an integer in [1, {}], got {}", origin, key, kMax,
         v.dump());
  return static_cast<int>(v.get<int64_t>());
}

std::string get_string(const json& j, const char* key, const std::string& origin) {
  if (!j.contains(key) || !j[key].is_string())
    fail("{}: missing string field 'tinylm.{}'", origin, key);
  return j[key].get<std::string>();
}

}  // namespace

RecurrenceShape TinyLMConfig::recurrence_shape() const {
  RecurrenceShape s;
  s.H = H;
  s.HV = HV;
  s.dk = dk;
  s.dv = dv;
  s.gate = gate;
  s.qk_l2norm = true;
  return s;
}

StateShape TinyLMConfig::state_shape() const {
  return StateShape{num_layers, HV, dv, dk};
}

std::string TinyLMConfig::file(const std::string& relative) const {
  return (fs::path(dir) / relative).string();
}

std::string TinyLMConfig::input_file(const char* field, const std::string& relative) const {
  const std::string path = file(relative);
  check_input_file(fmt::format("{} (field 'tinylm.{}'):", config_path, field), path);
  return path;
}

std::string default_tinylm_config_path() {
  return data_dir() + "/tinylm/config.json";
}

std::string tinylm_config_for(const std::string& model_option) {
  const fs::path p(model_option);
  if (p.extension() == ".json" && fs::is_regular_file(p)) {
    std::ifstream in(model_option);
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("tinylm")) return model_option;
  }
  return default_tinylm_config_path();
}

TinyLMConfig load_tinylm_config(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    fail("{}: cannot open the tiny model's config (scripts/train_tinylm.py writes it)", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  // The shared part is a statecheck model config; parse it with the project's loader so that
  // `--model <this file>` and the forward pass agree on every shape.
  const ModelConfig m = parse_model_config(j, path, 1);
  if (!j.contains("tinylm") || !j["tinylm"].is_object())
    fail("{}: no 'tinylm' section (not a tiny language model config)", path);
  if (!m.full_layers.empty())
    fail("{}: field 'full_attention_layers' must be empty for the tiny model", path);
  const json& t = j["tinylm"];
  TinyLMConfig c;
  c.name = m.name;
  c.config_path = path;
  c.dir = fs::path(path).parent_path().string();
  if (c.dir.empty()) c.dir = ".";
  c.gate = m.gate;
  c.num_layers = m.num_layers;
  c.H = m.num_key_heads;
  c.HV = m.num_value_heads;
  c.dk = m.head_k_dim;
  c.dv = m.head_v_dim;
  c.conv_width = m.conv_width;
  if (m.conv_layout != ConvLayout::channels_first)
    fail("{}: field 'linear.conv_layout' must be channels_first for the tiny model", path);
  c.vocab = get_positive(t, "vocab_size", path);
  if (c.vocab != 256)
    fail("{}: field 'tinylm.vocab_size' is {}, the byte-level model needs 256", path, c.vocab);
  c.d_model = get_positive(t, "d_model", path);
  c.mlp_hidden = get_positive(t, "mlp_hidden", path);
  if (!t.contains("tie_word_embeddings") || !t["tie_word_embeddings"].is_boolean())
    fail("{}: missing boolean field 'tinylm.tie_word_embeddings'", path);
  c.tie_embeddings = t["tie_word_embeddings"].get<bool>();
  if (!t.contains("norm_eps") || !t["norm_eps"].is_number() || !(t["norm_eps"].get<double>() > 0))
    fail("{}: field 'tinylm.norm_eps' must be a positive number", path);
  c.norm_eps = static_cast<float>(t["norm_eps"].get<double>());
  if (!t.contains("l2norm_eps") || !t["l2norm_eps"].is_number() ||
      t["l2norm_eps"].get<double>() != kReferenceL2NormEps)
    fail(
        "{}: field 'tinylm.l2norm_eps' must be {} (the reference recurrence's q/k L2-norm epsilon)",
        path, kReferenceL2NormEps);
  c.weights_file = get_string(t, "weights", path);
  c.eval_text_file = get_string(t, "eval_text", path);
  c.golden_file = get_string(t, "golden", path);
  return c;
}

TinyLMState TinyLMState::zeros(const TinyLMConfig& c) {
  TinyLMState s;
  s.temporal = MultiLayerState(c.state_shape());
  s.conv_dim = c.conv_dim();
  s.conv_window = c.conv_width - 1;
  s.conv.assign(static_cast<size_t>(c.num_layers) * s.conv_dim * s.conv_window, 0.0f);
  return s;
}

TinyLM TinyLM::load(const std::string& config_path) {
  TinyLM m;
  m.cfg_ = load_tinylm_config(config_path);
  const TinyLMConfig& c = m.cfg_;
  const size_t D = c.d_model, H = c.H, HV = c.HV, dk = c.dk, dv = c.dv, F = c.mlp_hidden;
  const size_t gw = c.gate_width(), cd = c.conv_dim(), W = c.conv_width;
  const std::string path = c.input_file("weights", c.weights_file);
  WeightReader r(path);
  const std::string dims =
      fmt::format("d_model {}, H {}, HV {}, d_k {}, d_v {}, mlp_hidden {}, W {}, gate {} in {}", D,
                  H, HV, dk, dv, F, W, gate_kind_name(c.gate), config_path);
  m.embed_ = r.get("embed.weight", {256, D}, dims);
  m.final_norm_ = r.get("final_norm.weight", {D}, dims);
  if (c.tie_embeddings) {
    m.lm_head_ = m.embed_;
  } else {
    m.lm_head_ = r.get("lm_head.weight", {256, D}, dims);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    Layer L;
    L.attn_norm = r.get(p + "attn_norm.weight", {D}, dims);
    L.in_proj = r.get(p + "mixer.q_proj.weight", {H * dk, D}, dims);
    append(L.in_proj, r.get(p + "mixer.k_proj.weight", {H * dk, D}, dims));
    append(L.in_proj, r.get(p + "mixer.v_proj.weight", {HV * dv, D}, dims));
    append(L.in_proj, r.get(p + "mixer.z_proj.weight", {HV * dv, D}, dims));
    append(L.in_proj, r.get(p + "mixer.a_proj.weight", {gw, D}, dims));
    append(L.in_proj, r.get(p + "mixer.b_proj.weight", {HV, D}, dims));
    L.conv = r.get(p + "mixer.conv_weight", {cd, W}, dims);
    L.A_log = r.get(p + "mixer.A_log", {HV}, dims);
    L.dt_bias = r.get(p + "mixer.dt_bias", {gw}, dims);
    L.out_norm = r.get(p + "mixer.out_norm.weight", {dv}, dims);
    L.o_proj = r.get(p + "mixer.o_proj.weight", {D, HV * dv}, dims);
    L.mlp_norm = r.get(p + "mlp_norm.weight", {D}, dims);
    L.gate_up = r.get(p + "gate_proj.weight", {F, D}, dims);
    append(L.gate_up, r.get(p + "up_proj.weight", {F, D}, dims));
    L.down = r.get(p + "down_proj.weight", {D, F}, dims);
    m.layers_.push_back(std::move(L));
  }
  r.check_all_used(fmt::format("num_layers {}, tie_word_embeddings {} in {}", c.num_layers,
                               c.tie_embeddings, config_path));
  return m;
}

size_t TinyLM::parameter_count() const {
  size_t n = embed_.size() + final_norm_.size() + (cfg_.tie_embeddings ? 0 : lm_head_.size());
  for (const auto& L : layers_)
    n += L.attn_norm.size() + L.in_proj.size() + L.conv.size() + L.A_log.size() + L.dt_bias.size() +
         L.out_norm.size() + L.o_proj.size() + L.mlp_norm.size() + L.gate_up.size() + L.down.size();
  return n;
}

std::vector<float> TinyLM::forward(const uint8_t* tokens, int T, TinyLMState& state,
                                   const ForwardOptions& opt) const {
  const TinyLMConfig& c = cfg_;
  if (state.temporal.shape != c.state_shape() || state.conv_dim != c.conv_dim() ||
      state.conv_window != c.conv_width - 1 ||
      state.conv.size() != static_cast<size_t>(c.num_layers) * c.conv_dim() * (c.conv_width - 1) ||
      state.temporal.data.size() != c.state_shape().size())
    fail(
        "tiny model {}: state of shape temporal [{}, {}, {}, {}], conv [{} x {}] does not match "
        "the "
        "model's [{}, {}, {}, {}], conv [{} x {}]",
        c.name, state.temporal.shape.layers, state.temporal.shape.heads, state.temporal.shape.dv,
        state.temporal.shape.dk, state.conv_dim, state.conv_window, c.num_layers, c.HV, c.dv, c.dk,
        c.conv_dim(), c.conv_width - 1);
  if (T < 0) fail("tiny model: negative token count {}", T);
  if (opt.layer_inputs) opt.layer_inputs->clear();
  if (T == 0) return {};
  const int D = c.d_model, HV = c.HV, dv = c.dv, F = c.mlp_hidden, W = c.conv_width;
  const int cd = c.conv_dim(), gw = c.gate_width(), qk = c.H * c.dk;
  const int P = cd + HV * dv + gw + HV;  // in_proj rows: q, k, v | z | a | b
  const size_t Ts = static_cast<size_t>(T);
  const RecurrenceShape shape = c.recurrence_shape();

  std::vector<float> x(Ts * D), h(Ts * D), proj(Ts * P), o(Ts * HV * dv), on(Ts * HV * dv);
  std::vector<float> gu(Ts * 2 * F), act(Ts * F);
  for (int t = 0; t < T; ++t)
    std::memcpy(&x[static_cast<size_t>(t) * D], &embed_[static_cast<size_t>(tokens[t]) * D],
                sizeof(float) * D);

  for (int l = 0; l < c.num_layers; ++l) {
    const Layer& L = layers_[l];
    rms_norm_rows(x.data(), T, D, L.attn_norm.data(), c.norm_eps, h.data(), "attention norm", l);
    linear_fixed_order(h.data(), T, D, L.in_proj.data(), P, proj.data());

    // Causal depthwise conv over the q, k, v channels with the carried conv state, then SiLU.
    LayerInputs in = LayerInputs::zeros(shape, T);
    float* conv_state = state.conv_layer(l);
    const int Wm1 = W - 1;
    auto input = [&](int j,
                     int ch) {  // conv input at extended position j (state first, then tokens)
      return j < Wm1 ? conv_state[static_cast<size_t>(ch) * Wm1 + j]
                     : proj[static_cast<size_t>(j - Wm1) * P + ch];
    };
    for (int t = 0; t < T; ++t) {
      for (int ch = 0; ch < cd; ++ch) {
        const float* w = &L.conv[static_cast<size_t>(ch) * W];
        float y = input(t, ch) * w[0];
        for (int i = 1; i < W; ++i) y = y + input(t + i, ch) * w[i];
        y = silu(y);
        if (ch < qk)
          in.q[static_cast<size_t>(t) * qk + ch] = y;
        else if (ch < 2 * qk)
          in.k[static_cast<size_t>(t) * qk + ch - qk] = y;
        else
          in.v[static_cast<size_t>(t) * HV * dv + ch - 2 * qk] = y;
      }
    }
    std::vector<float> next_conv(static_cast<size_t>(cd) * Wm1);
    for (int ch = 0; ch < cd; ++ch)
      for (int j = 0; j < Wm1; ++j) next_conv[static_cast<size_t>(ch) * Wm1 + j] = input(T + j, ch);
    std::copy(next_conv.begin(), next_conv.end(), conv_state);

    // Gates: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b).
    const int a_off = cd + HV * dv, b_off = a_off + gw;
    for (int t = 0; t < T; ++t) {
      const float* row = &proj[static_cast<size_t>(t) * P];
      for (int p = 0; p < gw; ++p) {
        const int head = c.gate == GateKind::gdn ? p : p / c.dk;
        in.g[static_cast<size_t>(t) * gw + p] =
            -std::exp(L.A_log[head]) * softplus(row[a_off + p] + L.dt_bias[p]);
      }
      for (int hv = 0; hv < HV; ++hv)
        in.beta[static_cast<size_t>(t) * HV + hv] = sigmoid(row[b_off + hv]);
    }

    float* S = state.temporal.layer(l);
    if (opt.recurrence)
      opt.recurrence(l, shape, in, S, o.data());
    else
      gated_delta_layer_fp32(shape, in, 0, T, S, o.data(), opt.storage);
    if (opt.layer_inputs) opt.layer_inputs->push_back(std::move(in));

    // Gated RMSNorm per value head: RMSNorm_dv(o) * out_norm * SiLU(z).
    for (int t = 0; t < T; ++t)
      for (int hv = 0; hv < HV; ++hv) {
        const size_t base = (static_cast<size_t>(t) * HV + hv) * dv;
        const float* z = &proj[static_cast<size_t>(t) * P + cd + static_cast<size_t>(hv) * dv];
        rms_norm_rows(&o[base], 1, dv, L.out_norm.data(), c.norm_eps, &on[base],
                      "gated output norm", l);
        for (int i = 0; i < dv; ++i) on[base + i] = on[base + i] * silu(z[i]);
      }
    linear_fixed_order(on.data(), T, HV * dv, L.o_proj.data(), D, x.data(), /*accumulate=*/true);

    // SwiGLU MLP.
    rms_norm_rows(x.data(), T, D, L.mlp_norm.data(), c.norm_eps, h.data(), "MLP norm", l);
    linear_fixed_order(h.data(), T, D, L.gate_up.data(), 2 * F, gu.data());
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < F; ++i) {
        const float* row = &gu[static_cast<size_t>(t) * 2 * F];
        act[static_cast<size_t>(t) * F + i] = silu(row[i]) * row[F + i];
      }
    linear_fixed_order(act.data(), T, F, L.down.data(), D, x.data(), /*accumulate=*/true);
  }

  rms_norm_rows(x.data(), T, D, final_norm_.data(), c.norm_eps, h.data(), "final norm", -1);
  if (opt.final_hidden) *opt.final_hidden = h;
  if (!opt.logits) return {};
  std::vector<float> logits(Ts * 256);
  linear_fixed_order(h.data(), T, D, lm_head_.data(), 256, logits.data());
  return logits;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (bytes.empty()) fail("{}: empty file", path);
  return bytes;
}

}  // namespace statecheck
