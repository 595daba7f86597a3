// safetensors files (core/io/safetensors.h): round trips of F32 and BF16 tensors, and one-line
// errors naming what is wrong with a truncated, mislabelled or malformed file.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/io/safetensors.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"
#include "tests/tensor_pattern.h"

using namespace statecheck;
using statecheck::test_support::error_of;
using statecheck::test_support::temp_path;
namespace fs = std::filesystem;
using statecheck::test_support::pattern;

namespace {

// The safetensors layout by hand: 8-byte little-endian header length, header, data.
void write_raw_safetensors(const std::string& path, const std::string& header,
                           const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xFF));
  out << header << data;
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
  // A shape of 17 dimensions of 1 (4 bytes of F32): refused by its rank, in a line that does not
  // print the shape.
  {
    std::ofstream out(path, std::ios::binary);
    std::string shape = "1";
    for (int i = 1; i < 17; ++i) shape += ",1";
    const std::string h =
        R"({"state":{"dtype":"F32","shape":[)" + shape + R"(],"data_offsets":[0,4]}})";
    const uint64_t n = h.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << "abcd";
  }
  EXPECT_EQ(error_of([&] { read_safetensors(path); }),
            path + ": tensor 'state': shape has 17 dimensions (at most 16)");
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
