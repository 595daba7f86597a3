// Error type raised by every statecheck component on bad input or a broken invariant.
//
// Messages are one line and name the file, field or index at fault, so the command line can print
// them as the one-line reason it exits with.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace statecheck {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// `text` with every byte that could reach a terminal as a control written as \xNN, so that a
// message quoting file contents stays one line and starts no escape sequence: C0 controls (bytes
// 0-31), DEL (127), the C1 controls U+0080-U+009F (UTF-8 \xc2\x80-\xc2\x9f; CSI is U+009B),
// and every byte that is not part of a well-formed UTF-8 sequence (RFC 3629: a stray
// continuation byte, a truncated or overlong sequence, a surrogate, above U+10FFFF; a raw 0x9b is
// CSI on an 8-bit terminal). Well-formed UTF-8 text stays as it is, readable.
inline std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const size_t n = text.size();
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  for (size_t i = 0; i < n;) {
    const unsigned char c = byte(i);
    if (c >= 32 && c < 127) {
      out += text[i++];
      continue;
    }
    // Length of the sequence a lead byte starts (0: not a lead byte); cp gathers its code point.
    const int len = c >= 0xC2 && c <= 0xDF   ? 2
                    : c >= 0xE0 && c <= 0xEF ? 3
                    : c >= 0xF0 && c <= 0xF4 ? 4
                                             : 0;
    uint32_t cp = len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      ok = (byte(i + k) & 0xC0) == 0x80;
      cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    ok = ok && !(len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) &&
         !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) && !(cp >= 0x80 && cp <= 0x9F);
    if (ok) {
      out.append(text, i, len);
      i += len;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  return out;
}

// Throws statecheck::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace statecheck
