// Test helper: a temporary folder unique to the test process (ctest runs each test in its own
// process), removed with its contents when the object goes out of scope, also on a failed ASSERT.
#pragma once

#include <filesystem>
#include <string>

#include <unistd.h>

namespace statecheck::test_support {

struct TempDir {
  std::filesystem::path dir;
  explicit TempDir(const std::string& tag)
      : dir(std::filesystem::temp_directory_path() /
            ("statecheck_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The path of `name` inside the folder.
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

// `name` inside one temporary folder shared by the whole test process (removed when it exits).
inline std::string temp_path(const std::string& name) {
  static const TempDir dir("test");
  return dir.file(name);
}

}  // namespace statecheck::test_support
