#include "core/drive/states_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>

#include "core/io/hdf5_file.h"
#include "core/io/hdf5_isolated.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"

namespace statecheck {

// The HDF5 signature sits at byte 0, or after a user block at 512, 1024, 2048, ... (HDF5 file
// format specification, "Format Signature"; MATLAB v7.3 and PyTables files have a user block).
bool has_hdf5_signature(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  for (uint64_t at = 0; in; at = at == 0 ? 512 : 2 * at) {
    char sig[8] = {};
    in.seekg(static_cast<std::streamoff>(at));
    in.read(sig, 8);
    if (in.gcount() != 8) return false;
    if (std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0) return true;
  }
  return false;
}

namespace {

// What the first bytes say the file is. safetensors: an 8-byte little-endian header length N
// >= 2, then the JSON header, which starts with '{' (safetensors README, "Format").
enum class StatesFormat { hdf5, safetensors, neither };

StatesFormat detect_format(const std::string& path, std::string& why) {
  if (has_hdf5_signature(path)) return StatesFormat::hdf5;
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (!in || end < 0) {  // procfs and other files without a size or a seek
    why = "no size to seek to: not an ordinary file";
    return StatesFormat::neither;
  }
  const uint64_t size = static_cast<uint64_t>(end);
  in.seekg(0);
  if (size == 0) {
    why = "it is empty (0 bytes)";
    return StatesFormat::neither;
  }
  unsigned char head[9] = {};
  in.read(reinterpret_cast<char*>(head), 9);
  const size_t got = static_cast<size_t>(in.gcount());
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | head[i];
  // A '{' after the length is safetensors even when the length runs past the end: the reader
  // then says the file is truncated.
  if (got == 9 && len >= 2 && head[8] == '{') return StatesFormat::safetensors;
  std::string first;
  for (size_t i = 0; i < std::min<size_t>(got, 8); ++i) first += fmt::format("{:02x}", head[i]);
  why = fmt::format(
      "{} bytes starting {}: no HDF5 signature, and no 8-byte length followed by a "
      "JSON header",
      size, first);
  return StatesFormat::neither;
}

std::string shape_str(const std::vector<size_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// At most four names, then how many more: error messages stay one short line.
std::string some_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 4; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 4) out += fmt::format(" and {} more", names.size() - 4);
  return out;
}

// The pattern of a name: its first run of digits replaced by {i} ("" when it has none).
std::string pattern_of(const std::string& name) {
  const size_t a = name.find_first_of("0123456789");
  if (a == std::string::npos) return "";
  const size_t b = name.find_first_not_of("0123456789", a);
  return name.substr(0, a) + "{i}" + (b == std::string::npos ? "" : name.substr(b));
}

// Checks one state tensor's shape: `layer_axis` tells whether it has the leading L axis (one
// tensor for all layers) or is one layer's ([HV, d_v, d_k] or [N, HV, d_v, d_k]).
void check_state_shape(const std::string& path, const std::string& name,
                       const std::vector<size_t>& s, const ModelConfig& m, bool layer_axis) {
  const size_t L = m.linear_layer_count(), HV = m.value_heads_shard(), dv = m.head_v_dim,
               dk = m.head_k_dim;
  const std::string expected =
      layer_axis
          ? fmt::format("[{}, {}, {}, {}] or [{}, N, {}, {}, {}]", L, HV, dv, dk, L, HV, dv, dk)
          : fmt::format("[{}, {}, {}] or [N, {}, {}, {}] per layer", HV, dv, dk, HV, dv, dk);
  const size_t lo = layer_axis ? 4 : 3;
  if (s.size() != lo && s.size() != lo + 1)
    fail("{}: tensor '{}' has shape {}; expected {} for model {} at TP {}", path, name,
         shape_str(s), expected, m.name, m.tp);
  const size_t fHV = s[s.size() - 3], fdv = s[s.size() - 2], fdk = s[s.size() - 1];
  if (layer_axis && s[0] != L)
    fail("{}: tensor '{}' has {} layers (axis 0) but model {} has {} linear-attention layers", path,
         name, s[0], m.name, L);
  if (fHV != HV) {
    std::string hint;
    if (fHV > 0 && static_cast<size_t>(m.num_value_heads) % fHV == 0)
      hint = fmt::format(" (a file of {} heads matches --tp {})", fHV, m.num_value_heads / fHV);
    fail("{}: tensor '{}' has {} value heads but model {} at TP {} has {} per shard{}", path, name,
         fHV, m.name, m.tp, HV, hint);
  }
  if (fdv != dv || fdk != dk)
    fail("{}: tensor '{}' has head shape [{}, {}] but model {} has [d_v, d_k] = [{}, {}]", path,
         name, fdv, fdk, m.name, dv, dk);
  const size_t n_axis = layer_axis ? 1 : 0;
  if (s.size() == lo + 1 && s[n_axis] == 0)
    fail("{}: tensor '{}' holds no states (N = 0)", path, name);
}

// Refuses non-finite states where the position in the file is still known (state n, layer, head,
// [i, j]); later stages would see them only after the recurrence has spread them. `data` is
// [layers, N, HV, d_v, d_k] for layers first_layer.. (one tensor: all of them).
void check_finite(const std::string& path, const std::vector<float>& data, size_t N, size_t HV,
                  size_t dv, size_t dk, size_t first_layer) {
  for (size_t i = 0; i < data.size(); ++i)
    if (!std::isfinite(data[i])) {
      const size_t head = dv * dk, idx = i % head, h = (i / head) % HV, rest = i / head / HV;
      fail(
          "{}: non-finite state value {} at state {}, layer {}, head {}, index [{}, {}] (d_v row, "
          "d_k column)",
          path, data[i], rest % N, first_layer + rest / N, h, idx / dk, idx % dk);
    }
}
}  // namespace

std::vector<std::pair<int, std::string>> match_layer_pattern(const std::vector<std::string>& names,
                                                             const std::string& pattern) {
  std::vector<std::pair<int, std::string>> out;
  const size_t at = pattern.find("{i}");
  if (at == std::string::npos) return out;
  const std::string pre = pattern.substr(0, at), post = pattern.substr(at + 3);
  for (const std::string& n : names) {
    if (n.size() <= pre.size() + post.size() || n.compare(0, pre.size(), pre) != 0 ||
        n.compare(n.size() - post.size(), post.size(), post) != 0)
      continue;
    const std::string digits = n.substr(pre.size(), n.size() - pre.size() - post.size());
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos ||
        (digits.size() > 1 && digits[0] == '0'))
      continue;
    out.push_back({std::stoi(digits), n});
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<MultiLayerState> read_states_file(const std::string& path, const ModelConfig& m,
                                              const std::string& key) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) fail("{}: cannot open states file", path);
  probe.close();
  std::string why;
  const StatesFormat format = detect_format(path, why);
  if (format == StatesFormat::neither)
    fail("{}: neither an HDF5 nor a safetensors file ({})", path, why);
  const bool hdf5 = format == StatesFormat::hdf5;
  // HDF5 is parsed by libhdf5, which a damaged file can crash: in a child process.
  const auto read = [&](const std::string& name, const ShapeCheck& check) {
    return hdf5 ? read_hdf5_array_isolated(path, name, check) : read_safetensors(path, name, check);
  };
  const size_t L = m.linear_layer_count(), HV = m.value_heads_shard(), dv = m.head_v_dim,
               dk = m.head_k_dim;
  const StateShape shape{static_cast<int>(L), static_cast<int>(HV), static_cast<int>(dv),
                         static_cast<int>(dk)};
  const size_t layer = shape.layer_size();

  // Which tensors: one (named, "state" or the only one) or one per layer (a pattern with {i}).
  const std::vector<std::string> names =
      hdf5 ? hdf5_dataset_names_isolated(path) : safetensors_tensor_names(path);
  std::string single = key, pattern;
  if (key.find("{i}") != std::string::npos) {
    single.clear();
    pattern = key;
  } else if (key.empty() && names.size() > 1 &&
             std::find(names.begin(), names.end(), "state") == names.end()) {
    std::vector<std::string> fitting;  // the patterns that name L tensors
    std::map<std::string, size_t> count;
    for (const std::string& n : names)
      if (const std::string p = pattern_of(n); !p.empty()) ++count[p];
    for (const auto& [p, c] : count)
      if (c == L) fitting.push_back(p);
    // Engine dumps hold a conv state per layer beside the temporal one: the conv pattern is not it.
    if (fitting.size() > 1)
      fitting.erase(
          std::remove_if(fitting.begin(), fitting.end(),
                         [](const std::string& p) { return p.find("conv") != std::string::npos; }),
          fitting.end());
    if (fitting.size() != 1)
      fail(
          "{}: {} tensors ({}), none named 'state' and {} per-layer pattern naming {} tensors; "
          "give --states-key NAME or a pattern such as 'layers.{{i}}.ssm_state'",
          path, names.size(), some_names(names), fitting.empty() ? "no" : "more than one", L);
    pattern = fitting[0];
  }
  if (!single.empty() && std::find(names.begin(), names.end(), single) == names.end() &&
      !(hdf5 && single.find('/') != std::string::npos))
    fail("{}: no tensor '{}' (found {})", path, single, some_names(names));

  if (pattern.empty()) {
    FloatArray a = read(single, [&](const std::string& name, const std::vector<size_t>& s) {
      check_state_shape(path, name, s, m, true);
    });
    const size_t N = a.shape.size() == 5 ? a.shape[1] : 1;
    check_finite(path, a.data, N, HV, dv, dk, 0);
    std::vector<MultiLayerState> out(N, MultiLayerState(shape));
    for (size_t l = 0; l < L; ++l)
      for (size_t n = 0; n < N; ++n)
        std::memcpy(out[n].layer(static_cast<int>(l)), a.data.data() + (l * N + n) * layer,
                    layer * sizeof(float));
    return out;
  }

  // One tensor per layer: nested HDF5 names are not listed at the root, so they are tried by
  // index (0..L-1, then the model's layer indices).
  std::vector<std::pair<int, std::string>> matched = match_layer_pattern(names, pattern);
  if (matched.empty() && hdf5 && pattern.find('/') != std::string::npos) {
    const std::string pre = pattern.substr(0, pattern.find("{i}")),
                      post = pattern.substr(pattern.find("{i}") + 3);
    const auto named = [&](const std::vector<int>& indices) {
      std::vector<std::pair<int, std::string>> out;
      for (int i : indices) {
        const std::string n = pre + std::to_string(i) + post;
        if (!hdf5_has_dataset_isolated(path, n)) return std::vector<std::pair<int, std::string>>{};
        out.push_back({i, n});
      }
      return out;
    };
    std::vector<int> consecutive(L);
    for (size_t l = 0; l < L; ++l) consecutive[l] = static_cast<int>(l);
    matched = named(consecutive);
    if (matched.empty()) matched = named(m.linear_layers);
  }
  if (matched.size() != L) {
    std::vector<std::string> m_names;
    for (const auto& [i, n] : matched) m_names.push_back(n);
    fail(
        "{}: pattern '{}' names {} tensors{} but model {} has {} linear-attention layers (found "
        "{})",
        path, pattern, matched.size(), m_names.empty() ? "" : " (" + some_names(m_names) + ")",
        m.name, L, some_names(names));
  }
  bool consecutive = true, model_indices = true;
  for (size_t l = 0; l < L; ++l) {
    consecutive = consecutive && matched[l].first == static_cast<int>(l);
    model_indices = model_indices && matched[l].first == m.linear_layers[l];
  }
  if (!consecutive && !model_indices)
    fail(
        "{}: pattern '{}' has layer indices {}..{}, neither 0..{} nor the linear-attention layers "
        "of model {} ({}, {}, ...)",
        path, pattern, matched.front().first, matched.back().first, L - 1, m.name,
        m.linear_layers[0], L > 1 ? m.linear_layers[1] : m.linear_layers[0]);
  std::vector<MultiLayerState> out;
  size_t N = 0;
  for (size_t l = 0; l < L; ++l) {
    const std::string& name = matched[l].second;
    FloatArray a = read(name, [&](const std::string& nm, const std::vector<size_t>& s) {
      check_state_shape(path, nm, s, m, false);
      const size_t n = s.size() == 4 ? s[0] : 1;
      if (l > 0 && n != N)
        fail("{}: tensor '{}' holds {} states but '{}' holds {}", path, nm, n, matched[0].second,
             N);
    });
    if (l == 0) {
      N = a.shape.size() == 4 ? a.shape[0] : 1;
      out.assign(N, MultiLayerState(shape));
    }
    check_finite(path, a.data, N, HV, dv, dk, l);
    for (size_t n = 0; n < N; ++n)
      std::memcpy(out[n].layer(static_cast<int>(l)), a.data.data() + n * layer,
                  layer * sizeof(float));
  }
  return out;
}

}  // namespace statecheck
