#include "core/io/paths.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/util/error.h"

namespace statecheck {

namespace fs = std::filesystem;

void check_input_file(const std::string& option, const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) fail("{} {}: no such file", option, path);
  if (fs::is_directory(st)) fail("{} {}: is a directory, not a file", option, path);
  if (!fs::is_regular_file(st))
    fail("{} {}: not a regular file (a FIFO, device or socket)", option, path);
}

void check_output_file(const std::string& option, const std::string& path,
                       const std::vector<InputPath>& inputs) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!ec && fs::exists(st)) {
    if (fs::is_directory(st)) fail("{} {}: is a directory, not a result file", option, path);
    if (!fs::is_regular_file(st))
      fail(
          "{} {}: exists and is not a regular file (a FIFO, device or socket); refusing to "
          "replace it",
          option, path);
    for (const InputPath& in : inputs) {
      if (in.path.empty()) continue;
      std::error_code eq;
      if (fs::equivalent(path, in.path, eq) && !eq)
        fail("{} {}: is the same file as {} {}; refusing to overwrite an input", option, path,
             in.option, in.path);
    }
  }
  // The nearest existing ancestor must be a directory (create_directories would fail on a file).
  for (fs::path parent = fs::path(path).parent_path(); !parent.empty();
       parent = parent.parent_path()) {
    std::error_code pe;
    const fs::file_status ps = fs::status(parent, pe);
    if (pe || !fs::exists(ps)) {
      if (parent == parent.parent_path()) break;
      continue;
    }
    if (!fs::is_directory(ps)) fail("{} {}: {} is not a directory", option, path, parent.string());
    break;
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) fail("{}: cannot create directory {} ({})", path, parent.string(), ec.message());
  }
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot write (is the directory writable?)", partial);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(partial, ec);
      fail("{}: write error (disk full?)", partial);
    }
  }
  std::error_code ec;
  fs::rename(partial, path, ec);
  if (ec) {
    std::error_code rm;
    fs::remove(partial, rm);
    fail("{}: cannot move the finished file into place ({})", path, ec.message());
  }
}

}  // namespace statecheck
