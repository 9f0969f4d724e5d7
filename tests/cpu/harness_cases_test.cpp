// The harness's case descriptions (harness/cases.h), which name every case in failures and CLI output.
#include <gtest/gtest.h>

#include <string>

#include "harness/cases.h"

namespace flashgate::harness {
namespace {

// A description stays one line: long length lists (65600 packed sequences) show their ends, count and sum.
TEST(HarnessCases, DescribeAbbreviatesLongLengthLists) {
  AttentionConfig c;
  c.packed = {0, 15, 100};
  EXPECT_NE(c.describe().find("packed[0,15,100]"), std::string::npos) << c.describe();
  c.packed.assign(65600, 8);
  c.packed.back() = 3;
  const std::string d = c.describe();
  EXPECT_NE(d.find("packed[8,8,8,8,8,8,...,8,3 (65600 entries, sum 524795)]"), std::string::npos) << d;
  EXPECT_LT(d.size(), 200u);
  DecodeConfig dc;
  dc.seqlens.assign(100, 7);
  EXPECT_NE(dc.describe().find("(100 entries, sum 700)"), std::string::npos) << dc.describe();
}

}  // namespace
}  // namespace flashgate::harness
