#include "core/io/paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/io/interrupt_cleanup.h"
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

fs::path resolved_path(const std::string& p) {
  std::error_code ec;
  const fs::path abs = fs::absolute(p, ec);
  if (ec) return fs::path(p).lexically_normal();
  fs::path r = fs::weakly_canonical(abs, ec);
  return ec ? abs.lexically_normal() : r;
}

bool same_file(const std::string& a, const std::string& b) {
  if (resolved_path(a) == resolved_path(b)) return true;
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

namespace {

// Where `path` is written first: whatever sits at `partial` must be an ordinary file (a FIFO would
// block, a link would be written through).
void check_partial_slot(const std::string& shown, const std::string& partial) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(partial, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    fail("{}: {} exists and is not a regular file (a link, FIFO, device or directory); remove it",
         shown, partial);
  // A regular file there is not this run's (it creates its partial file after this check): one
  // left by a killed run, or a file that only shares the name. Either way it is not replaced.
  if (!ec && fs::exists(st))
    fail(
        "{}: {} exists (left by a killed run, or another file of that name); remove it or write "
        "the result elsewhere",
        shown, partial);
}

// `path` (a result or its partial file) against the inputs: refused if it is one of them.
void check_not_an_input(const std::string& option, const std::string& shown,
                        const std::string& path, const std::vector<InputPath>& inputs) {
  for (const InputPath& in : inputs)
    if (!in.path.empty() && same_file(path, in.path))
      fail("{} {}: {} is the same file as {} {}; refusing to overwrite an input", option, shown,
           path == shown ? "it" : path, in.option, in.path);
}

}  // namespace

void check_output_file(const std::string& option, const std::string& path,
                       const std::vector<InputPath>& inputs) {
  if (path.empty()) fail("{} needs a path", option);
  if (fs::path(path).filename().empty())
    fail("{} {}: names a directory (trailing '/'), not a result file", option, path);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!ec && fs::exists(st)) {
    if (fs::is_directory(st)) fail("{} {}: is a directory, not a result file", option, path);
    if (!fs::is_regular_file(st))
      fail(
          "{} {}: exists and is not a regular file (a FIFO, device or socket); refusing to "
          "replace it",
          option, path);
  }
  check_not_an_input(option, path, path, inputs);
  // The result is written to path.partial first: an ordinary file there, and not an input.
  const std::string partial = path + ".partial";
  check_not_an_input(option, path, partial, inputs);
  check_partial_slot(option + " " + path, partial);
  // The nearest existing ancestor must be a writable directory (create_directories would fail on
  // a file; a read-only one would fail only after the work), and the folders to create below it
  // and the partial file's name must fit its file system's name limit.
  std::vector<std::string> names = {fs::path(partial).filename().string()};
  fs::path existing;
  for (fs::path parent = fs::absolute(path, ec).parent_path(); !parent.empty();
       parent = parent.parent_path()) {
    std::error_code pe;
    const fs::file_status ps = fs::status(parent, pe);
    if (pe || !fs::exists(ps)) {
      names.push_back(parent.filename().string());
      if (parent == parent.parent_path()) break;
      continue;
    }
    if (!fs::is_directory(ps)) fail("{} {}: {} is not a directory", option, path, parent.string());
    if (::access(parent.c_str(), W_OK | X_OK) != 0)
      fail("{} {}: directory {} is not writable", option, path, parent.string());
    existing = parent;
    break;
  }
  const long limit = existing.empty() ? -1 : ::pathconf(existing.c_str(), _PC_NAME_MAX);
  const size_t name_max = limit > 0 ? static_cast<size_t>(limit) : 255;
  for (const std::string& name : names)
    if (name.size() > name_max)
      fail("{} {}: the name '{}...' is {} bytes long{}; the file system allows {}", option, path,
           name.substr(0, 16), name.size(),
           name == names[0] ? " while written ('.partial' appended)" : "", name_max);
}

CreatedDirectories::CreatedDirectories(const std::string& what, const fs::path& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  for (fs::path d = dir; !d.empty() && !fs::exists(d, ec); d = d.parent_path()) {
    created_.push_back(d);
    if (d == d.parent_path()) break;
  }
  fs::create_directories(dir, ec);
  if (ec) {
    const std::string why = ec.message();
    for (const fs::path& d : created_) fs::remove(d, ec);  // those made before the failure
    created_.clear();
    fail("{}: cannot create directory {} ({})", what, dir.string(), why);
  }
  // Outermost first, so that an interrupt removes the deepest first.
  for (auto d = created_.rbegin(); d != created_.rend(); ++d)
    on_interrupt_.emplace_back(d->string(), true);
}

void CreatedDirectories::keep() {
  keep_ = true;
  on_interrupt_.clear();
}

CreatedDirectories::~CreatedDirectories() {
  on_interrupt_.clear();
  if (keep_) return;
  std::error_code ec;
  for (const fs::path& d : created_) fs::remove(d, ec);  // only if empty
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) fail("{}: cannot create directory {} ({})", path, parent.string(), ec.message());
  }
  const std::string partial = path + ".partial";
  check_partial_slot(path, partial);
  // Exclusive: a file that appeared at the partial name since the check is not replaced either,
  // and only the file made here is registered for removal on a signal.
  const int fd =
      ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0)
    fail("{}: cannot create ({}; is the directory writable?)", partial, std::strerror(errno));
  const InterruptCleanup on_interrupt(partial, false);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || done != text.size()) {
    std::error_code ec;
    fs::remove(partial, ec);
    fail("{}: write error (disk full?)", partial);
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
