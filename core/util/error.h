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

// `text` with its C0 control characters (bytes 0-31) and DEL (127) written as \xNN, so that a
// message quoting file contents stays one line and starts no ESC sequence. Other bytes are kept
// as they are (UTF-8 text stays readable).
inline std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 32 || c == 127)
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out;
}

// Throws statecheck::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace statecheck
