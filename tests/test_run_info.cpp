// The root attributes of result files (core/io/run_info.h), read back from a quick run.
#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "experiments/experiment.h"
#include "tests/h5_read.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::temp_path;

namespace {

// Output of a shell command, trailing newlines removed ("" when it cannot run).
std::string shell_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}
}  // namespace

// The root attributes every result file carries (docs/experiments.md, "Result files"), read back
// with the HDF5 C API from a quick `codec` run on the tiny fixture model: tool_version is the
// project version of CMakeLists.txt; git_commit the source tree's HEAD (as git itself prints it
// here; "-dirty" allowed, the tree may have edits) or "unknown" without git; command_line, seed
// and model as given (the fixture's "name"); created_utc an ISO 8601 UTC time between the test's
// own clock readings before and after the run.
TEST(RunInfo, RootAttributesReadBackFromAQuickRun) {
  Options o;
  o.experiment = "codec";
  o.model = std::string(STATECHECK_TEST_DATA_DIR) + "/states/model_tiny_gdn.json";
  o.model_given = true;
  o.quick = true;
  o.threads = 2;
  o.seed = 12345678901234ull;
  o.command_line = "statecheck codec --quick --seed 12345678901234 (from test_run_info)";
  o.out = temp_path("run_info/codec.h5");
  const std::time_t before = std::time(nullptr);
  ASSERT_EQ(run_experiment(o), 0);
  const std::time_t after = std::time(nullptr);
  using test_support::read_h5_int_attr;
  using test_support::read_h5_string_attr;
  bool found = false;

  std::ifstream cmake(std::string(STATECHECK_SOURCE_DIR) + "/CMakeLists.txt");
  const std::string text((std::istreambuf_iterator<char>(cmake)), std::istreambuf_iterator<char>());
  const std::string marker = "project(statecheck VERSION ";
  const size_t at_version = text.find(marker);
  ASSERT_NE(at_version, std::string::npos) << "no '" << marker << "' in CMakeLists.txt";
  const size_t begin = at_version + marker.size();
  const std::string version =
      text.substr(begin, text.find_first_not_of("0123456789.", begin) - begin);
  ASSERT_FALSE(version.empty());
  EXPECT_EQ(read_h5_string_attr(o.out, "/", "tool_version", &found), version);
  EXPECT_TRUE(found);

  const std::string commit = read_h5_string_attr(o.out, "/", "git_commit", &found);
  EXPECT_TRUE(found);
  const std::string head = shell_output("git -C '" + std::string(STATECHECK_SOURCE_DIR) +
                                        "' rev-parse HEAD 2>/dev/null");
  if (head.size() == 40)
    EXPECT_TRUE(commit == head || commit == head + "-dirty") << commit << " vs HEAD " << head;
  else
    EXPECT_EQ(commit, "unknown");

  EXPECT_EQ(read_h5_string_attr(o.out, "/", "command_line", &found), o.command_line);
  EXPECT_TRUE(found);
  EXPECT_EQ(read_h5_int_attr(o.out, "/", "seed", &found), 12345678901234);
  EXPECT_TRUE(found);
  EXPECT_EQ(read_h5_string_attr(o.out, "/", "model", &found), "tiny-gdn-test");
  EXPECT_TRUE(found);
  EXPECT_EQ(read_h5_int_attr(o.out, "/", "quick", &found), 1);
  EXPECT_TRUE(found);

  const std::string created = read_h5_string_attr(o.out, "/", "created_utc", &found);
  EXPECT_TRUE(found);
  const std::string shape = "dddd-dd-ddTdd:dd:ddZ";  // d: a decimal digit
  ASSERT_EQ(created.size(), shape.size()) << created;
  for (size_t i = 0; i < shape.size(); ++i)
    ASSERT_TRUE(shape[i] == 'd' ? std::isdigit(static_cast<unsigned char>(created[i])) != 0
                                : created[i] == shape[i])
        << created << " at " << i;
  std::tm tm{};
  ASSERT_NE(strptime(created.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm), nullptr);
  const std::time_t at = timegm(&tm);
  EXPECT_GE(at, before) << created;
  EXPECT_LE(at, after) << created;
}
