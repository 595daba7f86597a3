// Recurrent state containers.
//
// Temporal state of one linear-attention layer: [HV, d_v, d_k], row-major fp32 (the serving
// layout: row i of head h is the d_k-vector that value channel i reads through the keys).
// Multi-layer state: [L, HV, d_v, d_k]. Conv state: [L, conv_dim, W - 1] bf16 bits (only its
// size matters to the numerics; it is carried through the pools untouched).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/util/error.h"

namespace statecheck {

struct StateShape {
  int layers = 0;  // L: linear-attention layers
  int heads = 0;   // HV: value heads (per TP shard)
  int dv = 0;      // d_v
  int dk = 0;      // d_k

  size_t head_size() const { return static_cast<size_t>(dv) * dk; }
  size_t layer_size() const { return static_cast<size_t>(heads) * head_size(); }
  size_t size() const { return static_cast<size_t>(layers) * layer_size(); }
  bool operator==(const StateShape& o) const {
    return layers == o.layers && heads == o.heads && dv == o.dv && dk == o.dk;
  }
  bool operator!=(const StateShape& o) const { return !(*this == o); }
};

// fp32 temporal state of all linear layers for one sequence position: [L, HV, d_v, d_k].
struct MultiLayerState {
  StateShape shape;
  std::vector<float> data;

  MultiLayerState() = default;
  explicit MultiLayerState(const StateShape& s) : shape(s), data(s.size(), 0.0f) {}

  float* head(int layer, int h) { return data.data() + offset(layer, h); }
  const float* head(int layer, int h) const { return data.data() + offset(layer, h); }
  float* layer(int l) { return data.data() + static_cast<size_t>(l) * shape.layer_size(); }
  const float* layer(int l) const {
    return data.data() + static_cast<size_t>(l) * shape.layer_size();
  }

 private:
  size_t offset(int layer, int h) const {
    return (static_cast<size_t>(layer) * shape.heads + h) * shape.head_size();
  }
};

// Conv state of all linear layers for one sequence position: [L, conv_dim, W - 1] as bf16 bits
// (layout per ModelConfig::conv_layout; bytes are what matter here).
struct ConvState {
  int layers = 0;
  int channels = 0;  // conv_dim per shard
  int window = 0;    // W - 1
  std::vector<uint16_t> data;

  size_t size() const { return static_cast<size_t>(layers) * channels * window; }
  size_t bytes() const { return size() * sizeof(uint16_t); }
};

}  // namespace statecheck
