// Test helper: a 1-D dataset written with the HDF5 C API alone, in the layouts other tools produce
// (chunked, deflated, partly written, integer-stored bf16, a file with a user block), for the
// readers' tests.
#pragma once

#include <string>

#include <hdf5.h>

namespace statecheck::test_support {

// A 1-D HDF5 dataset "state" of `type` holding `n` values, of which the first `written` are
// written from `values` (chunks of `chunk` elements when chunk > 0, deflated if `deflate`), with
// the attribute dtype = `dtype_attr` when it is not empty; the file gets a user block of
// `userblock` bytes when that is not 0.
inline void write_h5_dataset(const std::string& path, hid_t type, const void* values, hsize_t n,
                             hsize_t written, hsize_t chunk, bool deflate,
                             const std::string& dtype_attr, hsize_t userblock = 0) {
  const hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (userblock > 0) H5Pset_userblock(fcpl, userblock);
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  const hsize_t dims[1] = {n};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunk > 0) {
    const hsize_t c[1] = {chunk};
    H5Pset_chunk(dcpl, 1, c);
    if (deflate) H5Pset_deflate(dcpl, 6);
  }
  const hid_t ds = H5Dcreate2(f, "state", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  const hsize_t start[1] = {0}, count[1] = {written};
  const hid_t mem = H5Screate_simple(1, count, nullptr);
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
  H5Dwrite(ds, type, mem, space, H5P_DEFAULT, values);
  if (!dtype_attr.empty()) {
    const hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, dtype_attr.size());
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(ds, "dtype", str, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, str, dtype_attr.data());
    H5Aclose(a);
    H5Sclose(scalar);
    H5Tclose(str);
  }
  H5Sclose(mem);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  H5Pclose(fcpl);
}

}  // namespace statecheck::test_support
