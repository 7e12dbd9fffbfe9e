// The per-element arithmetic of the iterative space's steps (math/elementwise.hpp), as the
// CUDA kernels and any host loop run it: the thresholds of the SIRT weights and the OSEM ratio
// and update, and the Poisson log-likelihood's conventions at p == 0 and q <= 0.
#include "math/elementwise.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace {

namespace k = ctforge::kernels;

TEST(ElementwiseArithmetic, ThresholdsOfWeightsAndRatios) {
  EXPECT_EQ(k::ew_invert_above(4.0f, 1e-6f), 0.25f);
  EXPECT_EQ(k::ew_invert_above(1e-6f, 1e-6f), 0.0f);  // at the floor: unseen, weight 0
  EXPECT_EQ(k::ew_invert_above(-3.0f, 0.0f), 0.0f);
  EXPECT_EQ(k::ew_ratio(3.0f, 2.0f, 0.5f), 1.5f);
  EXPECT_EQ(k::ew_ratio(3.0f, 0.5f, 0.5f), 0.0f);
  EXPECT_EQ(k::ew_multiply_ratio(2.0f, 3.0f, 4.0f, 0.1f), 1.5f);
  EXPECT_EQ(k::ew_multiply_ratio(2.0f, 3.0f, 0.1f, 0.1f), 2.0f);  // s <= eps: x unchanged
  EXPECT_EQ(k::ew_weighted_residual(2.0f, 5.0f, 3.5f), 3.0f);
  EXPECT_EQ(k::ew_weighted_update(1.0f, 0.5f, 2.0f, -3.0f, false), -2.0f);
  EXPECT_EQ(k::ew_weighted_update(1.0f, 0.5f, 2.0f, -3.0f, true), 0.0f);
  EXPECT_EQ(k::ew_clamp_nonnegative(-0.5f), 0.0f);
  EXPECT_EQ(k::ew_lincomb(2.0f, 3.0f, -1.0f, 4.0f), 2.0f);
}

TEST(ElementwiseArithmetic, PoissonTermConventions) {
  // log's last bits differ between math libraries and compilers (clang's differs by ~8 ulp).
  EXPECT_NEAR(k::poisson_term(3.0f, 2.0f), 3.0 * std::log(2.0) - 2.0, 1e-14);
  EXPECT_EQ(k::poisson_term(0.0f, 2.0f), -2.0);  // p log q taken as 0 where p == 0
  EXPECT_EQ(k::poisson_term(0.0f, 0.0f), 0.0);
  EXPECT_EQ(k::poisson_term(0.0f, -1.0f), 0.0);
  EXPECT_EQ(k::poisson_term(1.0f, 0.0f), -std::numeric_limits<double>::infinity());
  // double: 1e20f squared overflows a float, not a double
  EXPECT_EQ(k::dot_term(1e20f, 1e20f), static_cast<double>(1e20f) * static_cast<double>(1e20f));
  EXPECT_TRUE(std::isfinite(k::dot_term(1e20f, 1e20f)));
}

}  // namespace
