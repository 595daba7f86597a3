// Errors and the text they quote (core/util/error.h).
#include <gtest/gtest.h>

#include "core/util/error.h"

using namespace statecheck;

// Messages quote file contents (tensor and dataset names, dtype strings): their control
// characters, C1 controls and bytes outside well-formed UTF-8 are escaped when printed, so the
// reason stays one line and cannot drive a terminal; well-formed text is kept.
TEST(Errors, ControlCharactersArePrintedEscaped) {
  EXPECT_EQ(printable("a\nb\x1b[31mc\x7f\td"), "a\\x0ab\\x1b[31mc\\x7f\\x09d");
  EXPECT_EQ(printable("plain text, caf\xc3\xa9"), "plain text, caf\xc3\xa9");
  EXPECT_EQ(printable("\xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0"),
            "\xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0");
  EXPECT_EQ(printable("\xc2\x9b[31m"), "\\xc2\\x9b[31m");            // CSI as UTF-8 (U+009B)
  EXPECT_EQ(printable("\x9b[31m"), "\\x9b[31m");                     // CSI as a raw byte
  EXPECT_EQ(printable("x\xe2\x82"), "x\\xe2\\x82");                  // truncated
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
}
