// The compact tables experiments print (experiments/report_table.h): layout by hand, exact zeros
// printed as 0, the row-width check, the --verbose key dump.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "core/util/error.h"
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
