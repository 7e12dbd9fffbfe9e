// values_within_radius: the voxels whose centres lie within a radius of the rotation axis, in
// memory order, on a grid of odd and even sizes.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/metrics.hpp"

namespace ctforge {
namespace {

TEST(Metrics, ValuesWithinRadiusKeepTheVoxelsNearTheAxisInMemoryOrder) {
  // x centres -2..2, y centres -1.5..1.5 (1 mm voxels, centred): within 1 mm of the axis lie
  // (x, y) = (0, -0.5) and (0, 0.5) of each plane (x = +-1 is sqrt(1.25) away).
  const volume_geometry g = volume_geometry::centered(5, 4, 3, {1.0, 1.0, 1.0});
  volume a(g), b(g);
  std::iota(a.data.begin(), a.data.end(), 0.0f);
  for (std::size_t n = 0; n < b.data.size(); ++n) b.data[n] = -a.data[n];
  const auto [va, vb] = values_within_radius(a, b, 1.0);
  const std::vector<float> expected = {7, 12, 27, 32, 47, 52};  // (k*4 + j)*5 + 2, j = 1, 2
  EXPECT_EQ(va, expected);
  std::vector<float> negated(expected.size());
  for (std::size_t n = 0; n < expected.size(); ++n) negated[n] = -expected[n];
  EXPECT_EQ(vb, negated);
  // Every voxel within a radius past the corners; none within one short of the nearest centre.
  EXPECT_EQ(values_within_radius(a, b, 10.0).first.size(), a.data.size());
  EXPECT_TRUE(values_within_radius(a, b, 0.4).first.empty());
  volume c(volume_geometry::centered(5, 4, 2, {1.0, 1.0, 1.0}));
  EXPECT_THROW(values_within_radius(a, c, 1.0), error);
}

}  // namespace
}  // namespace ctforge
