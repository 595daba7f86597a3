#include "core/pools/state_pool.h"

#include <algorithm>
#include <cstring>

#include "core/dtype/bf16.h"

namespace statecheck {

ActivePool::ActivePool(int32_t slots, const PayloadShape& shape, Dtype temporal, bool payload)
    : alloc_("active pool", slots), shape_(shape), temporal_dtype_(temporal), payload_(payload) {
  if (temporal != Dtype::fp32 && temporal != Dtype::bf16)
    fail("active pool: temporal dtype {} is not fp32 or bf16", dtype_name(temporal));
  if (payload_) {
    temporal_.assign((static_cast<size_t>(slots) + 1) * shape_.temporal_elems(), 0.0f);
    conv_.assign((static_cast<size_t>(slots) + 1) * shape_.conv_elems, 0);
  }
}

float* ActivePool::temporal(int32_t slot) {
  return payload_ ? temporal_.data() + static_cast<size_t>(slot) * shape_.temporal_elems()
                  : nullptr;
}
const float* ActivePool::temporal(int32_t slot) const {
  return payload_ ? temporal_.data() + static_cast<size_t>(slot) * shape_.temporal_elems()
                  : nullptr;
}
uint16_t* ActivePool::conv(int32_t slot) {
  return payload_ ? conv_.data() + static_cast<size_t>(slot) * shape_.conv_elems : nullptr;
}
const uint16_t* ActivePool::conv(int32_t slot) const {
  return payload_ ? conv_.data() + static_cast<size_t>(slot) * shape_.conv_elems : nullptr;
}

void ActivePool::write_reference(int32_t slot, uint64_t h) {
  if (payload_) reference_state(h, shape_, temporal_dtype_, temporal(slot), conv(slot));
}

void ActivePool::clear_slot(int32_t slot) {
  if (!payload_) return;
  std::fill_n(temporal(slot), shape_.temporal_elems(), 0.0f);
  std::fill_n(conv(slot), shape_.conv_elems, uint16_t{0});
}

void ActivePool::copy(int32_t src, int32_t dst) {
  if (!payload_) return;
  std::memcpy(temporal(dst), temporal(src), shape_.temporal_elems() * sizeof(float));
  std::memcpy(conv(dst), conv(src), shape_.conv_elems * sizeof(uint16_t));
}

CheckpointPool::CheckpointPool(int32_t slots, const PayloadShape& shape, Dtype scale, bool payload)
    : alloc_("checkpoint pool", slots), shape_(shape), payload_(payload) {
  codec_.kind = CodecKind::int8;
  codec_.scale_dtype = scale;
  const size_t heads = static_cast<size_t>(shape_.temporal.layers) * shape_.temporal.heads;
  scale_row_ = heads * shape_.temporal.dk * codec_.scale_bytes();
  if (payload_) {
    values_.assign((static_cast<size_t>(slots) + 1) * shape_.temporal_elems(), 0);
    scales_.assign((static_cast<size_t>(slots) + 1) * scale_row_, 0);
    conv_.assign((static_cast<size_t>(slots) + 1) * shape_.conv_elems, 0);
  }
}

void CheckpointPool::store_from_active(const ActivePool& active, int32_t a, int32_t c) {
  if (!payload_) return;
  const StateShape& s = shape_.temporal;
  const float* src = active.temporal(a);
  uint8_t* values = values_.data() + static_cast<size_t>(c) * shape_.temporal_elems();
  uint8_t* scales = scales_.data() + static_cast<size_t>(c) * scale_row_;
  for (int l = 0; l < s.layers; ++l)
    for (int h = 0; h < s.heads; ++h) {
      const size_t head = static_cast<size_t>(l) * s.heads + h;
      encode_head(codec_, src + head * s.head_size(), s.dv, s.dk, values + head * s.head_size(),
                  scales + head * s.dk * codec_.scale_bytes(), {l, h});
    }
  std::memcpy(conv_.data() + static_cast<size_t>(c) * shape_.conv_elems, active.conv(a),
              shape_.conv_elems * sizeof(uint16_t));
}

void CheckpointPool::load_to_active(int32_t c, ActivePool& active, int32_t a) const {
  if (!payload_) return;
  const StateShape& s = shape_.temporal;
  float* dst = active.temporal(a);
  const uint8_t* values = values_.data() + static_cast<size_t>(c) * shape_.temporal_elems();
  const uint8_t* scales = scales_.data() + static_cast<size_t>(c) * scale_row_;
  const size_t heads = static_cast<size_t>(s.layers) * s.heads;
  for (size_t head = 0; head < heads; ++head)
    decode_head(codec_, values + head * s.head_size(), scales + head * s.dk * codec_.scale_bytes(),
                s.dv, s.dk, dst + head * s.head_size());
  if (active.temporal_dtype() == Dtype::bf16)
    for (size_t e = 0; e < shape_.temporal_elems(); ++e) dst[e] = round_to_bf16(dst[e]);
  std::memcpy(active.conv(a), conv_.data() + static_cast<size_t>(c) * shape_.conv_elems,
              shape_.conv_elems * sizeof(uint16_t));
}

}  // namespace statecheck
