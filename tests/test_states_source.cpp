// The 'states' drive (core/drive/states_source.h) feeding experiments: quick codec and chain runs
// on states files with the tiny fixture model.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/io/hdf5_file.h"
#include "core/io/safetensors.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "tests/h5_read.h"
#include "tests/temp_dir.h"

using namespace statecheck;
namespace fs = std::filesystem;
using statecheck::test_support::read_h5_int_attr;
using statecheck::test_support::TempDir;

namespace {

const std::string kDir = std::string(STATECHECK_TEST_DATA_DIR) + "/states/";

// A quick codec or chain run on states file `states` with the tiny model; returns the error
// message ("" if the run succeeds) and leaves the result at `out`.
std::string run_on_states(const std::string& experiment, const std::string& states,
                          const std::string& out) {
  Options o;
  o.experiment = experiment;
  o.model = kDir + "model_tiny_gdn.json";
  o.drive = parse_drive("states", states);
  o.quick = true;
  o.threads = 1;
  const ModelConfig m = load_model(o.model);
  try {
    H5Writer file(out);
    Summary summary;
    if (experiment == "codec")
      run_codec(o, m, file, summary);
    else
      run_chain(o, m, file, summary);
    file.commit();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Finite states too large for fp32 arithmetic (3e38: the first decay-and-write step overflows)
// would put inf and NaN into the results; the run stops instead, naming the file and where the
// recurrence overflowed.
TEST(StatesFixtures, StatesThatOverflowTheRecurrenceAreNamed) {
  const TempDir dir("huge_states");
  const std::string huge = dir.file("huge.safetensors");
  TensorToWrite t;
  t.dtype = "F32";
  t.shape = {2, 2, 16, 16};
  t.data.assign(2 * 2 * 16 * 16, 3e38f);
  write_safetensors(huge, {{"state", t}});
  for (const std::string experiment : {"codec", "chain"}) {
    const std::string msg = run_on_states(experiment, huge, dir.file("r.h5"));
    EXPECT_NE(msg.find("states:" + huge + ": sequence 0, layer "), std::string::npos) << msg;
    EXPECT_NE(msg.find("too large for fp32 arithmetic"), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(dir.file("r.h5"))) << experiment;
  }
}

// chain follows one sequence: of a file with N = 2 states it runs the first, and records both
// numbers.
TEST(StatesFixtures, ChainRecordsWhichOfTheFilesStatesItFollows) {
  const TempDir dir("n2_states");
  const std::string out = dir.file("chain.h5");
  ASSERT_EQ(run_on_states("chain", kDir + "tiny_n2_bf16.safetensors", out), "");
  bool found = false, found_followed = false;
  EXPECT_EQ(read_h5_int_attr(out, "chain", "states_in_source", &found), 2);
  EXPECT_EQ(read_h5_int_attr(out, "chain", "state_followed", &found_followed), 0);
  EXPECT_TRUE(found && found_followed) << "the attributes are missing";
}
