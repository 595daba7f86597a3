#include "core/workloads/mooncake_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/json_int.h"

namespace statecheck {

BadLines parse_bad_lines(const std::string& s) {
  if (s == "reject") return BadLines::reject;
  if (s == "skip") return BadLines::skip;
  fail("--trace-bad-lines: expected reject or skip, got '{}'", s);
}

namespace {

// Why a line is malformed: the kind (what skipped lines are counted by) and the full reason.
struct LineIssue {
  std::string kind, reason;
  bool empty() const { return reason.empty(); }
};
LineIssue issue(std::string kind, std::string reason) {
  return {std::move(kind), std::move(reason)};
}
LineIssue issue(std::string reason) {
  return {reason, reason};
}

// Parses one line; returns an empty issue on success.
LineIssue parse_line(const std::string& text, TraceRequest& r) {
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    return issue("NUL byte", fmt::format("a NUL byte at column {} (JSON has none)", nul + 1));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse errors and number overflows
    // The parser's message quotes the offending token; keep the reason one short line.
    std::string what = e.what();
    if (what.size() > 160) what = what.substr(0, 157) + "...";
    for (char& c : what)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
    return issue("bad JSON", fmt::format("bad JSON ({})", what));
  }
  if (!j.is_object()) return issue("not a JSON object");
  for (const char* f : {"timestamp", "input_length", "output_length", "hash_ids"})
    if (!j.contains(f)) return issue(fmt::format("missing field '{}'", f));
  const auto& ts = j["timestamp"];
  if (!ts.is_number()) return issue("field 'timestamp' is not a number");
  r.timestamp_ms = ts.get<double>();
  if (!std::isfinite(r.timestamp_ms) || r.timestamp_ms < 0)
    return issue("timestamp out of range",
                 fmt::format("negative or non-finite timestamp {}", ts.dump()));
  // A year of traffic is 3.2e10 ms; later stamps are a unit mistake, not a trace to bin by minute.
  if (r.timestamp_ms > 3.2e10)
    return issue("timestamp out of range",
                 fmt::format("timestamp {} ms is later than one year", ts.dump()));
  // Values are quoted as written (v.dump()), and read without wrapping (json_int64).
  for (const char* f : {"input_length", "output_length"}) {
    const auto& v = j[f];
    if (!v.is_number_integer()) return issue(fmt::format("field '{}' is not an integer", f));
    const int64_t x = json_int64(v);
    if (x < 0)
      return issue(fmt::format("{} out of range", f), fmt::format("negative {} {}", f, v.dump()));
    if (x > kTraceMaxTokens)
      return issue(fmt::format("{} out of range", f),
                   fmt::format("{} {} is more than {} tokens", f, v.dump(), kTraceMaxTokens));
  }
  r.input_length = static_cast<int32_t>(j["input_length"].get<int64_t>());
  r.output_length = static_cast<int32_t>(j["output_length"].get<int64_t>());
  if (r.input_length < 1)
    return issue("input_length out of range", "input_length 0 (a prompt needs at least one token)");
  const auto& h = j["hash_ids"];
  if (!h.is_array()) return issue("field 'hash_ids' is not a list");
  r.hash_ids.clear();
  r.hash_ids.reserve(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    if (!h[i].is_number_integer())
      return issue("hash_ids entry not an integer",
                   fmt::format("hash_ids[{}] is not an integer", i));
    const int64_t x = json_int64(h[i]);
    if (x < 0 || x > kTraceMaxHashId)
      return issue("hash_ids entry out of range",
                   fmt::format("hash_ids[{}] = {} outside 0..{}", i, h[i].dump(), kTraceMaxHashId));
    r.hash_ids.push_back(x);
  }
  const int64_t blocks =
      (static_cast<int64_t>(r.input_length) + kTraceBlockTokens - 1) / kTraceBlockTokens;
  if (static_cast<int64_t>(r.hash_ids.size()) != blocks)
    return issue(
        "hash_ids count does not match input_length",
        fmt::format("{} hash_ids for input_length {} (expected ceil({} / {}) = {})",
                    r.hash_ids.size(), r.input_length, r.input_length, kTraceBlockTokens, blocks));
  return {};
}

// Reads one line (without its '\n') into `text`, keeping at most kMaxLineBytes of it so that a
// file without newlines cannot fill memory; `too_long` says the rest was dropped. False at the
// end of the stream when nothing was read.
constexpr size_t kMaxLineBytes = size_t{1} << 20;
bool read_line(std::istream& in, std::string& text, bool& too_long) {
  text.clear();
  too_long = false;
  std::streambuf* sb = in.rdbuf();
  bool any = false;
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      if (!any) in.setstate(std::ios::eofbit);
      return any;
    }
    any = true;
    if (c == '\n') return true;
    if (text.size() < kMaxLineBytes)
      text.push_back(static_cast<char>(c));
    else
      too_long = true;
  }
}

}  // namespace

Trace parse_mooncake_trace(std::istream& in, const std::string& origin, BadLines policy,
                           int64_t max_total_tokens) {
  Trace t;
  t.origin = origin;
  std::string text;
  int64_t line = 0;
  bool too_long = false;
  while (read_line(in, text, too_long)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (!too_long && text.find_first_not_of(" \t") == std::string::npos) continue;
    TraceRequest r;
    r.line = line;
    // A valid line is at most a few tens of KB (4096 hash ids of 7 digits for 2^21 tokens).
    const LineIssue bad =
        too_long ? issue("line too long", fmt::format("longer than {} bytes", kMaxLineBytes))
                 : parse_line(text, r);
    if (!bad.empty()) {
      if (policy == BadLines::reject)
        fail("{}:{}: {} (use --trace-bad-lines skip to skip malformed lines)", origin, line,
             printable(bad.reason));
      TraceSkipCount& k = t.skipped_by_kind[bad.kind];
      ++k.count;
      ++t.skipped_count;
      if (static_cast<int>(k.first_lines.size()) < kTraceSkippedKept) {
        k.first_lines.push_back(line);
        t.skipped.push_back({line, bad.kind, bad.reason});
      }
      continue;
    }
    t.total_tokens += static_cast<int64_t>(r.input_length) + r.output_length;
    // Past the cap the requests are only counted (the error below says the total).
    if (t.total_tokens <= max_total_tokens) t.requests.push_back(std::move(r));
  }
  if (in.bad()) fail("{}: read error after line {}", origin, line);
  if (t.total_tokens > max_total_tokens)
    fail(
        "{}: the trace holds {} prompt + output tokens, more than the cap of {} "
        "(--trace-max-tokens; the replay needs about {:.1f} GiB per run for it, at 4 bytes per "
        "token); raise the cap on a machine with the memory",
        origin, t.total_tokens, max_total_tokens,
        4.0 * static_cast<double>(t.total_tokens) / 1073741824.0);
  if (!std::is_sorted(t.requests.begin(), t.requests.end(),
                      [](const TraceRequest& a, const TraceRequest& b) {
                        return a.timestamp_ms < b.timestamp_ms;
                      })) {
    std::stable_sort(t.requests.begin(), t.requests.end(),
                     [](const TraceRequest& a, const TraceRequest& b) {
                       return a.timestamp_ms < b.timestamp_ms;
                     });
    t.reordered = true;
  }
  return t;
}

Trace load_mooncake_trace(const std::string& path, BadLines policy, int64_t max_total_tokens) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open trace file", path);
  return parse_mooncake_trace(f, path, policy, max_total_tokens);
}

std::vector<int32_t> trace_prompt_tokens(const TraceRequest& r) {
  std::vector<int32_t> t(static_cast<size_t>(r.input_length));
  for (int32_t p = 0; p < r.input_length; ++p) {
    const int64_t h = r.hash_ids[static_cast<size_t>(p / kTraceBlockTokens)];
    t[p] = static_cast<int32_t>(h * kTraceBlockTokens + p % kTraceBlockTokens);
  }
  return t;
}

TraceReuse trace_prefix_reuse(const std::vector<TraceRequest>& requests) {
  // A trie over hash ids; each node remembers the longest block length seen through it (the last
  // block of a prompt may be partial, so two prompts sharing a block id share min of their lengths
  // inside it — under the token mapping, a block id names the same tokens at the same positions).
  struct Node {
    std::map<int64_t, int32_t> next;
    int32_t max_len = 0;  // most tokens of this block any earlier prompt had
  };
  std::vector<Node> nodes(1);
  TraceReuse out;
  for (const TraceRequest& r : requests) {
    const int64_t n = static_cast<int64_t>(r.hash_ids.size());
    out.blocks += n;
    out.tokens += r.input_length;
    const int64_t match_limit = r.input_length - 1;  // the engine matches tokens[0, len - 1)
    int32_t node = 0;
    bool shared = true;
    int64_t reused_tokens = 0;
    for (int64_t b = 0; b < n; ++b) {
      const int32_t len = static_cast<int32_t>(
          std::min<int64_t>(kTraceBlockTokens, r.input_length - b * kTraceBlockTokens));
      auto it = nodes[node].next.find(r.hash_ids[b]);
      if (shared && it != nodes[node].next.end()) {
        ++out.blocks_reused;
        reused_tokens += std::min(len, nodes[it->second].max_len);
        node = it->second;
        nodes[node].max_len = std::max(nodes[node].max_len, len);
        continue;
      }
      shared = false;
      if (it == nodes[node].next.end()) {
        nodes.emplace_back();
        it = nodes[node].next.emplace(r.hash_ids[b], static_cast<int32_t>(nodes.size() - 1)).first;
      }
      node = it->second;
      nodes[node].max_len = std::max(nodes[node].max_len, len);
    }
    out.tokens_reused += std::min(reused_tokens, match_limit);
  }
  return out;
}

}  // namespace statecheck
