// safetensors files: an 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section (offsets are relative to its start). Format: github.com/huggingface/
// safetensors, README "Format". The header is parsed with nlohmann-json.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/io/hdf5_file.h"

namespace statecheck {

// Reads one tensor of a safetensors file as fp32: `name` if given, else "state" if present, else
// the only tensor. Supported dtypes: F32, BF16, F64 (F64 rounded to fp32). Throws
// statecheck::Error with one line naming the file and the problem: too short for its header,
// header length past the end or above 100 MB, bad JSON, missing dtype/shape/data_offsets,
// unsupported dtype, byte range not matching shape x dtype size (mislabelled), data past the end of
// the file (truncated), a tensor named twice, tensors overlapping, data bytes that no tensor
// indexes (before, between or after the tensors: the format indexes every byte), several tensors
// and none named "state". `check` (if given) sees the tensor's name and shape before its data are
// read.
FloatArray read_safetensors(const std::string& path, const std::string& name = "",
                            const ShapeCheck& check = nullptr);

// Names of the tensors in a safetensors file (its JSON header; "__metadata__" left out), sorted.
// Throws statecheck::Error like read_safetensors for an unreadable or malformed header.
std::vector<std::string> safetensors_tensor_names(const std::string& path);

// The string metadata of a safetensors file (its header's "__metadata__" object; empty when
// absent). Throws statecheck::Error like read_safetensors for a malformed header, and naming the
// key when "__metadata__" is not an object of strings (the format allows strings only).
std::map<std::string, std::string> safetensors_metadata(const std::string& path);

// A tensor to write: shape outermost first; `dtype` "F32" (values written as is) or "BF16"
// (values rounded to bf16).
struct TensorToWrite {
  std::vector<size_t> shape;
  std::vector<float> data;
  std::string dtype = "F32";
};

// Writes tensors (sorted by name, 8-byte aligned data) plus string metadata. Throws on I/O error.
void write_safetensors(const std::string& path, const std::map<std::string, TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace statecheck
