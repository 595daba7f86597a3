// Slot allocator of a state pool (docs/cache_model.md; SGLang
// python/sglang/srt/mem_cache/allocator/mamba.py, MambaSlotAllocator).
//
// A pool of N usable slots allocates N + 1 rows; row 0 is reserved (padding rows of a batch point
// at it), so the allocator hands out slots 1..N. The free list is first-in first-out like SGLang's
// (alloc takes from the front, free appends at the back), so slot numbers are reproducible.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace statecheck {

// "No slot": a node without a state (tombstone), a request without a tracking slot.
constexpr int32_t kNoSlot = -1;

class SlotAllocator {
 public:
  // `name` names the pool in error messages ("active pool", "checkpoint pool"); `size` = N >= 0.
  // Throws statecheck::Error when size < 0.
  SlotAllocator(std::string name, int32_t size);

  const std::string& name() const { return name_; }
  int32_t size() const { return size_; }  // N (usable slots)
  int32_t available() const { return static_cast<int32_t>(free_.size()); }

  // One free slot in 1..N, or kNoSlot when the pool is empty (the caller decides whether to evict
  // and retry; see StateCache). Never throws.
  int32_t alloc();

  // Returns `slot` to the pool. Throws statecheck::Error naming the pool and slot on slot 0 (the
  // reserved row), a slot outside 1..N and a double free.
  void free(int32_t slot);

  // True when `slot` (1..N) is on the free list. Throws on a slot outside 1..N.
  bool is_free(int32_t slot) const;

  // Every slot free again, in the initial order 1..N (a flush of the cache).
  void clear();

 private:
  void check_range(int32_t slot, const char* what) const;

  std::string name_;
  int32_t size_ = 0;
  std::deque<int32_t> free_;
  std::vector<uint8_t> is_free_;  // [N + 1], index = slot
};

}  // namespace statecheck
