// The HDF5 result writer and array reader (core/io/hdf5_file.h): values read back, nothing left
// by an uncommitted or failed write, and datasets that would read back wrong (never written,
// chunks missing, data in external files, values outside fp32) refused by name.
#include <cstdint>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "core/io/hdf5_file.h"
#include "core/util/error.h"
#include "tests/error_of.h"
#include "tests/h5_read.h"
#include "tests/h5_write.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::error_of;
using statecheck::test_support::temp_path;
namespace fs = std::filesystem;
using statecheck::test_support::write_h5_dataset;

TEST(Hdf5, WriterOutputReadsBack) {
  const std::string path = temp_path("w.h5");
  {
    H5Writer w(path);
    w.attr("/", "model", std::string("x"));
    w.write("codec/int8/relerr", std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, "1", "test");
    w.write_scalar("codec/int8/scalar", 0.5, "1", "test");
    w.write_strings("codec/names", {"a", "bb"}, "names");
    w.commit();
  }
  std::vector<size_t> shape;
  const auto v = read_hdf5_doubles(path, "codec/int8/relerr", &shape);
  EXPECT_EQ(shape, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(v, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(read_hdf5_doubles(path, "codec/int8/scalar")[0], 0.5);
  EXPECT_THROW(read_hdf5_doubles(path, "nope"), Error);
}

// String attributes are variable-length UTF-8 (h5py returns them as str, not bytes), with the text
// intact: empty, non-ASCII, and the units attribute of a dataset.
TEST(Hdf5, StringAttributesAreVariableLengthUtf8) {
  const std::string path = temp_path("vlen.h5");
  {
    H5Writer w(path);
    w.attr("/", "model", std::string("qwen3.5-35b-a3b"));
    w.attr("/", "empty", std::string());
    w.attr("/", "utf8", std::string("\xce\xbc = 2^-8"));
    w.write_scalar("g/x", 1.0, "GiB", "d");
    w.commit();
  }
  for (const auto& [obj, name, want] :
       {std::tuple<std::string, std::string, std::string>{"/", "model", "qwen3.5-35b-a3b"},
        {"/", "empty", ""},
        {"/", "utf8", "\xce\xbc = 2^-8"},
        {"g/x", "units", "GiB"}}) {
    bool found = false, variable = false;
    EXPECT_EQ(test_support::read_h5_string_attr(path, obj, name, &found, &variable), want);
    EXPECT_TRUE(found) << name;
    EXPECT_TRUE(variable) << name;
  }
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t a = H5Aopen_by_name(f, "/", "model", H5P_DEFAULT, H5P_DEFAULT);
  const hid_t t = H5Aget_type(a);
  EXPECT_EQ(H5Tget_cset(t), H5T_CSET_UTF8);
  H5Tclose(t);
  H5Aclose(a);
  H5Fclose(f);
}

TEST(Hdf5, UncommittedResultLeavesTheEarlierFileUntouched) {
  const std::string path = temp_path("keep.h5");
  {
    H5Writer w(path);
    w.write_scalar("x", 1.0, "1", "first run");
    w.commit();
  }
  try {
    H5Writer w(path);
    w.write_scalar("x", 2.0, "1", "second run, fails before commit");
    throw Error("simulated failure");
  } catch (const Error&) {
  }
  EXPECT_EQ(read_hdf5_doubles(path, "x")[0], 1.0);
  EXPECT_FALSE(fs::exists(path + ".partial"));
}

// A dataset declared but never written would read back as fill values; one holding F64 values
// beyond the fp32 range would read back as inf and be reported as non-finite. Both are named.
TEST(Hdf5, UnwrittenDatasetAndOutOfRangeF64AreNamed) {
  const std::string path = temp_path("unwritten.h5");
  {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[2] = {1u << 20, 16};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
    const hid_t ds = H5Dcreate2(f, "state", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  EXPECT_NE(error_of([&] {
              read_hdf5_array(path);
            }).find("dataset 'state' declares 16777216 elements but its data were never written"),
            std::string::npos);
  {
    H5Writer w(path);
    w.write("state", std::vector<double>{1.0, -1e300}, {2}, "1", "out of the fp32 range");
    w.commit();
  }
  EXPECT_NE(error_of([&] {
              read_hdf5_array(path);
            }).find("F64 value -1e+300 at flat index 1 is outside the fp32 range"),
            std::string::npos);
}

TEST(Hdf5, FailedWriterRemovesTheDirectoriesItCreated) {
  const std::string root = temp_path("created");
  fs::remove_all(root);
  try {
    H5Writer w(root + "/a/b/r.h5");
    EXPECT_TRUE(fs::is_directory(root + "/a/b"));
    throw Error("simulated failure");
  } catch (const Error&) {
  }
  EXPECT_FALSE(fs::exists(root + "/a"));
  {
    H5Writer w(root + "/a/b/r.h5");
    w.write_scalar("x", 1.0, "1", "kept");
    w.commit();
  }
  EXPECT_TRUE(fs::exists(root + "/a/b/r.h5"));
}

// A compressed dataset is "partly allocated" to HDF5 (its storage is smaller than its extent)
// and reads back in full; data kept in an external file are refused.
TEST(Hdf5, CompressedDatasetReadsAndExternalDataAreRefused) {
  const std::string path = temp_path("gzip.h5");
  std::vector<float> v(4096);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) * 0.5f;
  auto make = [&](bool external) {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[1] = {v.size()}, chunk[1] = {1024};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (external) {
      H5Pset_external(dcpl, (temp_path("gzip.h5") + ".raw").c_str(), 0, v.size() * 4);
    } else {
      H5Pset_chunk(dcpl, 1, chunk);
      H5Pset_deflate(dcpl, 6);
    }
    const hid_t ds = H5Dcreate2(f, "state", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  };
  make(true);
  EXPECT_NE(error_of([&] { read_hdf5_array(path); }).find("keeps its data in external files"),
            std::string::npos);
  if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
    GTEST_SKIP() << "this HDF5 library has no deflate filter: the compressed-dataset half of the "
                    "test did not run (the external-data half passed)";
  make(false);
  const FloatArray a = read_hdf5_array(path);
  ASSERT_EQ(a.data.size(), v.size());
  EXPECT_EQ(a.data, v);
}

// bf16 states stored as 16-bit integers keep their bits whether the integers are signed (torch's
// bf16 viewed as int16) or not: -1.5 is bf16 0xBFC0, int16 -16448, and must not read back as 0
// (HDF5 converts a negative int16 to uint16 by clamping it to 0).
TEST(Hdf5, Bf16BitsStoredAsSignedOrUnsignedIntegersReadBack) {
  const std::vector<float> want = {-1.5f, 0.25f, -0.0078125f, 3.0f};
  const std::vector<int16_t> signed_bits = {-16448, 0x3E80, -17408, 0x4040};  // by hand
  const std::vector<uint16_t> unsigned_bits = {0xBFC0, 0x3E80, 0xBC00, 0x4040};
  const std::string path = temp_path("bf16_int16.h5");
  write_h5_dataset(path, H5T_STD_I16LE, signed_bits.data(), 4, 4, 0, false, "bf16");
  EXPECT_EQ(read_hdf5_array(path).data, want);
  write_h5_dataset(path, H5T_STD_U16LE, unsigned_bits.data(), 4, 4, 0, false, "bf16");
  EXPECT_EQ(read_hdf5_array(path).data, want);
}

// A chunked dataset with chunks never written would read them as fill values (zeros), whether or
// not it is compressed (a compressed one is "partly allocated" even when complete): the chunks
// are counted. Four chunks of 1024 values, one written.
TEST(Hdf5, ChunksNeverWrittenAreRefusedCompressedOrNot) {
  std::vector<float> v(4096);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 5) - 2.0f;
  const std::string path = temp_path("gap_chunks.h5");
  for (const bool deflate : {false, true}) {
    if (deflate && H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
      GTEST_SKIP() << "this HDF5 build has no deflate filter (the plain half ran)";
    write_h5_dataset(path, H5T_IEEE_F32LE, v.data(), 4096, 1024, 1024, deflate, "");
    EXPECT_NE(error_of([&] {
                read_hdf5_array(path);
              }).find("declares 4096 elements in 4 chunks, of which only 1 are stored"),
              std::string::npos)
        << (deflate ? "deflated" : "plain");
    write_h5_dataset(path, H5T_IEEE_F32LE, v.data(), 4096, 4096, 1024, deflate, "");
    EXPECT_EQ(read_hdf5_array(path).data, v) << (deflate ? "deflated" : "plain");
  }
}
