#include "core/cache/next_use_index.h"

#include <algorithm>

#include "core/util/error.h"

namespace statecheck {

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// One token into the running prefix hash: FNV-1a's offset and prime applied to the whole 32-bit
// token rather than to its four bytes, then a xorshift so that the high bits reach the low ones
// again. A quarter of the byte-wise multiplies: hashing prefixes is most of a replay's time under
// the offline policies. Only equality of prefixes matters (64-bit keys, collisions about n^2 /
// 2^65 for n prefixes).
inline uint64_t fnv_step(uint64_t h, int32_t token) {
  h = (h ^ static_cast<uint32_t>(token)) * kFnvPrime;
  return h ^ (h >> 29);
}

// A nonzero key of the prefix hash h at depth c (the depth is mixed in so that equal hashes of
// different lengths never collide; 0 is reserved for the empty prefix).
inline uint64_t make_key(uint64_t h, int64_t c) {
  uint64_t k = h ^ (static_cast<uint64_t>(c) * 0x9e3779b97f4a7c15ull);
  k ^= k >> 31;
  return k == 0 ? 1 : k;
}

// Calls emit(key) for every multiple c of g with c <= n, in order, with the key of tokens[0, c):
// one pass of the incremental hash. The index's entries, key() and grid_keys() all come from here.
template <class Emit>
void for_each_grid_key(const int32_t* tokens, int64_t n, int g, Emit emit) {
  uint64_t h = kFnvOffset;
  const int64_t last = n / g * g;
  for (int64_t i = 0; i < last; ++i) {
    h = fnv_step(h, tokens[i]);
    if ((i + 1) % g == 0) emit(make_key(h, i + 1));
  }
}

}  // namespace

NextUseIndex::NextUseIndex(size_t requests,
                           const std::function<std::vector<int32_t>(size_t)>& tokens_of,
                           int granularity)
    : g_(granularity), requests_(requests) {
  if (granularity < 1) fail("next-use index: granularity must be >= 1, got {}", granularity);
  for (size_t j = 0; j < requests; ++j) {
    const std::vector<int32_t> t = tokens_of(j);
    const int64_t usable = static_cast<int64_t>(t.size()) - 1;  // the engine matches len - 1
    matchable_.push_back(std::max<int64_t>(0, usable));
    for_each_grid_key(t.data(), usable, g_,
                      [&](uint64_t k) { entries_.emplace_back(k, static_cast<int64_t>(j)); });
  }
  std::sort(entries_.begin(), entries_.end());
}

uint64_t NextUseIndex::key(const int32_t* tokens, int64_t depth) const {
  uint64_t last = 0;
  for_each_grid_key(tokens, depth, g_, [&](uint64_t k) { last = k; });
  return last;
}

void NextUseIndex::grid_keys(const int32_t* tokens, int64_t depth,
                             std::vector<uint64_t>& out) const {
  out.clear();
  if (depth >= g_) out.reserve(static_cast<size_t>(depth / g_));
  for_each_grid_key(tokens, depth, g_, [&](uint64_t k) { out.push_back(k); });
}

int64_t NextUseIndex::next_use(uint64_t key, int64_t now) const {
  if (key == 0) return now + 1 < static_cast<int64_t>(requests_) ? now + 1 : kNever;
  auto it = std::upper_bound(entries_.begin(), entries_.end(), std::make_pair(key, now));
  if (it == entries_.end() || it->first != key) return kNever;
  return it->second;
}

int64_t NextUseIndex::uses_after(uint64_t key, int64_t now) const {
  if (key == 0) return std::max<int64_t>(0, static_cast<int64_t>(requests_) - (now + 1));
  const auto first = std::upper_bound(entries_.begin(), entries_.end(), std::make_pair(key, now));
  // A key's entries are few and contiguous: gallop to a bound of its end, then search within.
  const size_t begin = static_cast<size_t>(first - entries_.begin()), n = entries_.size();
  size_t lo = begin, hi = begin, step = 1;
  while (hi < n && entries_[hi].first == key) {
    lo = hi;
    hi = std::min(n, hi + step);
    step *= 2;
  }
  const auto last = std::upper_bound(entries_.begin() + static_cast<std::ptrdiff_t>(lo),
                                     entries_.begin() + static_cast<std::ptrdiff_t>(hi),
                                     std::make_pair(key, kNever));
  return static_cast<int64_t>(last - first);
}

bool NextUseIndex::used_by(uint64_t key, int64_t j) const {
  if (key == 0) return j >= 0 && j < static_cast<int64_t>(requests_);
  return std::binary_search(entries_.begin(), entries_.end(), std::make_pair(key, j));
}

}  // namespace statecheck
