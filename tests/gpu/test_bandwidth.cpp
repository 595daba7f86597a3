// The mixed stream of the benchmarks' yardsticks (kernels/common/bandwidth.h): its shape for a
// kernel's read and write bytes (no GPU needed), and the values it stores against a host loop
// that follows the documented layout.
#include <cstdint>
#include <vector>

#include "core/util/error.h"
#include "core/util/rng.h"
#include "kernels/common/bandwidth.h"
#include "tests/error_of.h"
#include "tests/gpu/gpu_test_util.h"

using namespace statecheck;
using namespace statecheck::cuda;
using statecheck::cuda::testing::GpuTest;
using statecheck::cuda::testing::Guarded;

namespace {

// The int8 checkpoint store of 8 Qwen3.5 TP-4 slots with fp32 active states (bf16 scales) reads
// 128778304 bytes and writes 34897920 (test_checkpoint_codec.cpp, CheckpointCodecByteModel):
// 3.69 : 1, rounded to 4 : 1, with 34897920 / 16 = 2181120 groups (a multiple of 256 already).
TEST(MixedStreamShape, FollowsTheKernelsReadWriteSplit) {
  const MixedStream store = mixed_stream_for(128778304.0, 34897920.0);
  EXPECT_EQ(store.reads, 4);
  EXPECT_EQ(store.writes, 1);
  EXPECT_EQ(store.groups, 2181120u);
  EXPECT_EQ(store.write_bytes(), 34897920u);
  EXPECT_EQ(store.read_bytes(), 4u * 34897920u);
  const double values = 8.0 * 30 * 8 * 128 * 128;
  const MixedStream load = mixed_stream_for(values, 2 * values);
  EXPECT_EQ(load.reads, 1);
  EXPECT_EQ(load.writes, 2);
  EXPECT_EQ(load.read_bytes(), static_cast<size_t>(values));  // a multiple of 4096 already
  const MixedStream copy = mixed_stream_for(1e6, 1.2e6);
  EXPECT_EQ(copy.reads, 1);
  EXPECT_EQ(copy.writes, 1);
  EXPECT_EQ(mixed_stream_for(16, 16).groups, 256u);  // never fewer than one block
}

TEST(MixedStreamShape, RefusesDegenerateSplits) {
  EXPECT_NE(test_support::error_of([] { mixed_stream_for(8, 1e6); }).find("at least 16 bytes"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([] { mixed_stream_for(1e6, 1e4); }).find("ratio 100.0 is over"),
            std::string::npos);
  // A malformed stream is refused before anything is launched (the pointers are never used).
  MixedStream m;
  m.groups = 300;
  EXPECT_NE(test_support::error_of([&] {
              mixed_stream(m, nullptr, nullptr, nullptr);
            }).find("groups 300 must be a positive multiple of 256"),
            std::string::npos);
  m.groups = 256, m.reads = 2, m.writes = 2;
  EXPECT_NE(test_support::error_of([&] {
              mixed_stream(m, nullptr, nullptr, nullptr);
            }).find("one of them 1"),
            std::string::npos);
}

TEST_F(GpuTest, MixedStreamStoresTheXorOfItsReads) {
  struct Split {
    int reads, writes;
  };
  for (const Split sp : {Split{4, 1}, Split{1, 4}, Split{1, 1}, Split{3, 1}, Split{1, 2}}) {
    MixedStream m;
    m.groups = 3 * 256, m.reads = sp.reads, m.writes = sp.writes;
    Rng rng(17);
    std::vector<uint32_t> src(m.read_bytes() / 4);
    for (auto& w : src) w = static_cast<uint32_t>(rng.next());
    Guarded<uint32_t> d_src(src), d_dst(std::vector<uint32_t>(m.write_bytes() / 4, 0xDEADBEEFu));
    mixed_stream(m, d_src.data(), d_dst.data(), nullptr);
    STATECHECK_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint32_t> got = d_dst.download();
    for (size_t b = 0; b < m.groups / 256; ++b)
      for (size_t t = 0; t < 256; ++t)
        for (int e = 0; e < 4; ++e) {
          uint32_t x = 0;
          for (int j = 0; j < m.reads; ++j) x ^= src[((b * m.reads + j) * 256 + t) * 4 + e];
          for (int o = 0; o < m.writes; ++o)
            ASSERT_EQ(got[((b * m.writes + o) * 256 + t) * 4 + e],
                      e == 0 ? x ^ static_cast<uint32_t>(o) : x)
                << sp.reads << ":" << sp.writes << " block " << b << " thread " << t << " word "
                << e << " copy " << o;
        }
    EXPECT_TRUE(d_dst.guard_intact());
    EXPECT_TRUE(d_src.guard_intact());
  }
}

}  // namespace
