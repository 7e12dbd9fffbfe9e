// Helical FBP on the GPU against the CPU path on the same input: flat and cylindrical
// detectors, odd sizes, a single slice, batches that end part-way (more views than one batch),
// a GPU memory limit that forces small batches, decreasing angles.
#include <gtest/gtest.h>

#include <cmath>

#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "gpu_fixture.hpp"
#include "recon/recon_quality.hpp"

using namespace ctforge;

namespace {

struct helical_gpu_case {
  std::int64_t cols, rows, nx, nz;
  detector_shape shape;
  double step_deg;         // negative: decreasing angles
  std::int64_t gpu_limit;  // bytes; 0: none
  const char* name;
};

class HelicalGpu : public ctforge::testing::gpu_param_test<helical_gpu_case> {};

}  // namespace

TEST_P(HelicalGpu, EqualsTheCpu) {
  const helical_gpu_case c = GetParam();
  const double sid = 300, sdd = 600, dv = 1.0;
  const double feed = 1.1 * static_cast<double>(c.rows) * dv * sid / sdd;
  const auto views = static_cast<std::int64_t>(std::ceil(4 * 360 / std::abs(c.step_deg)));
  const geometry g = make_helical_geometry(c.cols, c.rows, 0.9, dv, sid, sdd,
                                           angle_range(0.2, deg_to_rad(c.step_deg), views), feed,
                                           -2 * feed, 0.3, -0.2, c.shape);
  const projection_stack p = project_analytic(shepp_logan_phantom(48), g);
  const volume_geometry vg = volume_geometry::centered(c.nx, c.nx + 2, c.nz, {0.8, 0.8, 0.9});
  recon_options o = ctforge::testing::cpu_options(algorithm::helical_fbp);
  const volume cpu = reconstruct(p, g, vg, o);
  o.where = backend::cuda;
  o.gpu_memory_limit_bytes = c.gpu_limit;
  const volume gpu = reconstruct(p, g, vg, o);
  // float sums over the same views in the same order; the two compilers differ only in fused
  // multiply-adds and the libm of asin / cos.
  EXPECT_LE(ctforge::testing::max_diff_over_peak(gpu, cpu), 1e-5) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HelicalGpu,
    ::testing::Values(
        helical_gpu_case{97, 16, 41, 9, detector_shape::flat, 1.0, 0, "flat"},
        helical_gpu_case{97, 16, 41, 9, detector_shape::cylindrical, 1.0, 0, "curved"},
        helical_gpu_case{64, 5, 33, 1, detector_shape::flat, -2.0, 0, "one_slice_decreasing"},
        helical_gpu_case{97, 16, 41, 9, detector_shape::cylindrical, 1.0, 4 << 20,
                         "small_batches"}),
    [](const auto& info) { return std::string(info.param.name); });
