#include "core/io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/util/json_parse.h"

namespace statecheck {

using nlohmann::json;

namespace {

// The parsed JSON header of a safetensors file; `in` is left at the start of the data section.
struct Header {
  nlohmann::json json;
  uint64_t header_len = 0;
  uint64_t file_size = 0;
};

Header read_header(const std::string& path, std::ifstream& in) {
  in.open(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path);
  in.seekg(0, std::ios::end);
  Header h;
  h.file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (h.file_size < 8) fail("{}: {} bytes, too short for a safetensors header", path, h.file_size);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  for (int i = 7; i >= 0; --i) h.header_len = (h.header_len << 8) | len_bytes[i];
  // Real headers are a few KB; a longer one is not a states file (and would be read into memory).
  if (h.header_len > (uint64_t(100) << 20))
    fail("{}: header of {} bytes is larger than 100 MB: not a safetensors file", path,
         h.header_len);
  if (h.header_len > h.file_size - 8)
    fail(
        "{}: header length {} runs past the end of the file ({} bytes): truncated or not a "
        "safetensors file",
        path, h.header_len, h.file_size);
  std::string header(h.header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(h.header_len));
  // The JSON parser stops at a NUL byte; the format pads a header with spaces, never NULs.
  if (const size_t nul = header.find('\0'); nul != std::string::npos)
    fail("{}: header has a NUL byte at offset {} (the format pads with spaces)", path, nul + 8);
  // A tensor named twice would leave the last entry to describe it: refused. Only the top-level
  // keys are tensor names.
  JsonRepeatedKey repeated;
  try {
    h.json = parse_json_noting_repeated_keys(header, repeated, 1);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON ({})", path, e.what());
  }
  if (!h.json.is_object()) fail("{}: header is not a JSON object", path);
  if (repeated.depth == 1) fail("{}: tensor '{}' is named twice in the header", path, repeated.key);
  return h;
}

}  // namespace

std::vector<std::string> safetensors_tensor_names(const std::string& path) {
  std::ifstream in;
  const Header h = read_header(path, in);
  std::vector<std::string> names;
  for (auto it = h.json.begin(); it != h.json.end(); ++it)
    if (it.key() != "__metadata__") names.push_back(it.key());
  std::sort(names.begin(), names.end());
  return names;
}

std::map<std::string, std::string> safetensors_metadata(const std::string& path) {
  std::ifstream in;
  const Header h = read_header(path, in);
  std::map<std::string, std::string> out;
  if (!h.json.contains("__metadata__")) return out;
  const json& meta = h.json["__metadata__"];
  if (!meta.is_object()) fail("{}: '__metadata__' must be an object of strings", path);
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    if (!it.value().is_string())
      fail("{}: '__metadata__' key '{}' must be a string, got {}", path, it.key(),
           it.value().dump());
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

FloatArray read_safetensors(const std::string& path, const std::string& wanted,
                            const ShapeCheck& check) {
  std::ifstream in;
  const Header h = read_header(path, in);
  const json& j = h.json;
  const uint64_t header_len = h.header_len, file_size = h.file_size;
  const uint64_t data_size = file_size - 8 - header_len;

  std::vector<std::string> names;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "__metadata__") names.push_back(it.key());
  // Every tensor's byte range, not only the one read: non-negative, inside the data, and no two
  // overlapping (as the safetensors format requires), so that a damaged header is not half used.
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::string>> ranges;
  for (const std::string& n : names) {
    const json& e = j[n];
    if (!e.is_object() || !e.contains("data_offsets")) continue;  // named below if it is read
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      fail("{}: tensor '{}': data_offsets {} must be two non-negative byte offsets [begin, end]",
           path, n, off.dump());
    const uint64_t b = off[0].get<uint64_t>(), e_ = off[1].get<uint64_t>();
    if (e_ < b) fail("{}: tensor '{}': data_offsets [{}, {}] are reversed", path, n, b, e_);
    if (e_ > data_size)
      fail("{}: tensor '{}' ends at data byte {} but the file holds only {} data bytes: truncated",
           path, n, e_, data_size);
    ranges.push_back({{b, e_}, n});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t r = 1; r < ranges.size(); ++r)
    if (ranges[r].first.first < ranges[r - 1].first.second)
      fail("{}: tensors '{}' and '{}' overlap in the data (bytes [{}, {}) and [{}, {}))", path,
           ranges[r - 1].second, ranges[r].second, ranges[r - 1].first.first,
           ranges[r - 1].first.second, ranges[r].first.first, ranges[r].first.second);
  // The tensors index the whole data section, without holes (as the format requires and its
  // reference loader checks): bytes that belong to no tensor mean a damaged or misread header.
  uint64_t covered = 0;
  for (const auto& [range, n] : ranges) {
    if (range.first != covered)
      fail("{}: data bytes [{}, {}) before tensor '{}' belong to no tensor (damaged header?)", path,
           covered, range.first, n);
    covered = range.second;
  }
  if (!ranges.empty() && covered != data_size)
    fail("{}: {} data bytes after the last tensor (from byte {}) belong to no tensor", path,
         data_size - covered, covered);
  std::string name = wanted;
  if (name.empty()) {
    if (j.contains("state"))
      name = "state";
    else if (names.size() == 1)
      name = names[0];
    else if (names.empty())
      fail("{}: no tensors in the file", path);
    else {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      fail("{}: several tensors ({}) and none named 'state'", path, list);
    }
  }
  if (!j.contains(name)) fail("{}: no tensor '{}'", path, name);
  const json& t = j[name];
  if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
    fail("{}: tensor '{}' lacks dtype, shape or data_offsets", path, name);
  if (!t["dtype"].is_string()) fail("{}: tensor '{}': dtype must be a string", path, name);
  const std::string dtype = t["dtype"].get<std::string>();
  size_t elem = 0;
  if (dtype == "F32")
    elem = 4;
  else if (dtype == "BF16")
    elem = 2;
  else if (dtype == "F64")
    elem = 8;
  else
    fail("{}: tensor '{}' has dtype {} (supported: F32, BF16, F64)", path, name, dtype);

  FloatArray out;
  out.name = name;
  out.dtype = dtype;
  uint64_t count = 1;
  if (!t["shape"].is_array()) fail("{}: tensor '{}': shape must be a list", path, name);
  // No tensor this tool reads has more than 6 dimensions; the bound keeps messages that print a
  // shape to one short line.
  constexpr size_t kMaxRank = 16;
  if (t["shape"].size() > kMaxRank)
    fail("{}: tensor '{}': shape has {} dimensions (at most {})", path, name, t["shape"].size(),
         kMaxRank);
  for (const auto& d : t["shape"]) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      fail("{}: tensor '{}': shape entries must be non-negative integers", path, name);
    out.shape.push_back(d.get<size_t>());
    if (__builtin_mul_overflow(count, d.get<uint64_t>(), &count) || count > (uint64_t(1) << 34))
      fail(
          "{}: tensor '{}': shape has more than 2^34 elements: not a state file this tool can hold",
          path, name);
  }
  // Its byte range was checked with every tensor's above (non-negative, ordered, in the file).
  const json& off = t["data_offsets"];
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (end - begin != count * elem)
    fail(
        "{}: tensor '{}' is labelled {} with shape of {} elements ({} bytes) but its data_offsets "
        "span {} bytes: mislabelled dtype or shape",
        path, name, dtype, count, count * elem, end - begin);

  if (check) check(name, out.shape);
  std::vector<char> raw(end - begin);
  in.seekg(static_cast<std::streamoff>(8 + header_len + begin));
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (!in) fail("{}: read error in tensor '{}'", path, name);
  out.data.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (elem == 4) {
      std::memcpy(&out.data[i], raw.data() + 4 * i, 4);
    } else if (elem == 2) {
      uint16_t b;
      std::memcpy(&b, raw.data() + 2 * i, 2);
      out.data[i] = float_from_bf16_bits(b);
    } else {
      double d;
      std::memcpy(&d, raw.data() + 8 * i, 8);
      if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max())
        fail("{}: tensor '{}': F64 value {} at flat index {} is outside the fp32 range", path, name,
             d, i);
      out.data[i] = static_cast<float>(d);
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (t.dtype != "F32" && t.dtype != "BF16")
      fail("write_safetensors: tensor '{}': dtype {} not supported", name, t.dtype);
    size_t n = 1;
    for (auto d : t.shape) n *= d;
    if (n != t.data.size())
      fail("write_safetensors: tensor '{}': {} values for shape of {}", name, t.data.size(), n);
    const uint64_t bytes = n * (t.dtype == "F32" ? 4 : 2);
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("{}: cannot create file", path);
  uint64_t len = h.size();
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xFF);
  out.write(reinterpret_cast<const char*>(len_bytes), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) {
    if (t.dtype == "F32") {
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size() * 4));
    } else {
      for (float f : t.data) {
        const uint16_t b = bf16_bits_from_float(f);
        out.write(reinterpret_cast<const char*>(&b), 2);
      }
    }
  }
  if (!out) fail("{}: write error", path);
}

}  // namespace statecheck
