// safetensors / HDF5 state files and the result-file writer.
#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "core/drive/states_file.h"
#include "core/io/hdf5_file.h"
#include "core/io/interrupt_cleanup.h"
#include "core/io/paths.h"
#include "core/io/safetensors.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "tests/error_of.h"
#include "tests/h5_read.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::error_of;
namespace fs = std::filesystem;

namespace {

// `name` inside this test process's temporary folder (removed when the process exits).
std::string temp_path(const std::string& name) {
  static const test_support::TempDir dir("test");
  return dir.file(name);
}

TensorToWrite pattern(std::vector<size_t> shape, const std::string& dtype) {
  TensorToWrite t;
  t.shape = shape;
  t.dtype = dtype;
  size_t n = 1;
  for (auto d : shape) n *= d;
  t.data.resize(n);
  for (size_t i = 0; i < n; ++i)
    t.data[i] = static_cast<float>(int(i % 97) - 48) / 64.0f;  // exact in bf16
  return t;
}

}  // namespace

TEST(Safetensors, RoundTripF32AndBf16) {
  const std::string path = temp_path("rt.safetensors");
  write_safetensors(path, {{"state", pattern({2, 3, 4}, "F32")}, {"other", pattern({5}, "BF16")}},
                    {{"k", "v"}});
  const FloatArray a = read_safetensors(path);
  EXPECT_EQ(a.name, "state");
  EXPECT_EQ(a.shape, (std::vector<size_t>{2, 3, 4}));
  EXPECT_EQ(a.data, pattern({2, 3, 4}, "F32").data);
  const FloatArray b = read_safetensors(path, "other");
  EXPECT_EQ(b.dtype, "BF16");
  EXPECT_EQ(b.data, pattern({5}, "BF16").data);
}

TEST(Safetensors, TruncatedFileIsOneLineError) {
  const std::string path = temp_path("trunc.safetensors");
  write_safetensors(path, {{"state", pattern({4, 4}, "F32")}});
  fs::resize_file(path, fs::file_size(path) - 10);
  const std::string msg = error_of([&] { read_safetensors(path); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  fs::resize_file(path, 5);
  EXPECT_NE(error_of([&] { read_safetensors(path); }).find("too short"), std::string::npos);
}

TEST(Safetensors, MislabelledDtypeIsNamed) {
  const std::string path = temp_path("mislabel.safetensors");
  write_safetensors(path, {{"state", pattern({4, 4}, "BF16")}});
  // Rewrite the header's dtype to F32 without changing the byte count (same length string).
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(f)), {});
  const auto pos = content.find("\"BF16\"");
  ASSERT_NE(pos, std::string::npos);
  content.replace(pos, 6, "\"F32\" ");
  f.seekp(0);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  f.close();
  const std::string msg = error_of([&] { read_safetensors(path); });
  EXPECT_NE(msg.find("mislabelled"), std::string::npos) << msg;
}

TEST(Safetensors, GarbageHeaderAndUnsupportedDtype) {
  const std::string path = temp_path("garbage.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = 6;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{nope}";
  }
  EXPECT_NE(error_of([&] { read_safetensors(path); }).find("not valid JSON"), std::string::npos);
  {
    std::ofstream out(path, std::ios::binary);
    const std::string h = R"({"state":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})";
    const uint64_t n = h.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << "ab";
  }
  EXPECT_NE(error_of([&] { read_safetensors(path); }).find("dtype I8"), std::string::npos);
}

// Header values that would be misreported by an unsigned or fp32 conversion are named as written.
TEST(Safetensors, NegativeOffsetsAndOutOfRangeF64AreNamed) {
  const std::string path = temp_path("neg.safetensors");
  auto write = [&](const std::string& h, const std::string& data) {
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = h.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << data;
  };
  write(R"({"state":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd");
  EXPECT_NE(error_of([&] {
              read_safetensors(path);
            }).find("data_offsets [-4,0] must be two non-negative byte offsets"),
            std::string::npos);
  // A damaged entry of another tensor, or two tensors sharing bytes, are refused too.
  write(R"({"state":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("other":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
        "abcdefgh");
  EXPECT_NE(error_of([&] {
              read_safetensors(path);
            }).find("tensors 'state' and 'other' overlap in the data (bytes [0, 4) and [2, 6))"),
            std::string::npos);
  write(R"({"state":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
        R"("other":{"dtype":"F32","shape":[1],"data_offsets":[4,99]}})",
        "abcdefgh");
  EXPECT_NE(error_of([&] { read_safetensors(path); }).find("tensor 'other' ends at data byte 99"),
            std::string::npos);
  const double big[2] = {1.0, 1e300};
  write(R"({"state":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})",
        std::string(reinterpret_cast<const char*>(big), 16));
  EXPECT_NE(error_of([&] {
              read_safetensors(path);
            }).find("F64 value 1e+300 at flat index 1 is outside the fp32 range"),
            std::string::npos);
}

TEST(StatesFile, ShapeChecksAgainstTheModel) {
  const ModelConfig m = load_model("qwen3.5-35b-a3b", 4);  // 30 layers, 8 heads, 128 x 128
  const std::string good = temp_path("good.safetensors");
  write_safetensors(good, {{"state", pattern({30, 2, 8, 128, 128}, "BF16")}});
  const auto states = read_states_file(good, m);
  ASSERT_EQ(states.size(), 2u);
  // [L, N, HV, dv, dk]: state n=1, layer 3, head 5, (7, 9)
  const size_t flat = (((3 * 2 + 1) * 8 + 5) * 128 + 7) * 128 + 9;
  EXPECT_EQ(states[1].head(3, 5)[7 * 128 + 9], pattern({30, 2, 8, 128, 128}, "BF16").data[flat]);

  const std::string wrong_heads = temp_path("heads.safetensors");
  write_safetensors(wrong_heads, {{"state", pattern({30, 32, 128, 128}, "F32")}});
  const std::string msg = error_of([&] { read_states_file(wrong_heads, m); });
  EXPECT_NE(msg.find("32 value heads"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--tp 1"), std::string::npos) << msg;
  const std::string wrong_layers = temp_path("layers.safetensors");
  write_safetensors(wrong_layers, {{"state", pattern({29, 8, 128, 128}, "F32")}});
  EXPECT_NE(error_of([&] { read_states_file(wrong_layers, m); }).find("29 layers"),
            std::string::npos);
}

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

TEST(Hdf5, StatesFileFromHdf5) {
  const ModelConfig m = load_model("kimi-linear-48b-a3b", 4);  // 20 layers, 8 heads
  const std::string path = temp_path("states.h5");
  {
    H5Writer w(path);
    std::vector<double> data(size_t(20) * 8 * 128 * 128);
    for (size_t i = 0; i < data.size(); ++i) data[i] = double(i % 13) * 0.25;
    w.write("state", data, {20, 8, 128, 128}, "1", "test states");
    w.commit();
  }
  const auto states = read_states_file(path, m);
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].head(19, 7)[127 * 128 + 127],
            float(((size_t(20) * 8 * 128 * 128) - 1) % 13) * 0.25f);
  fs::resize_file(path, fs::file_size(path) / 2);
  EXPECT_THROW(read_states_file(path, m), Error);
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

TEST(Summary, ThresholdsPassFailAndSkip) {
  const std::string path = temp_path("thr.json");
  {
    std::ofstream out(path);
    out << R"({"limits": {"a": {"op": "<", "limit": 1.0, "reason": "r"}, "b": {"op": ">", "limit": 2.0, "reason": "r"},
              "c": {"op": "<", "limit": 1.0, "reason": "r"}}})";
  }
  auto rows = load_thresholds(path);
  Summary s;
  s.set("a", 0.5);
  s.set("b", 1.0);
  check_thresholds(s, rows);
  for (const auto& r : rows) {
    if (r.key == "a") {
      EXPECT_TRUE(r.present && r.pass);
    } else if (r.key == "b") {
      EXPECT_TRUE(r.present && !r.pass);
    } else {
      EXPECT_FALSE(r.present);
    }
  }
  s.set("a", std::nan(""));
  check_thresholds(s, rows);
  EXPECT_FALSE(rows[0].pass);
}

// A malformed thresholds file is named with the file and the key; nothing that would silently
// change the gate (a repeated key, text after the JSON, an empty gate) is accepted.
TEST(Summary, MalformedThresholdsAreNamed) {
  const std::string path = temp_path("thr_bad.json");
  const std::string row = R"({"op": "<", "limit": 1.0, "reason": "r"})";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"limits": {"a": )" + row + R"(, "a": {"op": ">", "limit": 0, "reason": "r"}}})",
       "key 'a' (in 'limits') appears twice"},
      {R"({"limits": {"a": {"op": "<", "op": ">", "limit": 1.0, "reason": "r"}}})",
       "key 'op' (in 'a') appears twice"},
      {R"({"limits": {"a": {"op": "<", "limit": 1.0, "reason": "r", "extra": 5}}})",
       "limit 'a': unknown field 'extra'"},
      {R"({"limits": {"a": )" + row + "}} trailing", "not valid JSON"},
      {R"({"limits": {}})", "'limits' is empty"},
      {R"({"limits": {"": )" + row + "}}", "empty key"},
      {R"({"limits": {"a": {"op": 1, "limit": 1.0, "reason": "r"}}})",
       "limit 'a': 'op' must be a string"},
      {R"({"limits": {"a": {"op": "<", "limit": 1.0, "reason": 2}}})",
       "limit 'a': 'reason' must be a string"},
      {R"({"limits": {"a": {"op": "<", "limit": "1", "reason": "r"}}})",
       "limit 'a': 'limit' must be a number"},
      {R"([1, 2])", "missing object 'limits'"},
  };
  for (const auto& [text, expect] : cases) {
    std::ofstream(path) << text;
    const std::string e = error_of([&] { load_thresholds(path); });
    EXPECT_NE(e.find(path), std::string::npos) << text << " -> " << e;
    EXPECT_NE(e.find(expect), std::string::npos) << text << " -> " << e;
  }
  const std::string dir = temp_path("thr_dir");
  fs::create_directories(dir);
  EXPECT_NE(error_of([&] { load_thresholds(dir); }).find("is a directory"), std::string::npos);
}

// Output paths that would destroy something are refused before anything is written; inputs must
// be regular files (a FIFO would block the run).
TEST(Paths, OutputsThatWouldDestroySomethingAreRefused) {
  const std::string dir = temp_path("paths");
  fs::create_directories(dir);
  const std::string fifo = dir + "/fifo", input = dir + "/states.safetensors",
                    plain = dir + "/plain";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(input) << "x";
  std::ofstream(plain) << "x";
  const std::vector<InputPath> inputs = {{"--states", input}};
  EXPECT_NE(error_of([&] {
              check_output_file("--out", fifo, inputs);
            }).find("--out " + fifo + ": exists and is not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_output_file("--out", dir, inputs);
            }).find("--out " + dir + ": is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_output_file("--out", dir + "/./states.safetensors", inputs);
            }).find("is the same file as --states " + input),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_output_file("--out", plain + "/x.h5", inputs);
            }).find(plain + " is not a directory"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_output_file("--out", plain, inputs); }), "");
  EXPECT_EQ(error_of([&] { check_output_file("--out", dir + "/new/x.h5", inputs); }), "");
  // The result writer refuses the FIFO itself, before creating anything.
  EXPECT_NE(error_of([&] { H5Writer w(fifo); }).find("not a regular file"), std::string::npos);
  EXPECT_FALSE(fs::exists(fifo + ".partial"));
  EXPECT_TRUE(fs::is_fifo(fifo));

  EXPECT_NE(error_of([&] {
              check_input_file("--trace", fifo);
            }).find("--trace " + fifo + ": not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_input_file("--trace", dir); }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_input_file("--trace", dir + "/none"); }).find("no such file"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_input_file("--trace", input); }), "");
}

TEST(Paths, PartialFilesAndSpellingsAreChecked) {
  const std::string dir = temp_path("paths2");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = dir + "/r.h5", target = dir + "/target";
  std::ofstream(target) << "keep";
  fs::create_symlink(target, out + ".partial");
  // A link where the partial file goes would be written through.
  EXPECT_NE(error_of([&] {
              check_output_file("--out", out, {});
            }).find(out + ".partial exists and is not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { H5Writer w(out); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { write_file_atomically(out, "x"); }).find("not a regular file"),
            std::string::npos);
  std::ifstream in(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
            "keep");
  // An input at the partial name would be consumed by the final rename.
  std::ofstream(dir + "/n.json.partial") << "{}";
  EXPECT_NE(error_of([&] {
              check_output_file("--out", dir + "/n.json", {{"--model", dir + "/n.json.partial"}});
            }).find("is the same file as --model"),
            std::string::npos);
  // One path spelled two ways, neither existing yet.
  EXPECT_TRUE(same_file(dir + "/new/./x.h5", dir + "/new/sub/../x.h5"));
  EXPECT_FALSE(same_file(dir + "/new/x.h5", dir + "/new/y.h5"));
  // A trailing '/' names a directory.
  EXPECT_NE(
      error_of([&] { check_output_file("--out", dir + "/newdir/", {}); }).find("names a directory"),
      std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/newdir"));
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

// CreatedDirectories removes only what it made, only if empty, and nothing once kept.
TEST(Paths, CreatedDirectoriesAreRemovedWhenEmptyUnlessKept) {
  const std::string root = temp_path("made");
  fs::remove_all(root);
  fs::create_directories(root);
  { CreatedDirectories d("test", root + "/a/b/c"); }
  EXPECT_TRUE(fs::is_directory(root));  // existed before: untouched
  EXPECT_FALSE(fs::exists(root + "/a"));
  {
    CreatedDirectories d("test", root + "/a/b");
    std::ofstream(root + "/a/b/f") << "x";
  }
  EXPECT_TRUE(fs::exists(root + "/a/b/f"));  // not empty: kept
  fs::remove_all(root + "/a");
  {
    CreatedDirectories d("test", root + "/a/b");
    d.keep();
  }
  EXPECT_TRUE(fs::is_directory(root + "/a/b"));
  std::ofstream(root + "/file") << "x";
  const std::string e = error_of([&] { CreatedDirectories d("--out x", root + "/file/sub"); });
  EXPECT_NE(e.find("--out x: cannot create directory " + root + "/file/sub"), std::string::npos)
      << e;
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

TEST(Paths, AtomicWriteReplacesWholeFilesOnly) {
  const std::string path = temp_path("atomic/summary.json");
  write_file_atomically(path, "first\n");
  write_file_atomically(path, "second\n");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "second\n");
  EXPECT_FALSE(fs::exists(path + ".partial"));
  // A target that is a directory: the rename fails, the directory and no partial file remain.
  const std::string d = temp_path("atomic/dir");
  fs::create_directories(d);
  EXPECT_NE(error_of([&] { write_file_atomically(d, "x"); }).find(d), std::string::npos);
  EXPECT_TRUE(fs::is_directory(d));
  EXPECT_FALSE(fs::exists(d + ".partial"));
}

namespace {

// A 1-D HDF5 dataset "state" of `type` holding `n` values, of which the first `written` are
// written from `values` (chunks of `chunk` elements when chunk > 0, deflated if `deflate`), with
// the attribute dtype = `dtype_attr` when it is not empty; the file gets a user block of
// `userblock` bytes when that is not 0.
void write_h5_dataset(const std::string& path, hid_t type, const void* values, hsize_t n,
                      hsize_t written, hsize_t chunk, bool deflate, const std::string& dtype_attr,
                      hsize_t userblock = 0) {
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

// The safetensors layout by hand: 8-byte little-endian header length, header, data.
void write_raw_safetensors(const std::string& path, const std::string& header,
                           const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xFF));
  out << header << data;
}

}  // namespace

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

// An HDF5 file with a user block (MATLAB v7.3, PyTables) has its signature at byte 512: it is read
// as HDF5, not parsed as a safetensors header.
TEST(StatesFile, Hdf5WithAUserBlockIsRecognised) {
  const ModelConfig m =
      load_model(std::string(STATECHECK_TEST_DATA_DIR) + "/states/model_tiny_gdn.json");
  std::vector<float> v(2 * 2 * 16 * 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 9) * 0.125f;
  const std::string path = temp_path("userblock.h5");
  write_h5_dataset(path, H5T_IEEE_F32LE, v.data(), v.size(), v.size(), 0, false, "", 512);
  EXPECT_NE(error_of([&] { read_states_file(path, m); }).find("has shape [1024]"),
            std::string::npos);  // read as HDF5: its 1-D shape is named
}

// The header must describe the data section exactly: a tensor named twice (the last entry would
// win), bytes before a tensor or after the last one (the format indexes every data byte) are
// refused by name.
TEST(Safetensors, DuplicateNamesAndUnindexedBytesAreRefused) {
  const std::string path = temp_path("layout.safetensors");
  const std::string data(16, '\0');  // four F32 zeros
  const std::pair<const char*, const char*> refused[] = {
      {R"({"state":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
       R"("state":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]}})",
       "tensor 'state' is named twice"},
      {R"({"state":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       "data bytes [0, 8) before tensor 'state' belong to no tensor"},
      {R"({"state":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       "8 data bytes after the last tensor (from byte 8) belong to no tensor"}};
  for (const auto& [header, reason] : refused) {
    write_raw_safetensors(path, header, data);
    EXPECT_NE(error_of([&] { read_safetensors(path); }).find(reason), std::string::npos) << reason;
  }
  write_raw_safetensors(path, R"({"state":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                        data);
  EXPECT_EQ(read_safetensors(path).data, std::vector<float>(4, 0.0f));
}

// Messages quote file contents (tensor and dataset names, dtype strings): their control
// characters, C1 controls and bytes outside well-formed UTF-8 are escaped when printed, so the
// reason stays one line and cannot drive a terminal; well-formed text is kept.
TEST(Errors, ControlCharactersArePrintedEscaped) {
  EXPECT_EQ(printable("a\nb\x1b[31mc\x7f\td"), "a\\x0ab\\x1b[31mc\\x7f\\x09d");
  EXPECT_EQ(printable("plain text, caf\xc3\xa9"), "plain text, caf\xc3\xa9");
  EXPECT_EQ(printable("\xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0"),
            "\xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0");
  EXPECT_EQ(printable("\xc2\x9b[31m"), "\\xc2\\x9b[31m");            // CSI as UTF-8 (U+009B)
  EXPECT_EQ(printable("\x9b[31m"), "\\x9b[31m");                     // CSI as a raw byte
  EXPECT_EQ(printable("x\xe2\x82"), "x\\xe2\\x82");                  // truncated
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
}

// A result file is written as NAME.partial first, in folders created as needed: a name the file
// system cannot hold (over NAME_MAX, 255 bytes here, with the suffix) is refused before the work,
// not after it.
TEST(Paths, OutputNamesTooLongForTheFileSystemAreRefused) {
  const std::string dir = temp_path("long_names");
  fs::create_directories(dir);
  ASSERT_EQ(::pathconf(dir.c_str(), _PC_NAME_MAX), 255) << "the expected messages assume 255";
  const std::string fits = dir + "/" + std::string(255 - 5 - 8, 'a') + ".json";  // 255 bytes
  EXPECT_EQ(error_of([&] { check_output_file("--summary", fits, {}); }), "");
  const std::string over = dir + "/" + std::string(255 - 5 - 8 + 1, 'a') + ".json";
  EXPECT_NE(error_of([&] { check_output_file("--summary", over, {}); })
                .find("is 256 bytes long while written ('.partial' appended); the file system "
                      "allows 255"),
            std::string::npos);
  const std::string folder = dir + "/" + std::string(300, 'b') + "/new/r.h5";  // to be created
  EXPECT_NE(error_of([&] {
              check_output_file("--out", folder, {});
            }).find("is 300 bytes long; the file system allows 255"),
            std::string::npos);
}

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

// The root attributes every result file carries (spec experiments.md, "Result files"), read back
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
  o.command_line = "statecheck codec --quick --seed 12345678901234 (from test_io)";
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

// An interrupted run (SIGINT, SIGTERM, SIGHUP) removes its partial result files and the folders
// it created for them, dies of the signal, and leaves committed results alone. The run is a forked
// child that commits one result, starts another in new folders, and interrupts itself.
TEST(Paths, InterruptedRunRemovesItsPartialFilesAndFolders) {
  const std::string dir = temp_path("interrupted");
  fs::create_directories(dir);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string kept = dir + "/kept.h5", open = dir + "/new/sub/open.h5";
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      install_interrupt_cleanup();
      {
        H5Writer done(kept);
        done.write("x", std::vector<double>{1.0}, {}, "1", "committed before the signal");
        done.commit();
      }
      H5Writer pending(open);
      pending.write("x", std::vector<double>{2.0}, {}, "1", "never committed");
      if (!fs::exists(open + ".partial")) _exit(3);
      raise(sig);
      _exit(4);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ", exit status " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_TRUE(fs::exists(kept)) << "the committed result was removed";
    EXPECT_FALSE(fs::exists(open + ".partial"));
    EXPECT_FALSE(fs::exists(dir + "/new")) << "the folders created for the partial file remain";
    fs::remove(kept);
  }
}
