// Test helper: a tensor to write to a safetensors file whose values (multiples of 1/64 in
// [-0.75, 0.75]) are exact in bf16, so F32 and BF16 files read back the same numbers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/io/safetensors.h"

namespace statecheck::test_support {

inline TensorToWrite pattern(std::vector<size_t> shape, const std::string& dtype) {
  TensorToWrite t;
  t.shape = shape;
  t.dtype = dtype;
  size_t n = 1;
  for (auto d : shape) n *= d;
  t.data.resize(n);
  for (size_t i = 0; i < n; ++i)
    t.data[i] = static_cast<float>(int(i % 97) - 48) / 64.0f;  // exact in bf16
  return t;
}

}  // namespace statecheck::test_support
