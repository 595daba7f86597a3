// The next-use index of the offline bound `belady` (docs/cache_policies.md): for a workload known
// in advance, when a cached prefix is next used.
//
// A prefix tokens[0, d) counts as used by request j when j's matchable tokens tokens_j[0, len_j -
// 1) start with tokens[0, c), c = floor(d / G) * G and G the chunk granularity Cg: the index holds,
// for every request j and every multiple c of G with G <= c <= len_j - 1, the pair (key of
// tokens_j[0, c), j). Under extra_buffer every cached state sits on the Cg grid (tracked points,
// branching points, decode tracks at multiples of the track interval), so the key is exact there;
// an off-grid state (no_buffer chunk and sequence ends) is keyed by its grid floor, and a prefix
// shorter than G by the empty prefix, which every later request uses.
//
// Built in O(N log N) for N (key, request) pairs: one pass of an incremental hash (FNV-1a per
// token) over every request's tokens, then a sort. next_use is a binary search (O(log N)).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace statecheck {

class NextUseIndex {
 public:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  // `requests` requests in submission order (engine ids 0 .. requests - 1); tokens_of(i) returns
  // request i's prompt. granularity G >= 1. Throws statecheck::Error on G < 1.
  NextUseIndex(size_t requests, const std::function<std::vector<int32_t>(size_t)>& tokens_of,
               int granularity);

  // Key of the prefix tokens[0, depth) (see the file comment); 0 for depth < G (the empty prefix).
  uint64_t key(const int32_t* tokens, int64_t depth) const;
  // The keys of every grid prefix of tokens[0, depth): out[i] = key of tokens[0, (i + 1) G) for
  // (i + 1) G <= depth (out is replaced; empty for depth < G). out.back() == key(tokens, depth).
  // One pass of the hash, as key() makes.
  void grid_keys(const int32_t* tokens, int64_t depth, std::vector<uint64_t>& out) const;
  // The first request id > now that uses the prefix of `key`; kNever when none does. Key 0 (the
  // empty prefix): now + 1 while requests remain.
  int64_t next_use(uint64_t key, int64_t now) const;
  // How many requests with id > now use the prefix of `key` (future-count's score); key 0: every
  // request after now. O(log N).
  int64_t uses_after(uint64_t key, int64_t now) const;
  // Whether request `j` uses the prefix of `key` (key 0: every request). O(log N).
  bool used_by(uint64_t key, int64_t j) const;
  // The first request id > now that uses the prefix of `key` and is not `skip`ped; kNever when
  // none is left. At most `limit` uses are tested: past them the next use is returned untested (an
  // earlier next use than the true one, never a later one). Key 0: as next_use.
  template <class Skip>
  int64_t next_use_unless(uint64_t key, int64_t now, Skip skip, int limit) const {
    if (key == 0) return next_use(key, now);
    auto it = std::upper_bound(entries_.begin(), entries_.end(), std::make_pair(key, now));
    for (int tested = 0; it != entries_.end() && it->first == key; ++it, ++tested)
      if (tested == limit || !skip(it->second)) return it->second;
    return kNever;
  }

  // Tokens request j can match (its prompt length - 1; the engine matches len - 1), 0 for j out
  // of range.
  int64_t matchable(int64_t j) const {
    return j >= 0 && j < static_cast<int64_t>(matchable_.size())
               ? matchable_[static_cast<size_t>(j)]
               : 0;
  }

  int granularity() const { return g_; }
  size_t requests() const { return requests_; }
  size_t entries() const { return entries_.size(); }

 private:
  int g_ = 64;
  size_t requests_ = 0;
  std::vector<std::pair<uint64_t, int64_t>> entries_;  // (key, request id), sorted
  std::vector<int64_t> matchable_;                     // [request id] -> len - 1
};

}  // namespace statecheck
