// The compact tables experiments print (experiments/report_table.h): layout by hand, exact zeros
// printed as 0, the row-width check, the --verbose key dump.
#include <cmath>
#include <cstdio>
#include <limits>

#include <gtest/gtest.h>

#include "core/util/error.h"
#include "experiments/experiment.h"
#include "experiments/report_table.h"

using namespace statecheck;

TEST(ReportTable, ColumnsAreAsWideAsTheirWidestCell) {
  ReportTable t("codec: error per codec", {"codec", "relerr"});
  t.add_row({"fp32", "0"});
  t.add_row({"fp8_e4m3", "0.02572"});
  // First column left-aligned, the others right-aligned, two spaces between and before.
  EXPECT_EQ(t.render(),
            "codec: error per codec\n"
            "  codec      relerr\n"
            "  fp32            0\n"
            "  fp8_e4m3  0.02572\n");
}

// A left-aligned last column is not padded (no trailing blanks).
TEST(ReportTable, LeftAlignedColumns) {
  ReportTable t("t", {"a", "key", "n"});
  t.align_left(1);
  t.align_left(2);
  t.add_row({"x", "int8.state_relerr", "6"});
  t.add_row({"yy", "k", "10"});
  EXPECT_EQ(t.render(),
            "t\n"
            "  a   key                n\n"
            "  x   int8.state_relerr  6\n"
            "  yy  k                  10\n");
  EXPECT_THROW(t.align_left(3), Error);
}

TEST(ReportTable, RowOfTheWrongWidthIsNamed) {
  ReportTable t("chain: x", {"a", "b", "c"});
  t.add_row({"1", "2", "3"});
  try {
    t.add_row({"1", "2"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "table 'chain: x': row 1 has 2 cells for 3 columns");
  }
}

TEST(ReportTable, ExactZeroReadsAsZeroAndOthersKeepFourDigits) {
  EXPECT_EQ(report_number(0.0), "0");
  EXPECT_EQ(report_number(-0.0), "0");
  EXPECT_EQ(report_number(1e-300), "1e-300");  // tiny but not zero stays visible
  EXPECT_EQ(report_number(0.0064651), "0.006465");
  EXPECT_EQ(report_number(16097280.0), "1.61e+07");
  EXPECT_EQ(report_number(std::nan("")), "nan");
  EXPECT_EQ(report_number(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(ReportTable, VerboseKeyDumpListsEveryKeyInOrder) {
  Summary s;
  s.set("codec.int8.state_relerr", 0.0064651);
  s.set("codec.bf16.state_relerr", 0.00165768);
  const std::string out = render_summary_keys(s, "codec summary");
  EXPECT_EQ(out.rfind("codec summary:\n", 0), 0u) << out;
  const size_t bf16 = out.find("codec.bf16.state_relerr"),
               int8 = out.find("codec.int8.state_relerr");
  ASSERT_NE(bf16, std::string::npos) << out;
  ASSERT_NE(int8, std::string::npos) << out;
  EXPECT_LT(bf16, int8);
  EXPECT_NE(out.find(" 0.0064651\n"), std::string::npos) << out;
}

// The suite's verdict: one row per experiment with its limits, how many hold and the closest
// row; failing rows listed with their reason; the count of failures returned.
TEST(SuiteVerdict, PerExperimentCountsClosestRowAndFailures) {
  Summary codec, chain, bench;
  codec.set("int8.state_relerr", 0.0065);    // 35% below 0.01
  codec.set("bf16.state_relerr", 0.0017);    // 56% below 0.0039
  chain.set("chain.saturation_ratio", 1.7);  // above 1.6: fails
  bench.set("bench.cpu_copy.gbps", 8.0);     // no limit
  std::vector<ThresholdRow> rows(3);
  rows[0].key = "int8.state_relerr", rows[0].op = "<", rows[0].limit = 0.01, rows[0].reason = "r0";
  rows[1].key = "bf16.state_relerr", rows[1].op = "<=", rows[1].limit = 0.0039,
  rows[1].reason = "r1";
  rows[2].key = "chain.saturation_ratio", rows[2].op = "<", rows[2].limit = 1.6;
  rows[2].reason = "saturates";
  Summary all;
  for (const Summary* s : {&codec, &chain, &bench}) all.merge(*s);
  check_thresholds(all, rows);
  ::testing::internal::CaptureStdout();
  const int failures =
      print_threshold_verdict({{"codec", codec}, {"chain", chain}, {"bench", bench}}, rows);
  std::fflush(stdout);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(failures, 1);
  auto line_of = [&](const std::string& start) {
    const size_t at = out.find("\n  " + start + " ");
    return at == std::string::npos ? std::string()
                                   : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  };
  const std::string c = line_of("codec"), ch = line_of("chain"), b = line_of("bench");
  auto ends_with = [](const std::string& line, const std::string& tail) {
    return line.size() >= tail.size() &&
           line.compare(line.size() - tail.size(), tail.size(), tail) == 0;
  };
  EXPECT_NE(c.find("  2     2  int8.state_relerr "), std::string::npos) << out;
  EXPECT_TRUE(ends_with(c, " 35% below the limit")) << out;
  EXPECT_NE(ch.find("  1     0  chain.saturation_ratio "), std::string::npos) << out;
  EXPECT_TRUE(ends_with(ch, " 6% above the limit")) << out;
  EXPECT_TRUE(ends_with(b, "  0     0  -                       -")) << out;
  EXPECT_NE(out.find("FAIL chain.saturation_ratio = 1.7, limit < 1.6: saturates"),
            std::string::npos)
      << out;
}
