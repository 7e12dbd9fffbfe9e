// The default reconstruction grid (recon/grid.cpp): the pixel pitch at the isocentre, and a
// displaced detector's wider field covered by more voxels of that same spacing.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"

namespace ctforge {
namespace {

std::vector<double> full_circle(int n) {
  std::vector<double> a;
  for (int i = 0; i < n; ++i) a.push_back(2 * std::numbers::pi * i / n);
  return a;
}

struct grid_case {
  std::int64_t cols, rows;
  double du, dv, sid, sdd, offset_u;  // sid = 0: parallel beam
};

class DefaultGrid : public ::testing::TestWithParam<grid_case> {};

TEST_P(DefaultGrid, SpacingIsThePixelPitchAtTheIsocentre) {
  const grid_case c = GetParam();
  const auto angles = full_circle(36);
  geometry g = c.sid > 0 ? make_cone_geometry(c.cols, c.rows, c.du, c.dv, c.sid, c.sdd, angles)
                         : make_parallel_geometry(c.cols, c.rows, c.du, c.dv, angles);
  g.orbit->offset_u_mm.assign(angles.size(), c.offset_u);
  const double m = c.sid > 0 ? c.sdd / c.sid : 1.0;
  const volume_geometry vg = default_grid(g);
  EXPECT_DOUBLE_EQ(vg.spacing_mm[0], c.du / m);
  EXPECT_DOUBLE_EQ(vg.spacing_mm[1], c.du / m);
  EXPECT_DOUBLE_EQ(vg.spacing_mm[2], c.dv / m);
  EXPECT_EQ(vg.nz, c.rows);
  // Across: the circle the scan covers (wider for a displaced detector), whole voxels of it.
  const double half = 0.5 * double(c.cols) * c.du;
  const bool displaced = std::abs(c.offset_u) > 0.5 * c.du;
  const double field = displaced ? half + std::abs(c.offset_u) : half;
  EXPECT_EQ(vg.nx, std::max<std::int64_t>(c.cols, std::int64_t(std::ceil(2 * field / c.du - 1e-9))));
  EXPECT_GE(double(vg.nx) * vg.spacing_mm[0], 2 * field / m - 1e-9);
  EXPECT_EQ(vg.ny, vg.nx);
}

// Odd and even sizes, one row, displaced by a fraction of a pixel (not displaced), by 5.3
// pixels (the wider field is not a whole number of pixels: the spacing used to shrink to fit),
// and by 40 % of the detector.
INSTANTIATE_TEST_SUITE_P(
    Cases, DefaultGrid,
    ::testing::Values(grid_case{161, 1, 1.0, 1.0, 0, 0, 5.3},
                      grid_case{160, 3, 0.5, 0.7, 0, 0, -2.65},
                      grid_case{161, 1, 1.0, 1.0, 0, 0, 0.3},
                      grid_case{101, 5, 0.4, 0.4, 500, 1000, 8.1},
                      grid_case{64, 1, 0.8, 0.8, 400, 700, 20.5},
                      grid_case{1, 1, 1.0, 1.0, 0, 0, 0}));

TEST(DefaultGrid, GivenSizeFitsTheFieldInThatManyVoxels) {
  const auto angles = full_circle(36);
  geometry g = make_parallel_geometry(161, 1, 1.0, 1.0, angles);
  g.orbit->offset_u_mm.assign(angles.size(), 5.3);
  grid_request r;
  r.size = std::array<std::int64_t, 3>{100, 100, 1};
  const volume_geometry vg = default_grid(g, r);
  EXPECT_DOUBLE_EQ(vg.spacing_mm[0], 2 * (80.5 + 5.3) / 100);
}

}  // namespace
}  // namespace ctforge
