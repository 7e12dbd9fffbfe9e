// SIRT (algorithm::sirt through ctforge::reconstruct): convergence on data the forward projector
// itself produced (circular and helical vector geometries), the gain over FDK on sparse views,
// non-negativity, odd sizes / one detector row / one view, progress, and option validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "recon/recon_quality.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

using testing::relative_error;

constexpr double pi = std::numbers::pi;

recon_options sirt(int iterations, bool nonnegative = false) {
  recon_options o;
  o.algo = algorithm::sirt;
  o.where = backend::cpu;
  o.iterations = iterations;
  o.nonnegative = nonnegative;
  return o;
}

struct scan {
  volume_geometry vg = volume_geometry::centered(24, 24, 24, {1.25, 1.25, 1.25});
  volume truth;
  geometry g;
};

// 60 views of 48 x 40 pixels (1.2 mm) around a 30 mm cube of 24^3 voxels; every voxel is seen
// by every view.
scan circular_scan() {
  scan s;
  s.truth = voxelize(shepp_logan_phantom(28), s.vg, 2);
  s.g = make_cone_geometry(48, 40, 1.2, 1.2, 120, 200, angle_range(0, 2 * pi / 60, 60));
  return s;
}

// The same orbit as a vector geometry climbing 0.15 mm per view (a helix over 9 mm): FDK cannot
// reconstruct it.
scan helical_scan() {
  scan s = circular_scan();
  std::vector<view_vectors> views = s.g.views;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const vec3 dz{0, 0, 0.15 * static_cast<double>(i) - 4.5};
    views[i].source = views[i].source + dz;
    views[i].detector_center = views[i].detector_center + dz;
  }
  s.g = make_vec_geometry(beam_kind::cone, 48, 40, std::move(views));
  return s;
}

// On data A x* made by the forward projector, SIRT converges towards x*: the error and the data
// residual fall with every 4x more iterations. Measured (rel. error / residual): 5 it
// 0.49 / 0.15, 20 it 0.30 / 0.056, 80 it 0.106 / 0.014 (circular); helical 0.49, 0.30, 0.107.
// The bounds at 80 iterations leave ~1.4x margin; a wrong weight (R or C off by a factor),
// a sign error or a transposed update stalls or diverges well above them.
TEST(Sirt, ConvergesOnConsistentData) {
  for (const scan& s : {circular_scan(), helical_scan()}) {
    const projection_stack p = forward_project(s.truth, s.g);
    double last_error = 1e300, last_residual = 1e300;
    for (int n : {5, 20, 80}) {
      const volume x = reconstruct(p, s.g, s.vg, sirt(n));
      const double error = relative_error(x.data, s.truth.data);
      const double residual = relative_error(forward_project(x, s.g).data, p.data);
      EXPECT_LT(error, 0.8 * last_error) << s.g.type_name() << ", " << n << " iterations";
      EXPECT_LT(residual, 0.8 * last_residual) << s.g.type_name() << ", " << n << " iterations";
      last_error = error;
      last_residual = residual;
    }
    EXPECT_LT(last_error, 0.15) << s.g.type_name();
    EXPECT_LT(last_residual, 0.02) << s.g.type_name();
  }
  const scan h = helical_scan();
  recon_options fdk;
  fdk.where = backend::cpu;
  EXPECT_THROW((void)reconstruct(forward_project(h.truth, h.g), h.g, h.vg, fdk), usage_error);
}

// Twelve views of exact (analytic) projections: FDK streaks; 20 non-negative SIRT iterations
// halve the mean error at least (measured: FDK 0.0074, SIRT 0.0020; SIRT without the
// constraint 0.0044), and no voxel is negative.
TEST(Sirt, SparseViewsBeatFdk) {
  const scan s = circular_scan();
  const geometry g =
      make_cone_geometry(48, 40, 1.2, 1.2, 120, 200, angle_range(0, 2 * pi / 12, 12));
  const projection_stack p = project_analytic(shepp_logan_phantom(28), g);
  recon_options fdk;
  fdk.where = backend::cpu;
  const double mae_fdk = mean_abs_error(reconstruct(p, g, s.vg, fdk).data, s.truth.data);
  const volume x = reconstruct(p, g, s.vg, sirt(20, true));
  const double mae_sirt = mean_abs_error(x.data, s.truth.data);
  EXPECT_LT(mae_sirt, 0.5 * mae_fdk) << "FDK " << mae_fdk << ", SIRT " << mae_sirt;
  EXPECT_GE(*std::min_element(x.data.begin(), x.data.end()), 0.0f);
  // Without the constraint some voxels go negative (streak troughs): the flag is what clamps.
  const volume free = reconstruct(p, g, s.vg, sirt(20, false));
  EXPECT_LT(*std::min_element(free.data.begin(), free.data.end()), 0.0f);
}

// Odd sizes, a single detector row (fan beam into one plane), a single view, a size-1 axis:
// SIRT runs, stays finite and reconstructs something (rays that miss the grid and voxels no
// view sees get zero weight, never a division by zero).
TEST(Sirt, OddSizesOneRowOneView) {
  struct c {
    std::int64_t cols, rows, views, nx, ny, nz;
  };
  for (const c& k : {c{31, 1, 17, 21, 19, 1}, c{33, 27, 1, 15, 13, 11}, c{29, 23, 9, 1, 17, 13}}) {
    const geometry g =
        make_cone_geometry(k.cols, k.rows, 1.2, 1.2, 120, 200,
                           angle_range(0.3, 2 * pi / static_cast<double>(k.views), k.views));
    const auto vg = volume_geometry::centered(k.nx, k.ny, k.nz, {1.25, 1.25, 1.25});
    const volume x = reconstruct(project_analytic(shepp_logan_phantom(20), g), g, vg, sirt(10));
    double peak = 0;
    for (float v : x.data) {
      ASSERT_TRUE(std::isfinite(v)) << k.cols << "x" << k.rows << "x" << k.views;
      peak = std::max(peak, static_cast<double>(std::abs(v)));
    }
    EXPECT_GT(peak, 0.01) << k.cols << "x" << k.rows << "x" << k.views;
  }
}

TEST(Sirt, ProgressOncePerIteration) {
  const scan s = circular_scan();
  const geometry g = make_cone_geometry(16, 12, 2.4, 2.4, 120, 200, angle_range(0, 2 * pi / 8, 8));
  recon_options o = sirt(4);
  std::vector<double> seen;
  o.progress = [&](double f) { seen.push_back(f); };
  (void)reconstruct(projection_stack(8, 12, 16), g, s.vg, o);
  ASSERT_EQ(seen.size(), 5u);  // 0, then after each of the 4 iterations
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.front(), 0.0);
  EXPECT_EQ(seen.back(), 1.0);
}

TEST(Sirt, InvalidOptionsAreUsageErrorsNamingThem) {
  const auto vg = volume_geometry::centered(8, 8, 8, {2, 2, 2});
  const geometry g = make_cone_geometry(16, 12, 2.4, 2.4, 120, 200, angle_range(0, 2 * pi / 8, 8));
  const projection_stack p(8, 12, 16);
  using ctforge::testing::expect_usage_error_naming;
  const auto usage = [&](recon_options o, const projection_stack& q, const std::string& name) {
    expect_usage_error_naming([&] { (void)reconstruct(q, g, vg, o); }, name);
  };
  recon_options o = sirt(0);
  usage(o, p, "--iterations");
  o = sirt(5);
  o.relaxation = 2.0;
  usage(o, p, "--relaxation");
  o.relaxation = 0.0;
  usage(o, p, "--relaxation");
  usage(sirt(5), projection_stack(7, 12, 16), "projections are 7 views");
  o = sirt(5);
  o.reference = true;
  usage(o, p, "--reference");
  projection_stack bad(8, 12, 16);
  bad.at(3, 4, 5) = std::nanf("");
  usage(sirt(5), bad, "view 3");
  EXPECT_EQ(parse_algorithm("SIRT"), algorithm::sirt);
}

}  // namespace
}  // namespace ctforge
