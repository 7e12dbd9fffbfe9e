// kernels::slab_row_band (src/math/slab_rows.hpp): the detector rows a slab needs, for the
// CUDA plan and the checkpointed slab-wise runs. The band must hold both bilinear taps of the
// row of every point of the slab's box in every view, and be narrower than the detector for a
// thin slab seen from afar.
#include "math/slab_rows.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

namespace ctforge::kernels {
namespace {

constexpr double k_sid = 300, k_sdd = 500, k_pitch = 1.0;
constexpr std::int64_t k_rows = 120, k_cols = 96;

using map12 = std::array<double, 12>;

/// Flat detector, source at distance k_sid from the axis (z), rotated by `angle`: the 3x4
/// matrix of col = SDD x' / (y' + SID) / du + c0, row = SDD z / (y' + SID) / dv + r0.
map12 flat_matrix(double angle) {
  const double c = std::cos(angle), s = std::sin(angle);
  const double c0 = 0.5 * (k_cols - 1), r0 = 0.5 * (k_rows - 1), f = k_sdd / k_pitch;
  // x' = c x + s y, y' = -s x + c y.
  return {f * c - c0 * s, f * s + c0 * c, 0, c0 * k_sid, -r0 * s, r0 * c, f, r0 * k_sid, -s, c, 0,
          k_sid};
}

/// Cylindrical detector of radius SDD about the source, same orbit (kernels::cyl_map_d layout:
/// a = (m0 x + m1 y + m2), c = (m3 x + m4 y + m5), row = m8 + (m6 z + m7) / hypot(a, c)).
map12 curved_map(double angle) {
  const double c = std::cos(angle), s = std::sin(angle);
  const double sx = k_sid * s, sy = -k_sid * c;  // the source
  const double tx = c, ty = s, nx = -s, ny = c;  // tangent and normal towards the detector
  const double inv_r = 1.0 / k_sdd, bz = 1.0 / k_pitch;
  return {tx * inv_r,
          ty * inv_r,
          -(tx * sx + ty * sy) * inv_r,
          nx * inv_r,
          ny * inv_r,
          -(nx * sx + ny * sy) * inv_r,
          bz,
          0.0,
          0.5 * (k_rows - 1),
          0.5 * (k_cols - 1),
          k_sdd / k_pitch,
          0.0};
}

double flat_row(const map12& m, double x, double y, double z) {
  return (m[4] * x + m[5] * y + m[6] * z + m[7]) / (m[8] * x + m[9] * y + m[10] * z + m[11]);
}

double curved_row(const map12& m, double x, double y, double z) {
  const double a = m[0] * x + m[1] * y + m[2], c = m[3] * x + m[4] * y + m[5];
  return m[8] + (m[6] * z + m[7]) / std::hypot(a, c);
}

std::vector<map12> views(bool curved) {
  std::vector<map12> out;
  for (int v = 0; v < 24; ++v) {
    const double angle = 0.2 + 2 * std::numbers::pi * v / 24;
    out.push_back(curved ? curved_map(angle) : flat_matrix(angle));
  }
  return out;
}

/// Every point of `box` (corners and random points) projects, in every view, to a row whose
/// taps floor(r) and floor(r) + 1 (clamped to the detector) lie in the band.
void expect_band_holds_every_tap(const slab_box& box, const std::vector<map12>& maps, bool curved,
                                 const row_band& band) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 400; ++i) {
    const bool corner = i < 8;
    const double fx = corner ? (i & 1) : u(rng), fy = corner ? ((i >> 1) & 1) : u(rng),
                 fz = corner ? ((i >> 2) & 1) : u(rng);
    const double x = box.x[0] + fx * (box.x[1] - box.x[0]),
                 y = box.y[0] + fy * (box.y[1] - box.y[0]),
                 z = box.z[0] + fz * (box.z[1] - box.z[0]);
    for (const map12& m : maps) {
      const double r = curved ? curved_row(m, x, y, z) : flat_row(m, x, y, z);
      if (!(r > -1.0 && r < static_cast<double>(k_rows))) continue;  // off the detector
      const auto t0 = static_cast<std::int64_t>(std::floor(r));
      ASSERT_GE(std::max<std::int64_t>(t0, 0), band.r0) << "row " << r;
      ASSERT_LT(std::min<std::int64_t>(t0 + 1, k_rows - 1), band.r1) << "row " << r;
    }
  }
}

/// A band within the detector, holding every tap of the box, and narrower than half the
/// detector for a thin slab.
void expect_narrow_band_holding_every_tap(const slab_box& box, const std::vector<map12>& maps,
                                          bool curved, const row_band& band, double z0) {
  ASSERT_LE(0, band.r0);
  ASSERT_LT(band.r0, band.r1);
  ASSERT_LE(band.r1, k_rows);
  expect_band_holds_every_tap(box, maps, curved, band);
  EXPECT_LT(band.r1 - band.r0, k_rows / 2) << "z0 " << z0;
}

TEST(SlabRows, FlatBandHoldsEveryTapAndIsNarrowForAThinSlab) {
  const std::vector<map12> maps = views(false);
  for (double z0 : {-40.0, -3.0, 0.0, 25.0}) {
    const slab_box box{{-30, 30}, {-28, 31}, {z0, z0 + 4}};
    const row_band band = slab_row_band(box, maps.data(), maps.size(), k_rows, false);
    expect_narrow_band_holding_every_tap(box, maps, false, band, z0);
  }
}

TEST(SlabRows, CurvedBandHoldsEveryTapAndIsNarrowForAThinSlab) {
  const std::vector<map12> maps = views(true);
  for (double z0 : {-40.0, -3.0, 0.0, 25.0}) {
    const slab_box box{{30, -30}, {-28, 31}, {z0 + 4, z0}};  // either order of the ends
    const row_band band = slab_row_band(box, maps.data(), maps.size(), k_rows, true, 0.5);
    expect_narrow_band_holding_every_tap(box, maps, true, band, z0);
  }
}

TEST(SlabRows, ASourceInOrBehindTheBoxTakesEveryRow) {
  // The box reaches past the orbit (SID 300 mm): some corner lies behind a flat view's source,
  // and the sources lie within the curved detector's box.
  const slab_box wide{{-350, 350}, {-350, 350}, {0, 2}};
  const std::vector<map12> flat = views(false), curved = views(true);
  const row_band f = slab_row_band(wide, flat.data(), flat.size(), k_rows, false);
  const row_band c = slab_row_band(wide, curved.data(), curved.size(), k_rows, true, 0.5);
  EXPECT_EQ(f.r0, 0);
  EXPECT_EQ(f.r1, k_rows);
  EXPECT_EQ(c.r0, 0);
  EXPECT_EQ(c.r1, k_rows);
}

TEST(SlabRows, ExtentIsWidenedByTheTapsAndClampedToTheDetector) {
  // [floor(lo) - 1, floor(hi) + 3)
  EXPECT_EQ(rows_of_extent(10.2, 20.7, false, 100).r0, 9);
  EXPECT_EQ(rows_of_extent(10.2, 20.7, false, 100).r1, 23);
  EXPECT_EQ(rows_of_extent(-5.0, 3.5, false, 100).r0, 0);
  EXPECT_EQ(rows_of_extent(97.5, 140.0, false, 100).r1, 100);
  // Entirely above the detector: an empty band at its end, never r1 < r0.
  const row_band above = rows_of_extent(150.0, 160.0, false, 100);
  EXPECT_EQ(above.r0, 100);
  EXPECT_EQ(above.r1, 100);
  const row_band all = rows_of_extent(10, 20, true, 100);
  EXPECT_EQ(all.r0, 0);
  EXPECT_EQ(all.r1, 100);
}

TEST(SlabRows, CentresBoxSpansTheFirstAndLastVoxelCentresOfTheSlab) {
  const slab_box b = slab_centres({-10, -20, -30}, {0.5, 2.0, 1.5}, 41, 21, 4, 3);
  EXPECT_DOUBLE_EQ(b.x[0], -10);
  EXPECT_DOUBLE_EQ(b.x[1], 10);
  EXPECT_DOUBLE_EQ(b.y[0], -20);
  EXPECT_DOUBLE_EQ(b.y[1], 20);
  EXPECT_DOUBLE_EQ(b.z[0], -30 + 4 * 1.5);
  EXPECT_DOUBLE_EQ(b.z[1], -30 + 6 * 1.5);
}

}  // namespace
}  // namespace ctforge::kernels
