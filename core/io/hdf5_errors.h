// HDF5 error handling shared by the writer (hdf5_writer.cpp) and the readers (hdf5_file.cpp).
//
// HDF5 C calls return a negative herr_t / hid_t on failure; check() and check_id() turn that
// into one statecheck error line, "<path>: HDF5 error while <what>" (core/util/error.h, fail).
// Including this header also turns off HDF5's own error-stack printing, once per program.
#pragma once

#include <string>

#include <hdf5.h>

#include "core/util/error.h"

namespace statecheck::hdf5_detail {

// Turns off HDF5's own error printing: statecheck reports one line per failure instead.
struct SilenceHdf5 {
  SilenceHdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
inline const SilenceHdf5 silence_hdf5;

inline void check(herr_t status, const std::string& what, const std::string& path) {
  if (status < 0) fail("{}: HDF5 error while {}", path, what);
}

inline hid_t check_id(hid_t id, const std::string& what, const std::string& path) {
  if (id < 0) fail("{}: HDF5 error while {}", path, what);
  return id;
}

}  // namespace statecheck::hdf5_detail
