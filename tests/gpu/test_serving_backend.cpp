// The CUDA serving backend's int8 working-state mode (kernels/host/serving_backend.h) against the
// working-state decode's CPU reference: a hit (the cached working slot decoded into fp32, the
// suffix but its last token through the chunked prefill, the last token through the decode from
// that state) and a miss (the same from zero), GDN and KDA, HV = 3H, two layers.
#include <gtest/gtest.h>

#include "core/util/error.h"
#include "kernels/host/serving_backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace statecheck::cuda {
namespace {

class ServingBackendWs : public testing::GpuTest, public ::testing::WithParamInterface<GateKind> {};

ServingShape small_shape(GateKind gate, bool bf16_scale) {
  ServingShape s;
  s.layer.H = 2, s.layer.HV = 6, s.layer.dk = 128, s.layer.dv = 64, s.layer.gate = gate;
  s.layers = 2;
  s.conv_elems = 16;
  s.temporal = Dtype::fp32;
  s.checkpoint = parse_codec("int8", bf16_scale ? Dtype::bf16 : Dtype::fp32);
  s.working.kind = WorkingStateKind::int8;
  s.working.bf16_scale = bf16_scale;
  s.parallel = 3;
  return s;
}

TEST_P(ServingBackendWs, HitAndMissAgreeWithTheReferenceBitForBit) {
  for (const bool bf16_scale : {false, true}) {
    const ServingShape s = small_shape(GetParam(), bf16_scale);
    const auto backend = cuda_serving_backend(s, 200, 7);
    const int64_t head = static_cast<int64_t>(s.layer.HV) * s.layer.dv * s.layer.dk;
    const int64_t scales = static_cast<int64_t>(s.layer.HV) * s.layer.dk;
    const int64_t outputs = static_cast<int64_t>(s.layer.HV) * s.layer.dv;
    // A hit of 128 tokens with a 9-token suffix, and a miss of 131 tokens (two chunks and a tail).
    const WorkingStateCheck hit = backend->check_working_state({137, 128});
    EXPECT_EQ(hit.compared, head + scales + outputs) << "bf16 scales " << bf16_scale;
    EXPECT_EQ(hit.differing, 0) << "bf16 scales " << bf16_scale;
    const WorkingStateCheck miss = backend->check_working_state({131, 0});
    EXPECT_EQ(miss.compared, head + scales + outputs) << "bf16 scales " << bf16_scale;
    EXPECT_EQ(miss.differing, 0) << "bf16 scales " << bf16_scale;
    // A one-token prompt: no prefill, the decode from the zero state; a one-token suffix: the
    // decode from the cached state as the load decoded it.
    EXPECT_EQ(backend->check_working_state({1, 0}).differing, 0) << "bf16 scales " << bf16_scale;
    EXPECT_EQ(backend->check_working_state({129, 128}).differing, 0)
        << "bf16 scales " << bf16_scale;
  }
}

TEST_P(ServingBackendWs, TimesEveryModeAndRefusesADonateOfTheSinglePool) {
  const auto backend = cuda_serving_backend(small_shape(GetParam(), false), 200, 7);
  const std::vector<ServedRequest> rs{{137, 128}, {131, 0}, {64, 32}, {200, 0}};
  for (const RestoreFrom from :
       {RestoreFrom::active_pool, RestoreFrom::checkpoint_pool, RestoreFrom::working_pool}) {
    EXPECT_GT(backend->serve_ms(rs[0], from), 0.0);
    EXPECT_GT(backend->serve_ms(rs[1], from), 0.0);
    EXPECT_GT(backend->serve_batches_ms(rs, from), 0.0);
  }
  EXPECT_GT(backend->donate_ms(RestoreFrom::checkpoint_pool), 0.0);
  EXPECT_GT(backend->donate_ms(RestoreFrom::working_pool), 0.0);
  EXPECT_THROW(backend->donate_ms(RestoreFrom::active_pool), Error);
  // Without a working-state format the mode is refused.
  ServingShape plain = small_shape(GetParam(), false);
  plain.working = WorkingStateFormat{};
  const auto without = cuda_serving_backend(plain, 200, 7);
  EXPECT_GT(without->serve_ms(rs[0], RestoreFrom::checkpoint_pool), 0.0);
  EXPECT_THROW(without->serve_ms(rs[0], RestoreFrom::working_pool), Error);
  EXPECT_THROW(without->check_working_state(rs[0]), Error);
  // After the timed work a hit still agrees with its reference.
  EXPECT_EQ(backend->check_working_state({137, 128}).differing, 0);
}

INSTANTIATE_TEST_SUITE_P(Gates, ServingBackendWs, ::testing::Values(GateKind::gdn, GateKind::kda),
                         [](const auto& info) {
                           return std::string(info.param == GateKind::gdn ? "gdn" : "kda");
                         });

}  // namespace
}  // namespace statecheck::cuda
