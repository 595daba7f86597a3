// The state pools of the cache model (docs/cache_model.md; SGLang MambaPool in
// python/sglang/srt/mem_cache/memory_pool.py and MambaCheckpointPool in
// python/sglang/srt/mem_cache/mamba_checkpoint_pool.py).
//
// ActivePool: the kernel-facing pool of running requests, A usable slots + reserved slot 0, each
// holding temporal + conv state at the temporal dtype (fp32 or bf16). In single-pool (bf16) mode
// the radix cache's states are slots of this pool too.
// CheckpointPool: int8 mode only, C usable slots + slot 0, each holding int8 temporal values +
// per-(layer, head, key-channel) scales + the conv state untouched (docs/codecs.md).
//
// Payload layout (when `payload` is on; see core/cache/payload.h for the shape): active temporal
// [A + 1, L, HV, d_v, d_k] fp32 (bf16-rounded values when the temporal dtype is bf16), active conv
// [A + 1, conv_elems] bf16 bits; checkpoint values [C + 1, L, HV, d_v, d_k] int8, scales
// [C + 1, L, HV, d_k] (scale dtype), conv [C + 1, conv_elems] bf16 bits. Slot-major so that one
// slot is contiguous. With `payload` off the pools are slot bookkeeping only.
#pragma once

#include <cstdint>
#include <vector>

#include "core/codec/codec.h"
#include "core/pools/payload.h"
#include "core/pools/slot_allocator.h"

namespace statecheck {

class ActivePool {
 public:
  // `slots` = A >= 0. `temporal`: the temporal dtype, fp32 or bf16 (bf16: values stored rounded
  // to bf16); another dtype is an Error.
  ActivePool(int32_t slots, const PayloadShape& shape, Dtype temporal, bool payload);

  SlotAllocator& allocator() { return alloc_; }
  const SlotAllocator& allocator() const { return alloc_; }
  bool has_payload() const { return payload_; }
  Dtype temporal_dtype() const { return temporal_dtype_; }
  const PayloadShape& shape() const { return shape_; }

  // Payload rows of one slot (0..A); null without payload.
  float* temporal(int32_t slot);
  const float* temporal(int32_t slot) const;
  uint16_t* conv(int32_t slot);
  const uint16_t* conv(int32_t slot) const;

  // Writes the reference state of prefix hash `h` into `slot` (the state a request holds after
  // computing that prefix). No-op without payload.
  void write_reference(int32_t slot, uint64_t h);
  // Zeroes a slot (a request that starts from an empty state). No-op without payload.
  void clear_slot(int32_t slot);
  // dst <- src, temporal and conv (the single-pool copy-on-write and the no_buffer chunk copy).
  void copy(int32_t src, int32_t dst);

 private:
  SlotAllocator alloc_;
  PayloadShape shape_;
  Dtype temporal_dtype_ = Dtype::fp32;
  bool payload_ = false;
  std::vector<float> temporal_;
  std::vector<uint16_t> conv_;
};

class CheckpointPool {
 public:
  // `slots` = C >= 0; `scale` = the int8 scale dtype (SGLang: the temporal dtype).
  CheckpointPool(int32_t slots, const PayloadShape& shape, Dtype scale, bool payload);

  SlotAllocator& allocator() { return alloc_; }
  const SlotAllocator& allocator() const { return alloc_; }
  const Codec& codec() const { return codec_; }

  // Donate: quantize active slot `a` into checkpoint slot `c` (temporal int8 + scales, conv
  // copied). Throws statecheck::Error (naming layer, head and position) on a non-finite state, and
  // the checkpoint slot then holds nothing usable. No-op without payload.
  void store_from_active(const ActivePool& active, int32_t a, int32_t c);
  // Hit (copy-on-write): dequantize checkpoint slot `c` into active slot `a`; the values are then
  // cast to the active pool's dtype (bf16 rounding when the temporal dtype is bf16). No-op without
  // payload.
  void load_to_active(int32_t c, ActivePool& active, int32_t a) const;

 private:
  SlotAllocator alloc_;
  PayloadShape shape_;
  Codec codec_;
  bool payload_ = false;
  size_t scale_row_ = 0;  // bytes of scales per slot
  std::vector<uint8_t> values_;
  std::vector<uint8_t> scales_;
  std::vector<uint16_t> conv_;
};

}  // namespace statecheck
