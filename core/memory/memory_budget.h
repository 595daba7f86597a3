// Memory of the state pools and the KV-token budget (docs/cache_model.md sections 1 and 5; SGLang
// model_executor model_runner_kv_cache_mixin.py _handle_max_mamba_cache / _profile_available_bytes
// and mem_cache/mamba_checkpoint_pool.py estimate_mem_usage_bytes).
//
// Per GPU (TP shard), in bytes:
//   active slot      = temporal L_lin * HV_shard * d_v * d_k * sizeof(temporal)
//                    + conv     L_lin * conv_dim_shard * (W - 1) * sizeof(conv)
//   checkpoint slot  = int8 temporal L_lin * HV_shard * d_v * d_k
//                    + scales   L_lin * HV_shard * d_k * sizeof(scale)
//                    + conv     (as above)
//   a pool of N usable slots allocates N + 1 (slot 0 reserved).
//   KV per token     = MHA: full layers * 2 (K and V) * max(1, KV heads / TP) * head_dim *
//   sizeof(kv)
//                      MLA: full layers * (kv_lora_rank + rope_dim) * sizeof(kv) (replicated per
//                      rank)
// Budget: rest = device memory * mem_fraction_static - weights - other reserves (GiB, as SGLang's
// "GB"). The active pool size A, unless given, is SGLang's ratio split:
//   A = floor(rest * r / (1 + r) / active slot bytes), r = mamba_full_memory_ratio (0.9).
// KV tokens, engine accounting (SGLang): floor((rest - A * active slot) / KV per token): the slot 0
// row and the int8 checkpoint pool are not subtracted (the pool is only checked against free
// memory). Correct accounting: floor((rest - (A + 1) * active slot - (C + 1) * checkpoint slot) /
// KV per token). Engines label GiB as "GB"; this module reports bytes and GiB (2^30) explicitly.
#pragma once

#include <cstdint>
#include <string>

#include "core/codec/codec.h"
#include "core/dtype/dtype.h"
#include "core/model/model_config.h"

namespace statecheck {

constexpr double kGiB = 1073741824.0;  // 2^30 bytes

// The dtypes of what a serving engine keeps per request. The active temporal state, the conv
// state and the KV cache are floating-point (fp32 or bf16); the int8 checkpoint pool's scales are
// bf16 or fp32. The budget functions throw statecheck::Error naming the field for any other.
struct StateDtypes {
  Dtype temporal = Dtype::fp32;  // active temporal state
  Dtype scale = Dtype::fp32;     // int8 checkpoint scales
  Dtype conv = Dtype::bf16;      // conv state (never quantized)
  Dtype kv = Dtype::bf16;        // full-attention KV cache
};

struct SlotBytes {
  uint64_t temporal = 0;
  uint64_t scale = 0;
  uint64_t conv = 0;
  uint64_t total() const { return temporal + scale + conv; }
};

// One slot of the active pool / of the int8 checkpoint pool for model `m` (already TP-sharded).
SlotBytes active_slot_bytes(const ModelConfig& m, const StateDtypes& d);
SlotBytes checkpoint_slot_bytes(const ModelConfig& m, const StateDtypes& d);

// A pool of `slots` usable slots: (slots + 1) rows of `per_slot`.
struct PoolBytes {
  int64_t slots = 0;
  SlotBytes per_slot;
  SlotBytes total;
};
PoolBytes pool_bytes(int64_t slots, const SlotBytes& per_slot);

// KV-cache bytes per token per GPU (see the formulas above).
uint64_t kv_bytes_per_token(const ModelConfig& m, const StateDtypes& d);

struct BudgetInputs {
  double gpu_mem_gib = 141e9 / kGiB;  // device memory (an H200: 141 GB = 131.3 GiB)
  double mem_fraction = 0.88;         // mem_fraction_static
  double weights_gib = -1.0;          // < 0: params_billion * 1e9 * weight_bytes_per_param / TP
  double reserve_gib = 0.0;           // other reserves (activations, graphs); 0 by default
  double mamba_full_memory_ratio = 0.9;
  int64_t active_slots = 0;  // 0: from the ratio split
  int64_t ckpt_slots = 0;    // int8 checkpoint pool C (0: none)
};

struct Budget {
  double rest_bytes = 0.0;  // memory left for caches (bytes)
  double weights_bytes = 0.0;
  bool active_from_ratio = false;
  PoolBytes active;
  PoolBytes checkpoint;  // slots 0 when there is no checkpoint pool
  uint64_t kv_bytes_per_token = 0;
  int64_t kv_tokens_engine = 0;   // SGLang's max_total_num_tokens
  int64_t kv_tokens_correct = 0;  // with slot 0 and the checkpoint pool subtracted
};

// Weights per GPU: in.weights_gib when >= 0, else params_billion * 1e9 * weight_bytes_per_param /
// TP. Throws statecheck::Error naming the option when the inputs are out of range, when the
// weights are not known (weights_unknown set, or no parameter count) and --weights-gib is not
// given, when nothing is left for the caches (rest <= 0, A < 1, or no KV token fits: the message
// shows the memory for caches, the pool's size and the shortfall), or when the model has no
// full-attention layers (no KV cache: the KV-token budget is not defined).
Budget compute_budget(const ModelConfig& m, const StateDtypes& d, const BudgetInputs& in);

// int8 mode at the memory of a single-pool run with `bf16_active` usable active slots: the same
// state bytes ((A_bf16 + 1) active slots) hold an active pool A and a checkpoint pool C = 2A
// (SGLang's default int8_mamba_ckpt_size): A = floor(((A_bf16 + 1) act - act - ckpt) / (act + 2
// ckpt)).
struct Int8Split {
  int64_t active = 0;
  int64_t ckpt = 0;
  uint64_t bytes = 0;   // (A + 1) act + (C + 1) ckpt
  uint64_t budget = 0;  // (A_bf16 + 1) act
};
Int8Split int8_split_at_equal_memory(int64_t bf16_active, const SlotBytes& act,
                                     const SlotBytes& ckpt);

// int8 mode at the memory of a single-pool run with `bf16_active` slots when the running cap is
// fixed: the active pool gets exactly `active_needed` slots (the running requests' live and
// tracking slots) and the checkpoint pool the rest: C = floor(((A_bf16 + 1) act - (A + 1) act) /
// ckpt) - 1. Throws statecheck::Error when nothing is left for checkpoints.
Int8Split int8_split_for_running(int64_t bf16_active, int64_t active_needed, const SlotBytes& act,
                                 const SlotBytes& ckpt);

}  // namespace statecheck
