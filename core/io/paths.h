// Checks on the files a run reads and writes, made before any work so that bad paths cost nothing
// and lose nothing (README "Exit status"): an input must be an existing regular file (a FIFO
// would block the run, a directory or device reads as garbage); an output must not be a
// directory, a device or other non-regular file, nor the same file as one of the run's inputs
// (writing a result over the states or model config it was computed from destroys the input).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/io/interrupt_cleanup.h"

namespace statecheck {

// A named path the run reads ("--states", "--trace", "--model").
struct InputPath {
  std::string option;
  std::string path;
};

// Throws statecheck::Error, naming the option and path, if `path` does not exist or is not a
// regular file (directory, FIFO, device, socket).
void check_input_file(const std::string& option, const std::string& path);

// `p` made absolute, with symbolic links and "." / ".." resolved as far as it exists.
std::filesystem::path resolved_path(const std::string& p);

// Whether two paths name the same file: the same resolved path, or (both existing) the same
// inode (std::filesystem::equivalent: hard links too).
bool same_file(const std::string& a, const std::string& b);

// Throws statecheck::Error, naming the option and path, if `path` ends in '/', exists and is a
// directory or not a regular file, if `path.partial` (where it is written first) exists (the
// writers then create it exclusively, so a file they did not make is not replaced), if either is
// the same file as one of `inputs`, if the nearest existing ancestor directory is a file or not
// writable, or if a folder to create or the name `path.partial` is longer than that file system's
// name limit (pathconf NAME_MAX).
// Does not create anything.
void check_output_file(const std::string& option, const std::string& path,
                       const std::vector<InputPath>& inputs);

// Creates directory `dir` and its missing ancestors. Unless keep() is called, the destructor
// removes again those it created, deepest first, each only if empty: a failed run leaves no new
// empty directories behind, and neither does an interrupted one (they are registered with
// core/io/interrupt_cleanup.h until kept or removed). Throws statecheck::Error "<what>: cannot
// create directory <dir> (<reason>)" when the directory cannot be created. An empty `dir` creates
// nothing.
class CreatedDirectories {
 public:
  CreatedDirectories(const std::string& what, const std::filesystem::path& dir);
  ~CreatedDirectories();
  void keep();
  CreatedDirectories(const CreatedDirectories&) = delete;
  CreatedDirectories& operator=(const CreatedDirectories&) = delete;

 private:
  std::vector<std::filesystem::path> created_;  // deepest first
  std::vector<InterruptCleanup> on_interrupt_;  // their registrations, outermost first
  bool keep_ = false;
};

// Writes `text` to `path` through `path.partial` and a rename, so that a failed or interrupted
// write leaves an earlier file at `path` untouched (and no partial file). Creates missing parent
// directories. Throws statecheck::Error naming the path on any failure, and if `path.partial`
// already exists (not replaced).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace statecheck
