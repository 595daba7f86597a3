// The fuzz input as a file: the readers under test take paths, as the command line gives them.
// One file per process (its pid in the name) under $TMPDIR (default /tmp), rewritten for every
// input and removed at exit.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace statecheck::fuzz {

// Writes data[0, size) to this process's input file (named with `suffix`, e.g. ".json") and
// returns its path. Aborts if the file cannot be written (the fuzzer would test nothing).
inline const std::string& input_file(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir && *dir ? dir : "/tmp") + "/statecheck-fuzz-" +
                    std::to_string(::getpid()) + suffix;
    static std::string for_exit;
    for_exit = p;
    std::atexit([] { std::remove(for_exit.c_str()); });
    return p;
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0)
    std::abort();
  return path;
}

}  // namespace statecheck::fuzz
