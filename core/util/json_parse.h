// JSON inputs parsed strictly (text after the value is an error, as nlohmann::json::parse does)
// and with repeated keys noted: nlohmann::json keeps the last of two equal keys in one object, so
// a repeated key would silently replace an earlier value (a threshold, a tensor's description).
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace statecheck {

// The first key found twice in one object: the key, the key that opened the object holding it
// ("" for the top-level object) and the object's depth (1: the top level; 0: no repeated key).
struct JsonRepeatedKey {
  std::string key, parent;
  int depth = 0;
};

// Parses `text` and fills `repeated` with its first repeated key in objects at depth <=
// `max_depth` (0: any depth). Throws nlohmann::json::exception on invalid JSON, as
// nlohmann::json::parse does; the caller names the file.
inline nlohmann::json parse_json_noting_repeated_keys(const std::string& text,
                                                      JsonRepeatedKey& repeated,
                                                      int max_depth = 0) {
  struct Open {
    std::set<std::string> keys;
    std::string last;  // the latest key read in this object
  };
  std::vector<Open> open;
  repeated = {};
  const nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t ev,
                                                   nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (ev == Event::object_start) {
      open.emplace_back();
    } else if (ev == Event::object_end) {
      open.pop_back();
    } else if (ev == Event::key) {
      const std::string k = parsed.get<std::string>();
      const int depth = static_cast<int>(open.size());
      if (repeated.depth == 0 && (max_depth == 0 || depth <= max_depth) &&
          !open.back().keys.insert(k).second)
        repeated = {k, depth > 1 ? open[depth - 2].last : std::string(), depth};
      open.back().last = k;
    }
    return true;
  };
  return nlohmann::json::parse(text, cb);
}

}  // namespace statecheck
