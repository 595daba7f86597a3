// Test helper: HDF5 files whose metadata lie, as a fuzzer or an attacker makes them. Each is a
// valid file written with the HDF5 C API and then patched at one field, so that the readers'
// storage checks (core/io/hdf5_file.h) must catch what libhdf5 itself trusts.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace statecheck::test_support {

// A COMPACT-layout f64 dataset "state" of shape `dims` (values 0.5, 1.5, ...) whose layout
// message then claims `stored_size` bytes of raw data instead of elements x 8. The layout
// message (version 3, class 0 = compact) is "03 00 <size, 2 bytes LE>" followed by the raw data
// (HDF5 file format specification, "Data Layout Message"); v1 object headers carry no checksum,
// so the patched file opens. Throws std::runtime_error if the message is not found.
inline void write_compact_lying_about_size(const std::string& path,
                                           const std::vector<hsize_t>& dims, uint16_t stored_size) {
  size_t n = 1;
  for (hsize_t d : dims) n *= d;
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = 0.5 + static_cast<double>(i);
  const uint16_t size = static_cast<uint16_t>(n * sizeof(double));
  {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_COMPACT);
    const hid_t ds = H5Dcreate2(f, "state", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const unsigned char head[4] = {3, 0, static_cast<unsigned char>(size & 0xff),
                                 static_cast<unsigned char>(size >> 8)};
  for (size_t at = 0; at + 4 + sizeof(double) <= bytes.size(); ++at) {
    if (std::memcmp(bytes.data() + at, head, 4) != 0 ||
        std::memcmp(bytes.data() + at + 4, values.data(), sizeof(double)) != 0)
      continue;
    bytes[at + 2] = static_cast<char>(stored_size & 0xff);
    bytes[at + 3] = static_cast<char>(stored_size >> 8);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return;
  }
  throw std::runtime_error("write_compact_lying_about_size: layout message not found");
}

}  // namespace statecheck::test_support
