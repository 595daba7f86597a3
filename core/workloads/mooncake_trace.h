// Mooncake-format request traces (the FAST'25 Mooncake release, e.g. data/traces/
// mooncake_conversation_trace.jsonl; docs/cache_model.md).
//
// One JSON object per line: `timestamp` (ms since the trace start, >= 0), `input_length` (prompt
// tokens, >= 1), `output_length` (generated tokens, >= 0), `hash_ids` (list of non-negative ints;
// hash_ids[i] names the i-th 512-token block of the prompt, the last block may be partial, so
// len(hash_ids) == ceil(input_length / 512)). Blank lines are ignored.
//
// Malformed lines (bad JSON, a missing or mistyped field, a negative length or timestamp, a hash
// list that does not match input_length) are never dropped silently: under BadLines::reject the
// first one raises statecheck::Error "FILE:LINE: reason"; under BadLines::skip each is counted by
// the kind of its reason, and the first kTraceSkippedKept of each kind are kept (line number +
// reason) in Trace::skipped for the caller to report: memory stays bounded however many lines
// are bad. A NUL byte anywhere in a line is a malformed line (JSON has none, and the JSON parser
// would stop reading at it).
//
// Total size: the prompt and output tokens of the valid lines are summed; a trace whose total
// exceeds `max_total_tokens` is refused after the whole file has been counted (its requests are
// no longer stored once the cap is passed), with the total it needs.
//
// Token mapping (prompt_tokens): position j (0..511) of a block with hash h becomes token id
// h * 512 + j, so equal hash prefixes are equal token prefixes and different blocks never share a
// token. Hash ids must be below 2^22 so that ids fit in int32 (the conversation trace's largest is
// 182789).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace statecheck {

constexpr int kTraceBlockTokens = 512;
constexpr int64_t kTraceMaxHashId = (int64_t{1} << 22) - 1;
// Largest input_length or output_length a trace line may give: 2^21 tokens, twice the longest
// context of the models here (1M); beyond it a line is a unit or typing mistake, and the replay's
// work grows with its square.
constexpr int64_t kTraceMaxTokens = int64_t{1} << 21;

// Skipped lines kept with their reason, per kind of reason.
constexpr int kTraceSkippedKept = 5;
// Default cap on a trace's prompt + output tokens: 2^30. The replay holds about 4 bytes per
// token per run (a trace of 200 prompts of 2^21 tokens, 4.2e8 tokens, took 1.7 GB), so 2^30
// tokens need about 4-8 GiB and fit a 24 GiB machine; the shipped conversation trace has
// 1.5e8.
constexpr int64_t kTraceDefaultMaxTotalTokens = int64_t{1} << 30;

struct TraceRequest {
  int64_t line = 0;  // 1-based line in the file
  double timestamp_ms = 0.0;
  int32_t input_length = 0;
  int32_t output_length = 0;
  std::vector<int64_t> hash_ids;
};

struct TraceIssue {
  int64_t line = 0;
  std::string kind;    // the kind of reason, e.g. "bad JSON", "missing field 'timestamp'"
  std::string reason;  // the full reason, with the values quoted
};

// Skipped lines of one kind of reason: how many, and the first line numbers (at most
// kTraceSkippedKept).
struct TraceSkipCount {
  int64_t count = 0;
  std::vector<int64_t> first_lines;
};

enum class BadLines { reject, skip };
BadLines parse_bad_lines(const std::string& s);  // "reject" | "skip"; Error otherwise

struct Trace {
  std::string origin;                  // file path (or a label)
  std::vector<TraceRequest> requests;  // in file order
  std::vector<TraceIssue> skipped;     // the first kTraceSkippedKept skipped lines of each kind
  std::map<std::string, TraceSkipCount> skipped_by_kind;  // every skipped line, by kind
  int64_t skipped_count = 0;                              // lines skipped in all
  int64_t total_tokens = 0;  // prompt + output tokens of the valid lines
  bool reordered = false;    // timestamps were not non-decreasing: requests were stably
                             // sorted by timestamp (arrival order)
};

// Parses a trace from a stream; `origin` names it in messages. See the file comment for errors;
// a trace over `max_total_tokens` throws statecheck::Error naming its total and the cap.
Trace parse_mooncake_trace(std::istream& in, const std::string& origin, BadLines policy,
                           int64_t max_total_tokens = kTraceDefaultMaxTotalTokens);
// Reads a trace file. Throws statecheck::Error naming the file when it cannot be opened.
Trace load_mooncake_trace(const std::string& path, BadLines policy,
                          int64_t max_total_tokens = kTraceDefaultMaxTotalTokens);

// The prompt's token ids (input_length of them) under the block mapping above.
std::vector<int32_t> trace_prompt_tokens(const TraceRequest& r);

// Prefix reuse of an infinite cache, measured on the trace itself:
//   blocks: sum over requests of the number of leading blocks whose hash prefix appeared in an
//           earlier request, over the total number of blocks (block granularity, the Mooncake
//           paper's measure; 36.6% on the conversation trace);
//   tokens: the same in tokens: the longest prefix of tokens[0, len - 1) shared with an earlier
//           prompt (token granularity, the ceiling of any prefix cache that matches len - 1).
struct TraceReuse {
  int64_t blocks = 0, blocks_reused = 0;
  int64_t tokens = 0, tokens_reused = 0;
  double block_fraction() const {
    return blocks ? static_cast<double>(blocks_reused) / blocks : 0.0;
  }
  double token_fraction() const {
    return tokens ? static_cast<double>(tokens_reused) / tokens : 0.0;
  }
};
TraceReuse trace_prefix_reuse(const std::vector<TraceRequest>& requests);

}  // namespace statecheck
