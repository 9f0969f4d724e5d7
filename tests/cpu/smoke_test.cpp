#include <gtest/gtest.h>
#include "flashgate/flashgate.h"
TEST(Smoke, Version) { EXPECT_STREQ(flashgate::version(), "0.1.0"); }
