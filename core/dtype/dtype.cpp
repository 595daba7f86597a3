#include "core/dtype/dtype.h"

#include "core/util/error.h"

namespace statecheck {

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::fp32:
      return "fp32";
    case Dtype::bf16:
      return "bf16";
    case Dtype::int8:
      return "int8";
    case Dtype::fp8_e4m3:
      return "fp8_e4m3";
  }
  return "?";
}

size_t dtype_bytes(Dtype d) {
  switch (d) {
    case Dtype::fp32:
      return 4;
    case Dtype::bf16:
      return 2;
    case Dtype::int8:
    case Dtype::fp8_e4m3:
      return 1;
  }
  return 0;
}

Dtype parse_dtype(const std::string& name, const std::string& what,
                  std::initializer_list<Dtype> allowed) {
  std::string expected;
  size_t i = 0;
  for (Dtype d : allowed) {
    if (name == dtype_name(d)) return d;
    expected += (i == 0                    ? ""
                 : i + 1 == allowed.size() ? " or "
                                           : ", ") +
                std::string(dtype_name(d));
    ++i;
  }
  fail("unknown {} '{}' (expected {})", what, name, expected);
}

}  // namespace statecheck
