// The matched projector pair (forward_project and back_project_matched, its exact transpose)
// and CGLS on it: adjoint identity on random volumes and projections for cone, parallel,
// vector, one-view and one-row geometries (with the voxel-driven back-projector as a negative
// control), CGLS convergence on consistent data, CGLS against SIRT at equal iterations, and
// determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "adjoint_cases.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;
using testing::adjoint_cases;
using testing::dot;
using testing::norm;
using testing::random_values;

// |<A x, y> - <x, A^T y>| / (|A x| |y|) <= 1e-5 for random x, y: the transpose takes exactly
// the samples and weights of the forward projector (float rounding of sums over ~10^4 terms
// is ~1e-7 relative). The voxel-driven back-projector is the adjoint of another interpolation
// model and misses by orders of magnitude more (negative control).
TEST(MatchedPair, AdjointIdentityOnRandomData) {
  for (const auto& c : adjoint_cases()) {
    volume x(c.vg);
    x.data = random_values(x.data.size(), 1);
    projection_stack y(c.g.view_count(), c.g.rows, c.g.cols);
    y.data = random_values(y.data.size(), 2);
    const projection_stack ax = forward_project(x, c.g, 2);
    const volume aty = back_project_matched(y, c.g, c.vg, 2);
    const double scale = norm(ax.data) * norm(y.data);
    ASSERT_GT(scale, 0) << c.name;
    const double gap = std::abs(dot(ax.data, y.data) - dot(x.data, aty.data)) / scale;
    std::cout << "[ metric   ] adjoint " << c.name << ": " << gap << "\n";
    EXPECT_LE(gap, 1e-5) << c.name;
    const volume bty = back_project(y, c.g, c.vg, 2);
    // The voxel-driven pair is not scaled as a transpose either: compare directions only.
    const double cosine = dot(x.data, bty.data) / (norm(x.data) * norm(bty.data));
    const double matched_cosine = dot(x.data, aty.data) / (norm(x.data) * norm(aty.data));
    EXPECT_GT(std::abs(cosine - matched_cosine), 1e-4) << c.name << ": negative control";
  }
}

// Same inputs and thread count: the same floats.
TEST(MatchedPair, DeterministicForAThreadCount) {
  const auto c = adjoint_cases()[0];
  projection_stack y(c.g.view_count(), c.g.rows, c.g.cols);
  y.data = random_values(y.data.size(), 5);
  EXPECT_EQ(back_project_matched(y, c.g, c.vg, 2).data,
            back_project_matched(y, c.g, c.vg, 2).data);
}

recon_options cgls(int iterations) {
  recon_options o;
  o.algo = algorithm::cgls;
  o.where = backend::cpu;
  o.iterations = iterations;
  o.threads = 2;
  return o;
}

// On projections the forward projector itself made (consistent data) the residual |A x - p|
// falls with every iteration, and CGLS is closer to the truth than SIRT after as many
// iterations (each costs one forward and one back-projection in both).
TEST(Cgls, ConvergesOnConsistentDataAndBeatsSirt) {
  const volume_geometry vg = volume_geometry::centered(20, 20, 16, {1.25, 1.25, 1.25});
  const volume truth = voxelize(shepp_logan_phantom(24), vg, 2);
  const geometry g = make_cone_geometry(40, 30, 1.2, 1.2, 120, 200, angle_range(0, 2 * pi / 45, 45));
  const projection_stack p = forward_project(truth, g, 2);
  double last = 1e300;
  for (int it : {1, 3, 6, 12}) {
    const volume x = reconstruct(p, g, vg, cgls(it));
    const projection_stack ax = forward_project(x, g, 2);
    std::vector<float> res(ax.data.size());
    for (std::size_t i = 0; i < res.size(); ++i) res[i] = ax.data[i] - p.data[i];
    const double r = norm(res) / norm(p.data);
    std::cout << "[ metric   ] cgls " << it << " iterations: relative residual " << r << "\n";
    EXPECT_LT(r, last) << it;
    last = r;
  }
  EXPECT_LT(last, 0.02);
  recon_options s = cgls(12);
  s.algo = algorithm::sirt;
  const volume xs = reconstruct(p, g, vg, s);
  const volume xc = reconstruct(p, g, vg, cgls(12));
  const double e_sirt = mean_abs_error(xs.data, truth.data);
  const double e_cgls = mean_abs_error(xc.data, truth.data);
  std::cout << "[ metric   ] 12 iterations: MAE cgls " << e_cgls << ", sirt " << e_sirt << "\n";
  EXPECT_LT(e_cgls, e_sirt);
  EXPECT_EQ(reconstruct(p, g, vg, cgls(5)).data, reconstruct(p, g, vg, cgls(5)).data);
}

TEST(Cgls, OptionsAreCheckedAndNamed) {
  const volume_geometry vg = volume_geometry::centered(6, 6, 4, {1, 1, 1});
  const geometry g = make_cone_geometry(8, 6, 1, 1, 60, 120, angle_range(0, 0.5, 6));
  projection_stack p(6, 6, 8);
  recon_options o = cgls(3);
  o.nonnegative = true;
  testing::expect_error_naming([&] { (void)reconstruct(p, g, vg, o); }, "--nonnegative");
  o = cgls(0);
  testing::expect_error_naming([&] { (void)reconstruct(p, g, vg, o); }, "--iterations");
  o = cgls(3);
  o.where = backend::cuda;
  testing::expect_error_naming([&] { (void)reconstruct(p, g, vg, o); }, "--backend cuda");
  EXPECT_EQ(parse_algorithm("CGLS"), algorithm::cgls);
  EXPECT_EQ(to_string(algorithm::cgls), "cgls");
  // Zero projections: the zero volume, at once.
  const volume x = reconstruct(p, g, vg, cgls(3));
  for (float v : x.data) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace ctforge
