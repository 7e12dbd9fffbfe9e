#include <gtest/gtest.h>

#include "ctforge/geometry.hpp"

TEST(Geometry, Placeholder) { EXPECT_TRUE(true); }
