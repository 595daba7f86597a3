// States supplied by the user (drive 'states'): a safetensors or HDF5 file holding temporal
// states [L, HV, d_v, d_k] or [L, N, HV, d_v, d_k] (N states of one model), fp32 or bf16
// (docs/experiments.md, "Drives").
#pragma once

#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/state/state.h"

namespace statecheck {

// Reads the states of `path` (format by content: the HDF5 signature at byte 0 or after a user
// block at 512 * 2^k; safetensors: an 8-byte header length and a header that starts with '{';
// anything else is refused as neither, quoting its size and first bytes; HDF5 is parsed in a child
// process, core/io/hdf5_isolated.h) and checks their shape against the model at its TP shard: L ==
// linear layers, HV == value heads per shard, d_v, d_k. Throws statecheck::Error naming the file
// and the mismatching axis (and suggesting
// --tp when HV matches another TP degree). Returns one MultiLayerState per state (N >= 1).
std::vector<MultiLayerState> read_states_file(const std::string& path, const ModelConfig& model);

}  // namespace statecheck
