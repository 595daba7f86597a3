// Mooncake trace parser: malformed lines reported with their line number and rejected or skipped
// (never silently), the block -> token mapping, and the infinite-cache reuse of the shipped trace.
#include <sstream>

#include <gtest/gtest.h>

#include "core/model/model_config.h"
#include "core/util/error.h"
#include "core/workloads/mooncake_trace.h"

using namespace statecheck;

namespace {

const char* kGood1 =
    R"({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})";
const char* kGood2 =
    R"({"timestamp": 10, "input_length": 1024, "output_length": 0, "hash_ids": [1, 3]})";

std::string lines(std::initializer_list<std::string> v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

std::string reject_message(const std::string& text) {
  std::istringstream in(text);
  try {
    parse_mooncake_trace(in, "t.jsonl", BadLines::reject);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Trace, ParsesFieldsAndSkipsBlankLines) {
  std::istringstream in(lines({kGood1, "", kGood2}));
  const Trace t = parse_mooncake_trace(in, "t.jsonl", BadLines::reject);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].line, 1);
  EXPECT_EQ(t.requests[1].line, 3);
  EXPECT_EQ(t.requests[1].input_length, 1024);
  EXPECT_EQ(t.requests[1].hash_ids, (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(t.skipped.empty());
  EXPECT_FALSE(t.reordered);
}

TEST(Trace, MalformedLinesAreRejectedWithTheirLineNumber) {
  EXPECT_NE(reject_message(lines({kGood1, "{not json"})).find("t.jsonl:2: bad JSON"),
            std::string::npos);
  EXPECT_NE(
      reject_message(
          lines({kGood1, kGood2,
                 R"({"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": []})"}))
          .find("t.jsonl:3: negative input_length -5"),
      std::string::npos);
  EXPECT_NE(
      reject_message(
          lines({R"({"timestamp": 1, "input_length": 5, "output_length": -1, "hash_ids": [1]})"}))
          .find("t.jsonl:1: negative output_length -1"),
      std::string::npos);
  const std::string m = reject_message(
      lines({kGood1,
             R"({"timestamp": 2, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]})"}));
  EXPECT_NE(m.find("t.jsonl:2: 2 hash_ids for input_length 1100 (expected ceil(1100 / 512) = 3)"),
            std::string::npos)
      << m;
  EXPECT_NE(reject_message(lines({R"({"timestamp": 1, "input_length": 5, "hash_ids": [1]})"}))
                .find("missing field 'output_length'"),
            std::string::npos);
  EXPECT_NE(
      reject_message(
          lines({R"({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1.5]})"}))
          .find("hash_ids[0] is not an integer"),
      std::string::npos);
  EXPECT_NE(reject_message(lines({R"([1, 2])"})).find("t.jsonl:1: not a JSON object"),
            std::string::npos);
}

// Values are quoted as written: an unsigned literal above 2^63 is not reported as -1, and a
// length beyond kTraceMaxTokens is refused before the replay would allocate for it; a number
// that overflows a double is a bad line like any other (with its line number).
TEST(Trace, HugeValuesAreQuotedAsWritten) {
  EXPECT_NE(reject_message(lines({kGood1, R"({"timestamp": 1e400, "input_length": 10, )"
                                          R"("output_length": 1, "hash_ids": [1]})"}))
                .find("t.jsonl:2: bad JSON"),
            std::string::npos);
  EXPECT_NE(reject_message(lines({R"({"timestamp": 0, "input_length": 18446744073709551615, )"
                                  R"("output_length": 1, "hash_ids": [1]})"}))
                .find("t.jsonl:1: input_length 18446744073709551615 is more than 2097152 tokens"),
            std::string::npos);
  EXPECT_NE(reject_message(lines({R"({"timestamp": 0, "input_length": 10, )"
                                  R"("output_length": 1073741824, "hash_ids": [1]})"}))
                .find("t.jsonl:1: output_length 1073741824 is more than 2097152 tokens"),
            std::string::npos);
  EXPECT_NE(reject_message(lines({R"({"timestamp": 0, "input_length": 10, )"
                                  R"("output_length": 1, "hash_ids": [18446744073709551615]})"}))
                .find("t.jsonl:1: hash_ids[0] = 18446744073709551615 outside 0..4194303"),
            std::string::npos);
}

TEST(Trace, MalformedLinesAreSkippedAndRecordedWhenAsked) {
  std::istringstream in(lines(
      {kGood1, "{oops",
       R"({"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": []})", kGood2}));
  const Trace t = parse_mooncake_trace(in, "t.jsonl", BadLines::skip);
  ASSERT_EQ(t.requests.size(), 2u);
  ASSERT_EQ(t.skipped.size(), 2u);
  EXPECT_EQ(t.skipped[0].line, 2);
  EXPECT_EQ(t.skipped[1].line, 3);
  EXPECT_NE(t.skipped[1].reason.find("0 hash_ids for input_length 10"), std::string::npos);
  EXPECT_THROW(parse_bad_lines("ignore"), Error);
}

TEST(Trace, OutOfOrderTimestampsAreSortedStably) {
  std::istringstream in(lines({kGood2, kGood1}));
  const Trace t = parse_mooncake_trace(in, "t.jsonl", BadLines::reject);
  EXPECT_TRUE(t.reordered);
  EXPECT_EQ(t.requests[0].line, 2);
}

TEST(Trace, EqualHashPrefixesAreEqualTokenPrefixes) {
  TraceRequest a, b;
  a.input_length = 600;
  a.hash_ids = {1, 2};
  b.input_length = 1024;
  b.hash_ids = {1, 3};
  const auto ta = trace_prompt_tokens(a), tb = trace_prompt_tokens(b);
  ASSERT_EQ(ta.size(), 600u);
  ASSERT_EQ(tb.size(), 1024u);
  for (int i = 0; i < 512; ++i) ASSERT_EQ(ta[i], tb[i]);
  EXPECT_EQ(ta[0], 512);
  EXPECT_EQ(ta[511], 1023);
  EXPECT_NE(ta[512], tb[512]);  // different blocks differ from their first token
  EXPECT_EQ(ta[512], 2 * 512);
}

TEST(Trace, PrefixReuseCountsLeadingSharedBlocks) {
  std::vector<TraceRequest> r(3);
  r[0].input_length = 1536;
  r[0].hash_ids = {1, 2, 3};
  r[1].input_length = 1100;
  r[1].hash_ids = {1, 2, 4};  // 2 shared blocks = 1024 tokens
  r[2].input_length = 700;
  r[2].hash_ids = {5, 2};  // different first block: nothing
  const TraceReuse u = trace_prefix_reuse(r);
  EXPECT_EQ(u.blocks, 8);
  EXPECT_EQ(u.blocks_reused, 2);
  EXPECT_EQ(u.tokens, 1536 + 1100 + 700);
  EXPECT_EQ(u.tokens_reused, 1024);
}

// The shipped conversation trace: 12,031 requests; an infinite cache at 512-token block
// granularity reuses about 36.6% of the prompt blocks (measured independently, data/traces).
TEST(Trace, ShippedConversationTraceParsesAndReusesAboutAThirdOfBlocks) {
  const Trace t = load_mooncake_trace(data_dir() + "/traces/mooncake_conversation_trace.jsonl",
                                      BadLines::reject);
  EXPECT_EQ(t.requests.size(), 12031u);
  EXPECT_TRUE(t.skipped.empty());
  const TraceReuse u = trace_prefix_reuse(t.requests);
  EXPECT_NEAR(u.block_fraction(), 0.366, 0.0015);
  int64_t tokens = 0;
  for (const auto& r : t.requests) tokens += r.input_length;
  EXPECT_EQ(tokens, 144793823);
}
