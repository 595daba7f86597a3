#include "core/drive/inputs_file.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/drive/states_file.h"
#include "core/io/hdf5_file.h"
#include "core/io/hdf5_isolated.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"

namespace statecheck {

namespace {

// Thrown by a ShapeCheck to stop a read once the shape is known (the data are not needed yet).
struct ShapeOnly {
  std::vector<size_t> shape;
};

std::string shape_str(const std::vector<size_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The tensor names a layer may hold, and whether each is required.
const std::vector<std::pair<std::string, bool>>& layer_tensors() {
  static const std::vector<std::pair<std::string, bool>> names = {
      {"q", true},  {"k", true},           {"v", true},
      {"g", true},  {"beta", true},        {"initial_state", false},
      {"o", false}, {"final_state", false}};
  return names;
}

std::string tensor_name(int layer, const std::string& what) {
  return fmt::format("layers.{}.{}", layer, what);
}

FloatArray read_tensor(const std::string& path, bool hdf5, const std::string& name,
                       const ShapeCheck& check) {
  return hdf5 ? read_hdf5_array_isolated(path, name, check) : read_safetensors(path, name, check);
}

std::vector<size_t> tensor_shape(const std::string& path, bool hdf5, const std::string& name) {
  if (hdf5) return hdf5_dataset_shape_isolated(path, name);
  try {
    read_tensor(path, hdf5, name,
                [](const std::string&, const std::vector<size_t>& s) { throw ShapeOnly{s}; });
  } catch (const ShapeOnly& s) {
    return s.shape;
  }
  fail("{}: tensor '{}' could not be inspected", path, name);
}

}  // namespace

bool parse_inputs_flag(const std::string& path, const std::string& key, const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  fail("{}: metadata '{}' must be \"true\" or \"false\", got '{}'", path, key, text);
}

float parse_inputs_scale(const std::string& path, const std::string& text) {
  char* end = nullptr;
  const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || !(v > 0) || v > 1e6)
    fail("{}: metadata 'scale' must be a positive decimal (the readout scale), got '{}'", path,
         text);
  return static_cast<float>(v);
}

InputsFile::InputsFile(const std::string& path, const ModelConfig& m) : path_(path) {
  hdf5_ = has_hdf5_signature(path);
  const std::map<std::string, std::string> meta =
      hdf5_ ? hdf5_root_attributes_isolated(path) : safetensors_metadata(path);
  auto required = [&](const char* key) -> const std::string& {
    const auto it = meta.find(key);
    if (it == meta.end())
      fail("{}: metadata '{}' is missing ({}; docs/real_models.md, \"The inputs file\")", path, key,
           hdf5_ ? "a root attribute" : "a key of __metadata__");
    return it->second;
  };
  if (meta.count("format") && meta.at("format") != "statecheck-inputs/1")
    fail("{}: metadata 'format' is '{}'; this build reads statecheck-inputs/1", path,
         meta.at("format"));
  const std::string& gate = required("gate");
  if (gate != "gdn" && gate != "kda")
    fail("{}: metadata 'gate' must be \"gdn\" or \"kda\", got '{}'", path, gate);
  const GateKind file_gate = gate == "gdn" ? GateKind::gdn : GateKind::kda;
  if (file_gate != m.gate)
    fail("{}: metadata 'gate' is '{}' but model {} is a {} model", path, gate, m.name,
         gate_kind_name(m.gate));
  shape_ = recurrence_shape(m);
  shape_.qk_l2norm = !parse_inputs_flag(path, "qk_l2norm_applied", required("qk_l2norm_applied"));
  shape_.scale = parse_inputs_scale(path, required("scale"));
  layers_ = m.linear_layers;

  // Every name in the file: layers.{i}.{tensor} of a linear layer i and a known tensor only.
  const std::vector<std::string> names =
      hdf5_ ? hdf5_dataset_names_isolated(path) : safetensors_tensor_names(path);
  const std::set<int> linear(layers_.begin(), layers_.end());
  std::set<std::string> present;
  for (const std::string& n : names) {
    int layer = -1;
    char tail[64] = {0};
    if (std::sscanf(n.c_str(), "layers.%d.%63s", &layer, tail) != 2 ||
        tensor_name(layer, tail) != n)
      fail("{}: tensor '{}' is not named layers.{{i}}.{{q,k,v,g,beta,initial_state,o,final_state}}",
           path, n);
    if (!linear.count(layer))
      fail(
          "{}: tensor '{}': layer {} is not a linear-attention layer of model {} (its linear "
          "layers are {})",
          path, n, layer, m.name, fmt::join(layers_, ", "));
    const auto& known = layer_tensors();
    if (std::none_of(known.begin(), known.end(), [&](const auto& k) { return k.first == tail; }))
      fail(
          "{}: tensor '{}': unknown tensor '{}' (expected q, k, v, g, beta, initial_state, o, "
          "final_state)",
          path, n, tail);
    present.insert(n);
  }

  const size_t H = shape_.H, HV = shape_.HV, dk = shape_.dk, dv = shape_.dv;
  const std::string tp_note = m.tp > 1 ? fmt::format(" at TP {}", m.tp) : "";
  size_t N = 0, T = 0;
  bool first = true, any_initial = false, all_initial = true, any_ref = false, all_ref = true;
  for (int layer : layers_) {
    for (const auto& [what, needed] : layer_tensors()) {
      const std::string name = tensor_name(layer, what);
      if (!present.count(name)) {
        if (needed)
          fail("{}: tensor '{}' is missing (layer {} is a linear-attention layer of model {})",
               path, name, layer, m.name);
        if (what == "initial_state") all_initial = false;
        if (what == "o" || what == "final_state") all_ref = false;
        continue;
      }
      if (what == "initial_state") any_initial = true;
      if (what == "o" || what == "final_state") any_ref = true;
      const std::vector<size_t> s = tensor_shape(path, hdf5_, name);
      std::vector<size_t> want;
      std::string layout;
      const bool per_state = what == "initial_state" || what == "final_state";
      if (what == "q" || what == "k")
        want = {H, dk}, layout = "[N, T, H, d_k]";
      else if (what == "v" || what == "o")
        want = {HV, dv}, layout = "[N, T, HV, d_v]";
      else if (what == "g" && m.gate == GateKind::kda)
        want = {HV, dk}, layout = "[N, T, HV, d_k] (KDA)";
      else if (what == "g" || what == "beta")
        want = {HV}, layout = what == "g" ? "[N, T, HV] (GDN)" : "[N, T, HV]";
      else
        want = {HV, dv, dk}, layout = "[N, HV, d_v, d_k]";
      const size_t lead = per_state ? 1 : 2;
      std::vector<size_t> full;
      if (s.size() == lead + want.size()) {
        full.assign(s.begin(), s.begin() + lead);
        full.insert(full.end(), want.begin(), want.end());
      }
      if (full.empty() || full != s) {
        std::string expect = "[";
        expect += per_state ? "N" : "N, T";
        for (size_t w : want) expect += ", " + std::to_string(w);
        expect += "]";
        fail("{}: tensor '{}' has shape {}; model {}{} needs {} = {} (H {}, HV {}, d_k {}, d_v {})",
             path, name, shape_str(s), m.name, tp_note, layout, expect, H, HV, dk, dv);
      }
      const size_t fN = s[0], fT = per_state ? T : s[1];
      if (first) {
        if (per_state) fail("{}: tensor '{}' is read before q (internal order)", path, name);
        N = fN, T = fT, first = false;
        if (N == 0 || T == 0)
          fail("{}: tensor '{}' holds no data (N = {}, T = {})", path, name, N, T);
      } else if (fN != N || fT != T) {
        fail("{}: tensor '{}' has N = {}, T = {} but layers.{}.q has N = {}, T = {}", path, name,
             fN, fT, layers_[0], N, T);
      }
    }
  }
  if (any_initial && !all_initial)
    fail("{}: some layers have an initial_state and others not; give it for every layer or none",
         path);
  if (any_ref && !all_ref)
    fail(
        "{}: some layers have reference tensors (o, final_state) and others not; give both for "
        "every layer or none",
        path);
  if (N > (1u << 20) || T > (1u << 24)) fail("{}: N = {} or T = {} is out of range", path, N, T);
  N_ = static_cast<int>(N);
  T_ = static_cast<int>(T);
  has_initial_ = any_initial;
  has_reference_ = any_ref;
}

std::vector<float> InputsFile::read_slice(int l, const char* what, int n,
                                          size_t per_sequence) const {
  if (l < 0 || l >= static_cast<int>(layers_.size()) || n < 0 || n >= N_)
    fail("{}: no sequence {} / linear layer {} ({} sequences, {} layers)", path_, n, l, N_,
         layers_.size());
  const std::string name = tensor_name(layers_[l], what);
  const FloatArray a = read_tensor(path_, hdf5_, name, nullptr);
  if (a.data.size() != per_sequence * N_)
    fail("{}: tensor '{}' changed since it was opened ({} values, expected {})", path_, name,
         a.data.size(), per_sequence * N_);
  const auto begin = a.data.begin() + static_cast<std::ptrdiff_t>(per_sequence * n);
  std::vector<float> out(begin, begin + static_cast<std::ptrdiff_t>(per_sequence));
  for (size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i]))
      fail("{}: tensor '{}': non-finite value {} at sequence {}, flat index {} of the sequence",
           path_, name, out[i], n, i);
  return out;
}

LayerInputs InputsFile::layer_inputs(int n, int l, int T) const {
  if (T < 0 || T > T_)
    fail("{}: {} tokens asked of sequence {} but the file holds T = {} per sequence", path_, T, n,
         T_);
  const RecurrenceShape& s = shape_;
  LayerInputs in = LayerInputs::zeros(s, T);
  auto take = [&](const char* what, std::vector<float>& dst) {
    const size_t per_token = dst.size() / std::max(T, 1);
    std::vector<float> all = read_slice(l, what, n, per_token * T_);
    std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(per_token * T), dst.begin());
  };
  if (T == 0) return in;
  take("q", in.q);
  take("k", in.k);
  take("v", in.v);
  take("g", in.g);
  take("beta", in.beta);
  const int gw = s.gate_width();
  for (size_t i = 0; i < in.g.size(); ++i)
    if (in.g[i] > 0.0f) {
      const size_t t = i / gw, p = i % gw;
      fail("{}: tensor '{}': g = {} > 0 at [{}, {}, {}{}]: g is a log-space decay (<= 0)", path_,
           tensor_name(layers_[l], "g"), in.g[i], n, t, s.gate == GateKind::gdn ? p : p / s.dk,
           s.gate == GateKind::gdn ? std::string() : fmt::format(", {}", p % s.dk));
    }
  for (size_t i = 0; i < in.beta.size(); ++i)
    if (!(in.beta[i] >= 0.0f && in.beta[i] <= 1.0f))
      fail("{}: tensor '{}': beta = {} at [{}, {}, {}] is outside [0, 1]", path_,
           tensor_name(layers_[l], "beta"), in.beta[i], n, i / s.HV, i % s.HV);
  return in;
}

std::vector<float> InputsFile::initial_layer_state(int n, int l) const {
  const size_t size = static_cast<size_t>(shape_.HV) * shape_.dv * shape_.dk;
  if (!has_initial_) {
    if (l < 0 || l >= static_cast<int>(layers_.size()) || n < 0 || n >= N_)
      fail("{}: no sequence {} / linear layer {}", path_, n, l);
    return std::vector<float>(size, 0.0f);
  }
  return read_slice(l, "initial_state", n, size);
}

std::vector<float> InputsFile::reference_outputs(int n, int l) const {
  if (!has_reference_) fail("{}: holds no reference tensors (layers.{{i}}.o)", path_);
  return read_slice(l, "o", n, static_cast<size_t>(T_) * shape_.HV * shape_.dv);
}

std::vector<float> InputsFile::reference_final_state(int n, int l) const {
  if (!has_reference_) fail("{}: holds no reference tensors (layers.{{i}}.final_state)", path_);
  return read_slice(l, "final_state", n, static_cast<size_t>(shape_.HV) * shape_.dv * shape_.dk);
}

}  // namespace statecheck
