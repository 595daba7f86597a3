// Thresholds files (core/io/summary.h): pass, fail and skip against a summary, and malformed files
// refused with the file and the key named.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "core/io/summary.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::error_of;
using statecheck::test_support::temp_path;
namespace fs = std::filesystem;

TEST(Summary, ThresholdsPassFailAndSkip) {
  const std::string path = temp_path("thr.json");
  {
    std::ofstream out(path);
    out << R"({"limits": {"a": {"op": "<", "limit": 1.0, "reason": "r"}, "b": {"op": ">", "limit": 2.0, "reason": "r"},
              "c": {"op": "<", "limit": 1.0, "reason": "r"}}})";
  }
  auto rows = load_thresholds(path);
  Summary s;
  s.set("a", 0.5);
  s.set("b", 1.0);
  check_thresholds(s, rows);
  for (const auto& r : rows) {
    if (r.key == "a") {
      EXPECT_TRUE(r.present && r.pass);
    } else if (r.key == "b") {
      EXPECT_TRUE(r.present && !r.pass);
    } else {
      EXPECT_FALSE(r.present);
    }
  }
  s.set("a", std::nan(""));
  check_thresholds(s, rows);
  EXPECT_FALSE(rows[0].pass);
}

// A malformed thresholds file is named with the file and the key; nothing that would silently
// change the gate (a repeated key, text after the JSON, an empty gate) is accepted.
TEST(Summary, MalformedThresholdsAreNamed) {
  const std::string path = temp_path("thr_bad.json");
  const std::string row = R"({"op": "<", "limit": 1.0, "reason": "r"})";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"limits": {"a": )" + row + R"(, "a": {"op": ">", "limit": 0, "reason": "r"}}})",
       "key 'a' (in 'limits') appears twice"},
      {R"({"limits": {"a": {"op": "<", "op": ">", "limit": 1.0, "reason": "r"}}})",
       "key 'op' (in 'a') appears twice"},
      {R"({"limits": {"a": {"op": "<", "limit": 1.0, "reason": "r", "extra": 5}}})",
       "limit 'a': unknown field 'extra'"},
      {R"({"limits": {"a": )" + row + "}} trailing", "not valid JSON"},
      {R"({"limits": {}})", "'limits' is empty"},
      {R"({"limits": {"": )" + row + "}}", "empty key"},
      {R"({"limits": {"a": {"op": 1, "limit": 1.0, "reason": "r"}}})",
       "limit 'a': 'op' must be a string"},
      {R"({"limits": {"a": {"op": "<", "limit": 1.0, "reason": 2}}})",
       "limit 'a': 'reason' must be a string"},
      {R"({"limits": {"a": {"op": "<", "limit": "1", "reason": "r"}}})",
       "limit 'a': 'limit' must be a number"},
      {R"([1, 2])", "missing object 'limits'"},
  };
  for (const auto& [text, expect] : cases) {
    std::ofstream(path) << text;
    const std::string e = error_of([&] { load_thresholds(path); });
    EXPECT_NE(e.find(path), std::string::npos) << text << " -> " << e;
    EXPECT_NE(e.find(expect), std::string::npos) << text << " -> " << e;
  }
  const std::string dir = temp_path("thr_dir");
  fs::create_directories(dir);
  EXPECT_NE(error_of([&] { load_thresholds(dir); }).find("is a directory"), std::string::npos);
}
