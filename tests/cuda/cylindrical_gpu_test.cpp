// Cylindrical (curved) detectors on the GPU against the CPU path on the same inputs: Joseph
// forward projection (rays to the curved pixel centres, kernels::cylinder_pixel_center) and FDK
// (pre-weights in gamma = arc / SDD, equiangular ramp kernel, the back-projector's curved
// variant reading kernels::cyl_map from constant memory), full and short scans, detector
// offsets, and a slab split forced by a small memory budget (slab_rows_curved row bands).
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/recon_quality.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <cmath>
#include <numbers>
#include <ostream>
#include <string>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_plan.cuh"
#include "recon/filter.hpp"

using namespace ctforge;
using ctforge::testing::span_of;

namespace {

// As fdk_gpu_test.cpp and projector_gpu_test.cpp: with exact interpolation both paths run the
// same float arithmetic per ray / pixel / voxel; FFT implementation, summation order and FMA
// contraction leave ~1e-6 of the peak, while a real defect (half-pixel shift, wrong weight,
// dropped view or slab seam) is >= 1e-3.
constexpr double k_exact_tol = 1e-5;

constexpr double k_sid = 160, k_sdd = 260, k_du = 1.3, k_dv = 1.25;

double peak_of(std::span<const float> v) {
  return ctforge::testing::peak_abs(v);
}

struct cyl_case {
  std::string name;
  std::int64_t cols = 45, rows = 31, views = 40;
  double arc_deg = 360;  // < 0: 180 deg + fan angle + 4 deg (short scan)
  double offset_u = 0, offset_v = 0;
  std::int64_t nx = 33, ny = 29, nz = 17;
  std::int64_t slab_planes = 0;  // > 0: memory budget forcing slabs of this many planes
};

std::ostream& operator<<(std::ostream& os, const cyl_case& c) {
  return os << c.name;
}

geometry make_geometry(const cyl_case& c) {
  double arc = c.arc_deg;
  if (arc < 0) {
    const double half_width = 0.5 * static_cast<double>(c.cols - 1) * k_du + std::abs(c.offset_u);
    arc = 180 + 2 * (half_width / k_sdd) * 180 / std::numbers::pi + 4;  // gamma = arc / SDD
  }
  const double step = deg_to_rad(arc) / static_cast<double>(c.views);
  return make_cone_geometry(c.cols, c.rows, k_du, k_dv, k_sid, k_sdd,
                            angle_range(deg_to_rad(7.0), step, c.views), {c.offset_u}, {c.offset_v},
                            detector_shape::cylindrical);
}

volume_geometry make_volume(const cyl_case& c) {
  return volume_geometry::centered(c.nx, c.ny, c.nz, {1.4, 1.4, 1.4});
}

/// The scan of a case: its geometry, grid and the Shepp-Logan phantom's projections.
struct problem {
  geometry g;
  volume_geometry vg;
  projection_stack proj;
};
problem problem_of(const cyl_case& c) {
  problem p{make_geometry(c), make_volume(c), {}};
  p.proj = project_analytic(shepp_logan_phantom(36), p.g);
  return p;
}

class CylindricalGpu : public ctforge::testing::gpu_param_test<cyl_case> {};

TEST_P(CylindricalGpu, FdkMatchesCpuPath) {
  const cyl_case& c = GetParam();
  const auto [g, vg, proj] = problem_of(c);
  recon_options opt;
  opt.where = backend::cpu;
  const volume cpu = reconstruct(proj, g, vg, opt);
  detail::cuda_options copt;
  if (c.slab_planes > 0)
    copt.gpu_memory_limit_bytes =
        ctforge::testing::slab_budget(c.views, c.rows, c.cols, vg, c.slab_planes);
  opt.where = backend::cuda;
  const volume gpu = ctforge::testing::cuda_reconstruct_as_reconstruct(proj, g, vg, opt, copt);
  const detail::cuda_pipeline_stats st = detail::cuda_last_pipeline_stats();
  const double peak = peak_of(span_of(cpu));
  ASSERT_GT(peak, 0.0);
  const double mae = mean_abs_error(span_of(gpu), span_of(cpu));
  EXPECT_LE(mae, k_exact_tol * peak) << c.name << ": mean |gpu - cpu| = " << mae / peak
                                     << " of the peak; " << st.slabs << " slabs";
  if (c.slab_planes > 0) EXPECT_GT(st.slabs, 1) << "the budget should have forced slabs";
  // Through the public API with the CUDA backend: the same volume.
  const volume api = reconstruct(proj, g, vg, opt);
  EXPECT_LE(mean_abs_error(span_of(api), span_of(cpu)), k_exact_tol * peak);
}

TEST_P(CylindricalGpu, ForwardProjectionMatchesCpu) {
  const cyl_case& c = GetParam();
  const geometry g = make_geometry(c);
  const volume vol = voxelize(shepp_logan_phantom(34), make_volume(c), 2);
  const projection_stack cpu = forward_project(vol, g);
  const projection_stack gpu = detail::cuda_forward_project(vol, g, detail::cuda_options{});
  ASSERT_EQ(gpu.data.size(), cpu.data.size());
  const double peak = peak_of(cpu.data);
  ASSERT_GT(peak, 0.0);
  EXPECT_LE(mean_abs_error(gpu.data, cpu.data), k_exact_tol * peak) << c.name;
}

// Unweighted back-projection (SIRT's) through the same pipeline.
TEST_P(CylindricalGpu, BackProjectionMatchesCpu) {
  const cyl_case& c = GetParam();
  const geometry g = make_geometry(c);
  const volume_geometry vg = make_volume(c);
  const projection_stack proj = project_analytic(shepp_logan_phantom(36), g);
  projector_options cpu_o, gpu_o;
  cpu_o.where = backend::cpu;
  gpu_o.where = backend::cuda;
  const volume cpu = back_project(proj, g, vg, cpu_o);
  const volume gpu = back_project(proj, g, vg, gpu_o);
  const double peak = peak_of(span_of(cpu));
  ASSERT_GT(peak, 0.0);
  EXPECT_LE(mean_abs_error(span_of(gpu), span_of(cpu)), k_exact_tol * peak) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CylindricalGpu,
    ::testing::Values(cyl_case{.name = "full_scan"},
                      cyl_case{.name = "offsets", .offset_u = 3.5, .offset_v = -2.0},
                      cyl_case{.name = "short_scan", .views = 36, .arc_deg = -1},
                      cyl_case{.name = "fan_one_row", .rows = 1, .nz = 1},
                      cyl_case{.name = "z_slabs", .offset_v = 1.5, .slab_planes = 8}),
    [](const ::testing::TestParamInfo<cyl_case>& i) { return i.param.name; });

}  // namespace

#else

TEST(CylindricalGpu, Skipped) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
