// The regression inputs of the fuzz harnesses (tests/data/fuzz/<harness>/, tests/fuzz/README.md):
// every input a harness once crashed on, or a crafted one of the same family, run through the
// same reader as the harness in an ordinary test. Each must end in a statecheck::Error naming the
// file (these inputs are all damaged), never a crash, a sanitizer report or another exception.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/io/hdf5_isolated.h"
#include "core/io/safetensors.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "core/workloads/mooncake_trace.h"
#include "tests/error_of.h"

using namespace statecheck;
using statecheck::test_support::error_of;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> inputs(const std::string& harness) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(STATECHECK_TEST_DATA_DIR) / "fuzz" / harness;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() != ".md") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Every input of `harness` gives a one-line Error starting with its path.
void expect_one_line_errors(const std::string& harness,
                            const std::function<void(const std::string&)>& read) {
  const std::vector<std::string> files = inputs(harness);
  ASSERT_FALSE(files.empty()) << "no regression inputs for " << harness;
  for (const std::string& f : files) {
    const std::string msg = error_of([&] { read(f); });
    EXPECT_FALSE(msg.empty()) << f << " was accepted";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
}

}  // namespace

TEST(FuzzRegressions, Hdf5StatesInputsAreOneLineErrors) {
  expect_one_line_errors("fuzz_hdf5_states",
                         [](const std::string& f) { read_hdf5_array_isolated(f); });
}

TEST(FuzzRegressions, SafetensorsInputsAreOneLineErrors) {
  expect_one_line_errors("fuzz_safetensors", [](const std::string& f) { read_safetensors(f); });
}

TEST(FuzzRegressions, TraceInputsAreOneLineErrors) {
  expect_one_line_errors("fuzz_trace", [](const std::string& f) {
    load_mooncake_trace(f, BadLines::reject, 1 << 16);
  });
}

TEST(FuzzRegressions, ModelConfigInputsAreOneLineErrors) {
  expect_one_line_errors("fuzz_model_config", [](const std::string& f) { load_model(f, 0); });
}

TEST(FuzzRegressions, ThresholdsInputsAreOneLineErrors) {
  expect_one_line_errors("fuzz_thresholds", [](const std::string& f) { load_thresholds(f); });
}
