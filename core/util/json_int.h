// Integers of JSON inputs (model configs, the tiny model's config, request traces) read without
// wrapping: nlohmann::json keeps a non-negative literal as uint64_t, and get<int64_t>() of one
// above 2^63 - 1 would come back negative, so a range check would name the wrong value or pass a
// wrapped one.
#pragma once

#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

namespace statecheck {

// The value of `v`, which must satisfy v.is_number_integer(), saturated to INT64_MAX when it is an
// unsigned literal above it (range checks then refuse it; errors quote v.dump(), the value as
// written).
inline int64_t json_int64(const nlohmann::json& v) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return v.is_number_unsigned() && v.get<uint64_t>() > kMax ? std::numeric_limits<int64_t>::max()
                                                            : v.get<int64_t>();
}

}  // namespace statecheck
