// The CPU projectors writing into the caller's memory (what the iterative space and
// projector_pair call once per iteration): bit-identical to the allocating public projectors on
// the adjoint tests' geometries (odd sizes, parallel, tilted helical vectors, one view, one row),
// whatever the output held before; the matched back-projector's per-thread volumes kept between
// calls without reallocation and cleared for each call (a second call on other projections gives
// that call's result, not a sum: the negative control of the reuse); sizes checked.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "adjoint_cases.hpp"
#include "ctforge/error.hpp"
#include "ctforge/projector.hpp"
#include "recon/forward_project_cpu.hpp"

namespace ctforge {
namespace {

/// Exact equality of the float bit patterns (0.0 vs -0.0 and NaN included).
bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

projection_stack random_projections(const geometry& g, unsigned seed) {
  projection_stack p(g.view_count(), g.rows, g.cols);
  p.data = testing::random_values(p.data.size(), seed, 0.0f, 1.0f);
  return p;
}

class ProjectorInto : public ::testing::TestWithParam<testing::geometry_case> {};

TEST_P(ProjectorInto, ForwardIsBitIdenticalToForwardProject) {
  const auto& c = GetParam();
  const std::vector<float> x =
      testing::random_values(static_cast<std::size_t>(c.vg.voxel_count()), 3);
  const projection_stack ref = forward_project(volume_view(c.vg, x), c.g, 2);
  std::vector<float> out(ref.data.size(), 7.0f);  // stale values, overwritten
  detail::forward_project_into(volume_view(c.vg, x), c.g, 2, out);
  EXPECT_TRUE(bit_identical(out, ref.data));
}

TEST_P(ProjectorInto, VoxelBackProjectionIsBitIdentical) {
  const auto& c = GetParam();
  const projection_stack p = random_projections(c.g, 5);
  const volume ref = back_project(p, c.g, c.vg, 2);
  std::vector<float> out(ref.data.size(), -3.0f);
  detail::back_project_into(p, c.g, c.vg, 2, out);
  EXPECT_TRUE(bit_identical(out, ref.data));
}

TEST_P(ProjectorInto, MatchedReusesItsScratchAndIsBitIdentical) {
  const auto& c = GetParam();
  const projection_stack p1 = random_projections(c.g, 11), p2 = random_projections(c.g, 12);
  for (const int threads : {1, 2, 3}) {
    detail::matched_scratch scratch;
    std::vector<float> out(static_cast<std::size_t>(c.vg.voxel_count()), 5.0f);
    detail::back_project_matched_into(p1, c.g, c.vg, threads, out, scratch);
    EXPECT_TRUE(bit_identical(out, back_project_matched(p1, c.g, c.vg, threads).data))
        << threads << " threads";
    std::vector<const float*> kept;
    for (const auto& v : scratch.partial) kept.push_back(v.data());
    // The second call on other projections: the same scratch memory, cleared first.
    detail::back_project_matched_into(p2, c.g, c.vg, threads, out, scratch);
    EXPECT_TRUE(bit_identical(out, back_project_matched(p2, c.g, c.vg, threads).data))
        << threads << " threads, second call";
    ASSERT_EQ(scratch.partial.size(), kept.size());
    for (std::size_t t = 0; t < kept.size(); ++t)
      EXPECT_EQ(scratch.partial[t].data(), kept[t]) << "thread " << t + 1 << " reallocated";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ProjectorInto, ::testing::ValuesIn(testing::adjoint_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ProjectorIntoSizes, WrongOutputSizesAreRefused) {
  const auto c = testing::adjoint_cases()[0];
  const std::vector<float> x(static_cast<std::size_t>(c.vg.voxel_count()), 1.0f);
  const projection_stack p = random_projections(c.g, 1);
  std::vector<float> short_proj(p.data.size() - 1), short_vol(x.size() - 1);
  detail::matched_scratch scratch;
  EXPECT_THROW(detail::forward_project_into(volume_view(c.vg, x), c.g, 1, short_proj),
               usage_error);
  EXPECT_THROW(detail::back_project_into(p, c.g, c.vg, 1, short_vol), usage_error);
  EXPECT_THROW(detail::back_project_matched_into(p, c.g, c.vg, 1, short_vol, scratch),
               usage_error);
}

}  // namespace
}  // namespace ctforge
