#include "core/cache/eviction_policy.h"

#include <algorithm>

#include "core/util/comma_list.h"
#include "core/util/error.h"

namespace statecheck {

const char* policy_name(PolicyKind p) {
  switch (p) {
    case PolicyKind::lru:
      return "lru";
    case PolicyKind::lru_used:
      return "lru-used";
    case PolicyKind::marconi:
      return "marconi";
    case PolicyKind::s3fifo:
      return "s3fifo";
    case PolicyKind::belady:
      return "belady";
    case PolicyKind::bip:
      return "bip";
    case PolicyKind::future_count:
      return "future-count";
    case PolicyKind::gdsf:
      return "gdsf";
  }
  return "?";
}

bool policy_is_offline(PolicyKind p) {
  return p == PolicyKind::belady || p == PolicyKind::future_count;
}

std::vector<PolicyKind> all_policies() {
  return {PolicyKind::lru,    PolicyKind::lru_used, PolicyKind::marconi,      PolicyKind::s3fifo,
          PolicyKind::belady, PolicyKind::bip,      PolicyKind::future_count, PolicyKind::gdsf};
}

PolicyKind parse_policy(const std::string& s) {
  for (PolicyKind p : all_policies())
    if (s == policy_name(p)) return p;
  fail(
      "--policy: unknown eviction policy '{}' (expected lru, lru-used, marconi, s3fifo, bip, gdsf, "
      "belady or future-count)",
      s);
}

std::vector<PolicyKind> parse_policy_list(const std::string& s) {
  std::vector<PolicyKind> out;
  const std::vector<std::string> items = comma_items(s);
  for (size_t index = 0; index < items.size(); ++index) {
    const std::string& item = items[index];
    if (item.empty()) fail("--policy: entry {} of '{}' is empty", index, s);
    const PolicyKind p = parse_policy(item);
    if (std::find(out.begin(), out.end(), p) != out.end())
      fail("--policy: entry {} ('{}') of '{}' repeats a policy", index, item, s);
    out.push_back(p);
  }
  return out;
}

double FlopCosts::prefill_flops(int64_t d) const {
  const double n = static_cast<double>(d);
  return n * (dense_per_token + linear_per_token) + attention_per_pair * n * (n + 1.0) / 2.0;
}

uint64_t token_prefix_hash(const int32_t* tokens, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

std::unique_ptr<EvictionPolicy> make_eviction_policy(PolicyKind kind, const PolicyContext& ctx) {
  switch (kind) {
    case PolicyKind::lru:
      return nullptr;
    case PolicyKind::lru_used:
      return make_lru_used_policy();
    case PolicyKind::marconi:
      return make_marconi_policy(ctx, -1.0);
    case PolicyKind::s3fifo:
      return make_s3fifo_policy(ctx);
    case PolicyKind::belady:
      return make_belady_policy(ctx);
    case PolicyKind::bip:
      return make_bip_policy();
    case PolicyKind::future_count:
      return make_future_count_policy(ctx);
    case PolicyKind::gdsf:
      return make_gdsf_policy();
  }
  return nullptr;
}

}  // namespace statecheck
