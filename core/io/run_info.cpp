#include "core/io/run_info.h"

#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "core/io/hdf5_file.h"

namespace statecheck {

namespace {
std::string run_command(const std::string& cmd) {
  std::array<char, 256> buf{};
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return "";
  while (fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto pos = line.find(':');
      return pos == std::string::npos ? line : line.substr(pos + 2);
    }
  }
  return "unknown CPU";
}
}  // namespace

RunInfo RunInfo::collect(const std::string& command_line, uint64_t seed, const std::string& model) {
  RunInfo r;
  r.tool_version = STATECHECK_VERSION;
  const std::string src = STATECHECK_SOURCE_DIR;
  r.git_commit = run_command("git -C '" + src + "' rev-parse --verify -q HEAD 2>/dev/null");
  const bool hex40 = r.git_commit.size() == 40 &&
                     r.git_commit.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex40)
    r.git_commit = "unknown";
  else if (!run_command("git -C '" + src + "' status --porcelain --untracked-files=no 2>/dev/null")
                .empty())
    r.git_commit += "-dirty";
  r.command_line = command_line;
  r.seed = seed;
  r.model = model;
  char buf[32];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  r.created_utc = buf;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  r.host = std::string(host) + ", " + cpu_model() + ", " +
           std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
  return r;
}

void RunInfo::write_to(H5Writer& f) const {
  f.attr("/", "tool_version", tool_version);
  f.attr("/", "git_commit", git_commit);
  f.attr("/", "command_line", command_line);
  f.attr("/", "seed", static_cast<int64_t>(seed));
  f.attr("/", "model", model);
  f.attr("/", "created_utc", created_utc);
  f.attr("/", "host", host);
}

}  // namespace statecheck
