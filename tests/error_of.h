// Test helper: the message of the statecheck::Error a call throws ("" when it throws none).
#pragma once

#include <functional>
#include <string>

#include "core/util/error.h"

namespace statecheck::test_support {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace statecheck::test_support
