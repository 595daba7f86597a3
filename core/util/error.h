// Error type raised by every statecheck component on bad input or a broken invariant.
//
// Messages are one line and name the file, field or index at fault, so the command line can print
// them as the one-line reason it exits with.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace statecheck {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws statecheck::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace statecheck
