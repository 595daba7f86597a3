// Recurrence inputs supplied in a file (drive 'inputs'): what a real model's linear-attention
// layers fed their recurrence on one or more sequences, exported by scripts/export_inputs.py or
// any tool that writes the layout below (docs/real_models.md, "The inputs file").
//
// Format: safetensors (metadata in "__metadata__") or HDF5 (datasets at the root, metadata as
// root attributes), told apart by content. For every linear-attention layer i of the model
// (0-based decoder-layer index, as in the model's `model.layers.{i}`):
//   layers.{i}.q              [N, T, H, d_k]
//   layers.{i}.k              [N, T, H, d_k]
//   layers.{i}.v              [N, T, HV, d_v]
//   layers.{i}.g              [N, T, HV] (GDN) or [N, T, HV, d_k] (KDA), log-space decay, <= 0
//   layers.{i}.beta           [N, T, HV], in [0, 1]
//   layers.{i}.initial_state  [N, HV, d_v, d_k]   optional (absent: the recurrence starts at 0)
//   layers.{i}.o              [N, T, HV, d_v]     optional reference outputs of the exporting
//   layers.{i}.final_state    [N, HV, d_v, d_k]   implementation (read by `statecheck reference`)
// in fp32, bf16 or fp64, row-major, q and k at the H key heads (not repeated to HV). Metadata,
// all required: "gate" ("gdn" | "kda"), "qk_l2norm_applied" ("true": q and k are already
// L2-normalised and the recurrence uses them as they are; "false": the recurrence normalises
// them, as the models' kernels do with use_qk_l2norm_in_kernel), "scale" (the readout scale
// applied to q after any normalisation, a positive decimal). Optional "format" must be
// "statecheck-inputs/1" when present.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/state/layer_inputs.h"

namespace statecheck {

class InputsFile {
 public:
  // Opens `path` and checks, before reading any data: the metadata; every tensor of every linear
  // layer of `model` present, with the shape of the model at its TP shard (H, HV, d_k, d_v and the
  // gate kind) and one N and T across all of them; no layers.{j}.* of a layer that is not a
  // linear-attention layer of the model, and no unknown tensor of a layer. Throws
  // statecheck::Error with one line naming the file and the tensor (or metadata key).
  InputsFile(const std::string& path, const ModelConfig& model);

  const std::string& path() const { return path_; }
  int count() const { return N_; }   // sequences N
  int tokens() const { return T_; }  // tokens T per sequence
  // The recurrence shape the file's inputs need: the model's, with qk_l2norm and scale from the
  // metadata.
  const RecurrenceShape& shape() const { return shape_; }
  // Decoder-layer index of the model's l-th linear-attention layer (the file's layers.{i}).
  int file_layer(int l) const { return layers_[l]; }
  bool has_initial_state() const { return has_initial_; }
  bool has_reference() const { return has_reference_; }  // o and final_state of every layer

  // Inputs of the l-th linear layer (0-based among linear layers) of sequence n, tokens [0, T).
  // Reads the layer's tensors and checks their values: non-finite values, g > 0 and beta outside
  // [0, 1] are refused naming the tensor and the index [n, t, head(, channel)]. Throws when
  // T > tokens().
  LayerInputs layer_inputs(int n, int l, int T) const;
  // Starting state of that layer, [HV, d_v, d_k] fp32: layers.{i}.initial_state[n], or zeros.
  std::vector<float> initial_layer_state(int n, int l) const;
  // Reference outputs [T, HV, d_v] and final state [HV, d_v, d_k] of sequence n, layer l; throws
  // unless has_reference().
  std::vector<float> reference_outputs(int n, int l) const;
  std::vector<float> reference_final_state(int n, int l) const;

 private:
  std::vector<float> read_slice(int l, const char* what, int n, size_t per_sequence) const;

  std::string path_;
  bool hdf5_ = false;
  int N_ = 0, T_ = 0;
  RecurrenceShape shape_;
  std::vector<int> layers_;
  bool has_initial_ = false, has_reference_ = false;
};

// Parses the metadata value of "qk_l2norm_applied" ("true" | "false") and "scale" (a positive
// finite decimal, the whole text); throws statecheck::Error naming `path` and the key otherwise.
bool parse_inputs_flag(const std::string& path, const std::string& key, const std::string& text);
float parse_inputs_scale(const std::string& path, const std::string& text);

}  // namespace statecheck
