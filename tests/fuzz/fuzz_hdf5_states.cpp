// libFuzzer harness: the HDF5 states reader as the command line runs it (the storage checks of
// read_hdf5_array in a child process, core/io/hdf5_isolated.h) on any bytes. A statecheck::Error
// is the expected answer to a bad file, also when libhdf5 crashes in the child; a crash or a
// memory blow-up of this process, or another exception, is a finding.
#include <cstdint>

#include "core/io/hdf5_isolated.h"
#include "core/util/error.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = statecheck::fuzz::input_file(data, size, ".h5");
  try {
    statecheck::read_hdf5_array_isolated(path);
  } catch (const statecheck::Error&) {
  }
  return 0;
}
