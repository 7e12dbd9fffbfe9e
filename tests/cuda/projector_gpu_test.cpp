// GPU forward projection (detail::cuda_forward_project) and unweighted back-projection
// (detail::cuda_back_project) against their CPU counterparts ctforge::forward_project and
// ctforge::back_project, for circular and vector geometries (tilted detector, helical source
// path), odd sizes, a single view, one detector row, a slab split, and the texture unit's
// interpolation.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"
#include "recon/recon_quality.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <algorithm>
#include <cmath>
#include <numbers>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_plan.cuh"

using namespace ctforge;

namespace {

// Exact interpolation: the GPU runs the CPU's per-ray (kernels::joseph_ray with the trilinear
// border sampler's arithmetic) and per-voxel (kernels::bp_contribution with the bilinear border
// sampler's arithmetic) float code on the same inputs; only FMA contraction, the ray set-up's
// double rounding and the order of the sum over views differ (~1e-6 of the peak). Mean
// absolute error <= 1e-5 of the peak is RTK's requirement for its CUDA filters; a half-voxel
// shift or a dropped view costs >= 1e-3.
constexpr double k_exact_tol = 1e-5;
// Texture unit interpolation: weights with 8 fractional bits (CUDA C++ Programming Guide,
// "Texture Fetching"), so a sample may be off by up to 2^-8 of the neighbouring-value
// difference along each interpolated axis; on these smooth phantoms that averages to ~1e-4 of
// the peak (a CPU emulation of the weights gave 0.55e-4 .. 1.0e-4 for FDK). 1e-3 keeps a
// 10x margin while a half-pixel shift still fails.
constexpr double k_hardware_tol = 1e-3;

enum class geo { cone, parallel, cone_vec, parallel_vec, steep };

struct proj_case {
  std::string name;
  geo kind = geo::cone;
  std::int64_t cols = 41, rows = 27, views = 23;
  std::int64_t nx = 31, ny = 27, nz = 19;
  bool hardware = false;
  // > 0: memory budget of the back-projection = its batch buffers plus this many volume
  // planes (forces a slab split); of the forward projection = two output batches of
  // min(initial batch, 8) views plus a 3D texture of this many planes.
  std::int64_t slab_planes = 0;
  int views_per_batch = 0;
  // > 0 (without slab_planes): forward projection budget for the whole volume and output
  // batches of this many views (forces several batches).
  std::int64_t fp_batch = 0;
};

std::ostream& operator<<(std::ostream& os, const proj_case& c) {
  return os << c.name;
}

constexpr double k_sid = 150, k_sdd = 240, k_du = 1.4, k_dv = 1.3, k_vox = 1.25;

// Vector geometry from a circular one: detector rotated in its plane by 6 deg and the source /
// detector moved along z by 0.4 mm per view (a helical path).
geometry vectorised(const geometry& circ) {
  std::vector<view_vectors> views = circ.views;
  const double a = 6.0 * std::numbers::pi / 180.0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    view_vectors& w = views[i];
    const vec3 u = w.u, v = w.v;
    const double ru = norm(u) / norm(v), rv = norm(v) / norm(u);
    w.u = std::cos(a) * u + (std::sin(a) * ru) * v;
    w.v = (-std::sin(a) * rv) * u + std::cos(a) * v;
    const vec3 dz{0, 0, 0.4 * static_cast<double>(i)};
    if (circ.beam == beam_kind::cone) w.source = w.source + dz;
    w.detector_center = w.detector_center + dz;
  }
  return make_vec_geometry(circ.beam, circ.cols, circ.rows, std::move(views));
}

geometry make_geometry(const proj_case& c) {
  if (c.kind == geo::steep)
    return ctforge::testing::steep_parallel_geometry(c.cols, c.rows, c.views);
  const auto angles =
      angle_range(0.3, 2 * std::numbers::pi / static_cast<double>(c.views), c.views);
  const bool cone = c.kind == geo::cone || c.kind == geo::cone_vec;
  geometry g = cone ? make_cone_geometry(c.cols, c.rows, k_du, k_dv, k_sid, k_sdd, angles)
                    : make_parallel_geometry(c.cols, c.rows, k_du, k_dv, angles);
  if (c.kind == geo::cone_vec || c.kind == geo::parallel_vec) g = vectorised(g);
  return g;
}

std::vector<proj_case> cases();

double peak_of(const std::vector<float>& v) {
  return ctforge::testing::peak_abs(v);
}

class ProjectorGpu : public ctforge::testing::gpu_param_test<proj_case> {};

/// Device memory budget that makes the forward projector run case c's plan (0: unlimited).
std::int64_t forward_budget(const proj_case& c, const volume_geometry& vg) {
  if (c.slab_planes <= 0 && c.fp_batch <= 0) return 0;
  const std::int64_t batch =
      c.fp_batch > 0 ? c.fp_batch
                     : std::min<std::int64_t>(
                           kernels::cuda::forward_initial_batch(c.views, c.rows, c.cols), 8);
  return kernels::cuda::forward_plan_bytes(vg, c.views, c.rows, c.cols, batch,
                                           c.slab_planes > 0 ? c.slab_planes : c.nz);
}

// Host side, runs without a device: each case's budget forces the plan the case is about
// (slabs of at most slab_planes planes, or several batches over the whole volume).
TEST(ProjectorGpuPlan, CasesForceTheirForwardPlan) {
  for (const proj_case& c : cases()) {
    const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {k_vox, k_vox, k_vox});
    const std::int64_t budget = forward_budget(c, vg);
    if (budget == 0) continue;
    const kernels::cuda::forward_plan p =
        kernels::cuda::make_forward_plan(vg, c.views, c.rows, c.cols, budget);
    if (c.slab_planes > 0) {
      EXPECT_EQ(p.slabs, (c.nz + c.slab_planes - 1) / c.slab_planes) << c.name;
      EXPECT_GT(p.slabs * p.slab_nz, c.nz) << c.name
                                           << ": the last slab should leave spare "
                                              "texture planes (zero-filled on the GPU)";
    } else {
      EXPECT_EQ(p.slabs, 1) << c.name;
      EXPECT_LE(p.views_per_batch, c.fp_batch) << c.name;
      EXPECT_GT((c.views + p.views_per_batch - 1) / p.views_per_batch, 2) << c.name;
    }
  }
}

TEST_P(ProjectorGpu, ForwardProjectionMatchesCpu) {
  const proj_case& c = GetParam();
  const geometry g = make_geometry(c);
  const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {k_vox, k_vox, k_vox});
  const volume vol = voxelize(shepp_logan_phantom(34), vg, 2);
  const projection_stack cpu = forward_project(vol, g);
  detail::cuda_options copt;
  copt.gpu_hardware_interpolation = c.hardware;
  copt.gpu_memory_limit_bytes = forward_budget(c, vg);
  const projection_stack gpu = detail::cuda_forward_project(vol, g, copt);
  const detail::cuda_forward_stats st = detail::cuda_last_forward_stats();
  ASSERT_EQ(gpu.data.size(), cpu.data.size());
  const double peak = peak_of(cpu.data);
  ASSERT_GT(peak, 0.0);
  const double mae = mean_abs_error(gpu.data, cpu.data);
  EXPECT_LE(mae, (c.hardware ? k_hardware_tol : k_exact_tol) * peak)
      << c.name << ": mean |gpu - cpu| = " << mae << " = " << mae / peak << " of the peak; "
      << st.slabs << " slabs of " << st.slab_nz << " planes, batches of " << st.views_per_batch
      << " views";
  if (copt.gpu_memory_limit_bytes > 0) {
    const kernels::cuda::forward_plan p =
        kernels::cuda::make_forward_plan(vg, c.views, c.rows, c.cols, copt.gpu_memory_limit_bytes);
    EXPECT_EQ(st.slabs, p.slabs);
    EXPECT_EQ(st.views_per_batch, p.views_per_batch);
  } else {
    EXPECT_EQ(st.slabs, 1);
  }
}

TEST_P(ProjectorGpu, BackProjectionMatchesCpu) {
  const proj_case& c = GetParam();
  const geometry g = make_geometry(c);
  const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {k_vox, k_vox, k_vox});
  const projection_stack proj = project_analytic(shepp_logan_phantom(34), g);
  const volume cpu = back_project(proj, g, vg);
  detail::cuda_options copt;
  copt.gpu_hardware_interpolation = c.hardware;
  copt.views_per_batch = c.views_per_batch;
  if (c.slab_planes > 0) {
    // No FFT buffers (filter = false): the budget is exact.
    kernels::cuda::plan_input in =
        kernels::cuda::make_plan_input(proj.views, proj.rows, proj.cols, vg, false);
    const std::int64_t batch =
        std::min<std::int64_t>(c.views_per_batch > 0 ? c.views_per_batch : 32, proj.views);
    copt.gpu_memory_limit_bytes =
        kernels::cuda::batch_bytes(in, batch, 0) + c.slab_planes * vg.nx * vg.ny * 4;
  }
  const volume gpu = detail::cuda_back_project(proj, g, vg, copt);
  const detail::cuda_pipeline_stats st = detail::cuda_last_pipeline_stats();
  ASSERT_EQ(gpu.data.size(), cpu.data.size());
  const double peak = peak_of(cpu.data);
  ASSERT_GT(peak, 0.0);
  const double mae = mean_abs_error(gpu.data, cpu.data);
  EXPECT_LE(mae, (c.hardware ? k_hardware_tol : k_exact_tol) * peak)
      << c.name << ": mean |gpu - cpu| = " << mae << " = " << mae / peak << " of the peak; "
      << st.batches << " batches, " << st.slabs << " slabs";
  EXPECT_FALSE(st.filtered);
  if (c.slab_planes > 0) {
    EXPECT_EQ(st.slabs, (c.nz + c.slab_planes - 1) / c.slab_planes);
  } else {
    EXPECT_EQ(st.slabs, 1);
  }
}

// The public projector API with backend cuda runs the GPU path (same result as the detail
// entry points) and agrees with backend cpu.
class ProjectorGpuApi : public ctforge::testing::gpu_test {};

TEST_F(ProjectorGpuApi, OptionsRunOnTheDevice) {
  const proj_case c{.name = "api"};
  const geometry g = make_geometry(c);
  const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {k_vox, k_vox, k_vox});
  const volume vol = voxelize(shepp_logan_phantom(34), vg, 2);
  projector_options gpu;
  gpu.where = backend::cuda;
  projector_options cpu;
  cpu.where = backend::cpu;
  const projection_stack fp = forward_project(vol, g, gpu);
  EXPECT_EQ(fp.data, detail::cuda_forward_project(vol, g, {}).data);
  const projection_stack fp_cpu = forward_project(vol, g, cpu);
  EXPECT_LE(mean_abs_error(fp.data, fp_cpu.data), k_exact_tol * peak_of(fp_cpu.data));
  const volume bp = back_project(fp_cpu, g, vg, gpu);
  // Bit for bit the GPU entry point's result (a silent CPU fallback would differ in round-off).
  EXPECT_EQ(bp.data, detail::cuda_back_project(fp_cpu, g, vg, {}).data);
  const volume bp_cpu = back_project(fp_cpu, g, vg, cpu);
  EXPECT_LE(mean_abs_error(bp.data, bp_cpu.data), k_exact_tol * peak_of(bp_cpu.data));
}

// SIRT with backend cuda runs the GPU projectors every iteration and agrees with the CPU: each
// operator is held to 1e-5 of the peak, and 5 iterations compound at most ~5 such deviations
// (measured per operator ~1e-6), so 5e-5; a helical vector geometry, which only SIRT handles.
TEST_F(ProjectorGpuApi, SirtMatchesCpu) {
  const proj_case c{.name = "sirt", .kind = geo::cone_vec};
  const geometry g = make_geometry(c);
  const auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {k_vox, k_vox, k_vox});
  const projection_stack p = project_analytic(shepp_logan_phantom(34), g);
  recon_options o;
  o.algo = algorithm::sirt;
  o.iterations = 5;
  o.where = backend::cpu;
  const volume cpu = reconstruct(p, g, vg, o);
  o.where = backend::cuda;
  const volume gpu = reconstruct(p, g, vg, o);
  const double peak = peak_of(cpu.data);
  ASSERT_GT(peak, 0.0);
  EXPECT_LE(mean_abs_error(gpu.data, cpu.data), 5e-5 * peak);
}

std::vector<proj_case> cases() {
  std::vector<proj_case> v;
  v.push_back({.name = "cone_odd_sizes"});
  v.push_back({.name = "parallel_odd_sizes", .kind = geo::parallel});
  v.push_back({.name = "cone_vec_tilted_helical", .kind = geo::cone_vec});
  v.push_back({.name = "parallel_vec_tilted", .kind = geo::parallel_vec});
  v.push_back({.name = "cone_single_view", .views = 1});
  v.push_back({.name = "cone_one_row", .rows = 1, .nz = 1});
  v.push_back({.name = "cone_size_one_y", .ny = 1});
  v.push_back({.name = "cone_vec_partial_batches", .kind = geo::cone_vec, .views_per_batch = 6});
  v.push_back({.name = "cone_vec_slab_split",
               .kind = geo::cone_vec,
               .nz = 61,
               .slab_planes = 13,
               .views_per_batch = 4});
  v.push_back({.name = "steep_parallel_z_dominant", .kind = geo::steep});
  v.push_back(
      {.name = "steep_parallel_slab_split", .kind = geo::steep, .nz = 41, .slab_planes = 9});
  v.push_back({.name = "cone_forward_chunks", .fp_batch = 5});
  v.push_back({.name = "cone_hardware_interpolation", .hardware = true});
  v.push_back(
      {.name = "parallel_vec_hardware_interpolation", .kind = geo::parallel_vec, .hardware = true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, ProjectorGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<proj_case>& i) { return i.param.name; });

}  // namespace

#else

TEST(ProjectorGpu, Skipped) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
