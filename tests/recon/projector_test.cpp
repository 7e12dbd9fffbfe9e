// Voxel projectors: Joseph forward projection against exact line integrals of the analytic
// phantom, fast vs reference back-projection, and a constant back-projection.
#include "ctforge/projector.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "cuda/cuda_api.hpp"
#include "math/backproject.hpp"
#include "math/forward_project.hpp"
#include "math/geometry.hpp"
#include "recon/backproject_cpu.hpp"
#include "recon/forward_project_cpu.hpp"
#include "recon/recon_quality.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;

struct comparison {
  double sum_rel;       // |sum(a) - sum(b)| / sum(b)
  double mean_abs_rel;  // mean |a - b| / max |b|
  double max_abs_rel;   // max |a - b| / max |b|
};

comparison compare(const projection_stack& a, const projection_stack& b) {
  double sa = 0, sb = 0, mad = 0, peak = 0, mx = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    sa += a.data[i];
    sb += b.data[i];
    mad += std::abs(a.data[i] - b.data[i]);
    mx = std::max(mx, static_cast<double>(std::abs(a.data[i] - b.data[i])));
    peak = std::max(peak, static_cast<double>(std::abs(b.data[i])));
  }
  return {std::abs(sa - sb) / std::abs(sb), mad / static_cast<double>(a.data.size()) / peak,
          mx / peak};
}

// The Joseph projection of a voxelized phantom differs from the exact line integrals through
// (1) partial-volume averaging in the voxelization and (2) bilinear interpolation between
// voxel centres, both confined to a band of about one voxel around each edge, so the mean
// error scales with the voxel size h (measured for Shepp-Logan 60 mm, parallel beam: mean
// |error| / peak = 2.3 %, 1.26 %, 0.54 % at h = 2, 1, 0.5 mm; bias < 1e-3 of the peak). The
// Shepp-Logan skull is only 0.8 mm thick, so single rays grazing it are off by up to ~35 % of
// the peak; the sums (both ~ the projected mass) agree to < 0.2 %. Tolerances are ~1.5-2x
// the measured values, far below what a misregistration (half-voxel shift, swapped axes,
// wrong spacing) produces, which is also checked by the convergence test below.
comparison expect_fp_close(const projection_stack& fp, const projection_stack& exact,
                           double sum_tol, double mean_tol) {
  const bool same_shape = fp.views == exact.views && fp.rows == exact.rows && fp.cols == exact.cols;
  EXPECT_TRUE(same_shape);
  if (!same_shape) return {1, 1, 1};
  const comparison c = compare(fp, exact);
  EXPECT_LT(c.sum_rel, sum_tol);
  EXPECT_LT(c.mean_abs_rel, mean_tol);
  std::printf("    sum rel %.2e, mean abs / peak %.2e, max abs / peak %.2e\n", c.sum_rel,
              c.mean_abs_rel, c.max_abs_rel);
  return c;
}

const phantom& shepp60() {
  static const phantom p = shepp_logan_phantom(60);
  return p;
}
const volume& shepp60_voxels() {
  static const volume v = voxelize(shepp60(), volume_geometry::centered(64, 64, 64, {1, 1, 1}), 3);
  return v;
}

TEST(ForwardProject, ConeMatchesAnalyticSheppLogan) {
  // Magnification 2, detector covering the whole phantom (near-side magnification 2.3).
  const geometry g = make_cone_geometry(81, 77, 1.6, 1.6, 200, 400,
                                        angle_range(0.1, 2 * pi / 12, 12), {0.8}, {-0.4});
  const auto fp = forward_project(shepp60_voxels(), g, 0);
  const auto exact = project_analytic(shepp60(), g, 0);
  expect_fp_close(fp, exact, 5e-3, 2e-2);  // measured 2.6e-4, 1.2e-2
}

TEST(ForwardProject, ParallelMatchesAnalyticSheppLogan) {
  const geometry g = make_parallel_geometry(67, 61, 1.0, 1.0, angle_range(0.05, pi / 12, 12));
  const auto fp = forward_project(shepp60_voxels(), g, 0);
  const auto exact = project_analytic(shepp60(), g, 0);
  const comparison fine = expect_fp_close(fp, exact, 5e-3, 2e-2);  // measured 1.7e-3, 1.26e-2
  // Convergence: with 2 mm voxels the mean error must be clearly larger (measured ratio 0.55;
  // O(h) predicts 0.5). A registration error would not shrink with the voxel size.
  const volume coarse_vol =
      voxelize(shepp60(), volume_geometry::centered(32, 32, 32, {2, 2, 2}), 3);
  const comparison coarse = compare(forward_project(coarse_vol, g, 0), exact);
  EXPECT_LT(fine.mean_abs_rel, 0.7 * coarse.mean_abs_rel);
  // Parallel beam: every view's sum times the pixel area is the projected mass, the same for
  // all views (Joseph with bilinear interpolation conserves it up to edge effects).
  double lo = 1e300, hi = 0;
  for (std::int64_t v = 0; v < fp.views; ++v) {
    double s = 0;
    for (std::int64_t i = 0; i < fp.rows * fp.cols; ++i) s += fp.view(v)[i];
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  EXPECT_LT((hi - lo) / hi, 5e-3);
}

TEST(ForwardProject, SingleViewOddAnisotropicGrid) {
  // Odd sizes, anisotropic spacing, an off-centre volume and a single oblique cone view with
  // a tilted detector: checks the world -> index conversion in every axis.
  const phantom p{{{{2, -3, 1}, {14, 9, 11}, 25, 0.02}, {{-4, 2, -2}, {5, 6, 4}, -40, 0.05}}};
  volume_geometry vg;
  vg.nx = 41;
  vg.ny = 33;
  vg.nz = 27;
  vg.spacing_mm = {0.9, 1.1, 1.3};
  vg.origin_mm = {-18.4, -21.0, -16.1};
  const volume vol = voxelize(p, vg, 3);
  const view_vectors w{{150, -90, 40}, {-90, 60, -25}, {0.45, 0.8, -0.1}, {-0.05, 0.1, 0.9}};
  const geometry g = make_vec_geometry(beam_kind::cone, 73, 59, {w});
  // Measured 3.7e-4 and 5.2e-3 (voxels up to 1.3 mm).
  expect_fp_close(forward_project(vol, g, 1), project_analytic(p, g, 1), 5e-3, 1e-2);
  // Thread count must not change the result.
  EXPECT_EQ(forward_project(vol, g, 1).data, forward_project(vol, g, 2).data);
}

TEST(ForwardProject, FanBeamOnSingleSlice) {
  // rows = 1 with a volume of nz = 1: a 2D problem. The phantom is a long cylinder along z
  // (semi-axis 1e4 mm), so the z = 0 slice of the 3D phantom is exact in 2D.
  const phantom p{{{{0, 0, 0}, {20, 14, 1e4}, 30, 0.02}, {{5, 3, 0}, {4, 6, 1e4}, 0, 0.03}}};
  const volume vol = voxelize(p, volume_geometry::centered(57, 51, 1, {0.8, 0.8, 0.8}), 4);
  const geometry fan = make_cone_geometry(97, 1, 0.9, 1.0, 120, 200, angle_range(0, 0.37, 17));
  // Measured 2.1e-4, 2.7e-3 and 2.5e-4, 2.5e-3 (0.8 mm pixels, smooth 2D objects).
  expect_fp_close(forward_project(vol, fan, 0), project_analytic(p, fan, 0), 5e-3, 5e-3);
  const geometry par = make_parallel_geometry(61, 1, 0.8, 1.0, angle_range(0, 0.37, 9));
  expect_fp_close(forward_project(vol, par, 0), project_analytic(p, par, 0), 5e-3, 5e-3);
}

TEST(ForwardProject, AxisAlignedRayThroughConstantVolumeIsExact) {
  // A constant volume: a ray along an axis through voxel centres sums n samples of value c,
  // times the spacing -> n * spacing * c exactly (float: 1e-6 relative). Off-axis rays through
  // the middle get chord * c up to the box-edge interpolation (within one voxel).
  volume vol(volume_geometry::centered(9, 7, 5, {2, 3, 4}));
  for (auto& x : vol.data) x = 0.25f;
  const geometry g = make_parallel_geometry(3, 3, 2, 4, {0.0, pi / 2});  // rays along +y, -x
  const auto fp = forward_project(vol, g, 1);
  EXPECT_NEAR(fp.at(0, 1, 1), 7 * 3 * 0.25, 1e-6 * 7 * 3);
  EXPECT_NEAR(fp.at(1, 1, 1), 9 * 2 * 0.25, 1e-6 * 9 * 2);
  EXPECT_NEAR(fp.at(1, 0, 0), 9 * 2 * 0.25, 1e-6 * 9 * 2);  // z = -4 is a voxel centre too
}

TEST(ForwardProject, RaysMissingTheVolumeGiveZero) {
  volume vol(volume_geometry::centered(8, 8, 8, {1, 1, 1}));
  for (auto& x : vol.data) x = 1.0f;
  // Detector far off to the side: rays parallel to the volume, 50 mm away.
  const geometry g = make_parallel_geometry(4, 4, 1, 1, {0.0}, {50.0}, {0.0});
  const auto fp = forward_project(vol, g, 1);
  for (float x : fp.data) EXPECT_EQ(x, 0.0f);
}

TEST(ForwardProject, ConeRaysStartAtTheSource) {
  // A source inside the volume: only the part of each ray beyond the source is integrated,
  // as in project_analytic (and as the back-projection ignores voxels behind the source).
  const phantom p{{{{0, 0, 0}, {18, 18, 18}, 0, 0.01}}};
  const volume vol = voxelize(p, volume_geometry::centered(41, 41, 41, {1, 1, 1}), 3);
  const geometry g = make_vec_geometry(beam_kind::cone, 9, 9,
                                       {{{0.3, -5, 0.2}, {0, 60, 0}, {3, 0, 0}, {0, 0, 3}}});
  // Same tolerances as for the other smooth objects (edge effects only; measured 7e-4 and
  // 1.4e-3). Without the partial first cell the error would be ~2 % (half a voxel of 25 mm).
  expect_fp_close(forward_project(vol, g, 1), project_analytic(p, g, 1), 5e-3, 5e-3);
}

projection_stack random_projections(const geometry& g, std::uint64_t seed) {
  projection_stack s(g.view_count(), g.rows, g.cols);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (auto& x : s.data) x = u(gen);
  return s;
}

// Fast (float matrices, float accumulation per view row, padded branch-free sampler) against
// the reference (double matrices, double accumulation, bounds-checked sampler). In float the
// detector coordinate p0/p2 carries a relative rounding error of a few 1e-7; with coordinates
// up to ~100 pixels that is ~1e-5 pixel, which moves a bilinear sample by at most
// 1e-5 * (the largest jump between neighbouring pixels, 1 for random data in [0, 1]). Summed
// over V views against a maximum of ~V/2 this gives at most a few 1e-5 for random data (the
// errors of different views are independent, so typically much less: measured <= 3.6e-6):
// bound 3e-5. For smooth data (the projections of a phantom) the same reasoning gives ~1e-6
// (measured 1.1e-6): bound 1e-5.
void expect_bp_agree(const projection_stack& proj, const geometry& g, const volume_geometry& vg,
                     double tol) {
  const volume fast = back_project(proj, g, vg, 2, false);
  const volume ref = back_project(proj, g, vg, 1, true);
  ASSERT_EQ(fast.data.size(), ref.data.size());
  double mx = 0, diff = 0;
  for (std::size_t i = 0; i < ref.data.size(); ++i) {
    mx = std::max(mx, static_cast<double>(std::abs(ref.data[i])));
    diff = std::max(diff, static_cast<double>(std::abs(fast.data[i] - ref.data[i])));
  }
  ASSERT_GT(mx, 0);
  EXPECT_LT(diff / mx, tol);
  std::printf("    max |fast - ref| / max = %.2e\n", diff / mx);
}

TEST(BackProject, FastMatchesReferenceConeOddSizes) {
  const geometry g =
      make_cone_geometry(37, 23, 1.3, 1.7, 120, 210, angle_range(0.2, 0.61, 11), {1.1}, {-0.6});
  volume_geometry vg = volume_geometry::centered(31, 26, 17, {1.0, 0.9, 1.2});
  vg.origin_mm[0] += 0.37;  // off-centre
  expect_bp_agree(random_projections(g, 1), g, vg, 3e-5);
  const phantom p = shepp_logan_phantom(30);
  expect_bp_agree(project_analytic(p, g), g, vg, 1e-5);
}

TEST(BackProject, FastMatchesReferenceSingleViewAndFanBeam) {
  const geometry one =
      make_vec_geometry(beam_kind::cone, 29, 19,
                        {{{140, -70, 15}, {-80, 50, -10}, {0.5, 0.75, 0.05}, {0, 0.1, 1.0}}});
  expect_bp_agree(random_projections(one, 2), one, volume_geometry::centered(23, 21, 15, {1, 1, 1}),
                  3e-5);
  // rows = 1 and a single-slice volume (fan beam, 2D).
  const geometry fan = make_cone_geometry(45, 1, 1.0, 1.0, 100, 180, angle_range(0, 0.3, 21));
  expect_bp_agree(random_projections(fan, 3), fan, volume_geometry::centered(33, 35, 1, {1, 1, 1}),
                  3e-5);
  const geometry par = make_parallel_geometry(41, 3, 1.0, 1.0, angle_range(0, 0.2, 15));
  expect_bp_agree(random_projections(par, 4), par, volume_geometry::centered(27, 29, 3, {1, 1, 1}),
                  3e-5);
}

TEST(BackProject, ConstantProjectionsGiveViewCountInsideFieldOfView) {
  // Parallel beam, all projections 1: a voxel whose detector coordinate stays within
  // [0, cols - 1] x [0, rows - 1] in every view reads exactly 1 per view, so the sum is the
  // number of views (exact in float for small integers).
  const std::int64_t views = 24, cols = 41, rows = 11;
  const geometry g =
      make_parallel_geometry(cols, rows, 1.0, 1.0, angle_range(0, pi / views, views));
  projection_stack ones(views, rows, cols);
  std::fill(ones.data.begin(), ones.data.end(), 1.0f);
  const volume_geometry vg = volume_geometry::centered(45, 45, 11, {1, 1, 1});
  for (bool reference : {false, true}) {
    const volume bp = back_project(ones, g, vg, 0, reference);
    const double fov = 0.5 * static_cast<double>(cols - 1);  // radius (mm) inside the detector
    std::int64_t inside = 0;
    for (std::int64_t k = 0; k < vg.nz; ++k)
      for (std::int64_t j = 0; j < vg.ny; ++j)
        for (std::int64_t i = 0; i < vg.nx; ++i) {
          const vec3 x = vg.voxel_center(i, j, k);
          const double r = std::hypot(x.x, x.y);
          if (r <= fov - 1e-3) {
            ++inside;
            EXPECT_EQ(bp.at(k, j, i), static_cast<float>(views)) << i << "," << j << "," << k;
          } else {
            // Partly outside the detector in some views: fewer samples of 1, never more.
            EXPECT_LE(bp.at(k, j, i), static_cast<float>(views));
          }
        }
    EXPECT_GT(inside, 1000);
  }
}

TEST(BackProject, FdkWeightedLoopMatchesDoubleReference) {
  // backproject_cpu<fdk> (used by FDK) against a direct double loop with weight 1/w^2.
  const geometry g = make_cone_geometry(33, 21, 1.2, 1.2, 100, 160, angle_range(0.1, 0.5, 9));
  const volume_geometry vg = volume_geometry::centered(27, 25, 15, {1, 1, 1});
  const projection_stack proj = project_analytic(shepp_logan_phantom(30), g);
  const auto padded = detail::make_padded_projections(proj);
  const auto fm = kernels::float_matrices(g);
  volume fast(vg);
  // Two z ranges: the loop adds into the slices it is given and leaves the others alone.
  detail::backproject_cpu<kernels::bp_weighting::fdk>(padded, fm.data(), vg, fast.data.data(), 0, 6,
                                                      2);
  detail::backproject_cpu<kernels::bp_weighting::fdk>(padded, fm.data(), vg, fast.data.data(), 6,
                                                      vg.nz, 1);
  const auto dm = compute_projection_matrices(g);
  double mx = 0, diff = 0;
  for (std::int64_t k = 0; k < vg.nz; ++k)
    for (std::int64_t j = 0; j < vg.ny; ++j)
      for (std::int64_t i = 0; i < vg.nx; ++i) {
        const vec3 x = vg.voxel_center(i, j, k);
        double acc = 0;
        for (std::int64_t v = 0; v < g.view_count(); ++v) {
          const auto& m = dm[v];
          const double p0 = m[0] * x.x + m[1] * x.y + m[2] * x.z + m[3];
          const double p1 = m[4] * x.x + m[5] * x.y + m[6] * x.z + m[7];
          const double p2 = m[8] * x.x + m[9] * x.y + m[10] * x.z + m[11];
          acc += kernels::sample_bilinear_border(proj.view(v), 33, 21, static_cast<float>(p0 / p2),
                                                 static_cast<float>(p1 / p2)) /
                 (p2 * p2);
        }
        mx = std::max(mx, std::abs(acc));
        diff = std::max(diff, std::abs(fast.at(k, j, i) - acc));
      }
  // Smooth data: see expect_bp_agree.
  EXPECT_LT(diff / mx, 1e-5);
}

TEST(Projectors, RejectMismatchedInput) {
  const geometry g = make_parallel_geometry(8, 4, 1, 1, {0.0, 1.0});
  projection_stack wrong(2, 4, 9);
  EXPECT_THROW(back_project(wrong, g, volume_geometry::centered(4, 4, 4, {1, 1, 1})), usage_error);
  volume bad(volume_geometry::centered(4, 4, 4, {1, 1, 1}));
  bad.data.resize(10);
  EXPECT_THROW(forward_project(bad, g), usage_error);
}

// The options overloads: backend cpu gives exactly the threads overloads' result; invalid
// options are usage errors naming the option; the CUDA backend without a usable device is an
// error, never a silent CPU run.
TEST(Projectors, OptionsSelectTheBackend) {
  const geometry g = make_cone_geometry(21, 9, 1.5, 1.5, 120, 240, angle_range(0.1, 0.4, 7));
  const auto vg = volume_geometry::centered(11, 10, 7, {1.2, 1.2, 1.2});
  const volume vol = voxelize(shepp_logan_phantom(12), vg, 2);
  projector_options cpu;
  cpu.where = backend::cpu;
  cpu.threads = 2;
  const projection_stack fp = forward_project(vol, g, cpu);
  EXPECT_EQ(fp.data, forward_project(vol, g, 2).data);
  EXPECT_EQ(back_project(fp, g, vg, cpu).data, back_project(fp, g, vg, 2, false).data);
  projector_options bad = cpu;
  bad.threads = -1;
  EXPECT_THROW(forward_project(vol, g, bad), usage_error);
  EXPECT_THROW(back_project(fp, g, vg, bad), usage_error);
  std::string why;
  projector_options gpu;
  gpu.where = backend::cuda;
#if defined(CTFORGE_WITH_CUDA)
  if (detail::cuda_device_available(&why, 0)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(forward_project(vol, g, gpu), ctforge::error);
  EXPECT_THROW(back_project(fp, g, vg, gpu), ctforge::error);
#else
  EXPECT_THROW(forward_project(vol, g, gpu), usage_error);
  EXPECT_THROW(back_project(fp, g, vg, gpu), usage_error);
#endif
  projector_options automatic;  // falls back to the CPU here
  automatic.threads = 2;
  EXPECT_EQ(forward_project(vol, g, automatic).data, fp.data);
}

// Slab-by-slab forward projection (the GPU's decomposition when the volume exceeds device
// memory: each slab's planes in their own texture, rays traced through a window of the slab,
// slabs summed) against the whole-volume projection. Trilinear interpolation is linear in the
// voxel values, so the only differences are the float rounding of the sum over slabs (a few
// ulp of a ray sum: measured <= 2.1e-7 of the peak) and samples dropped at a window's ends by
// rounding, whose slab weight is itself ~1e-7. 1e-5 leaves a 50x margin; a window half a plane
// short already costs 0.14 .. 0.36 of the peak (checked by mutating project_planes).
TEST(ForwardProjectSlabs, SumOfSlabsIsTheWholeVolume) {
  const auto vg = volume_geometry::centered(23, 19, 17, {1.2, 1.2, 1.1});
  const volume vol = voxelize(shepp_logan_phantom(12), vg, 2);
  const geometry cone =
      make_cone_geometry(29, 25, 1.3, 1.3, 60, 110, angle_range(0.1, 2 * pi / 11, 11));
  const geometry par = make_parallel_geometry(29, 25, 1.1, 1.0, angle_range(0.1, pi / 9, 9));
  const geometry steep = ctforge::testing::steep_parallel_geometry(27, 21, 7);
  for (const auto* g : {&cone, &par, &steep}) {
    const projection_stack whole = forward_project(vol, *g, 2);
    double peak = 0;
    for (float x : whole.data) peak = std::max(peak, static_cast<double>(std::abs(x)));
    ASSERT_GT(peak, 0.0);
    for (std::int64_t slab : {1, 2, 5, 16}) {
      const projection_stack sum = detail::forward_project_slabs(vol, *g, slab, 2);
      ASSERT_EQ(sum.data.size(), whole.data.size());
      double max_diff = 0;
      for (std::size_t i = 0; i < sum.data.size(); ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::abs(sum.data[i] - whole.data[i])));
      EXPECT_LE(max_diff, 1e-5 * peak) << "slabs of " << slab << " planes, beam "
                                       << (g == &cone  ? "cone"
                                           : g == &par ? "parallel"
                                                       : "steep");
    }
    // One slab holding every plane is the whole-volume computation itself.
    EXPECT_EQ(detail::forward_project_slabs(vol, *g, 17, 2).data, whole.data);
    EXPECT_EQ(detail::forward_project_slabs(vol, *g, 40, 1).data, whole.data);
  }
  EXPECT_THROW(detail::forward_project_slabs(vol, cone, 0), usage_error);
}

// No silent NaN: a non-finite voxel or projection value would spread into every ray or voxel
// it touches. Both projectors refuse it up front, naming where it is, on every entry point.
TEST(Projectors, NonFiniteInputsAreUsageErrorsNamingTheValue) {
  const auto vg = volume_geometry::centered(7, 6, 5, {1, 1, 1});
  const geometry g = make_cone_geometry(9, 8, 1.5, 1.5, 60, 110, angle_range(0, pi / 4, 8));
  volume vol(vg);
  vol.at(1, 2, 3) = std::numeric_limits<float>::quiet_NaN();  // (z, y, x) = (1, 2, 3)
  projection_stack p(8, 8, 9);
  p.at(5, 4, 2) = std::numeric_limits<float>::infinity();
  projector_options cpu;
  cpu.where = backend::cpu;
  using ctforge::testing::expect_error_naming;
  using ctforge::testing::expect_usage_error_naming;
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { (void)forward_project(vol, g, 1); },
           [&] { (void)forward_project(vol, g, projector_options{}); },
           [&] { (void)forward_project(vol, g, cpu); },
           [&] { (void)detail::forward_project_slabs(vol, g, 2); }})
    expect_usage_error_naming([&] { f(); }, "voxel (x 3, y 2, z 1)", "nan");
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { (void)back_project(p, g, vg, 1); }, [&] { (void)back_project(p, g, vg, 1, true); },
           [&] { (void)back_project(p, g, vg, projector_options{}); },
           [&] { (void)back_project(p, g, vg, cpu); }})
    expect_error_naming(f, "view 5, row 4, col 2", "inf");
}

// The Joseph body on its own: through a single bright voxel, every ray along an axis that
// passes its centre picks up exactly value * spacing (one plane sample, bilinear weight 1).
TEST(JosephKernel, SingleVoxelAlongEachAxis) {
  std::vector<float> vol(5 * 4 * 3, 0.0f);
  const int nx = 5, ny = 4, nz = 3;
  vol[(1 * ny + 2) * nx + 3] = 2.0f;  // voxel (i, j, k) = (3, 2, 1)
  const kernels::trilinear_border_sampler s{vol.data(), nx, ny, nz};
  EXPECT_FLOAT_EQ(kernels::joseph_ray(s, {-7, 2, 1}, {1, 0, 0}, nx, ny, nz, 1.5f), 3.0f);
  EXPECT_FLOAT_EQ(kernels::joseph_ray(s, {3, 9, 1}, {0, -2, 0}, nx, ny, nz, 2.0f), 2.0f);
  EXPECT_FLOAT_EQ(kernels::joseph_ray(s, {3, 2, -4}, {0, 0, 0.5f}, nx, ny, nz, 1.0f), 4.0f);
  // Half a voxel off in a transverse axis: bilinear weight 1/2.
  EXPECT_FLOAT_EQ(kernels::joseph_ray(s, {0, 2.5f, 1}, {1, 0, 0}, nx, ny, nz, 1.0f), 1.0f);
  // Diagonal in x-y through the voxel centre: one sample per x plane at (3, 2) exactly, step
  // length sqrt(2) per x unit.
  EXPECT_FLOAT_EQ(kernels::joseph_ray(s, {3, 2, 1}, {1, 1, 0}, nx, ny, nz, std::sqrt(2.0f)),
                  2.0f * std::sqrt(2.0f));
  // Missing the box entirely.
  EXPECT_EQ(kernels::joseph_ray(s, {0, 5, 1}, {1, 0, 0}, nx, ny, nz, 1.0f), 0.0f);
}

// A cut at t_min counts the cut cell partially: a constant volume of 5 voxels along x (cells
// [-0.5, 4.5]) integrated from x = 2.3 on covers 2.2 voxels; in the other direction 2.8.
TEST(JosephKernel, CutAtTminCountsPartialCell) {
  std::vector<float> vol(5 * 2 * 2, 1.5f);
  const kernels::trilinear_border_sampler s{vol.data(), 5, 2, 2};
  // p at x = 0.3 with d = (2, 0, 0): t_min = 1 puts the cut at x = 2.3; dir_mm = 2 (1 mm voxels).
  EXPECT_NEAR(kernels::joseph_ray(s, {0.3f, 0.5f, 0.5f}, {2, 0, 0}, 5, 2, 2, 2.0f, 1.0f),
              1.5f * 2.2f, 1e-5f);
  EXPECT_NEAR(kernels::joseph_ray(s, {0.3f, 0.5f, 0.5f}, {-2, 0, 0}, 5, 2, 2, 2.0f, -1.0f),
              1.5f * 2.8f, 1e-5f);
  // No cut: the whole 5 voxels.
  EXPECT_NEAR(kernels::joseph_ray(s, {0.3f, 0.5f, 0.5f}, {-2, 0, 0}, 5, 2, 2, 2.0f), 1.5f * 5,
              1e-5f);
}

// The layout padded_volume_sampler reads: one zero voxel before and two after each axis.
std::vector<float> zero_bordered(const std::vector<float>& vol, int nx, int ny, int nz) {
  std::vector<float> padded(static_cast<std::size_t>((nx + 3) * (ny + 3) * (nz + 3)), 0.0f);
  for (int k = 0; k < nz; ++k)
    for (int j = 0; j < ny; ++j)
      for (int i = 0; i < nx; ++i)
        padded[static_cast<std::size_t>(((k + 1) * (ny + 3) + j + 1) * (nx + 3) + i + 1)] =
            vol[static_cast<std::size_t>((k * ny + j) * nx + i)];
  return padded;
}

/// n values uniform in [0.5, 2), drawn from `gen` in order.
std::vector<float> random_values(int n, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> val(0.5f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = val(gen);
  return v;
}

// The branch-free padded sampler (the GPU's arithmetic) reproduces the bounds-checked
// border-zero trilinear sampler everywhere, including outside the volume and on its faces.
// Both compute the same weights; only the summation order differs (float: 1e-6 relative).
TEST(JosephKernel, PaddedSamplerMatchesBorderSampler) {
  const int nx = 6, ny = 5, nz = 1;  // includes a size-1 axis
  std::mt19937_64 gen(11);
  const std::vector<float> vol = random_values(nx * ny * nz, gen);
  std::uniform_real_distribution<float> pos(-2.5f, 7.5f);
  const std::vector<float> padded = zero_bordered(vol, nx, ny, nz);
  const kernels::padded_volume_sampler fast{padded.data(), nx, ny, nz};
  for (int t = 0; t < 20000; ++t) {
    float x = pos(gen), y = pos(gen), z = 0.6f * pos(gen) - 1.0f;
    if (t % 4 == 0) x = std::round(x);  // integer (plane) coordinates, as Joseph samples
    if (t % 7 == 0) z = std::round(z);
    const float ref = kernels::sample_trilinear_border(vol.data(), nx, ny, nz, x, y, z);
    ASSERT_NEAR(fast(x, y, z), ref, 1e-6f * 2.0f) << x << " " << y << " " << z;
  }
}

// forward_project reads the caller's volume in place through border_volume_sampler, which must
// give padded_volume_sampler's values bit for bit (same arithmetic, zeros fetched instead of
// stored), inside, on the faces and outside, for sizes with 1 and 2 voxels along an axis.
TEST(JosephKernel, InPlaceSamplerIsBitIdenticalToPaddedSampler) {
  for (const auto [nx, ny, nz] : {std::array{6, 5, 1}, std::array{2, 7, 3}, std::array{1, 1, 4}}) {
    std::mt19937_64 gen(12);
    const std::vector<float> vol = random_values(nx * ny * nz, gen);
    std::uniform_real_distribution<float> pos(-2.5f, 8.5f);
    const std::vector<float> padded = zero_bordered(vol, nx, ny, nz);
    const kernels::padded_volume_sampler fast{padded.data(), nx, ny, nz};
    const kernels::border_volume_sampler in_place{vol.data(), nx, ny, nz};
    int interior = 0;
    for (int t = 0; t < 20000; ++t) {
      float x = pos(gen), y = pos(gen), z = pos(gen) - 1.0f;
      if (t % 4 == 0) x = std::round(x);
      if (t % 7 == 0) z = std::round(z);
      interior += x >= 0 && y >= 0 && z >= 0 && x < nx - 1 && y < ny - 1 && z < nz - 1;
      ASSERT_EQ(in_place(x, y, z), fast(x, y, z)) << x << " " << y << " " << z;
    }
    if (nx > 1 && ny > 1 && nz > 1) EXPECT_GT(interior, 100);  // both branches exercised
  }
}

}  // namespace
}  // namespace ctforge
