// The dtype vocabulary: how one state element, one scale or one pool entry is stored. Used by the
// codecs (value and scale dtypes), the recurrence (the working state's storage between tokens),
// the state pools of the cache model, the CUDA pool kernels and the memory budget.
//
//   fp32       IEEE-754 binary32, 4 bytes
//   bf16       the upper half of binary32, round to nearest even (core/dtype/bf16.h), 2 bytes
//   int8       two's-complement code of a scaled value, 1 byte (needs a scale)
//   fp8_e4m3   OCP E4M3 code (core/dtype/fp8_e4m3.h), 1 byte
// Semantics of each rounding: docs/codecs.md.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

namespace statecheck {

enum class Dtype { fp32, bf16, int8, fp8_e4m3 };

// "fp32", "bf16", "int8", "fp8_e4m3".
const char* dtype_name(Dtype d);

// Bytes of one element: 4, 2, 1, 1.
size_t dtype_bytes(Dtype d);

// The dtype named `name` among `allowed` (default: fp32 and bf16, the floating-point storage
// dtypes of states and scales). Throws statecheck::Error "unknown <what> '<name>' (expected a or
// b)" otherwise, listing `allowed` in the order given.
Dtype parse_dtype(const std::string& name, const std::string& what,
                  std::initializer_list<Dtype> allowed = {Dtype::bf16, Dtype::fp32});

}  // namespace statecheck
