// Test helpers: strings and integer attributes read back from a result file with the HDF5 C API
// alone (the project's reader covers numeric datasets only), so the tests check what h5py or
// h5dump would see.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <hdf5.h>

namespace statecheck::test_support {

// Fixed-length string dataset `ds` of `path`, one entry per element ({} when it cannot be read).
inline std::vector<std::string> read_h5_strings(const std::string& path, const std::string& ds) {
  std::vector<std::string> out;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  const hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  if (d >= 0) {
    const hid_t type = H5Dget_type(d), space = H5Dget_space(d);
    const size_t width = H5Tget_size(type);
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    std::vector<char> buf(width * static_cast<size_t>(n) + 1, '\0');
    if (H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type) &&
        H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) >= 0)
      for (hssize_t i = 0; i < n; ++i)
        out.push_back(std::string(buf.data() + i * width, width).c_str());
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(d);
  }
  H5Fclose(f);
  return out;
}

// String attribute `name` of object `obj` ("/" for the root); `found` tells whether it exists
// and is a string (fixed or variable length); `variable` (if given) whether it is variable length.
inline std::string read_h5_string_attr(const std::string& path, const std::string& obj,
                                       const std::string& name, bool* found,
                                       bool* variable = nullptr) {
  std::string out;
  *found = false;
  if (variable) *variable = false;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  if (H5Aexists_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT) > 0) {
    const hid_t a = H5Aopen_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    const hid_t type = H5Aget_type(a);
    if (H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type)) {
      std::vector<char> buf(H5Tget_size(type) + 1, '\0');
      if (H5Aread(a, type, buf.data()) >= 0) {
        out = buf.data();
        *found = true;
      }
    } else if (H5Tget_class(type) == H5T_STRING) {
      char* text = nullptr;
      const hid_t mem = H5Tcopy(H5T_C_S1);
      H5Tset_size(mem, H5T_VARIABLE);
      H5Tset_cset(mem, H5Tget_cset(type));
      if (H5Aread(a, mem, &text) >= 0 && text) {
        out = text;
        *found = true;
        if (variable) *variable = true;
        H5free_memory(text);
      }
      H5Tclose(mem);
    }
    H5Tclose(type);
    H5Aclose(a);
  }
  H5Fclose(f);
  return out;
}

// Integer attribute `name` of object `obj`; `found` tells whether it exists and is an integer.
inline int64_t read_h5_int_attr(const std::string& path, const std::string& obj,
                                const std::string& name, bool* found) {
  int64_t out = 0;
  *found = false;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  if (H5Aexists_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT) > 0) {
    const hid_t a = H5Aopen_by_name(f, obj.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    const hid_t type = H5Aget_type(a);
    if (H5Tget_class(type) == H5T_INTEGER && H5Aread(a, H5T_NATIVE_INT64, &out) >= 0) *found = true;
    H5Tclose(type);
    H5Aclose(a);
  }
  H5Fclose(f);
  return out;
}

}  // namespace statecheck::test_support
