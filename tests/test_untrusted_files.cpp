// Untrusted inputs (docs/robustness.md): a damaged or crafted file ends in one statecheck::Error
// naming the file, never a crash or a memory blow-up; wrong files are named for what they are;
// mislabels, NUL bytes and missing fields are refused; bad or huge traces cost bounded memory.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "core/drive/states_file.h"
#include "core/io/hdf5_file.h"
#include "core/io/hdf5_isolated.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "core/workloads/mooncake_trace.h"
#include "tests/error_of.h"
#include "tests/h5_crafted.h"
#include "tests/h5_write.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::error_of;
using statecheck::test_support::temp_path;
using statecheck::test_support::write_h5_dataset;

namespace {

const std::string kData = STATECHECK_TEST_DATA_DIR;

ModelConfig tiny_model() {
  return load_model(kData + "/states/model_tiny_gdn.json");
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

bool one_line(const std::string& s) {
  return !s.empty() && s.find('\n') == std::string::npos;
}

}  // namespace

// The issue's crash: a COMPACT dataset of (2, 2, 16, 16) f64 whose stored size is 0. libhdf5
// would copy 8192 bytes out of an empty message; the storage check refuses it first, in process
// and in the reader process.
TEST(UntrustedHdf5, CompactDatasetWithStoredSizeZeroIsRefusedBeforeTheRead) {
  const std::string path = temp_path("compact0.h5");
  test_support::write_compact_lying_about_size(path, {2, 2, 16, 16}, 0);
  const std::string in_process = error_of([&] { read_hdf5_array(path); });
  EXPECT_TRUE(one_line(in_process)) << in_process;
  EXPECT_EQ(in_process.rfind(path + ": ", 0), 0u) << in_process;
  const std::string isolated = error_of([&] { read_hdf5_array_isolated(path); });
  EXPECT_EQ(isolated, in_process);
  // The same file with its true size reads, value for value (0.5, 1.5, ...).
  const std::string good = temp_path("compact_ok.h5");
  test_support::write_compact_lying_about_size(good, {2, 2, 16, 16}, 8192);
  const FloatArray a = read_hdf5_array_isolated(good);
  ASSERT_EQ(a.data.size(), 1024u);
  EXPECT_EQ(a.dtype, "F64");
  EXPECT_EQ(a.shape, (std::vector<size_t>{2, 2, 16, 16}));
  EXPECT_EQ(a.data[1023], 1023.5f);
}

// A compact dataset claiming fewer bytes than its dataspace but not 0 (half of them).
TEST(UntrustedHdf5, CompactDatasetWithShortStoredSizeNamesBothSizes) {
  const std::string path = temp_path("compact_half.h5");
  test_support::write_compact_lying_about_size(path, {4, 64}, 1024);
  const std::string msg = error_of([&] { read_hdf5_array_isolated(path); });
  EXPECT_TRUE(one_line(msg)) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

// Sets STATECHECK_HDF5_READER_TEST_FAULT for one scope: the reader process then crashes, loops
// or allocates without bound before it reads, as a faulty libhdf5 would.
struct ReaderFault {
  explicit ReaderFault(const char* fault) { setenv("STATECHECK_HDF5_READER_TEST_FAULT", fault, 1); }
  ~ReaderFault() { unsetenv("STATECHECK_HDF5_READER_TEST_FAULT"); }
};

// A crash inside the reader process (a SIGSEGV, raised there as a library crash would) is one
// Error naming the file and the signal; the test process lives on.
TEST(UntrustedHdf5, CrashInTheReaderProcessBecomesAnError) {
  const std::string path = kData + "/states/tiny_f64.h5";
  std::string msg;
  {
    const ReaderFault fault("segv");
    msg = error_of([&] { read_hdf5_array_isolated(path); });
  }
  EXPECT_TRUE(one_line(msg)) << msg;
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find("signal " + std::to_string(SIGSEGV)), std::string::npos) << msg;
}

// Memory without bound in the reader (1 MiB blocks until 64 GiB) meets the address-space limit of
// hdf5_child_memory_limit (here 512 MiB + 3 x 1032 x the 10 KB file; under AddressSanitizer a
// resident-memory limit an eighth plus 512 MiB above it) long before the machine's, and becomes one
// Error naming the file.
TEST(UntrustedHdf5, MemoryBlowUpInTheReaderProcessBecomesAnError) {
  const std::string path = kData + "/states/tiny_f64.h5";
  EXPECT_LT(hdf5_child_memory_limit(std::filesystem::file_size(path)), uint64_t{600} << 20);
  std::string msg;
  {
    const ReaderFault fault("grow");
    msg = error_of([&] { read_hdf5_array_isolated(path); });
  }
  EXPECT_TRUE(one_line(msg)) << msg;
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find("needs more than"), std::string::npos) << msg;
}

// A reader that never returns is ended by the wall-clock limit, set to 1 s through
// STATECHECK_HDF5_READER_SECONDS, and becomes one Error naming the file and the limit.
TEST(UntrustedHdf5, ReaderProcessThatHangsIsEndedByTheTimeLimit) {
  const std::string path = kData + "/states/tiny_f64.h5";
  ASSERT_EQ(setenv("STATECHECK_HDF5_READER_SECONDS", "1", 1), 0);
  EXPECT_EQ(hdf5_child_time_limit_s(1000), 1u);
  std::string msg;
  const auto start = std::chrono::steady_clock::now();
  {
    const ReaderFault fault("hang");
    msg = error_of([&] { read_hdf5_array_isolated(path); });
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsetenv("STATECHECK_HDF5_READER_SECONDS");
  // The reader's own alarm ended it, not the caller's fallback a minute after the limit.
  EXPECT_LT(waited, 20.0);
  EXPECT_TRUE(one_line(msg)) << msg;
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find("did not finish within 1 s"), std::string::npos) << msg;
  // Without the variable: 120 s plus 1 s per 10 MiB, at most a day; a malformed value is an error.
  EXPECT_EQ(hdf5_child_time_limit_s(0), 120u);
  EXPECT_EQ(hdf5_child_time_limit_s(uint64_t{100} << 20), 130u);
  EXPECT_EQ(hdf5_child_time_limit_s(~uint64_t{0}), 86400u);
  for (const char* bad : {"0", " 5", "+5", "-1", "10s", "1e3", "86401", ""}) {
    ASSERT_EQ(setenv("STATECHECK_HDF5_READER_SECONDS", bad, 1), 0);
    const std::string m = error_of([] { hdf5_child_time_limit_s(0); });
    EXPECT_NE(m.find("STATECHECK_HDF5_READER_SECONDS="), std::string::npos) << "'" << bad << "'";
  }
  unsetenv("STATECHECK_HDF5_READER_SECONDS");
}

// The shape check runs in the calling process, before the reader reads the data: what it throws
// comes back as is, and a check that records the shape sees the file's.
TEST(UntrustedHdf5, ShapeCheckRunsInTheCallerBeforeTheData) {
  const std::string path = kData + "/states/tiny_f64.h5";
  const FloatArray a = read_hdf5_array(path);
  std::vector<size_t> seen;
  int calls = 0;
  const std::string msg = error_of([&] {
    read_hdf5_array_isolated(path, "", [&](const std::string& name, const std::vector<size_t>& s) {
      seen = s, ++calls;
      fail("{}: refused '{}' by the check", path, name);
    });
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, a.shape);
  EXPECT_EQ(msg, fmt::format("{}: refused '{}' by the check", path, a.name));
  EXPECT_EQ(hdf5_dataset_shape_isolated(path, a.name), a.shape);
}

// Reads from many threads at once while the others allocate: every reader process answers (a
// forked copy of this multi-threaded process could inherit a lock another thread held and hang).
TEST(UntrustedHdf5, IsolatedReadsFromManyThreadsAtOnceAllAnswer) {
  const std::string path = kData + "/states/tiny_f64.h5";
  const FloatArray want = read_hdf5_array(path);
  ASSERT_EQ(setenv("STATECHECK_HDF5_READER_SECONDS", "30", 1), 0);
  std::atomic<int> same{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)  // allocate and free without pause
    threads.emplace_back([&] {
      while (!stop) {
        std::vector<std::unique_ptr<std::vector<float>>> v;
        for (int i = 1; i < 64; ++i) v.push_back(std::make_unique<std::vector<float>>(i * 37));
      }
    });
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&] {
      for (int i = 0; i < 8; ++i) {
        try {
          same += read_hdf5_array_isolated(path).data == want.data;
        } catch (const std::exception&) {  // counted as a wrong answer, not a crash of the test
        }
      }
    });
  for (auto& r : readers) r.join();
  stop = true;
  for (auto& t : threads) t.join();
  unsetenv("STATECHECK_HDF5_READER_SECONDS");
  EXPECT_EQ(same.load(), 32);
}

namespace {

// Descriptors open in this process now (/proc/self/fd, less the one that lists it).
int open_descriptors() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    n += e.exists() ? 1 : 0;
  return n;
}

}  // namespace

// No descriptor and no child process outlives a read, whatever ended it: a result, a refused
// shape, a crash, an error of the reader; nor does one of this process's descriptors reach the
// reader (it would keep result files open): the reader sees only its standard streams and the
// socket.
TEST(UntrustedHdf5, ReadsLeaveNoDescriptorOrChildBehind) {
  const std::string path = kData + "/states/tiny_f64.h5";
  const int before = open_descriptors();
  read_hdf5_array_isolated(path);
  error_of([&] {
    read_hdf5_array_isolated(path, "", [&](const std::string& n, const std::vector<size_t>&) {
      fail("{}: refused '{}'", path, n);
    });
  });
  {
    const ReaderFault fault("segv");
    error_of([&] { read_hdf5_array_isolated(path); });
  }
  error_of([&] { read_hdf5_array_isolated(path, "no_such_dataset"); });
  EXPECT_EQ(open_descriptors(), before);
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  // A descriptor of this process without close-on-exec (as libhdf5 opens its files) is not the
  // reader's: the fault "fds" makes the reader report its open descriptors as its error.
  const int opened = ::open(path.c_str(), O_RDONLY);  // no O_CLOEXEC
  ASSERT_GE(opened, 0);
  const int extra = fcntl(opened, F_DUPFD, 100);  // above the reader's socket, close-on-exec off
  ::close(opened);
  ASSERT_GE(extra, 100);
  std::string seen;
  {
    const ReaderFault fault("fds");
    seen = error_of([&] { read_hdf5_array_isolated(path); });
  }
  ::close(extra);
  ASSERT_EQ(seen.rfind("descriptors", 0), 0u) << seen;
  std::istringstream numbers(seen.substr(std::strlen("descriptors")));
  std::vector<int> held;
  for (int fd; numbers >> fd;) held.push_back(fd);
  ASSERT_FALSE(held.empty()) << seen;
  EXPECT_EQ(held.back(), 3) << seen;  // the socket, and nothing above it
  EXPECT_EQ(std::find(held.begin(), held.end(), extra), held.end()) << seen;
}

// The reader's result is the caller's: the shipped fixture read both ways is the same array.
TEST(UntrustedHdf5, IsolatedReadEqualsTheInProcessRead) {
  const std::string path = kData + "/states/tiny_f64.h5";
  const FloatArray a = read_hdf5_array(path), b = read_hdf5_array_isolated(path);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.data, b.data);
}

// An empty dataset is a valid file: both readers return shape {0} and no data (the copy out of
// the reader process has no buffer to write to; the fuzzer found it).
TEST(UntrustedHdf5, EmptyDatasetReadsAsShapeZeroInBothReaders) {
  const std::string path = temp_path("empty.h5");
  const float none = 0.0f;
  write_h5_dataset(path, H5T_IEEE_F32LE, &none, 0, 0, 0, false, "");
  const FloatArray a = read_hdf5_array(path), b = read_hdf5_array_isolated(path);
  EXPECT_EQ(a.shape, std::vector<size_t>{0});
  EXPECT_EQ(b.shape, std::vector<size_t>{0});
  EXPECT_TRUE(a.data.empty());
  EXPECT_TRUE(b.data.empty());
}

// fp32 data carrying dtype = "bf16" (and the reverse) are mislabelled, as the safetensors reader
// says of its equivalent.
TEST(UntrustedHdf5, DtypeAttributeThatDisagreesWithTheStoredTypeIsRefused) {
  const std::vector<float> f(16, 1.0f);
  const std::string path = temp_path("f32_as_bf16.h5");
  write_h5_dataset(path, H5T_IEEE_F32LE, f.data(), 16, 16, 0, false, "bf16");
  const std::string msg = error_of([&] { read_hdf5_array(path); });
  EXPECT_NE(msg.find("labelled dtype=\"bf16\" but stored as float32: mislabelled"),
            std::string::npos)
      << msg;
  const std::vector<uint16_t> bits(16, 0x3f80);
  const std::string path2 = temp_path("int16_as_f32.h5");
  write_h5_dataset(path2, H5T_STD_U16LE, bits.data(), 16, 16, 0, false, "float32");
  EXPECT_NE(error_of([&] { read_hdf5_array(path2); }).find("stored as int16: mislabelled"),
            std::string::npos);
  // Labels that agree are read: bf16 bits 0x3f80 are 1.0.
  const std::string path3 = temp_path("int16_bf16.h5");
  write_h5_dataset(path3, H5T_STD_U16LE, bits.data(), 16, 16, 0, false, "bf16");
  EXPECT_EQ(read_hdf5_array(path3).data[15], 1.0f);
}

// A file that is neither HDF5 nor safetensors is named so, by its first bytes, whatever its
// extension; so is an empty one.
TEST(UntrustedFiles, NeitherHdf5NorSafetensorsIsSaidByTheFirstBytes) {
  const ModelConfig m = tiny_model();
  const std::string text = temp_path("text.h5");
  write_text(text, "this is a text file, not states\n");
  const std::string msg = error_of([&] { read_states_file(text, m); });
  EXPECT_NE(msg.find("neither an HDF5 nor a safetensors file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("7468697320697320"), std::string::npos) << msg;  // "this is "
  const std::string empty = temp_path("empty.h5");
  write_text(empty, "");
  EXPECT_NE(error_of([&] { read_states_file(empty, m); }).find("it is empty (0 bytes)"),
            std::string::npos);
}

// A NUL byte after a trace line's closing brace: the JSON parser would stop at it and accept the
// line; it is a malformed line.
TEST(UntrustedTrace, NulByteAfterTheClosingBraceIsAMalformedLine) {
  const std::string good =
      R"({"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [7]})";
  std::istringstream in(good + std::string(1, '\0') + "junk\n");
  const std::string msg = error_of([&] { parse_mooncake_trace(in, "t.jsonl", BadLines::reject); });
  EXPECT_NE(msg.find("t.jsonl:1: a NUL byte at column " + std::to_string(good.size() + 1)),
            std::string::npos)
      << msg;
}

// 100,000 bad lines of two kinds under skip: every one counted by kind, only the first
// kTraceSkippedKept of each kept (memory bounded), the valid lines kept.
TEST(UntrustedTrace, SkippedLinesAreCountedByKindWithTheFirstLineNumbersKept) {
  std::string text;
  const std::string good =
      R"({"timestamp": 1, "input_length": 3, "output_length": 1, "hash_ids": [7]})";
  for (int i = 0; i < 100000; ++i) text += (i % 2 ? "not json\n" : "{\"timestamp\": 1}\n");
  text += good + "\n";
  std::istringstream in(text);
  const Trace t = parse_mooncake_trace(in, "t.jsonl", BadLines::skip);
  EXPECT_EQ(t.skipped_count, 100000);
  ASSERT_EQ(t.skipped_by_kind.size(), 2u);
  const TraceSkipCount& json = t.skipped_by_kind.at("bad JSON");
  const TraceSkipCount& missing = t.skipped_by_kind.at("missing field 'input_length'");
  EXPECT_EQ(json.count, 50000);
  EXPECT_EQ(missing.count, 50000);
  EXPECT_EQ(json.first_lines, (std::vector<int64_t>{2, 4, 6, 8, 10}));
  EXPECT_EQ(missing.first_lines, (std::vector<int64_t>{1, 3, 5, 7, 9}));
  EXPECT_EQ(t.skipped.size(), 2u * kTraceSkippedKept);
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].line, 100001);
}

// The total-token cap: refused after the whole file is counted, saying the total it holds.
TEST(UntrustedTrace, TotalTokenCapRefusesWithTheTotalNeeded) {
  std::string text;
  for (int i = 0; i < 3; ++i)
    text += R"({"timestamp": 1, "input_length": 1000, "output_length": 24, "hash_ids": [1, 2]})"
            "\n";
  std::istringstream in(text);
  const std::string msg =
      error_of([&] { parse_mooncake_trace(in, "t.jsonl", BadLines::reject, 2500); });
  EXPECT_NE(msg.find("holds 3072 prompt + output tokens, more than the cap of 2500"),
            std::string::npos)
      << msg;
  std::istringstream in2(text);
  EXPECT_EQ(parse_mooncake_trace(in2, "t.jsonl", BadLines::reject, 3072).requests.size(), 3u);
}

// A line of more than 1 MiB (no newline in sight) is one malformed line, read in bounded memory.
TEST(UntrustedTrace, OverlongLineIsMalformed) {
  std::istringstream in(std::string((size_t{1} << 20) + 10, '['));
  const Trace t = parse_mooncake_trace(in, "t.jsonl", BadLines::skip);
  EXPECT_EQ(t.skipped_count, 1);
  EXPECT_EQ(t.skipped_by_kind.count("line too long"), 1u);
}

namespace {
nlohmann::json qwen_hf() {
  return {{"model_type", "qwen3_next"},  {"num_hidden_layers", 4},
          {"linear_num_key_heads", 2},   {"linear_num_value_heads", 4},
          {"linear_key_head_dim", 8},    {"linear_value_head_dim", 8},
          {"num_key_value_heads", 2},    {"head_dim", 8},
          {"full_attention_interval", 4}};
}
nlohmann::json kimi_hf() {
  return {{"model_type", "kimi_linear"},
          {"num_hidden_layers", 4},
          {"kv_lora_rank", 16},
          {"qk_rope_head_dim", 8},
          {"linear_attn_config", {{"num_heads", 2}, {"head_dim", 8}, {"full_attn_layers", {4}}}}};
}
}  // namespace

// Qwen3-Next without linear_conv_kernel_dim: transformers' Qwen3NextConfig defaults it to 4, so
// statecheck does, saying so on stderr. Kimi-Linear without short_conv_kernel_size: its modelling
// code has no default (it indexes the key), so the config is refused naming the field.
TEST(UntrustedModelConfig, MissingConvWidthDefaultsAsTheEngineOrIsRefused) {
  ::testing::internal::CaptureStderr();
  const ModelConfig q = parse_model_config(qwen_hf(), "config.json", 1);
  const std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(q.conv_width, 4);
  EXPECT_NE(note.find("no 'linear_conv_kernel_dim'; using 4"), std::string::npos) << note;
  nlohmann::json with = qwen_hf();
  with["linear_conv_kernel_dim"] = 3;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(parse_model_config(with, "config.json", 1).conv_width, 3);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  const std::string msg = error_of([&] { parse_model_config(kimi_hf(), "config.json", 1); });
  EXPECT_NE(msg.find("missing field 'linear_attn_config.short_conv_kernel_size'"),
            std::string::npos)
      << msg;
}

// conv_width 1 leaves no conv state (W - 1 = 0 inputs): refused, with its one spelling.
TEST(UntrustedModelConfig, ConvWidthOneIsRefused) {
  nlohmann::json j = qwen_hf();
  j["linear_conv_kernel_dim"] = 1;
  const std::string msg = error_of([&] { parse_model_config(j, "config.json", 1); });
  EXPECT_NE(msg.find("field 'linear.conv_width' must be >= 2"), std::string::npos) << msg;
}

// A config file with a NUL byte after its JSON value: the parser would stop there; refused.
TEST(UntrustedModelConfig, NulByteInTheFileIsRefused) {
  const std::string path = temp_path("nul.json");
  std::ifstream in(kData + "/states/model_tiny_gdn.json", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_text(path, text + std::string(1, '\0') + "{");
  const std::string msg = error_of([&] { load_model(path); });
  EXPECT_NE(msg.find("a NUL byte at offset " + std::to_string(text.size())), std::string::npos)
      << msg;
}
