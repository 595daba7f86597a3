#include "core/memory/memory_budget.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace statecheck {

namespace {

// Bytes of one element of a floating-point state dtype; throws naming `field` otherwise.
size_t float_state_bytes(Dtype d, const char* field) {
  if (d != Dtype::fp32 && d != Dtype::bf16)
    fail("{}: dtype {} is not a floating-point state dtype (expected fp32 or bf16)", field,
         dtype_name(d));
  return dtype_bytes(d);
}

}  // namespace

SlotBytes active_slot_bytes(const ModelConfig& m, const StateDtypes& d) {
  const uint64_t L = static_cast<uint64_t>(m.linear_layer_count());
  SlotBytes s;
  s.temporal = L * static_cast<uint64_t>(m.value_heads_shard()) * m.head_v_dim * m.head_k_dim *
               float_state_bytes(d.temporal, "--temporal-dtype");
  s.conv = L * static_cast<uint64_t>(m.conv_dim_shard()) * static_cast<uint64_t>(m.conv_width - 1) *
           float_state_bytes(d.conv, "--conv-dtype");
  return s;
}

SlotBytes checkpoint_slot_bytes(const ModelConfig& m, const StateDtypes& d) {
  const uint64_t L = static_cast<uint64_t>(m.linear_layer_count());
  const uint64_t hv = static_cast<uint64_t>(m.value_heads_shard());
  SlotBytes s;
  s.temporal = L * hv * m.head_v_dim * m.head_k_dim;  // int8
  s.scale = L * hv * m.head_k_dim * float_state_bytes(d.scale, "--scale-dtype");
  s.conv = active_slot_bytes(m, d).conv;
  return s;
}

PoolBytes pool_bytes(int64_t slots, const SlotBytes& per_slot) {
  PoolBytes p;
  p.slots = slots;
  p.per_slot = per_slot;
  const uint64_t rows = static_cast<uint64_t>(slots) + 1;
  p.total.temporal = rows * per_slot.temporal;
  p.total.scale = rows * per_slot.scale;
  p.total.conv = rows * per_slot.conv;
  return p;
}

uint64_t kv_bytes_per_token(const ModelConfig& m, const StateDtypes& d) {
  const uint64_t layers = static_cast<uint64_t>(m.full_layer_count());
  const uint64_t b = float_state_bytes(d.kv, "KV dtype");
  if (m.full_attention.kind == FullAttentionSpec::Kind::mla)
    return layers *
           static_cast<uint64_t>(m.full_attention.kv_lora_rank + m.full_attention.rope_dim) * b;
  return layers * 2 * static_cast<uint64_t>(m.kv_heads_shard()) *
         static_cast<uint64_t>(m.full_attention.head_dim) * b;
}

Budget compute_budget(const ModelConfig& m, const StateDtypes& d, const BudgetInputs& in) {
  if (!(in.gpu_mem_gib > 0)) fail("--gpu-mem-gib must be > 0, got {}", in.gpu_mem_gib);
  if (!(in.mem_fraction > 0 && in.mem_fraction <= 1))
    fail("--mem-fraction must be in (0, 1], got {}", in.mem_fraction);
  if (!(in.mamba_full_memory_ratio > 0))
    fail("mamba_full_memory_ratio must be > 0, got {}", in.mamba_full_memory_ratio);
  if (in.active_slots < 0 || in.ckpt_slots < 0) fail("pool sizes must be >= 0");
  Budget b;
  b.kv_bytes_per_token = kv_bytes_per_token(m, d);
  if (b.kv_bytes_per_token == 0)
    fail(
        "memory budget: model '{}' has no full-attention layers (no KV cache), so its KV-token "
        "budget is not defined; the memory, capacity, firecount and replay experiments need a "
        "hybrid model",
        m.name);
  if (in.weights_gib < 0 && !m.weights_unknown.empty())
    fail(
        "memory budget: the weights of model '{}' are not known ({}); give --weights-gib (GiB "
        "per GPU)",
        m.name, m.weights_unknown);
  if (in.weights_gib < 0 && !(m.params_billion > 0))
    fail("memory budget: model '{}' states no parameter count; give --weights-gib (GiB per GPU)",
         m.name);
  b.weights_bytes = in.weights_gib >= 0 ? in.weights_gib * kGiB
                                        : m.params_billion * 1e9 * m.weight_bytes_per_param / m.tp;
  b.rest_bytes = in.gpu_mem_gib * kGiB * in.mem_fraction - b.weights_bytes - in.reserve_gib * kGiB;
  if (b.rest_bytes <= 0)
    fail(
        "memory budget: nothing left for caches ({:.2f} GiB x {} - weights {:.2f} GiB at TP {} - "
        "reserves {:.2f} GiB); a model served across several GPUs needs --tp N (or --weights-gib)",
        in.gpu_mem_gib, in.mem_fraction, b.weights_bytes / kGiB, m.tp, in.reserve_gib);
  const SlotBytes act = active_slot_bytes(m, d);
  const SlotBytes ck = checkpoint_slot_bytes(m, d);
  int64_t A = in.active_slots;
  if (A == 0) {
    const double r = in.mamba_full_memory_ratio;
    A = static_cast<int64_t>(
        std::floor(b.rest_bytes * r / (1.0 + r) / static_cast<double>(act.total())));
    b.active_from_ratio = true;
  }
  if (A < 1) fail("memory budget: the active pool gets {} slots (too little memory)", A);
  b.active = pool_bytes(A, act);
  b.checkpoint = pool_bytes(in.ckpt_slots, ck);
  if (in.ckpt_slots == 0) b.checkpoint.total = SlotBytes{};  // no pool at all
  const double engine_left =
      b.rest_bytes - static_cast<double>(A) * static_cast<double>(act.total());
  const double correct_left = b.rest_bytes - static_cast<double>(b.active.total.total()) -
                              static_cast<double>(b.checkpoint.total.total());
  b.kv_tokens_engine =
      engine_left > 0 ? static_cast<int64_t>(std::floor(engine_left / b.kv_bytes_per_token)) : 0;
  b.kv_tokens_correct =
      correct_left > 0 ? static_cast<int64_t>(std::floor(correct_left / b.kv_bytes_per_token)) : 0;
  if (b.kv_tokens_engine < 1)
    fail(
        "memory budget: model {} at TP {}: the active pool ({} slots x {} bytes = {:.2f} GiB) "
        "leaves no memory for the KV cache: memory for caches {:.2f} GiB ({:.2f} GiB x {} - "
        "weights {:.2f} GiB - reserves {:.2f} GiB), short by {:.2f} GiB plus {} bytes for one KV "
        "token; lower --active-slots or raise --gpu-mem-gib",
        m.name, m.tp, A, act.total(), static_cast<double>(A) * act.total() / kGiB,
        b.rest_bytes / kGiB, in.gpu_mem_gib, in.mem_fraction, b.weights_bytes / kGiB,
        in.reserve_gib, std::max(0.0, -engine_left) / kGiB, b.kv_bytes_per_token);
  return b;
}

Int8Split int8_split_at_equal_memory(int64_t bf16_active, const SlotBytes& act,
                                     const SlotBytes& ckpt) {
  if (bf16_active < 1) fail("int8 split: the single-pool run has {} active slots", bf16_active);
  Int8Split s;
  const uint64_t a = act.total(), c = ckpt.total();
  s.budget = (static_cast<uint64_t>(bf16_active) + 1) * a;
  if (s.budget < a + c) fail("int8 split: {} bytes hold no active and checkpoint slot", s.budget);
  s.active = static_cast<int64_t>((s.budget - a - c) / (a + 2 * c));
  if (s.active < 1)
    fail("int8 split: the state budget of {} active slots holds no int8 active pool", bf16_active);
  s.ckpt = 2 * s.active;
  s.bytes = (static_cast<uint64_t>(s.active) + 1) * a + (static_cast<uint64_t>(s.ckpt) + 1) * c;
  return s;
}

Int8Split int8_split_for_running(int64_t bf16_active, int64_t active_needed, const SlotBytes& act,
                                 const SlotBytes& ckpt) {
  if (active_needed < 1 || active_needed >= bf16_active)
    fail("int8 split: {} active slots needed, the single-pool run has {}", active_needed,
         bf16_active);
  Int8Split s;
  const uint64_t a = act.total(), c = ckpt.total();
  s.budget = (static_cast<uint64_t>(bf16_active) + 1) * a;
  s.active = active_needed;
  const uint64_t left = s.budget - (static_cast<uint64_t>(active_needed) + 1) * a;
  if (left < 2 * c) fail("int8 split: no memory left for checkpoint slots");
  s.ckpt = static_cast<int64_t>(left / c) - 1;
  s.bytes = (static_cast<uint64_t>(s.active) + 1) * a + (static_cast<uint64_t>(s.ckpt) + 1) * c;
  return s;
}

}  // namespace statecheck
