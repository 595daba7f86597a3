// The items of a comma-separated option value, in order and as written (no trimming): "a,b" gives
// {"a", "b"}, "" gives {""} and "a," gives {"a", ""}, so that a caller names an empty item by its
// index. Used by the list options (--policy, --k-list, --bench-sections).
#pragma once

#include <string>
#include <vector>

namespace statecheck {

inline std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    items.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

}  // namespace statecheck
