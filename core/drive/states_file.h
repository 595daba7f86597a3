// States supplied by the user (drive 'states'): a safetensors or HDF5 file holding temporal
// states, fp32, bf16 or fp64 (docs/experiments.md, "Drives"), in one of two layouts:
//   one tensor    [L, HV, d_v, d_k] or [L, N, HV, d_v, d_k] (N states of one model): the tensor
//                 named by --states-key, else the one named "state", else the only one;
//   per layer     one tensor per linear-attention layer, [HV, d_v, d_k] or [N, HV, d_v, d_k],
//                 named by a pattern with "{i}" for the layer index (--states-key
//                 'layers.{i}.ssm_state'; HDF5 names may hold groups, 'layers/{i}/ssm_state').
//                 Without --states-key a file of several tensors, none named "state", is read
//                 per layer when exactly one pattern (the names with their first number replaced
//                 by {i}) matches L tensors. The indices are either 0..L-1 or the model's
//                 linear-attention layer indices (engines number all layers: 0, 1, 2, 4, ...);
//                 layers are taken in index order.
#pragma once

#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/state/state.h"

namespace statecheck {

// Whether `path` holds the HDF5 signature at byte 0 or after a user block at 512 * 2^k (HDF5 file
// format specification, "Format Signature"); files without it are read as safetensors.
bool has_hdf5_signature(const std::string& path);

// Reads the states of `path` (format by content: the HDF5 signature at byte 0 or after a user
// block at 512 * 2^k; safetensors: an 8-byte header length and a header that starts with '{';
// anything else is refused as neither, quoting its size and first bytes; HDF5 is parsed in a child
// process, core/io/hdf5_isolated.h) and checks their shape against the model at its TP shard: L ==
// linear layers, HV == value heads per shard, d_v, d_k. Throws statecheck::Error naming the file
// and the mismatching axis (and suggesting
// --tp when HV matches another TP degree). `key`: a tensor name, a pattern with one "{i}", or ""
// (the rules above); when no tensor fits, the error names at most four of the tensors found and the
// --states-key to give. Returns one MultiLayerState per state (N >= 1).
std::vector<MultiLayerState> read_states_file(const std::string& path, const ModelConfig& model,
                                              const std::string& key = "");

// The names of `names` matching `pattern` (one "{i}" standing for a decimal layer index without
// leading zeros), with their indices, sorted by index. A pattern without "{i}" matches nothing.
std::vector<std::pair<int, std::string>> match_layer_pattern(const std::vector<std::string>& names,
                                                             const std::string& pattern);

}  // namespace statecheck
