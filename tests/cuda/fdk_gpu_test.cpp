// FDK / FBP on the GPU (detail::cuda_reconstruct) against the CPU path (ctforge::reconstruct
// with backend cpu) on the same projections: odd sizes, one view, one detector row, detector
// offsets, short scans (Parker), several batches with a partial last one, slab splits forced
// by a small memory budget (projection store on the host and on the device), parallel-beam
// FBP, and the texture unit's interpolation.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/recon_quality.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_plan.cuh"
#include "recon/filter.hpp"

using namespace ctforge;

namespace {

constexpr double k_pi = std::numbers::pi;

// Tolerance of the exact-interpolation GPU path against the CPU path: mean absolute error
// <= 1e-5 of the CPU result's peak (RTK's requirement for its CUDA filters). Both paths run the
// same float arithmetic per pixel (kernels::preweight), per voxel and view
// (kernels::bp_contribution with the bilinear border sampler) and the same ramp response; they
// differ only in the FFT implementation (cuFFT vs FFTW, float round-off ~1e-7 of a row's norm
// times log2 N), the order in which views are summed (batches of B views in registers vs the
// CPU's row accumulators: ~sqrt(views) * 6e-8 relative) and FMA contraction. That is ~1e-6 of
// the peak, an order of magnitude below the tolerance, while any real defect (a half-pixel
// shift, a wrong weight, a dropped view or batch, a slab seam) is >= 1e-3.
constexpr double k_exact_tol = 1e-5;

// Tolerance with the texture unit's bilinear filtering: its weights have 8 fractional bits
// (CUDA C++ Programming Guide, "Texture Fetching"), so each sample can be off by up to 2^-8 of
// the difference between neighbouring detector pixels along each axis. A CPU emulation of these
// weights on a Shepp-Logan FDK (48^3, 90 views) gave a mean deviation of 5.5e-5 of the peak with
// round-to-nearest weights and 1.0e-4 with truncated ones; 1e-3 keeps a 10x margin over that
// while a half-pixel shift or a wrong weight still exceeds it.
constexpr double k_hardware_tol = 1e-3;

struct fdk_case {
  std::string name;
  algorithm algo = algorithm::fdk;
  std::int64_t cols = 45, rows = 31, views = 40;
  double arc_deg = 360;  // covered arc: views spaced arc / views apart
  std::int64_t nx = 33, ny = 29, nz = 17;
  double spacing = 1.4;             // mm, all axes
  double shift_x = 0, shift_z = 0;  // volume origin shift (mm)
  double offset_u = 0, offset_v = 0;
  // Memory budget: 0 = automatic; > 0 = bytes; < 0 = batch buffers (with the cuFFT work area
  // of the real plans) plus -value volume planes (forces the slab split).
  std::int64_t memory = 0;
  bool expect_device_store = false;  // with a forced split: expected store location
  int views_per_batch = 0;
  bool hardware = false;
  filter_window window = filter_window::ram_lak;
};

std::ostream& operator<<(std::ostream& os, const fdk_case& c) {
  return os << c.name;
}

constexpr double k_sid = 160, k_sdd = 260, k_du = 1.3, k_dv = 1.25;

geometry make_geometry(const fdk_case& c) {
  // Short scans need 180 deg + fan angle; arc_deg < 0 means exactly that plus 4 degrees.
  double arc = c.arc_deg;
  if (arc < 0) {
    const double half_width = 0.5 * static_cast<double>(c.cols - 1) * k_du + std::abs(c.offset_u);
    arc = 180 + 2 * std::atan(half_width / k_sdd) * 180 / k_pi + 4;
  }
  const double step = deg_to_rad(arc) / static_cast<double>(c.views);
  const auto angles = angle_range(deg_to_rad(7.0), step, c.views);
  if (c.algo == algorithm::fbp)
    return make_parallel_geometry(c.cols, c.rows, k_du, k_dv, angles, {c.offset_u}, {c.offset_v});
  return make_cone_geometry(c.cols, c.rows, k_du, k_dv, k_sid, k_sdd, angles, {c.offset_u},
                            {c.offset_v});
}

volume_geometry make_volume(const fdk_case& c) {
  auto vg = volume_geometry::centered(c.nx, c.ny, c.nz, {c.spacing, c.spacing, c.spacing});
  vg.origin_mm[0] += c.shift_x;
  vg.origin_mm[2] += c.shift_z;
  return vg;
}

double peak_of(const volume& v) {
  return ctforge::testing::peak_abs(v.data);
}

using ctforge::testing::span_of;

// The detector columns the pipeline runs on: reconstruct pads a displaced detector on its
// narrow side before either backend runs (detail::pad_for_displaced_detector).
std::int64_t run_cols(const fdk_case& c) {
  const geometry g = make_geometry(c);
  const projection_stack zeros(c.views, c.rows, c.cols);
  recon_options opt;
  opt.algo = c.algo;
  return c.cols +
         detail::narrow_side_padding_for(detail::make_fdk_setup(zeros, g, opt, false), g).columns;
}

kernels::cuda::plan_input plan_input_of(const fdk_case& c) {
  const std::int64_t cols = run_cols(c);
  kernels::cuda::plan_input in = kernels::cuda::make_plan_input(
      c.views, c.rows, cols, make_volume(c), true, detail::padded_length(cols));
  in.requested_batch = c.views_per_batch;
  return in;
}

// Memory budget of a case with c.memory < 0: the pipeline's batch buffers (with `work` bytes
// of cuFFT work area, that of the batch's real plans) plus -memory volume planes, plus the
// projection store when the case expects it on the device: the volume must be split into
// slabs of -memory planes.
std::int64_t split_budget(const fdk_case& c, std::int64_t work) {
  const kernels::cuda::plan_input in = plan_input_of(c);
  const std::int64_t cols = in.cols;
  return kernels::cuda::batch_bytes(in, kernels::cuda::initial_batch(in), work) +
         (c.expect_device_store ? c.views * c.rows * cols * 4 : 0) + (-c.memory) * c.nx * c.ny * 4;
}

class FdkGpu : public ctforge::testing::gpu_param_test<fdk_case> {};

TEST_P(FdkGpu, MatchesCpuPath) {
  const fdk_case& c = GetParam();
  const geometry g = make_geometry(c);
  const volume_geometry vg = make_volume(c);
  const projection_stack proj = project_analytic(shepp_logan_phantom(36), g);

  recon_options opt;
  opt.algo = c.algo;
  opt.where = backend::cpu;
  opt.filter = c.window;
  const volume cpu = reconstruct(proj, g, vg, opt);

  detail::cuda_options copt;
  copt.views_per_batch = c.views_per_batch;
  copt.gpu_hardware_interpolation = c.hardware;
  if (c.memory < 0) {
    const kernels::cuda::plan_input in = plan_input_of(c);
    copt.gpu_memory_limit_bytes = split_budget(
        c, detail::cuda_fft_work_bytes(in.padded_len, kernels::cuda::initial_batch(in) * in.rows));
  } else {
    copt.gpu_memory_limit_bytes = c.memory;
  }
  opt.where = backend::cuda;
  const volume gpu = ctforge::testing::cuda_reconstruct_as_reconstruct(proj, g, vg, opt, copt);
  const detail::cuda_pipeline_stats st = detail::cuda_last_pipeline_stats();

  ASSERT_EQ(gpu.data.size(), cpu.data.size());
  const double peak = peak_of(cpu);
  ASSERT_GT(peak, 0.0) << "the phantom must be visible in the reconstruction";
  const double mae = mean_abs_error(span_of(gpu), span_of(cpu));
  const double tol = c.hardware ? k_hardware_tol : k_exact_tol;
  EXPECT_LE(mae, tol * peak) << c.name << ": mean |gpu - cpu| = " << mae << " (" << mae / peak
                             << " of the peak " << peak << "); " << st.batches << " batches of "
                             << st.views_per_batch << " views, " << st.slabs << " slabs";
  if (c.memory < 0) {
    EXPECT_GT(st.slabs, 1) << "the memory budget should have forced a slab split";
    EXPECT_EQ(st.device_store, c.expect_device_store);
  } else {
    EXPECT_EQ(st.slabs, 1);
  }
  if (c.views_per_batch > 0)
    EXPECT_EQ(st.views_per_batch, std::min<int>(c.views_per_batch, static_cast<int>(c.views)));
}

std::vector<fdk_case> cases() {
  std::vector<fdk_case> v;
  v.push_back({.name = "cone_full_scan_odd_sizes"});
  v.push_back({.name = "cone_single_view", .views = 1});
  v.push_back({.name = "fan_beam_one_row", .rows = 1, .nz = 1});
  v.push_back({.name = "fan_beam_short_scan", .rows = 1, .arc_deg = -1, .nz = 1});
  v.push_back({.name = "cone_detector_offsets", .offset_u = 3.7, .offset_v = -2.3});
  v.push_back({.name = "cone_short_scan_parker", .views = 37, .arc_deg = -1});
  v.push_back({.name = "cone_size_one_x", .nx = 1});
  v.push_back({.name = "cone_shifted_volume", .shift_x = 4.1, .shift_z = -6.3});
  v.push_back({.name = "cone_partial_last_batch", .views_per_batch = 7});
  v.push_back({.name = "cone_one_view_per_batch", .views = 5, .views_per_batch = 1});
  v.push_back({.name = "cone_hann_window", .window = filter_window::hann});
  v.push_back({.name = "slabs_host_store", .nz = 41, .memory = -9, .views_per_batch = 8});
  // Store 58 planes of the volume; 34 budgeted planes >= the 32 that keep it on the device.
  v.push_back({.name = "slabs_device_store",
               .nz = 150,
               .memory = -34,
               .expect_device_store = true,
               .views_per_batch = 4});
  v.push_back({.name = "slabs_short_scan_offsets",
               .views = 37,
               .arc_deg = -1,
               .nz = 41,
               .shift_z = 5.0,
               .offset_u = 2.0,
               .offset_v = 3.1,
               .memory = -10,
               .views_per_batch = 4});
  v.push_back(
      {.name = "fbp_parallel_half_scan", .algo = algorithm::fbp, .views = 45, .arc_deg = 180});
  v.push_back({.name = "fbp_parallel_full_scan_one_row",
               .algo = algorithm::fbp,
               .rows = 1,
               .arc_deg = 360,
               .nz = 1});
  v.push_back({.name = "cone_hardware_interpolation", .hardware = true});
  v.push_back({.name = "fbp_hardware_interpolation",
               .algo = algorithm::fbp,
               .arc_deg = 180,
               .hardware = true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, FdkGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<fdk_case>& i) { return i.param.name; });

// Host-side check of the cases above (runs without a GPU): the budget of every split case makes
// the pipeline's planner split the volume, keep the requested batch and put the store where
// the case expects, in balanced slabs of at most -memory planes, whatever the real cuFFT work
// area between none and the estimate (one row buffer).
TEST(FdkGpuPlan, SplitCasesForceTheirPlan) {
  int split_cases = 0;
  for (const fdk_case& c : cases()) {
    if (c.memory >= 0) continue;
    ++split_cases;
    const kernels::cuda::plan_input in = plan_input_of(c);
    const int batch = kernels::cuda::initial_batch(in);
    for (const double fraction : {0.0, 0.25, 1.0}) {
      const auto work_of = [&](int b) {
        return static_cast<std::int64_t>(
            fraction * static_cast<double>(kernels::cuda::fft_work_estimate(in, b)));
      };
      const kernels::cuda::plan p =
          kernels::cuda::make_pipeline_plan(in, split_budget(c, work_of(batch)), work_of);
      EXPECT_TRUE(p.slab_mode) << c.name << ", work " << fraction << " of the estimate";
      EXPECT_EQ(p.device_store, c.expect_device_store) << c.name;
      EXPECT_EQ(p.views_per_batch, batch) << c.name;
      const std::int64_t planes = -c.memory, n_slabs = (c.nz + planes - 1) / planes;
      EXPECT_EQ(p.slab_nz, (c.nz + n_slabs - 1) / n_slabs) << c.name;
    }
  }
  EXPECT_GE(split_cases, 3);
}

// The public entry point dispatches to the GPU (backend cuda) and gives the same volume as the
// backend entry point with the same options.
class FdkGpuDispatch : public ctforge::testing::gpu_test {};

TEST_F(FdkGpuDispatch, ReconstructWithCudaBackendUsesTheGpuPath) {
  const fdk_case c{.name = "dispatch"};
  const geometry g = make_geometry(c);
  const volume_geometry vg = make_volume(c);
  const projection_stack proj = project_analytic(shepp_logan_phantom(36), g);
  recon_options opt;
  opt.where = backend::cuda;
  const volume via_api = reconstruct(proj, g, vg, opt);
  const volume direct = detail::cuda_reconstruct(proj, g, vg, opt, detail::cuda_options{});
  ASSERT_EQ(via_api.data.size(), direct.data.size());
  // Same device code on the same inputs: identical up to the (deterministic) summation order.
  EXPECT_LE(mean_abs_error(span_of(via_api), span_of(direct)), 1e-7 * peak_of(direct));
  EXPECT_FALSE(detail::cuda_last_pipeline_stats().hardware_interpolation);
  // The API's GPU options reach the pipeline: the memory budget and the interpolation mode.
  recon_options fast = opt;
  fast.gpu_hardware_interpolation = true;
  const volume hw = reconstruct(proj, g, vg, fast);
  EXPECT_TRUE(detail::cuda_last_pipeline_stats().hardware_interpolation);
  EXPECT_LE(mean_abs_error(span_of(hw), span_of(direct)), 1e-3 * peak_of(direct));
  recon_options split = opt;
  split.gpu_memory_limit_bytes =
      24 << 20;  // ample for this problem: the plan must use it as its budget
  const volume sl = reconstruct(proj, g, vg, split);
  EXPECT_EQ(detail::cuda_last_pipeline_stats().budget_bytes, split.gpu_memory_limit_bytes);
  EXPECT_LE(mean_abs_error(span_of(sl), span_of(direct)), 1e-5 * peak_of(direct));
}

// Non-finite projection values are found on the device while pre-weighting (the host does not
// scan the projections for the GPU): the same usage error as on the CPU, naming the first bad
// value, with and without a slab split, and the CPU names the same value.
TEST_F(FdkGpuDispatch, NonFiniteValuesAreUsageErrors) {
  const fdk_case c{.name = "non_finite", .nz = 41, .memory = -9, .views_per_batch = 8};
  const geometry g = make_geometry(c);
  projection_stack proj = project_analytic(shepp_logan_phantom(36), g);
  proj.at(13, 7, 22) = std::numeric_limits<float>::quiet_NaN();
  proj.at(30, 0, 0) = std::numeric_limits<float>::infinity();
  recon_options opt;
  const kernels::cuda::plan_input in = plan_input_of(c);
  detail::cuda_options split;
  split.views_per_batch = c.views_per_batch;
  split.gpu_memory_limit_bytes = split_budget(
      c, detail::cuda_fft_work_bytes(in.padded_len, kernels::cuda::initial_batch(in) * in.rows));
  for (const detail::cuda_options& copt : {detail::cuda_options{}, split}) {
    try {
      (void)detail::cuda_reconstruct(proj, g, make_volume(c), opt, copt);
      ADD_FAILURE() << "expected usage_error";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("view 13, row 7, col 22"), std::string::npos)
          << e.what();
    }
  }
  recon_options cpu = opt;
  cpu.where = backend::cpu;
  try {
    (void)reconstruct(proj, g, make_volume(c), cpu);
    ADD_FAILURE() << "expected usage_error";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("view 13, row 7, col 22"), std::string::npos) << e.what();
  }
}

// Progress is reported from the calling thread, ends at 1 and never decreases.
TEST_F(FdkGpuDispatch, ProgressIsMonotonicAndComplete) {
  const fdk_case c{.name = "progress", .views_per_batch = 5};
  const geometry g = make_geometry(c);
  const projection_stack proj = project_analytic(shepp_logan_phantom(36), g);
  std::vector<double> seen;
  recon_options opt;
  opt.progress = [&](double f) { seen.push_back(f); };
  detail::cuda_options copt;
  copt.views_per_batch = 5;
  (void)detail::cuda_reconstruct(proj, g, make_volume(c), opt, copt);
  ASSERT_FALSE(seen.empty());
  EXPECT_DOUBLE_EQ(seen.back(), 1.0);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

// Scans as users bring them (recon/fdk_geometry_test.cpp on the CPU): a half-fan detector
// (padded on its narrow side, Wang's weights) with a full and a short scan, a cone_vec scan
// whose detector is turned and tilted (resampled onto virtual detectors), a flipped one, and a
// negative row pitch reconstruct on the GPU as on the CPU, within the exact-path tolerance.
TEST_F(FdkGpuDispatch, HalfFanAndCircularVectorGeometriesMatchCpu) {
  const phantom ph = shepp_logan_phantom(36);
  const volume_geometry vg = volume_geometry::centered(31, 29, 17, {1.2, 1.2, 1.2});
  std::vector<std::pair<std::string, geometry>> cases;
  cases.emplace_back("half-fan full scan",
                     make_cone_geometry(45, 21, 1.3, 1.25, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(4), 90), {18.0}));
  cases.emplace_back("half-fan short scan",
                     make_cone_geometry(45, 21, 1.3, 1.25, k_sid, k_sdd,
                                        angle_range(0, deg_to_rad(1.5), 170), {-9.0}));
  cases.emplace_back("negative row pitch", make_cone_geometry(45, 21, 1.3, -1.25, k_sid, k_sdd,
                                                              angle_range(0, deg_to_rad(4), 90)));
  const geometry base =
      make_cone_geometry(45, 31, 1.3, 1.25, k_sid, k_sdd, angle_range(0, deg_to_rad(4), 90));
  std::vector<view_vectors> turned = base.views, flipped = base.views;
  for (auto& w : turned) {
    const vec3 n = cross(w.u, w.v), k = (1.0 / norm(n)) * n;
    const double t = deg_to_rad(6);
    auto rot = [&](vec3 x) {
      return std::cos(t) * x + std::sin(t) * cross(k, x) + (1 - std::cos(t)) * dot(k, x) * k;
    };
    w.u = rot(w.u);
    w.v = rot(w.v);
  }
  for (auto& w : flipped) w.u = -1.0 * w.u;
  cases.emplace_back("cone_vec turned", make_vec_geometry(beam_kind::cone, 45, 31, turned));
  cases.emplace_back("cone_vec flipped", make_vec_geometry(beam_kind::cone, 45, 31, flipped));
  for (const auto& [name, g] : cases) {
    const projection_stack proj = project_analytic(ph, g);
    recon_options cpu;
    cpu.where = backend::cpu;
    recon_options gpu = cpu;
    gpu.where = backend::cuda;
    const volume a = reconstruct(proj, g, vg, cpu), b = reconstruct(proj, g, vg, gpu);
    EXPECT_GT(peak_of(a), 0.0) << name;
    EXPECT_LE(mean_abs_error(span_of(b), span_of(a)), k_exact_tol * peak_of(a)) << name;
  }
}

}  // namespace

#else

TEST(FdkGpu, Skipped) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
