// The chunked prefill's launcher (chunked_prefill.h): argument checks, the choice of form and
// value tile, the split form's workspace, and the launches of the kernels in chunk_kernel.cuh
// (the fused kernel and the split form's transform pass) and state_pass.cuh (its state pass).
#include "kernels/chunked_delta/chunked_prefill.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

#include "core/recurrence/chunked_delta.h"
#include "kernels/chunked_delta/chunk_kernel.cuh"
#include "kernels/chunked_delta/chunk_workspace.h"
#include "kernels/chunked_delta/state_pass.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device.h"
#include "kernels/gated_delta/pool_params.h"

namespace statecheck::cuda {

namespace {

template <int BV, bool KDA, typename StateT>
void launch_fused(const GatedDeltaPoolArgs& a, const PoolParams& p, cudaStream_t stream) {
  constexpr int bytes = Smem<BV, KDA>::bytes;
  const void* kernel = reinterpret_cast<const void*>(chunked_prefill_kernel<BV, KDA, StateT>);
  if (resident_blocks(kernel, kThreads, bytes) == 0)
    fail("chunked_prefill_pool: the device cannot give {} bytes of shared memory to a block",
         bytes);
  const dim3 grid(a.num_seqs, a.HV, a.dv / BV);
  chunked_prefill_kernel<BV, KDA, StateT><<<grid, kThreads, bytes, stream>>>(p, nullptr, 0);
}

// The split form: the transform pass over every workspace slot, then the state pass.
template <int BV, bool KDA, typename StateT>
void launch_split(const GatedDeltaPoolArgs& a, const PoolParams& p, uint8_t* ws, int64_t slots,
                  cudaStream_t stream) {
  using X = Smem<64, KDA, Form::transform>;
  const void* transform =
      reinterpret_cast<const void*>(chunked_prefill_kernel<64, KDA, float, Form::transform>);
  const void* state_pass =
      reinterpret_cast<const void*>(chunked_state_pass_kernel<BV, KDA, StateT>);
  if (resident_blocks(transform, kThreads, X::bytes) == 0 ||
      resident_blocks(state_pass, kThreads, StatePassSmem<BV>::bytes) == 0)
    fail("chunked_prefill_pool: the device cannot give {} bytes of shared memory to a block",
         std::max<int>(X::bytes, StatePassSmem<BV>::bytes));
  chunked_prefill_kernel<64, KDA, float, Form::transform>
      <<<dim3(static_cast<unsigned>(slots), a.HV), kThreads, X::bytes, stream>>>(p, ws, a.num_seqs);
  STATECHECK_CUDA_CHECK_LAUNCH("chunked_prefill_pool (transform pass)");
  chunked_state_pass_kernel<BV, KDA, StateT>
      <<<dim3(a.dv / BV, a.HV, a.num_seqs), kThreads, StatePassSmem<BV>::bytes, stream>>>(p, ws);
}

template <int BV>
void launch_tile(const GatedDeltaPoolArgs& a, const PoolParams& p, uint8_t* ws, int64_t slots,
                 cudaStream_t stream) {
  const bool kda = a.gate == GateKind::kda, f32 = a.state_dtype == Dtype::fp32;
  auto run = [&](auto kda_tag, auto state_tag) {
    constexpr bool K = decltype(kda_tag)::value;
    using S = typename decltype(state_tag)::type;
    if (ws)
      launch_split<BV, K, S>(a, p, ws, slots, stream);
    else
      launch_fused<BV, K, S>(a, p, stream);
  };
  if (kda && f32)
    run(std::true_type{}, std::common_type<float>{});
  else if (kda)
    run(std::true_type{}, std::common_type<__nv_bfloat16>{});
  else if (f32)
    run(std::false_type{}, std::common_type<float>{});
  else
    run(std::false_type{}, std::common_type<__nv_bfloat16>{});
}

void check_args(const GatedDeltaPoolArgs& a, const ChunkedPrefillOptions& opt) {
  check_pool_shape(a, "chunked_prefill_pool");
  if (a.dk != kDk) fail("chunked_prefill_pool: d_k = {} is not supported (only 128)", a.dk);
  if (a.dv % 32 != 0) fail("chunked_prefill_pool: d_v = {} is not a multiple of 32", a.dv);
  if (opt.value_tile != 0 && opt.value_tile != 32 && opt.value_tile != 64)
    fail("chunked_prefill_pool: value_tile = {} (0, 32 or 64)", opt.value_tile);
  if (opt.value_tile != 0 && a.dv % opt.value_tile != 0)
    fail("chunked_prefill_pool: value_tile = {} does not divide d_v = {}", opt.value_tile, a.dv);
  if (a.state_dtype != Dtype::fp32 && a.state_dtype != Dtype::bf16)
    fail("chunked_prefill_pool: the state dtype must be fp32 or bf16");
  if (opt.total_tokens < 0)
    fail("chunked_prefill_pool: total_tokens = {} is negative", opt.total_tokens);
  if (opt.form == ChunkedForm::split && opt.total_tokens == 0 && a.num_seqs > 0)
    fail("chunked_prefill_pool: the split form needs total_tokens (cu_seqlens[num_seqs])");
  if (opt.form == ChunkedForm::split && a.num_seqs > kChunkedSplitMaxSeqs)
    fail("chunked_prefill_pool: the split form takes at most {} sequences (num_seqs = {})",
         kChunkedSplitMaxSeqs, a.num_seqs);
  if (chunked_prefill_form(a, opt) == ChunkedForm::split && opt.workspace) {
    const size_t need = chunked_prefill_workspace_bytes(a, opt.total_tokens);
    if (opt.workspace_bytes < need)
      fail("chunked_prefill_pool: workspace_bytes = {} (the split form needs {})",
           opt.workspace_bytes, need);
    if (reinterpret_cast<uintptr_t>(opt.workspace) % 16 != 0)
      fail("chunked_prefill_pool: the workspace is not 16-byte aligned");
  }
}

}  // namespace

bool chunked_prefill_supported(const GatedDeltaPoolArgs& a) {
  return a.dk == kDk && a.dv > 0 && a.dv % 32 == 0 &&
         (a.state_dtype == Dtype::fp32 || a.state_dtype == Dtype::bf16);
}

ChunkedForm chunked_prefill_form(const GatedDeltaPoolArgs& a, const ChunkedPrefillOptions& opt) {
  if (opt.form != ChunkedForm::automatic) return opt.form;
  const bool one_chunk_each = a.max_seq_len > 0 && a.max_seq_len <= kC;
  return opt.total_tokens > 0 && !one_chunk_each && a.num_seqs <= kChunkedSplitMaxSeqs
             ? ChunkedForm::split
             : ChunkedForm::fused;
}

size_t chunked_prefill_workspace_bytes(const GatedDeltaPoolArgs& a, int64_t total_tokens) {
  return static_cast<size_t>(chunk_slots(a.num_seqs, total_tokens)) * a.HV * ChunkTile::bytes(a.dv);
}

int chunked_prefill_value_tile(const GatedDeltaPoolArgs& a, const ChunkedPrefillOptions& opt) {
  if (opt.value_tile != 0) return opt.value_tile;
  if (a.dv % 64 != 0) return 32;
  const bool kda = a.gate == GateKind::kda;
  int resident = 0;
  if (chunked_prefill_form(a, opt) == ChunkedForm::split)
    resident = resident_blocks(
        kda ? reinterpret_cast<const void*>(chunked_state_pass_kernel<64, true, float>)
            : reinterpret_cast<const void*>(chunked_state_pass_kernel<64, false, float>),
        kThreads, StatePassSmem<64>::bytes);
  else
    resident = resident_blocks(
        kda ? reinterpret_cast<const void*>(chunked_prefill_kernel<64, true, float>)
            : reinterpret_cast<const void*>(chunked_prefill_kernel<64, false, float>),
        kThreads, kda ? Smem<64, true>::bytes : Smem<64, false>::bytes);
  const int64_t blocks = static_cast<int64_t>(a.num_seqs) * a.HV * (a.dv / 64);
  return blocks >= resident ? 64 : 32;
}

void chunked_prefill_pool(const GatedDeltaPoolArgs& a, const ChunkedPrefillOptions& opt,
                          cudaStream_t stream) {
  check_args(a, opt);
  if (a.num_seqs == 0) return;
  const PoolParams p = pool_params(a, "chunked_prefill_pool");
  uint8_t* ws = nullptr;
  int64_t slots = 0;
  struct AsyncFree {  // a workspace the launcher allocated, freed on the stream however it ends
    uint8_t* ptr;
    cudaStream_t stream;
    ~AsyncFree() {
      if (ptr) (void)cudaFreeAsync(ptr, stream);
    }
  } owned{nullptr, stream};
  if (chunked_prefill_form(a, opt) == ChunkedForm::split) {
    slots = chunk_slots(a.num_seqs, opt.total_tokens);
    ws = static_cast<uint8_t*>(opt.workspace);
    if (!ws) {
      const cudaError_t e =
          cudaMallocAsync(reinterpret_cast<void**>(&ws),
                          chunked_prefill_workspace_bytes(a, opt.total_tokens), stream);
      if (e == cudaErrorMemoryAllocation && opt.form == ChunkedForm::automatic) {
        (void)cudaGetLastError();  // no room for the workspace: the fused form needs none
        ws = nullptr;
      } else {
        STATECHECK_CUDA_CHECK(e);
        owned.ptr = ws;
      }
    }
  }
  ChunkedPrefillOptions chosen = opt;  // the form that runs: split exactly when ws is set
  chosen.form = ws ? ChunkedForm::split : ChunkedForm::fused;
  if (chunked_prefill_value_tile(a, chosen) == 64)
    launch_tile<64>(a, p, ws, slots, stream);
  else
    launch_tile<32>(a, p, ws, slots, stream);
  STATECHECK_CUDA_CHECK_LAUNCH("chunked_prefill_pool");
}

double chunked_prefill_flops(const GatedDeltaPoolArgs& a, const std::vector<int32_t>& cu) {
  double f = 0.0;
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    f += chunked_delta_flops_per_head(cu[s + 1] - cu[s], kC, a.dk, a.dv);
  return f * a.HV;
}

}  // namespace statecheck::cuda
