// The device-side parameters of a launch over a state pool (gated_delta_pool.h), shared by the
// recurrent kernels (kernels/gated_delta/) and the chunked prefill (kernels/chunked_delta/): the
// launch arguments as typed device pointers, and the shape and pointer checks both launchers make.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include <cuda_bf16.h>

#include "core/util/error.h"
#include "kernels/gated_delta/gated_delta_pool.h"

namespace statecheck::cuda {

struct PoolParams {
  int H, HV, dk, dv;
  bool qk_l2norm;
  float scale;  // the readout scale (d_k^-1/2 unless the launch gives one)
  void* pool;
  const int32_t* slot_ids;
  const int32_t* cu;
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const float* g;
  const float* beta;
  __nv_bfloat16* o;
};

// The shape checks every pool launch makes, before any device work. Throws statecheck::Error,
// prefixed with `who`, when H, HV, d_k or d_v is not positive, HV % H != 0 or num_seqs < 0.
inline void check_pool_shape(const GatedDeltaPoolArgs& a, const char* who) {
  if (a.H <= 0 || a.HV <= 0 || a.dk <= 0 || a.dv <= 0)
    fail("{}: H, HV, d_k, d_v must be positive (got {}, {}, {}, {})", who, a.H, a.HV, a.dk, a.dv);
  if (a.HV % a.H != 0) fail("{}: HV ({}) is not a multiple of H ({})", who, a.HV, a.H);
  if (a.num_seqs < 0) fail("{}: num_seqs = {}", who, a.num_seqs);
}

// The parameters of launch `a`. Throws statecheck::Error, prefixed with `who`, when a required
// pointer is null (named) or the state pool is not 16-byte aligned (the kernels move state rows
// in 16-byte vectors). Shapes are the caller's to check.
inline PoolParams pool_params(const GatedDeltaPoolArgs& a, const char* who) {
  const std::pair<const void*, const char*> required[] = {{a.state_pool, "state_pool"},
                                                          {a.slot_ids, "slot_ids"},
                                                          {a.cu_seqlens, "cu_seqlens"},
                                                          {a.q, "q"},
                                                          {a.k, "k"},
                                                          {a.v, "v"},
                                                          {a.g, "g"},
                                                          {a.beta, "beta"}};
  for (const auto& [pointer, name] : required)
    if (!pointer) fail("{}: {} is null (a required device pointer)", who, name);
  if (reinterpret_cast<uintptr_t>(a.state_pool) % 16 != 0)
    fail("{}: state_pool is not 16-byte aligned (the kernels move state rows in 16-byte vectors)",
         who);
  PoolParams p;
  p.H = a.H, p.HV = a.HV, p.dk = a.dk, p.dv = a.dv;
  p.qk_l2norm = a.qk_l2norm;
  p.scale =
      a.scale != 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.dk)));
  p.pool = a.state_pool;
  p.slot_ids = a.slot_ids;
  p.cu = a.cu_seqlens;
  p.q = reinterpret_cast<const __nv_bfloat16*>(a.q);
  p.k = reinterpret_cast<const __nv_bfloat16*>(a.k);
  p.v = reinterpret_cast<const __nv_bfloat16*>(a.v);
  p.g = a.g;
  p.beta = a.beta;
  p.o = reinterpret_cast<__nv_bfloat16*>(a.o);
  return p;
}

}  // namespace statecheck::cuda
