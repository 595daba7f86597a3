#include "core/cache/radix_tree.h"

#include <algorithm>

#include "core/util/error.h"

namespace statecheck {

namespace {

inline bool uses_tree_lru(const EvictionPolicy* p) {
  return p == nullptr || p->kind() == PolicyKind::lru;
}

inline uint64_t child_key(int32_t parent, int32_t token) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) |
         static_cast<uint32_t>(token);
}

// Length of the common prefix of a[0, na) and b[0, nb).
inline int64_t common_prefix(const int32_t* a, int64_t na, const int32_t* b, int64_t nb) {
  const int64_t n = std::min(na, nb);
  int64_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

RadixTree::RadixTree(KvPool& kv, SlotAllocator& states, int chunk_granularity, int page_size)
    : kv_(kv), states_(states), cg_(chunk_granularity), page_(page_size) {
  if (chunk_granularity <= 0)
    fail("radix tree: chunk granularity must be > 0, got {}", chunk_granularity);
  if (page_size <= 0) fail("radix tree: page size must be > 0, got {}", page_size);
  if (std::max(cg_, page_) % std::min(cg_, page_) != 0)
    fail("radix tree: chunk granularity {} and page size {} must divide one another", cg_, page_);
  nodes_.emplace_back();
  RadixNode& root = nodes_[kRoot];
  root.live = true;
  root.full_lock = 1;  // the root is always locked and in no list
  root.state_lock = 1;
  root.own_locks = 1;
  live_nodes_ = 1;
}

// ---- node storage -------------------------------------------------------------------------------

int32_t RadixTree::new_node() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    nodes_[id] = RadixNode();
  } else {
    id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[id].live = true;
  ++live_nodes_;
  return id;
}

void RadixTree::delete_node(int32_t id) {
  RadixNode& n = nodes_[id];
  erase_child(n.parent, n.key.data());
  --nodes_[n.parent].num_children;
  n.live = false;
  n.key.clear();
  n.key.shrink_to_fit();
  free_ids_.push_back(id);
  --live_nodes_;
}

int32_t RadixTree::find_child(int32_t parent, const int32_t* first) const {
  if (page_ == 1) {
    auto it = children_.find(child_key(parent, first[0]));
    return it == children_.end() ? -1 : it->second;
  }
  auto it = paged_children_.find({parent, std::vector<int32_t>(first, first + page_)});
  return it == paged_children_.end() ? -1 : it->second;
}

void RadixTree::set_child(int32_t parent, const int32_t* first, int32_t child) {
  if (page_ == 1)
    children_[child_key(parent, first[0])] = child;
  else
    paged_children_[{parent, std::vector<int32_t>(first, first + page_)}] = child;
}

void RadixTree::erase_child(int32_t parent, const int32_t* first) {
  if (page_ == 1)
    children_.erase(child_key(parent, first[0]));
  else
    paged_children_.erase({parent, std::vector<int32_t>(first, first + page_)});
}

int64_t RadixTree::common_pages(const int32_t* a, int64_t na, const int32_t* b, int64_t nb) const {
  const int64_t p = common_prefix(a, na, b, nb);
  return page_ == 1 ? p : p / page_ * page_;
}

// ---- LRU lists ----------------------------------------------------------------------------------

void RadixTree::list_push_front(List& l, int32_t id) {
  LruLinks& x = nodes_[id].*l.links;
  x.prev = -1;
  x.next = l.head;
  x.in = true;
  if (l.head >= 0) (nodes_[l.head].*l.links).prev = id;
  l.head = id;
  if (l.tail < 0) l.tail = id;
  ++l.size;
}

void RadixTree::list_remove(List& l, int32_t id) {
  LruLinks& x = nodes_[id].*l.links;
  if (x.prev >= 0)
    (nodes_[x.prev].*l.links).next = x.next;
  else
    l.head = x.next;
  if (x.next >= 0)
    (nodes_[x.next].*l.links).prev = x.prev;
  else
    l.tail = x.prev;
  x = LruLinks();
  --l.size;
}

void RadixTree::touch_full(int32_t id) {
  if (nodes_[id].full.in) list_remove(full_, id);
  nodes_[id].full_tick = ++tick_;
  list_push_front(full_, id);
}

void RadixTree::touch_state(int32_t id) {
  if (nodes_[id].stat.in) list_remove(state_, id);
  nodes_[id].state_tick = ++tick_;
  list_push_front(state_, id);
}

// SGLang LRUList.get_prev_leaf_no_lock: from `from` (exclusive; -1 = from the tail) towards the
// head, the first node that is unlocked and has no children.
int32_t RadixTree::full_lru_leaf_unlocked(int32_t from) const {
  int32_t x = from < 0 ? full_.tail : nodes_[from].full.prev;
  while (x >= 0 && (nodes_[x].full_lock > 0 || nodes_[x].num_children > 0)) x = nodes_[x].full.prev;
  return x;
}

// SGLang LRUList.get_prev_no_lock on the state list.
int32_t RadixTree::state_lru_unlocked(int32_t from) const {
  int32_t x = from < 0 ? state_.tail : nodes_[from].stat.prev;
  while (x >= 0 && nodes_[x].state_lock > 0) x = nodes_[x].stat.prev;
  return x;
}

// ---- split / match / insert ---------------------------------------------------------------------

// SGLang _split_node: the new parent takes key[0, p), no state, the child's full lock and state
// lock 0; the child keeps key[p, ..) and its state. Full list: the new node, then the child, move
// to the most recent end (the child more recent); a child holding a state also moves to the most
// recent end of the state list (SGLang re-inserts it there: mamba_lru_list.insert_mru(child)).
int32_t RadixTree::split(int32_t child, int64_t p) {
  const int32_t nid = new_node();  // may reallocate nodes_: take references afterwards
  RadixNode& c = nodes_[child];
  RadixNode& n = nodes_[nid];
  n.parent = c.parent;
  n.key.assign(c.key.begin(), c.key.begin() + p);
  n.state = kNoSlot;
  n.full_lock = c.full_lock;
  n.state_lock = 0;
  n.own_locks = 0;
  n.num_children = 1;
  c.key.erase(c.key.begin(), c.key.begin() + p);
  c.parent = nid;
  set_child(n.parent, n.key.data(), nid);
  set_child(nid, c.key.data(), child);
  list_remove(full_, child);
  touch_full(nid);
  touch_full(child);
  if (nodes_[child].state != kNoSlot) touch_state(child);
  ++counters_.splits;
  ++counters_.tombstones_created;
  return nid;
}

RadixMatch RadixTree::match(const int32_t* tokens, int64_t n, bool every_node_has_state) {
  ++counters_.matches;
  RadixMatch r;
  n = n / page_ * page_;  // whole pages only (SGLang page-aligns the match key)
  if (n <= 0) return r;
  int32_t node = kRoot;
  int64_t pos = 0;
  int64_t best_len = 0;
  int32_t best = kRoot;
  while (pos < n) {
    const int32_t child = find_child(node, tokens + pos);
    if (child < 0) break;
    if (every_node_has_state || nodes_[node].state != kNoSlot) {
      best_len = pos;
      best = node;
    }
    const RadixNode& c = nodes_[child];
    const int64_t klen = static_cast<int64_t>(c.key.size());
    const int64_t p = common_pages(c.key.data(), klen, tokens + pos, n - pos);
    if (p < klen) {
      node = split(child, p);
      pos += p;
      break;
    }
    pos += p;
    node = child;
  }
  if (every_node_has_state || nodes_[node].state != kNoSlot) {
    best_len = pos;
    best = node;
  }
  // LRU refresh: the hit node and its ancestors, the hit node most recent (SGLang
  // reset_node_and_parents_mru); in the state list the hit node alone (docs/cache_model.md;
  // a split on the way has already refreshed its child there).
  if (best != kRoot) {
    int32_t d = 0;
    for (int32_t x = best; x != kRoot; x = nodes_[x].parent) ++d;
    tick_ += static_cast<uint64_t>(d);
    uint64_t t = tick_;
    // Walk up, pushing each ancestor behind the previous one: rebuild by removing the path and
    // pushing it root-side first so that the hit ends up at the head.
    std::vector<int32_t> path;
    path.reserve(static_cast<size_t>(d));
    for (int32_t x = best; x != kRoot; x = nodes_[x].parent) path.push_back(x);
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      list_remove(full_, *it);
      list_push_front(full_, *it);
    }
    for (int32_t x : path) nodes_[x].full_tick = t--;
    if (nodes_[best].state != kNoSlot) {
      touch_state(best);
      if (policy_) policy_->on_hit(*this, best);
    }
  }
  r.hit_len = best_len;
  r.hit_node = best;
  r.matched_len = pos;
  if (pos > best_len) {
    const int64_t grid = std::max(cg_, page_);  // lcm(Cg, P): one divides the other
    const int64_t aligned = pos / grid * grid;
    r.branching_len = aligned > 0 ? aligned : -1;
  }
  return r;
}

RadixInsert RadixTree::insert(const int32_t* tokens, int64_t n, int32_t state,
                              int64_t prev_prefix_len) {
  if (n <= 0) fail("radix insert: empty key (the caller must not insert an empty node)");
  if (prev_prefix_len > n)
    fail("radix insert: locked prefix {} longer than the key {}", prev_prefix_len, n);
  if (state < 1 || state > states_.size())
    fail("radix insert: state slot {} not in the {}", state, states_.name());
  if (n % page_ != 0)
    fail("radix insert: a state at depth {} is off the page grid (page size {})", n, page_);
  RadixInsert r;
  int32_t node = kRoot;
  int64_t pos = 0;
  while (pos < n) {
    const int32_t child = find_child(node, tokens + pos);
    if (child < 0) break;
    node = child;
    touch_full(node);
    if (nodes_[node].state != kNoSlot && (!policy_ || policy_->refresh_walked_states_on_insert()))
      touch_state(node);
    const int64_t klen = static_cast<int64_t>(nodes_[node].key.size());
    const int64_t p = common_pages(nodes_[node].key.data(), klen, tokens + pos, n - pos);
    if (prev_prefix_len < pos + p) r.kv_freed += (pos + p) - std::max(prev_prefix_len, pos);
    pos += p;
    if (p < klen) node = split(node, p);
  }
  if (r.kv_freed > 0) kv_.free(r.kv_freed);
  r.prefix_len = pos;
  if (pos < n) {
    const int32_t leaf = new_node();
    RadixNode& l = nodes_[leaf];
    l.parent = node;
    l.key.assign(tokens + pos, tokens + n);
    l.state = state;
    set_child(node, l.key.data(), leaf);
    ++nodes_[node].num_children;
    touch_full(leaf);
    touch_state(leaf);
    full_evictable_ += n - pos;
    ++state_evictable_;
    r.node = leaf;
    if (policy_) policy_->on_state_added(*this, leaf, tokens, n);
  } else if (nodes_[node].state == kNoSlot) {
    RadixNode& t = nodes_[node];
    t.state = state;
    t.state_lock = t.own_locks;  // locks taken on the tombstone now protect its state
    touch_full(node);
    touch_state(node);
    ++(t.state_lock == 0 ? state_evictable_ : state_protected_);
    r.node = node;
    if (policy_) policy_->on_state_added(*this, node, tokens, n);
  } else {
    r.state_exists = true;
    touch_full(node);
    if (!policy_ || policy_->refresh_walked_states_on_insert()) touch_state(node);
    r.node = node;
  }
  return r;
}

// ---- locks --------------------------------------------------------------------------------------

void RadixTree::lock(int32_t node) {
  RadixNode& n0 = nodes_.at(static_cast<size_t>(node));
  if (!n0.live) fail("radix lock: node {} is not in the tree", node);
  if (node == kRoot) return;
  if (n0.state != kNoSlot) {
    if (n0.state_lock == 0) {
      --state_evictable_;
      ++state_protected_;
    }
    ++n0.state_lock;
  }
  ++n0.own_locks;
  for (int32_t x = node; x != kRoot; x = nodes_[x].parent) {
    RadixNode& n = nodes_[x];
    if (n.full_lock == 0) {
      full_evictable_ -= static_cast<int64_t>(n.key.size());
      full_protected_ += static_cast<int64_t>(n.key.size());
    }
    ++n.full_lock;
  }
}

void RadixTree::unlock(int32_t node) {
  RadixNode& n0 = nodes_.at(static_cast<size_t>(node));
  if (!n0.live) fail("radix unlock: node {} is not in the tree", node);
  if (node == kRoot) return;
  if (n0.own_locks <= 0) fail("radix unlock: node {} is not locked", node);
  if (n0.state != kNoSlot) {
    if (n0.state_lock <= 0)
      fail("radix unlock: node {} holds state slot {} with state lock 0", node, n0.state);
    if (n0.state_lock == 1) {
      ++state_evictable_;
      --state_protected_;
    }
    --n0.state_lock;
  }
  --n0.own_locks;
  for (int32_t x = node; x != kRoot; x = nodes_[x].parent) {
    RadixNode& n = nodes_[x];
    if (n.full_lock <= 0) fail("radix unlock: node {} has full lock 0", x);
    if (n.full_lock == 1) {
      full_evictable_ += static_cast<int64_t>(n.key.size());
      full_protected_ -= static_cast<int64_t>(n.key.size());
    }
    --n.full_lock;
  }
}

// ---- eviction -----------------------------------------------------------------------------------

bool RadixTree::swept_tombstone(int32_t id, int32_t children) const {
  const RadixNode& n = nodes_[id];
  return id != kRoot && n.state == kNoSlot && n.num_children == children && n.full_lock == 0;
}

int64_t RadixTree::eviction_tokens(int32_t leaf) const {
  int64_t tokens = static_cast<int64_t>(nodes_[leaf].key.size());
  for (int32_t a = nodes_[leaf].parent; swept_tombstone(a, 1); a = nodes_[a].parent)
    tokens += static_cast<int64_t>(nodes_[a].key.size());
  return tokens;
}

// SGLang _evict_leaf_node + _iteratively_delete_tombstone_leaf.
int64_t RadixTree::evict_leaf(int32_t x, int32_t* survivor, int64_t* nodes_deleted) {
  RadixNode& n = nodes_[x];
  if (n.full_lock != 0 || n.state_lock != 0)
    fail("radix evict: leaf {} is locked (full {}, state {})", x, n.full_lock, n.state_lock);
  if (n.state == kNoSlot) fail("radix evict: leaf {} is a tombstone (a leaf must hold a state)", x);
  if (policy_) policy_->on_state_removed(*this, x);
  const int64_t len = static_cast<int64_t>(n.key.size());
  kv_.free(len);
  states_.free(n.state);
  list_remove(full_, x);
  list_remove(state_, x);
  full_evictable_ -= len;
  --state_evictable_;
  int32_t parent = n.parent;
  delete_node(x);
  int64_t freed = len;
  int64_t deleted = 1;
  while (swept_tombstone(parent, 0)) {
    RadixNode& p = nodes_[parent];
    if (p.state_lock != 0)
      fail("radix evict: tombstone {} has state lock {}", parent, p.state_lock);
    const int64_t plen = static_cast<int64_t>(p.key.size());
    kv_.free(plen);
    list_remove(full_, parent);
    full_evictable_ -= plen;
    freed += plen;
    ++deleted;
    const int32_t up = p.parent;
    delete_node(parent);
    parent = up;
  }
  *survivor = parent;
  *nodes_deleted = deleted;
  return freed;
}

int64_t RadixTree::evict_full(int64_t tokens) {
  if (!uses_tree_lru(policy_)) return evict_full_policy(tokens);
  int64_t evicted = 0;
  int32_t x = full_lru_leaf_unlocked(-1);
  while (evicted < tokens && x >= 0) {
    const int32_t next = full_lru_leaf_unlocked(x);
    int32_t survivor = kRoot;
    int64_t deleted = 0;
    evicted += evict_leaf(x, &survivor, &deleted);
    counters_.full_evicted_nodes += deleted;
    // The surviving ancestor may have become a leaf that is older than `next`: restart from the
    // tail (SGLang evict_full).
    x = nodes_[survivor].num_children == 0 ? full_lru_leaf_unlocked(-1) : next;
  }
  counters_.full_evicted_tokens += evicted;
  return evicted;
}

int32_t RadixTree::evict_state(int32_t count) {
  if (!uses_tree_lru(policy_)) return evict_state_policy(count);
  int32_t evicted = 0;
  int32_t x = state_lru_unlocked(-1);
  while (evicted < count && x >= 0) {
    const int32_t next = state_lru_unlocked(x);
    RadixNode& n = nodes_[x];
    if (n.num_children > 0) {
      if (policy_) policy_->on_state_removed(*this, x);
      states_.free(n.state);
      list_remove(state_, x);
      n.state = kNoSlot;
      --state_evictable_;
      ++counters_.tombstones_created;
    } else {
      int32_t survivor = kRoot;
      int64_t deleted = 0;
      evict_leaf(x, &survivor, &deleted);
      counters_.state_evicted_nodes += deleted;
    }
    ++evicted;
    x = next;
  }
  counters_.state_evictions += evicted;
  return evicted;
}

// The candidates are those evict_full / evict_state above would walk, in the same order (least
// recent first); the policy picks one, which is evicted exactly as there. Collected anew for every
// victim: an eviction may turn an ancestor into a leaf (a new KV candidate).
int64_t RadixTree::evict_full_policy(int64_t tokens) {
  int64_t evicted = 0;
  while (evicted < tokens) {
    candidates_.clear();
    for (int32_t x = full_lru_leaf_unlocked(-1); x >= 0; x = full_lru_leaf_unlocked(x))
      candidates_.push_back(x);
    if (candidates_.empty()) break;
    const size_t i = policy_->choose(*this, candidates_, EvictPool::kv);
    if (i >= candidates_.size())
      fail("radix evict: policy {} chose candidate {} of {}", policy_name(policy_->kind()), i,
           candidates_.size());
    int32_t survivor = kRoot;
    int64_t deleted = 0;
    evicted += evict_leaf(candidates_[i], &survivor, &deleted);
    counters_.full_evicted_nodes += deleted;
  }
  counters_.full_evicted_tokens += evicted;
  return evicted;
}

void RadixTree::evict_one_state(int32_t x) {
  RadixNode& n = nodes_[x];
  if (n.num_children > 0) {
    policy_->on_state_removed(*this, x);
    states_.free(n.state);
    list_remove(state_, x);
    n.state = kNoSlot;
    --state_evictable_;
    ++counters_.tombstones_created;
  } else {
    int32_t survivor = kRoot;
    int64_t deleted = 0;
    evict_leaf(x, &survivor, &deleted);
    counters_.state_evicted_nodes += deleted;
  }
}

int32_t RadixTree::evict_state_policy(int32_t count) {
  int32_t evicted = 0;
  while (evicted < count) {
    candidates_.clear();
    for (int32_t x = state_lru_unlocked(-1); x >= 0; x = state_lru_unlocked(x))
      candidates_.push_back(x);
    if (candidates_.empty()) break;
    const size_t i = policy_->choose(*this, candidates_, EvictPool::state);
    if (i >= candidates_.size())
      fail("radix evict: policy {} chose candidate {} of {}", policy_name(policy_->kind()), i,
           candidates_.size());
    evict_one_state(candidates_[i]);
    ++evicted;
  }
  counters_.state_evictions += evicted;
  return evicted;
}

void RadixTree::reset() {
  for (size_t id = 1; id < nodes_.size(); ++id) {
    const RadixNode& n = nodes_[id];
    if (!n.live) continue;
    if (n.full_lock != 0 || n.state_lock != 0) fail("radix flush: node {} is locked", id);
  }
  for (size_t id = 1; id < nodes_.size(); ++id) {
    const RadixNode& n = nodes_[id];
    if (!n.live) continue;
    kv_.free(static_cast<int64_t>(n.key.size()));
    if (n.state != kNoSlot) {
      if (policy_) policy_->on_state_removed(*this, static_cast<int32_t>(id));
      states_.free(n.state);
    }
  }
  nodes_.resize(1);
  nodes_[kRoot].num_children = 0;
  free_ids_.clear();
  children_.clear();
  paged_children_.clear();
  full_ = List{&RadixNode::full};
  state_ = List{&RadixNode::stat};
  live_nodes_ = 1;
  full_evictable_ = full_protected_ = 0;
  state_evictable_ = state_protected_ = 0;
}

// ---- inspection ---------------------------------------------------------------------------------

void RadixTree::collect_state_slots(std::vector<std::pair<int32_t, int32_t>>& slot_node) const {
  for (size_t id = 1; id < nodes_.size(); ++id)
    if (nodes_[id].live && nodes_[id].state != kNoSlot)
      slot_node.emplace_back(nodes_[id].state, static_cast<int32_t>(id));
}

int64_t RadixTree::depth(int32_t node) const {
  int64_t d = 0;
  for (int32_t x = node; x != kRoot; x = nodes_[x].parent)
    d += static_cast<int64_t>(nodes_[x].key.size());
  return d;
}

}  // namespace statecheck
