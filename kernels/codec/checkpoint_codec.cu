#include "kernels/codec/checkpoint_codec.h"

#include <type_traits>

#include <cuda_bf16.h>

#include "kernels/codec/codec_common.cuh"
#include "kernels/codec/load_per_head.cuh"
#include "kernels/codec/load_rows.cuh"
#include "kernels/codec/slot_copy.cuh"
#include "kernels/codec/store_per_head.cuh"
#include "kernels/codec/store_staged_bf16.cuh"
#include "kernels/codec/store_strips.cuh"
#include "kernels/common/cuda_check.h"

namespace statecheck::cuda {

namespace {

Kind kind_of(const Codec& c) {
  switch (c.kind) {
    case CodecKind::fp32:
      return Kind::fp32;
    case CodecKind::bf16:
      return Kind::bf16;
    case CodecKind::int8:
      return Kind::int8;
    case CodecKind::fp8_e4m3:
      return Kind::fp8;
    case CodecKind::fp8_e4m3_raw:
      return Kind::fp8_raw;
  }
  return Kind::fp32;
}

// Whether a codec on an active dtype is a slot copy (checkpoint bytes = active bytes).
template <typename ActiveT, Kind K>
constexpr bool is_slot_copy() {
  return (K == Kind::fp32 && std::is_same_v<ActiveT, float>) ||
         (K == Kind::bf16 && std::is_same_v<ActiveT, __nv_bfloat16>);
}

// ---- The choice of kernel: one function per direction, behind both the launch and the query ----
//
// The active dtype is read as dispatch() reads it: fp32, or else bf16.

constexpr int kStripGroups = kFastThreads / 8;  // row groups of a store_strips_kernel block

// is_slot_copy on runtime values.
bool slot_copy_codec(Dtype active_dtype, Kind k) {
  return (k == Kind::fp32 && active_dtype == Dtype::fp32) ||
         (k == Kind::bf16 && active_dtype != Dtype::fp32);
}

// Whether a head of the active dtype is whole 16-byte units (what slot_copy_kernel moves).
bool heads_are_whole_units(const PoolGeometry& g, Dtype active_dtype) {
  const int64_t head_bytes =
      static_cast<int64_t>(g.dv) * g.dk * (active_dtype == Dtype::fp32 ? 4 : 2);
  return head_bytes % 16 == 0;
}

// Key columns per thread of store_strips_kernel: fp32 active states take 8 (two 16-byte loads per
// row) where d_k allows, bf16 ones 4 (one 8-byte load per row); docs/kernel_notes.md says why.
int strip_columns(const PoolGeometry& g, bool fp32_active) {
  return fp32_active && g.dk % 64 == 0 ? 8 : 4;
}

// int8 and fp8_e4m3: bf16 active states with 128 x 128 heads take the staged kernel; d_k a
// multiple of 8 strip_columns and d_v 128 or 256 the strip kernel. A slot copy with heads of
// whole 16-byte units takes the copy kernel; everything else the per-head kernel.
CheckpointKernel store_kernel_for(const PoolGeometry& g, Dtype active_dtype, Kind k) {
  if (k == Kind::int8 || k == Kind::fp8) {
    if (active_dtype != Dtype::fp32 && g.dk == 128 && g.dv == 128)
      return CheckpointKernel::store_staged_bf16;
    const int cols = strip_columns(g, active_dtype == Dtype::fp32);
    if (g.dk % (8 * cols) == 0 && (g.dv == 8 * kStripGroups || g.dv == 16 * kStripGroups))
      return CheckpointKernel::store_strips;
  }
  if (slot_copy_codec(active_dtype, k) && heads_are_whole_units(g, active_dtype))
    return CheckpointKernel::slot_copy;
  return CheckpointKernel::store_per_head;
}

// A slot copy with heads of whole 16-byte units: the copy kernel; otherwise d_k % 4 == 0 with
// d_k / 4 dividing 128: the row kernel; everything else: the per-head kernel.
CheckpointKernel load_kernel_for(const PoolGeometry& g, Dtype active_dtype, Kind k) {
  if (slot_copy_codec(active_dtype, k) && heads_are_whole_units(g, active_dtype))
    return CheckpointKernel::slot_copy;
  if (g.dk > 0 && g.dk % 4 == 0 && kFastThreads % (g.dk / 4) == 0)
    return CheckpointKernel::load_rows;
  return CheckpointKernel::load_per_head;
}

// ---- Launches ----------------------------------------------------------------------------------

// Launches slot_copy_kernel (the head must be whole 16-byte units).
template <typename ActiveT, bool CHECK>
void launch_slot_copy(const PoolGeometry& g, const CodecParams& p, int n, cudaStream_t stream) {
  const int64_t head_bytes = static_cast<int64_t>(g.dv) * g.dk * sizeof(ActiveT);
  constexpr int64_t kRunUnits = static_cast<int64_t>(kCopyUnits) * kCopyThreads;
  const int runs = static_cast<int>((head_bytes / 16 + kRunUnits - 1) / kRunUnits);
  const dim3 grid(static_cast<unsigned>(g.HV * runs + p.conv_blocks), static_cast<unsigned>(g.L),
                  static_cast<unsigned>(n));
  slot_copy_kernel<ActiveT, CHECK><<<grid, kCopyThreads, 0, stream>>>(p, runs);
}

int conv_blocks_for(int64_t conv_elems) {
  return static_cast<int>((conv_elems + kConvChunk - 1) / kConvChunk);
}

CodecParams make_params(const PoolGeometry& g, const StatePoolView& src, const StatePoolView& dst,
                        const int32_t* src_ids, const int32_t* dst_ids, int32_t* error_info) {
  CodecParams p;
  p.L = g.L, p.HV = g.HV, p.dv = g.dv, p.dk = g.dk;
  p.conv_elems = (src.conv && dst.conv) ? g.conv_elems : 0;
  p.conv_blocks = conv_blocks_for(p.conv_elems);
  p.src_temporal = src.temporal, p.src_scales = src.scales, p.src_conv = src.conv,
  p.src_slots = src.slots_total;
  p.dst_temporal = dst.temporal, p.dst_scales = dst.scales, p.dst_conv = dst.conv,
  p.dst_slots = dst.slots_total;
  p.src_ids = src_ids, p.dst_ids = dst_ids;
  p.error_info = error_info;
  return p;
}

void check_geometry(const PoolGeometry& g, const Codec& c, const StatePoolView& ckpt,
                    const char* what) {
  if (g.L <= 0 || g.HV <= 0 || g.dv <= 0 || g.dk <= 0)
    fail("{}: pool geometry must be positive (L {}, HV {}, d_v {}, d_k {})", what, g.L, g.HV, g.dv,
         g.dk);
  if (g.dk > 256 || g.dv > 256)
    fail("{}: d_k and d_v up to 256 are supported (got {}, {})", what, g.dk, g.dv);
  if (g.L > 65535) fail("{}: at most 65535 layers per launch (got {})", what, g.L);
  if (c.has_scales() && !ckpt.scales)
    fail("{}: codec {} needs a scales buffer in the checkpoint pool", what, c.kind_name());
}

// The kernels move temporal values and scales in 8- and 16-byte accesses and bulk copies from
// each pool's base (cudaMalloc returns 256-byte aligned memory).
void check_alignment(const StatePoolView& v, const char* pool, const char* what) {
  for (const void* ptr : {v.temporal, v.scales})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      fail("{}: the {} pool's {} buffer is not 16-byte aligned", what, pool,
           ptr == v.temporal ? "temporal" : "scales");
}

template <typename ActiveT, Kind K, typename ScaleT, int VEC, int NCHUNK>
void launch_store_rows(const PoolGeometry& g, const CodecParams& p, int n, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n) * g.L * (g.HV + p.conv_blocks));
  if (g.dv <= 8 * kWarps)
    store_per_head_kernel<ActiveT, K, ScaleT, VEC, NCHUNK, 8><<<grid, kWarps * 32, 0, stream>>>(p);
  else
    store_per_head_kernel<ActiveT, K, ScaleT, VEC, NCHUNK, 16><<<grid, kWarps * 32, 0, stream>>>(p);
}

template <typename ActiveT, Kind K, typename ScaleT>
void launch_store_per_head(const PoolGeometry& g, const CodecParams& p, int n,
                           cudaStream_t stream) {
  if (g.dk % 4 == 0 && g.dk <= 128)
    launch_store_rows<ActiveT, K, ScaleT, 4, 1>(g, p, n, stream);
  else if (g.dk % 4 == 0)
    launch_store_rows<ActiveT, K, ScaleT, 4, 2>(g, p, n, stream);
  else if (g.dk <= 128)
    launch_store_rows<ActiveT, K, ScaleT, 1, 4>(g, p, n, stream);
  else
    launch_store_rows<ActiveT, K, ScaleT, 1, 8>(g, p, n, stream);
}

// Launches store kernel `kernel` (store_kernel_for's choice) for the template arguments.
template <typename ActiveT, Kind K, typename ScaleT>
void launch_store(const PoolGeometry& g, const CodecParams& p, int n, CheckpointKernel kernel,
                  cudaStream_t stream) {
  constexpr bool kScaled = K == Kind::int8 || K == Kind::fp8;
  switch (kernel) {
    case CheckpointKernel::store_staged_bf16:
      if constexpr (kScaled && std::is_same_v<ActiveT, __nv_bfloat16>) {
        const dim3 grid(static_cast<unsigned>(g.HV + p.conv_blocks), static_cast<unsigned>(g.L),
                        static_cast<unsigned>(n));
        store_staged_bf16_kernel<ScaleT, K><<<grid, kFastThreads, 0, stream>>>(p);
        return;
      }
      break;
    case CheckpointKernel::store_strips:
      if constexpr (kScaled) {
        // Rows per thread: 8, or 16 for d_v = 256.
        const int cols = strip_columns(g, sizeof(ActiveT) == 4);
        const dim3 grid(static_cast<unsigned>(g.HV * (g.dk / (8 * cols)) + p.conv_blocks),
                        static_cast<unsigned>(g.L), static_cast<unsigned>(n));
        if (cols == 8 && g.dv == 8 * kStripGroups)
          store_strips_kernel<ActiveT, ScaleT, K, kFastThreads, 8, 8>
              <<<grid, kFastThreads, 0, stream>>>(p);
        else if (cols == 8)
          store_strips_kernel<ActiveT, ScaleT, K, kFastThreads, 16, 8>
              <<<grid, kFastThreads, 0, stream>>>(p);
        else if (g.dv == 8 * kStripGroups)
          store_strips_kernel<ActiveT, ScaleT, K, kFastThreads, 8, 4>
              <<<grid, kFastThreads, 0, stream>>>(p);
        else
          store_strips_kernel<ActiveT, ScaleT, K, kFastThreads, 16, 4>
              <<<grid, kFastThreads, 0, stream>>>(p);
        return;
      }
      break;
    case CheckpointKernel::slot_copy:
      if constexpr (is_slot_copy<ActiveT, K>()) {
        launch_slot_copy<ActiveT, true>(g, p, n, stream);
        return;
      }
      break;
    case CheckpointKernel::store_per_head:
      launch_store_per_head<ActiveT, K, ScaleT>(g, p, n, stream);
      return;
    default:
      break;
  }
  fail("checkpoint_store: no {} kernel for these template arguments",
       checkpoint_kernel_name(kernel));
}

// Launches load kernel `kernel` (load_kernel_for's choice) for the template arguments.
template <typename ActiveT, Kind K, typename ScaleT>
void launch_load(const PoolGeometry& g, const CodecParams& p, int n, CheckpointKernel kernel,
                 cudaStream_t s) {
  switch (kernel) {
    case CheckpointKernel::slot_copy:
      if constexpr (is_slot_copy<ActiveT, K>()) {
        launch_slot_copy<ActiveT, false>(g, p, n, s);
        return;
      }
      break;
    case CheckpointKernel::load_rows: {
      const int rows_per_run = kFastThreads / (g.dk / 4) * kLoadPasses;
      const int runs = (g.dv + rows_per_run - 1) / rows_per_run;
      const dim3 grid(static_cast<unsigned>(g.HV * runs + p.conv_blocks),
                      static_cast<unsigned>(g.L), static_cast<unsigned>(n));
      load_rows_kernel<ActiveT, K, ScaleT><<<grid, kFastThreads, 0, s>>>(p, runs);
      return;
    }
    case CheckpointKernel::load_per_head: {
      const dim3 grid(static_cast<unsigned>(n) * g.L * (g.HV + p.conv_blocks));
      load_per_head_kernel<ActiveT, K, ScaleT><<<grid, kWarps * 32, 0, s>>>(p);
      return;
    }
    default:
      break;
  }
  fail("checkpoint_load: no {} kernel for these template arguments",
       checkpoint_kernel_name(kernel));
}

template <typename T>
struct TypeTag {
  using type = T;
};
template <Kind K>
struct KindTag {
  static constexpr Kind value = K;
};

// Turns the runtime choices of a launch (active dtype, codec kind, scale dtype) into template
// arguments, in one place for store and load: calls f(TypeTag<ActiveT>, KindTag<K>,
// TypeTag<ScaleT>), with ScaleT float for the codecs without scales.
template <typename F>
void dispatch(Dtype active_dtype, const Codec& c, F&& f) {
  auto with_active = [&](auto active) {
    auto with_kind = [&](auto kind) {
      constexpr Kind K = decltype(kind)::value;
      if constexpr (K == Kind::int8 || K == Kind::fp8) {
        if (c.scale_dtype == Dtype::bf16) return f(active, kind, TypeTag<__nv_bfloat16>{});
      }
      return f(active, kind, TypeTag<float>{});
    };
    switch (kind_of(c)) {
      case Kind::fp32:
        return with_kind(KindTag<Kind::fp32>{});
      case Kind::bf16:
        return with_kind(KindTag<Kind::bf16>{});
      case Kind::int8:
        return with_kind(KindTag<Kind::int8>{});
      case Kind::fp8:
        return with_kind(KindTag<Kind::fp8>{});
      case Kind::fp8_raw:
        return with_kind(KindTag<Kind::fp8_raw>{});
    }
  };
  if (active_dtype == Dtype::fp32)
    with_active(TypeTag<float>{});
  else
    with_active(TypeTag<__nv_bfloat16>{});
}

}  // namespace

CheckpointKernel checkpoint_store_variant(const PoolGeometry& g, Dtype active_dtype,
                                          const Codec& codec) {
  return store_kernel_for(g, active_dtype, kind_of(codec));
}

CheckpointKernel checkpoint_load_variant(const PoolGeometry& g, const Codec& codec,
                                         Dtype active_dtype) {
  return load_kernel_for(g, active_dtype, kind_of(codec));
}

const char* checkpoint_kernel_name(CheckpointKernel k) {
  switch (k) {
    case CheckpointKernel::store_staged_bf16:
      return "store_staged_bf16";
    case CheckpointKernel::store_strips:
      return "store_strips";
    case CheckpointKernel::store_per_head:
      return "store_per_head";
    case CheckpointKernel::slot_copy:
      return "slot_copy";
    case CheckpointKernel::load_rows:
      return "load_rows";
    case CheckpointKernel::load_per_head:
      return "load_per_head";
  }
  return "?";
}

void checkpoint_store(const PoolGeometry& g, const StatePoolView& active, Dtype active_dtype,
                      const StatePoolView& ckpt, const Codec& codec, const int32_t* active_slots,
                      const int32_t* ckpt_slots, int n, int32_t* error_info, cudaStream_t stream) {
  check_geometry(g, codec, ckpt, "checkpoint_store");
  if (n <= 0) return;
  if (n > 65535) fail("checkpoint_store: at most 65535 slots per launch (got {})", n);
  if (!active.temporal || !ckpt.temporal || !active_slots || !ckpt_slots)
    fail("checkpoint_store: a required device pointer is null");
  check_alignment(active, "active", "checkpoint_store");
  check_alignment(ckpt, "checkpoint", "checkpoint_store");
  const CodecParams p = make_params(g, active, ckpt, active_slots, ckpt_slots, error_info);
  const CheckpointKernel kernel = checkpoint_store_variant(g, active_dtype, codec);
  dispatch(active_dtype, codec, [&](auto active, auto kind, auto scale) {
    launch_store<typename decltype(active)::type, decltype(kind)::value,
                 typename decltype(scale)::type>(g, p, n, kernel, stream);
  });
  STATECHECK_CUDA_CHECK_LAUNCH("checkpoint_store");
}

void checkpoint_load(const PoolGeometry& g, const StatePoolView& ckpt, const Codec& codec,
                     const StatePoolView& active, Dtype active_dtype, const int32_t* ckpt_slots,
                     const int32_t* active_slots, int n, cudaStream_t stream) {
  check_geometry(g, codec, ckpt, "checkpoint_load");
  if (n <= 0) return;
  if (n > 65535) fail("checkpoint_load: at most 65535 slots per launch (got {})", n);
  if (!active.temporal || !ckpt.temporal || !active_slots || !ckpt_slots)
    fail("checkpoint_load: a required device pointer is null");
  check_alignment(active, "active", "checkpoint_load");
  check_alignment(ckpt, "checkpoint", "checkpoint_load");
  const CodecParams p = make_params(g, ckpt, active, ckpt_slots, active_slots, nullptr);
  const CheckpointKernel kernel = checkpoint_load_variant(g, codec, active_dtype);
  dispatch(active_dtype, codec, [&](auto active, auto kind, auto scale) {
    launch_load<typename decltype(active)::type, decltype(kind)::value,
                typename decltype(scale)::type>(g, p, n, kernel, stream);
  });
  STATECHECK_CUDA_CHECK_LAUNCH("checkpoint_load");
}

void check_store_error(int32_t* error_info, const PoolGeometry& g, cudaStream_t stream) {
  if (!error_info) return;
  int32_t host[4] = {0, 0, 0, 0};
  STATECHECK_CUDA_CHECK(
      cudaMemcpyAsync(host, error_info, sizeof host, cudaMemcpyDeviceToHost, stream));
  STATECHECK_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host[0] == 0) return;
  STATECHECK_CUDA_CHECK(cudaMemsetAsync(error_info, 0, sizeof host, stream));
  fail(
      "non-finite state value at layer {}, head {}, index [{}, {}] (d_v row, d_k column): the "
      "checkpoint "
      "store refused it",
      host[1], host[2], host[3] / g.dk, host[3] % g.dk);
}

double checkpoint_store_bytes(const PoolGeometry& g, Dtype active_dtype, const Codec& c, int n) {
  const double elems = static_cast<double>(n) * g.L * g.HV * g.dv * g.dk;
  const double scales = static_cast<double>(n) * g.L * g.HV * g.dk * c.scale_bytes();
  const double conv = 2.0 * 2.0 * static_cast<double>(n) * g.L * g.conv_elems;
  return elems * (dtype_bytes(active_dtype) + c.value_bytes()) + scales + conv + 8.0 * n;
}

double checkpoint_store_read_bytes(const PoolGeometry& g, Dtype active_dtype, int n) {
  const double elems = static_cast<double>(n) * g.L * g.HV * g.dv * g.dk;
  return elems * dtype_bytes(active_dtype) + 2.0 * n * g.L * g.conv_elems + 8.0 * n;
}

double checkpoint_load_bytes(const PoolGeometry& g, Dtype active_dtype, const Codec& c, int n) {
  return checkpoint_store_bytes(g, active_dtype, c, n);  // the same bytes, the other way
}

double checkpoint_load_read_bytes(const PoolGeometry& g, Dtype active_dtype, const Codec& c,
                                  int n) {
  // The store's written bytes, and the slot lists, which either direction reads.
  return checkpoint_store_bytes(g, active_dtype, c, n) -
         checkpoint_store_read_bytes(g, active_dtype, n) + 8.0 * n;
}

}  // namespace statecheck::cuda
