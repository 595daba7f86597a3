#include "core/pools/slot_allocator.h"

#include "core/util/error.h"

namespace statecheck {

SlotAllocator::SlotAllocator(std::string name, int32_t size) : name_(std::move(name)), size_(size) {
  if (size < 0) fail("{}: size must be >= 0, got {}", name_, size);
  clear();
}

void SlotAllocator::clear() {
  free_.clear();
  is_free_.assign(static_cast<size_t>(size_) + 1, 0);
  for (int32_t s = 1; s <= size_; ++s) {
    free_.push_back(s);
    is_free_[s] = 1;
  }
}

int32_t SlotAllocator::alloc() {
  if (free_.empty()) return kNoSlot;
  const int32_t s = free_.front();
  free_.pop_front();
  is_free_[s] = 0;
  return s;
}

void SlotAllocator::check_range(int32_t slot, const char* what) const {
  if (slot == 0) fail("{}: {} slot 0, the reserved padding row", name_, what);
  if (slot < 1 || slot > size_) fail("{}: {} slot {} outside 1..{}", name_, what, slot, size_);
}

void SlotAllocator::free(int32_t slot) {
  check_range(slot, "cannot free");
  if (is_free_[slot]) fail("{}: double free of slot {}", name_, slot);
  is_free_[slot] = 1;
  free_.push_back(slot);
}

bool SlotAllocator::is_free(int32_t slot) const {
  check_range(slot, "cannot query");
  return is_free_[slot] != 0;
}

}  // namespace statecheck
