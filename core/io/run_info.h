// What every result file records about the run that made it (docs/experiments.md: root
// attributes tool_version, git_commit, command_line, seed, model, created_utc).
#pragma once

#include <cstdint>
#include <string>

namespace statecheck {

class H5Writer;

struct RunInfo {
  std::string tool_version;
  std::string git_commit;
  std::string command_line;
  uint64_t seed = 0;
  std::string model;
  std::string created_utc;
  std::string host;  // machine header: hostname, CPU model, core count

  // Fills version, commit (git rev-parse of the source tree, "-dirty" when it has changes,
  // "unknown" outside a checkout), UTC time and host.
  static RunInfo collect(const std::string& command_line, uint64_t seed, const std::string& model);
  void write_to(H5Writer& file) const;
};

}  // namespace statecheck
