#include "core/drive/states_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "core/io/hdf5_file.h"
#include "core/io/hdf5_isolated.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"

namespace statecheck {

namespace {
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

// What the first bytes say the file is. safetensors: an 8-byte little-endian header length N
// >= 2, then the JSON header, which starts with '{' (safetensors README, "Format").
enum class StatesFormat { hdf5, safetensors, neither };

StatesFormat detect_format(const std::string& path, std::string& why) {
  if (has_hdf5_signature(path)) return StatesFormat::hdf5;
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
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
}  // namespace

std::vector<MultiLayerState> read_states_file(const std::string& path, const ModelConfig& m) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) fail("{}: cannot open states file", path);
  probe.close();
  const size_t L = m.linear_layer_count(), HV = m.value_heads_shard(), dv = m.head_v_dim,
               dk = m.head_k_dim;
  const std::string expected =
      fmt::format("[{}, {}, {}, {}] or [{}, N, {}, {}, {}]", L, HV, dv, dk, L, HV, dv, dk);
  // The shape is checked against the model before any data are read (a wrong file costs nothing).
  const ShapeCheck check_shape = [&](const std::string& name, const std::vector<size_t>& s) {
    if (s.size() != 4 && s.size() != 5)
      fail("{}: tensor '{}' has shape {}; expected {} for model {} at TP {}", path, name,
           shape_str(s), expected, m.name, m.tp);
    const size_t fL = s[0], fHV = s[s.size() - 3], fdv = s[s.size() - 2], fdk = s[s.size() - 1];
    if (fL != L)
      fail("{}: tensor '{}' has {} layers (axis 0) but model {} has {} linear-attention layers",
           path, name, fL, m.name, L);
    if (fHV != HV) {
      std::string hint;
      if (fHV > 0 && static_cast<size_t>(m.num_value_heads) % fHV == 0)
        hint = fmt::format(" (a file of {} heads matches --tp {})", fHV, m.num_value_heads / fHV);
      fail("{}: tensor '{}' has {} value heads but model {} at TP {} has {} per shard{}", path,
           name, fHV, m.name, m.tp, HV, hint);
    }
    if (fdv != dv || fdk != dk)
      fail("{}: tensor '{}' has head shape [{}, {}] but model {} has [d_v, d_k] = [{}, {}]", path,
           name, fdv, fdk, m.name, dv, dk);
    if (s.size() == 5 && s[1] == 0) fail("{}: tensor '{}' holds no states (N = 0)", path, name);
  };
  std::string why;
  const StatesFormat format = detect_format(path, why);
  if (format == StatesFormat::neither)
    fail("{}: neither an HDF5 nor a safetensors file ({})", path, why);
  // HDF5 is parsed by libhdf5, which a damaged file can crash: in a child process.
  FloatArray a = format == StatesFormat::hdf5 ? read_hdf5_array_isolated(path, "", check_shape)
                                              : read_safetensors(path, "", check_shape);
  const auto& s = a.shape;
  const size_t N = s.size() == 5 ? s[1] : 1;

  StateShape shape{static_cast<int>(L), static_cast<int>(HV), static_cast<int>(dv),
                   static_cast<int>(dk)};
  // Refuse non-finite states here, where the position in the file is still known (state n, layer,
  // head, [i, j]); later stages would see them only after the recurrence has spread them.
  for (size_t i = 0; i < a.data.size(); ++i)
    if (!std::isfinite(a.data[i])) {
      const size_t head = dv * dk, idx = i % head, h = (i / head) % HV, rest = i / head / HV;
      const size_t n = s.size() == 5 ? rest % N : 0, l = s.size() == 5 ? rest / N : rest;
      fail(
          "{}: non-finite state value {} at state {}, layer {}, head {}, index [{}, {}] (d_v row, "
          "d_k column)",
          path, a.data[i], n, l, h, idx / dk, idx % dk);
    }
  std::vector<MultiLayerState> out(N, MultiLayerState(shape));
  const size_t layer = shape.layer_size();
  for (size_t l = 0; l < L; ++l)
    for (size_t n = 0; n < N; ++n) {
      const float* src = a.data.data() + (l * N + n) * layer;
      std::memcpy(out[n].layer(static_cast<int>(l)), src, layer * sizeof(float));
    }
  return out;
}

}  // namespace statecheck
