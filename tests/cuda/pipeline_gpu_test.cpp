// GPU pipeline behaviour: no device-memory growth over repeated calls, error reporting (memory
// budget, device ordinal, invalid input), the device probe, and the memory plan / slab row
// ranges (cuda/cuda_plan.cuh: plain host code, checked on every machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/volume.hpp"
#include "cuda/cuda_plan.cuh"
#include "gpu_fixture.hpp"
#include "math/backproject.hpp"
#include "math/cylinder.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/recon_quality.hpp"
#include "test_support.hpp"

using namespace ctforge;
namespace kc = ctforge::kernels::cuda;

namespace {

/// Whether the bilinear taps of detector row r (rows floor(r) and floor(r) + 1, clipped to the
/// detector) lie in the slab's rows; r outside (-1, rows) samples zero and needs none.
::testing::AssertionResult taps_inside(const kc::slab_info& s, double r, std::int64_t rows) {
  if (!(r > -1.0 && r < static_cast<double>(rows))) return ::testing::AssertionSuccess();
  const auto t0 = static_cast<std::int64_t>(std::floor(r));
  const std::int64_t lo = std::max<std::int64_t>(t0, 0);
  const std::int64_t hi = std::min<std::int64_t>(t0 + 1, rows - 1);
  if (lo >= s.row_offset && hi < s.row_offset + s.rows_valid) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "row " << r << " taps rows " << lo << ".." << hi << ", the slab holds " << s.row_offset
         << ".." << s.row_offset + s.rows_valid - 1;
}

// ---- memory plan (host code, runs without a GPU) -------------------------------------------

kc::plan_input sample_input() {
  kc::plan_input in;
  in.views = 100;
  in.rows = 64;
  in.cols = 80;
  in.nx = 96;
  in.ny = 90;
  in.nz = 70;
  in.filter = true;
  in.padded_len = 160;
  return in;
}

TEST(CudaPlan, WholeVolumeWhenItFits) {
  const kc::plan_input in = sample_input();
  const kc::plan p = kc::make_plan(in, std::int64_t{1} << 34);
  EXPECT_FALSE(p.slab_mode);
  EXPECT_EQ(p.slab_nz, in.nz);
  EXPECT_EQ(p.views_per_batch, 32);
  EXPECT_EQ(p.batches, 4);  // 100 views in batches of 32: 32 + 32 + 32 + 4
  EXPECT_LE(p.planned, p.budget);
}

TEST(CudaPlan, RequestedBatchIsHonouredAndCapped) {
  kc::plan_input in = sample_input();
  in.requested_batch = 7;
  EXPECT_EQ(kc::make_plan(in, std::int64_t{1} << 34).views_per_batch, 7);
  EXPECT_EQ(kc::make_plan(in, std::int64_t{1} << 34).batches, 15);
  in.requested_batch = 5000;  // more than the views and than the constant-memory limit
  EXPECT_EQ(kc::make_plan(in, std::int64_t{1} << 34).views_per_batch, 100);
  in.views = 3000;
  EXPECT_EQ(kc::make_plan(in, std::int64_t{1} << 36).views_per_batch, kc::k_max_batch_views);
  in.max_batch = 200;  // device limit on array layers
  EXPECT_EQ(kc::make_plan(in, std::int64_t{1} << 36).views_per_batch, 200);
}

TEST(CudaPlan, SplitsTheVolumeIntoBalancedSlabsThatFit) {
  const kc::plan_input in = sample_input();
  const std::int64_t plane = in.nx * in.ny * 4;
  const std::int64_t fixed = kc::batch_bytes(in, 32, kc::fft_work_estimate(in, 32));
  for (std::int64_t planes : {8, 9, 23, 35, 69}) {
    const std::int64_t budget = fixed + planes * plane;
    const kc::plan p = kc::make_plan(in, budget);
    ASSERT_TRUE(p.slab_mode) << planes;
    EXPECT_EQ(p.views_per_batch, 32);
    EXPECT_LE(p.slab_nz, planes);
    EXPECT_LE(p.planned, budget) << planes;
    // Balanced: as many slabs as the budget requires, sizes differing by less than a slab count.
    const std::int64_t n_slabs = (in.nz + p.slab_nz - 1) / p.slab_nz;
    EXPECT_EQ(n_slabs, (in.nz + planes - 1) / planes) << planes;
    EXPECT_LT(n_slabs * p.slab_nz - in.nz, n_slabs) << planes;
    // The projection store (100 x 64 x 80 floats = 59 planes) is never on the device here:
    // it would leave fewer than 17 planes (a quarter of the volume).
    EXPECT_FALSE(p.device_store) << planes;
  }
}

TEST(CudaPlan, KeepsTheStoreOnTheDeviceWhenRoomRemains) {
  kc::plan_input in = sample_input();
  in.views = 20;  // store of 20 x 64 x 80 floats = 11.9 planes
  const std::int64_t plane = in.nx * in.ny * 4;
  const std::int64_t fixed = kc::batch_bytes(in, 20, kc::fft_work_estimate(in, 20));
  const std::int64_t store = in.views * in.rows * in.cols * 4;
  const kc::plan p = kc::make_plan(in, fixed + store + 40 * plane);
  ASSERT_TRUE(p.slab_mode);
  EXPECT_TRUE(p.device_store);
  EXPECT_EQ(p.slab_nz, 35);  // 40 planes fit: 2 slabs of 35
  EXPECT_LE(p.planned, fixed + store + 40 * plane);
  const kc::plan q = kc::make_plan(in, fixed + store + 16 * plane);
  ASSERT_TRUE(q.slab_mode);
  EXPECT_FALSE(q.device_store) << "16 planes next to the store is below a quarter of the volume";
  EXPECT_LE(q.planned, fixed + store + 16 * plane);
}

TEST(CudaPlan, HalvesTheBatchBeforeGivingUp) {
  const kc::plan_input in = sample_input();
  const std::int64_t plane = in.nx * in.ny * 4;
  const std::int64_t budget = kc::batch_bytes(in, 4, kc::fft_work_estimate(in, 4)) + 8 * plane;
  const kc::plan p = kc::make_plan(in, budget);
  EXPECT_EQ(p.views_per_batch, 4);
  EXPECT_TRUE(p.slab_mode);
  EXPECT_LE(p.planned, budget);
}

// The pipeline plans with the real cuFFT work area. A budget sized for the requested batch with
// its real work area (here smaller than the estimate) keeps that batch and splits into the
// budgeted planes; the estimate is never used.
TEST(CudaPlan, PipelinePlanUsesTheRealWorkArea) {
  kc::plan_input in = sample_input();
  in.requested_batch = 8;
  const std::int64_t plane = in.nx * in.ny * 4;
  std::vector<int> asked;
  const auto no_work = [&](int b) {
    asked.push_back(b);
    return std::int64_t{0};
  };
  const kc::plan p = kc::make_pipeline_plan(in, kc::batch_bytes(in, 8, 0) + 20 * plane, no_work);
  EXPECT_EQ(p.views_per_batch, 8);
  EXPECT_TRUE(p.slab_mode);
  EXPECT_EQ(p.slab_nz, 18);  // 70 planes, at most 20 a slab: 4 slabs of 18
  EXPECT_EQ(asked, std::vector<int>{8});
  // Planned with the estimate, the same budget leaves fewer planes per slab (the defect this
  // guards: the test budgets then no longer give the split they ask for).
  EXPECT_LT(kc::make_plan(in, kc::batch_bytes(in, 8, 0) + 20 * plane).slab_nz, p.slab_nz);
}

// When the initial batch's buffers do not fit, the batch halves, each size planned with its own
// (smaller) work area: the largest that fits wins. Without filtering no work area is asked for.
TEST(CudaPlan, PipelinePlanShrinksTheBatchWithItsOwnWorkArea) {
  const kc::plan_input in = sample_input();  // automatic batch: 32
  const std::int64_t plane = in.nx * in.ny * 4;
  const auto work_of = [&](int b) { return kc::fft_work_estimate(in, b); };
  const std::int64_t budget = kc::batch_bytes(in, 16, work_of(16)) + 10 * plane;
  const kc::plan p = kc::make_pipeline_plan(in, budget, work_of);
  EXPECT_EQ(p.views_per_batch, 16);
  EXPECT_TRUE(p.slab_mode);
  EXPECT_LE(p.planned, budget);
  kc::plan_input bp = in;
  bp.filter = false;
  bp.padded_len = 0;
  const kc::plan q = kc::make_pipeline_plan(bp, std::int64_t{1} << 34, [](int) -> std::int64_t {
    ADD_FAILURE() << "plain back-projection has no FFT";
    return 0;
  });
  EXPECT_FALSE(q.slab_mode);
  EXPECT_EQ(q.views_per_batch, 32);
}

TEST(CudaPlan, TooSmallBudgetNamesTheOption) {
  const kc::plan_input in = sample_input();
  ctforge::testing::expect_runtime_error_naming([&] { (void)kc::make_plan(in, 1 << 20); },
                                                "--gpu-memory-limit", "MiB");
}

// ---- forward projector plan (host code) ----------------------------------------------------

TEST(CudaForwardPlan, WholeVolumeWithTheLargestBatchThatFits) {
  const auto vg = volume_geometry::centered(96, 90, 70, {1, 1, 1});
  const kc::forward_plan p = kc::make_forward_plan(vg, 100, 64, 80, std::int64_t{1} << 34);
  EXPECT_EQ(p.slabs, 1);
  EXPECT_EQ(p.slab_nz, 70);
  EXPECT_EQ(p.views_per_batch, 100);  // 100 views of 20 KiB: far below the 256 MiB batch cap
  EXPECT_LE(p.planned, p.budget);
  // A budget that holds the volume with 25 views per buffer but not 50: the batch halves
  // (100 -> 50 -> 25) before the volume is split.
  const std::int64_t budget = kc::forward_plan_bytes(vg, 100, 64, 80, 25, 70);
  const kc::forward_plan q = kc::make_forward_plan(vg, 100, 64, 80, budget);
  EXPECT_EQ(q.slabs, 1);
  EXPECT_EQ(q.views_per_batch, 25);
  EXPECT_EQ(q.planned, budget);
  // Large detectors: a batch holds at most 256 MiB of projections.
  EXPECT_EQ(kc::forward_initial_batch(1000, 1024, 1024), 64);
  EXPECT_EQ(kc::forward_initial_batch(3, 4096, 4096), 3);
  EXPECT_EQ(kc::forward_initial_batch(5000, 8, 8), 1024);
}

TEST(CudaForwardPlan, SplitsIntoBalancedSlabsThatFit) {
  const auto vg = volume_geometry::centered(96, 90, 70, {1, 1, 1});
  for (std::int64_t planes : {1, 2, 13, 35, 50}) {
    const std::int64_t budget = kc::forward_plan_bytes(vg, 100, 64, 80, 8, planes);
    const kc::forward_plan p = kc::make_forward_plan(vg, 100, 64, 80, budget);
    EXPECT_EQ(p.views_per_batch, 8) << planes;
    EXPECT_LE(p.planned, budget) << planes;
    EXPECT_LE(p.slab_nz, planes) << planes;
    EXPECT_EQ(p.slabs, (70 + planes - 1) / planes) << planes;
    EXPECT_EQ(p.slabs, (70 + p.slab_nz - 1) / p.slab_nz) << planes;
    EXPECT_LT(p.slabs * p.slab_nz - 70, p.slabs) << planes;  // balanced
  }
  // The device's 3D texture depth caps a slab even when memory would hold more.
  const kc::forward_plan d = kc::make_forward_plan(vg, 100, 64, 80, std::int64_t{1} << 34, 16);
  EXPECT_EQ(d.slabs, 5);
  EXPECT_EQ(d.slab_nz, 14);
}

TEST(CudaForwardPlan, TooSmallBudgetNamesTheOption) {
  const auto vg = volume_geometry::centered(96, 90, 70, {1, 1, 1});
  const std::int64_t need = kc::forward_plan_bytes(vg, 100, 64, 80, 1, 1);
  EXPECT_NO_THROW((void)kc::make_forward_plan(vg, 100, 64, 80, need));
  ctforge::testing::expect_runtime_error_naming(
      [&] { (void)kc::make_forward_plan(vg, 100, 64, 80, need - 1); }, "--gpu-memory-limit",
      "96 x 90");
}

// Every voxel centre of a slab, in every view, has both bilinear taps that can be non-zero
// inside the kept row range, and thin slabs keep only part of a tall detector.
TEST(CudaPlan, SlabRowRangesCoverEveryTap) {
  const std::int64_t rows = 120;
  const geometry g = make_cone_geometry(
      64, rows, 1.0, 1.0, 300, 500, angle_range(0.1, 2 * std::numbers::pi / 30, 30), {0.0}, {4.5});
  auto vg = volume_geometry::centered(20, 22, 48, {1.5, 1.5, 1.5});
  vg.origin_mm[2] += 3.0;
  const auto mats = compute_projection_matrices(g);
  for (std::int64_t nz : {1, 5, 16, 48}) {
    for (std::int64_t z0 = 0; z0 + nz <= vg.nz; z0 += std::max<std::int64_t>(nz, 7)) {
      const kc::slab_info s = kc::slab_rows(vg, mats, rows, z0, nz);
      ASSERT_GE(s.row_offset, 0);
      ASSERT_GE(s.rows_valid, 0);
      ASSERT_LE(s.row_offset + s.rows_valid, rows);
      for (std::int64_t k = z0; k < z0 + nz; ++k)
        for (std::int64_t j = 0; j < vg.ny; ++j)
          for (std::int64_t i = 0; i < vg.nx; ++i) {
            const vec3 x = vg.voxel_center(static_cast<double>(i), static_cast<double>(j),
                                           static_cast<double>(k));
            for (const auto& m : mats) {
              const double p2 = m[8] * x.x + m[9] * x.y + m[10] * x.z + m[11];
              const double r = (m[4] * x.x + m[5] * x.y + m[6] * x.z + m[7]) / p2;
              ASSERT_TRUE(taps_inside(s, r, rows)) << "slab z0=" << z0 << " nz=" << nz;
            }
          }
      if (nz == 5) {
        EXPECT_LT(s.rows_valid, rows / 2) << "a 5-plane slab should need under half the rows";
      }
    }
  }
}

TEST(CudaPlan, SlabBehindTheSourceTakesAllRows) {
  // SID 20 mm: the volume (60 mm wide) surrounds the source in some views.
  const geometry g = make_cone_geometry(32, 40, 1.0, 1.0, 20, 60, angle_range(0, 0.5, 12));
  const auto vg = volume_geometry::centered(40, 40, 8, {1.5, 1.5, 1.0});
  const kc::slab_info s = kc::slab_rows(vg, compute_projection_matrices(g), 40, 2, 3);
  EXPECT_EQ(s.row_offset, 0);
  EXPECT_EQ(s.rows_valid, 40);
}

// The same for a cylindrical detector (slab_rows_curved, shifted_cyl_maps): every voxel's taps
// lie in the kept rows, the shifted float maps put the voxel at row - row_offset, and a source
// inside the volume's footprint takes all rows.
TEST(CudaPlan, CurvedSlabRowRangesCoverEveryTap) {
  const std::int64_t rows = 120;
  const geometry g = make_cone_geometry(64, rows, 1.0, 1.0, 300, 500,
                                        angle_range(0.1, 2 * std::numbers::pi / 30, 30), {6.0},
                                        {4.5}, detector_shape::cylindrical);
  auto vg = volume_geometry::centered(20, 22, 48, {1.5, 1.5, 1.5});
  vg.origin_mm[2] += 3.0;
  const auto maps = kernels::cylinder_maps_d(g);
  std::vector<kernels::proj_matrix> shifted(maps.size());
  for (std::int64_t nz : {1, 5, 16, 48}) {
    for (std::int64_t z0 = 0; z0 + nz <= vg.nz; z0 += std::max<std::int64_t>(nz, 7)) {
      const kc::slab_info s = kc::slab_rows_curved(vg, maps, rows, z0, nz);
      ASSERT_GE(s.row_offset, 0);
      ASSERT_GE(s.rows_valid, 0);
      ASSERT_LE(s.row_offset + s.rows_valid, rows);
      kc::shifted_cyl_maps(maps, s.row_offset, shifted.data());
      for (std::int64_t k = z0; k < z0 + nz; ++k)
        for (std::int64_t j = 0; j < vg.ny; ++j)
          for (std::int64_t i = 0; i < vg.nx; ++i) {
            const vec3 x = vg.voxel_center(static_cast<double>(i), static_cast<double>(j),
                                           static_cast<double>(k));
            for (std::int64_t v = 0; v < g.view_count(); ++v) {
              const double r = project_to_detector(g, v, x).row;
              kernels::cyl_map m;
              std::copy(std::begin(shifted[static_cast<std::size_t>(v)].m),
                        std::end(shifted[static_cast<std::size_t>(v)].m), m.m);
              const kernels::detector_point q = kernels::project_point(
                  m, static_cast<float>(x.x), static_cast<float>(x.y), static_cast<float>(x.z));
              ASSERT_NEAR(q.row, r - static_cast<double>(s.row_offset), 1e-3);
              ASSERT_TRUE(taps_inside(s, r, rows)) << "slab z0=" << z0 << " nz=" << nz;
            }
          }
      if (nz == 5) {
        EXPECT_LT(s.rows_valid, rows / 2) << "a 5-plane slab should need under half the rows";
      }
    }
  }
  // SID 20 mm: the volume (60 mm wide) surrounds the source in some views.
  const geometry near = make_cone_geometry(32, 40, 1.0, 1.0, 20, 60, angle_range(0, 0.5, 12), {},
                                           {}, detector_shape::cylindrical);
  const auto vg2 = volume_geometry::centered(40, 40, 8, {1.5, 1.5, 1.0});
  const kc::slab_info s = kc::slab_rows_curved(vg2, kernels::cylinder_maps_d(near), 40, 2, 3);
  EXPECT_EQ(s.row_offset, 0);
  EXPECT_EQ(s.rows_valid, 40);
}

TEST(CudaPlan, SlabsPartitionTheVolume) {
  const geometry g = make_cone_geometry(32, 40, 1.0, 1.0, 300, 500, angle_range(0, 0.5, 12));
  const auto vg = volume_geometry::centered(10, 10, 29, {1, 1, 1});
  kc::plan p;
  p.slab_mode = true;
  p.slab_nz = 6;
  const auto slabs = kc::make_slabs(p, vg, compute_projection_matrices(g), 40);
  ASSERT_EQ(slabs.size(), 5u);
  std::int64_t next = 0;
  for (const auto& s : slabs) {
    EXPECT_EQ(s.z0, next);
    next += s.nz;
  }
  EXPECT_EQ(next, vg.nz);
}

// CPU emulation of the slab path's sampling, with the pipeline's own row ranges and shifted
// matrices: per slab, a texture array holding rows [row_offset, row_offset + rows_valid) of
// each view, one zero row, and NaN in every row the kernel must never read; the samplers of
// both interpolation modes (border addressing: zero outside the array; zero at or beyond
// rows_valid). Summed over slabs this must reproduce the CPU back-projection of the whole
// volume (float round-off of the shifted matrices aside) and never touch a NaN.
TEST(CudaPlan, SlabSamplingReproducesWholeVolumeBackProjection) {
  const std::int64_t cols = 40, rows = 90;
  const geometry g =
      make_cone_geometry(cols, rows, 1.1, 0.9, 250, 420,
                         angle_range(0.2, 2 * std::numbers::pi / 17, 17), {1.5}, {-6.0});
  auto vg = volume_geometry::centered(18, 16, 70, {1.6, 1.6, 1.3});
  vg.origin_mm[2] -= 8.0;  // some slabs project partly, or entirely, off the detector
  projection_stack proj(g.view_count(), rows, cols);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);
  for (float& x : proj.data) x = uni(rng);
  const volume ref = back_project(proj, g, vg);
  const double peak = ctforge::testing::peak_abs(ref.data);

  const auto mats = compute_projection_matrices(g);
  kc::plan pl;
  pl.slab_mode = true;
  pl.slab_nz = 9;
  const auto slabs = kc::make_slabs(pl, vg, mats, rows);
  int max_valid = 0;
  bool partial = false;
  for (const auto& sl : slabs) {
    max_valid = std::max(max_valid, sl.rows_valid);
    partial = partial || (sl.rows_valid > 0 && sl.rows_valid < rows);
  }
  ASSERT_TRUE(partial) << "the geometry should give slabs that keep only part of the rows";
  const std::int64_t array_rows = std::min<std::int64_t>(rows, max_valid + 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const bool hardware : {false, true}) {
    volume out(vg);
    std::vector<kernels::proj_matrix> shifted(mats.size());
    for (const auto& sl : slabs) {
      kc::shifted_matrices(mats, sl.row_offset, shifted.data());
      const std::int64_t plane = vg.nx * vg.ny;
      std::vector<float> arr(static_cast<std::size_t>(array_rows * cols));
      for (std::int64_t v = 0; v < g.view_count(); ++v) {
        for (std::int64_t r = 0; r < array_rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c)
            arr[static_cast<std::size_t>(r * cols + c)] = r < sl.rows_valid
                                                              ? proj.at(v, sl.row_offset + r, c)
                                                              : (r == sl.rows_valid ? 0.0f : nan);
        // Texture in border mode: taps outside the array read 0.
        const auto tap = [&](std::int64_t c, std::int64_t r) -> float {
          return (c >= 0 && c < cols && r >= 0 && r < array_rows)
                     ? arr[static_cast<std::size_t>(r * cols + c)]
                     : 0.0f;
        };
        const auto bilinear = [&](float c, float r) {
          const float fc = std::floor(c), fr = std::floor(r);
          const auto c0 = static_cast<std::int64_t>(fc), r0 = static_cast<std::int64_t>(fr);
          const float ac = c - fc, ar = r - fr;
          return (1 - ar) * ((1 - ac) * tap(c0, r0) + ac * tap(c0 + 1, r0)) +
                 ar * ((1 - ac) * tap(c0, r0 + 1) + ac * tap(c0 + 1, r0 + 1));
        };
        const float rows_limit = static_cast<float>(sl.rows_valid);
        const auto sample = [&](float c, float r) -> float {
          if (hardware) return r < rows_limit ? bilinear(c, r) : 0.0f;
          if (!(c > -1.0f && c < static_cast<float>(cols) && r > -1.0f && r < rows_limit))
            return 0.0f;
          return bilinear(c, r);
        };
        for (std::int64_t k = 0; k < sl.nz; ++k)
          for (std::int64_t j = 0; j < vg.ny; ++j)
            for (std::int64_t i = 0; i < vg.nx; ++i) {
              const vec3 x = vg.voxel_center(static_cast<double>(i), static_cast<double>(j),
                                             static_cast<double>(sl.z0 + k));
              out.data[static_cast<std::size_t>((sl.z0 + k) * plane + j * vg.nx + i)] +=
                  kernels::bp_contribution<kernels::bp_weighting::none>(
                      shifted[static_cast<std::size_t>(v)], static_cast<float>(x.x),
                      static_cast<float>(x.y), static_cast<float>(x.z), sample);
            }
      }
    }
    double mae = 0;
    bool finite = true;
    for (std::size_t i = 0; i < out.data.size(); ++i) {
      finite = finite && std::isfinite(out.data[i]);
      mae += std::abs(out.data[i] - ref.data[i]);
    }
    mae /= static_cast<double>(out.data.size());
    EXPECT_TRUE(finite) << "a sample read a row outside the slab's range (hardware = " << hardware
                        << ")";
    // Same float arithmetic up to the matrices' row shift (done in double, then rounded):
    // ~1e-7 relative per sample.
    EXPECT_LE(mae, 1e-5 * peak) << "hardware = " << hardware;
  }
}

}  // namespace

#if defined(CTFORGE_WITH_CUDA)

#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "cuda/cuda_api.hpp"
#include "recon/filter.hpp"

namespace {

// The probe answers without throwing and gives a reason exactly when no device is usable
// (on this machine: whichever holds). Runs with or without a device.
TEST(CudaProbe, ReasonGivenExactlyWhenUnavailable) {
  std::string why = "unchanged";
  const bool ok = detail::cuda_device_available(&why);
  if (ok)
    EXPECT_TRUE(why.empty()) << why;
  else
    EXPECT_FALSE(why.empty());
  std::string again;
  EXPECT_EQ(detail::cuda_device_available(&again), ok);
  EXPECT_EQ(again, ok ? std::string() : why);
  EXPECT_EQ(detail::cuda_device_available(nullptr), ok);
}

// Each device ordinal is probed on its own: one that does not exist is never usable, and its
// reason names it when the driver answers at all.
TEST(CudaProbe, NonexistentOrdinalIsUnavailable) {
  std::string why;
  EXPECT_FALSE(detail::cuda_device_available(&why, 4096));
  EXPECT_FALSE(why.empty());
  if (detail::cuda_device_available(nullptr, 0))
    EXPECT_NE(why.find("4096"), std::string::npos) << why;
  EXPECT_FALSE(detail::cuda_device_available(nullptr, -1));
  EXPECT_THROW(resolve_backend(backend::cuda, nullptr, 4096), ctforge::error);
  EXPECT_THROW(resolve_backend(backend::automatic, nullptr, -1), usage_error);
  std::string notice;
  if (detail::cuda_device_available(nullptr, 0)) {
    // Devices exist: a mistyped ordinal is a usage error, not a quiet fall-back to the CPU.
    EXPECT_THROW(resolve_backend(backend::cuda, nullptr, 4096), usage_error);
    EXPECT_THROW(resolve_backend(backend::automatic, &notice, 4096), usage_error);
  } else {
    EXPECT_EQ(resolve_backend(backend::automatic, &notice, 4096), backend::cpu);
    EXPECT_FALSE(notice.empty());
  }
}

// Requesting the CUDA backend runs on the device where one is usable, and fails with a clear
// error instead of crashing where none is.
TEST(CudaProbe, CudaBackendRunsWithADeviceAndIsAnErrorWithout) {
  std::string why;
  const bool available = detail::cuda_device_available(&why);
  const geometry g = make_cone_geometry(16, 8, 1, 1, 100, 200, angle_range(0, 0.2, 32));
  projection_stack proj(32, 8, 16);
  std::fill(proj.data.begin(), proj.data.end(), 1.0f);
  const volume_geometry vg = volume_geometry::centered(8, 8, 4, {1, 1, 1});
  recon_options opt;
  opt.where = backend::cuda;
  if (available) {
    EXPECT_NO_THROW((void)reconstruct(proj, g, vg, opt));
    EXPECT_NO_THROW((void)detail::cuda_reconstruct(proj, g, vg, opt, detail::cuda_options{}));
    return;
  }
  EXPECT_THROW((void)reconstruct(proj, g, vg, opt), ctforge::error);
  EXPECT_THROW((void)detail::cuda_reconstruct(proj, g, vg, opt, detail::cuda_options{}),
               ctforge::error);
}

// Host-side check of the slab budgets the CudaPipeline tests below give (runs without a GPU):
// problem make(n, views) has (n + 24) x n pixels, `views` views and an n x n x n/2 volume; a
// budget of the batch buffers for B views (with the work area of the real plans, anywhere
// between none and the estimate) plus P planes splits the volume, keeps the batch and leaves
// the store on the host.
TEST(CudaPipelinePlan, TestBudgetsForceTheirSplit) {
  struct budget_case {
    std::int64_t n, views;
    int batch;
    std::int64_t planes;
  };
  for (const budget_case& c :
       {budget_case{96, 64, 8, 20}, budget_case{40, 30, 2, 8}, budget_case{40, 30, 1, 10}}) {
    const auto vg = volume_geometry::centered(c.n, c.n, c.n / 2, {0.7, 0.7, 0.7});
    kc::plan_input in =
        kc::make_plan_input(c.views, c.n, c.n + 24, vg, true, detail::padded_length(c.n + 24));
    in.requested_batch = c.batch;
    for (const double fraction : {0.0, 0.25, 1.0}) {
      const auto work_of = [&](int b) {
        return static_cast<std::int64_t>(fraction *
                                         static_cast<double>(kc::fft_work_estimate(in, b)));
      };
      const std::int64_t budget =
          kc::batch_bytes(in, c.batch, work_of(c.batch)) + c.planes * c.n * c.n * 4;
      const kc::plan p = kc::make_pipeline_plan(in, budget, work_of);
      EXPECT_TRUE(p.slab_mode) << c.n << "/" << c.batch << ", work " << fraction;
      EXPECT_FALSE(p.device_store) << c.n << "/" << c.batch;
      EXPECT_EQ(p.views_per_batch, c.batch) << c.n << "/" << c.batch;
      EXPECT_LE(p.slab_nz, c.planes) << c.n << "/" << c.batch;
    }
  }
}

// A budget with room for fewer planes than a slab takes (min(nz, 8)) beside the first batch
// makes the planner halve the batch and keep the volume whole rather than split it, so a test
// that wants slabs must leave at least 8 planes (testing::slab_budget).
TEST(CudaPipelinePlan, TooFewPlanesHalveTheBatchInsteadOfSplitting) {
  const auto vg = volume_geometry::centered(33, 29, 17, {1.4, 1.4, 1.4});
  const kc::plan_input in = kc::make_plan_input(40, 31, 45, vg, true, detail::padded_length(45));
  const auto work_of = [&](int b) { return kc::fft_work_estimate(in, b); };
  const auto budget = [&](std::int64_t planes) {
    return kc::batch_bytes(in, 32, work_of(32)) + planes * vg.nx * vg.ny * 4;
  };
  const kc::plan few = kc::make_pipeline_plan(in, budget(5), work_of);
  EXPECT_FALSE(few.slab_mode);
  EXPECT_LT(few.views_per_batch, 32);
  const kc::plan enough = kc::make_pipeline_plan(in, budget(8), work_of);
  EXPECT_TRUE(enough.slab_mode);
  EXPECT_EQ(enough.views_per_batch, 32);
  EXPECT_LE(enough.slab_nz, 8);
}

class CudaPipeline : public ctforge::testing::gpu_test {
 protected:
  struct problem {
    geometry g;
    volume_geometry vg;
    projection_stack proj;
  };
  static problem make(std::int64_t n, std::int64_t views) {
    problem p{make_cone_geometry(
                  n + 24, n, 1.0, 1.0, 200, 320,
                  angle_range(0, 2 * std::numbers::pi / static_cast<double>(views), views)),
              volume_geometry::centered(n, n, n / 2, {0.7, 0.7, 0.7}),
              {}};
    p.proj = project_analytic(shepp_logan_phantom(0.6 * static_cast<double>(n)), p.g);
    return p;
  }
  // Budget of the batch buffers for `batch` views (with the cuFFT work area of the real plans)
  // plus `planes` volume planes: forces a slab split when planes < nz.
  static std::int64_t slab_budget(const problem& p, int batch, std::int64_t planes) {
    const kc::plan_input in = kc::make_plan_input(p.proj.views, p.proj.rows, p.proj.cols, p.vg,
                                                  true, detail::padded_length(p.proj.cols));
    const std::int64_t work = detail::cuda_fft_work_bytes(in.padded_len, batch * in.rows);
    return kc::batch_bytes(in, batch, work) + planes * p.vg.nx * p.vg.ny * 4;
  }
  // Budget of the forward projector's buffers for batches of 8 views and a 3D texture of 10
  // planes: slabs of 10 planes.
  static std::int64_t forward_slab_budget(const problem& p) {
    return kc::forward_plan_bytes(p.vg, p.proj.views, p.proj.rows, p.proj.cols, 8, 10);
  }
  // A volume of constant density 0.01 / mm on the problem's grid.
  static volume constant_volume(const problem& p) {
    volume vol(p.vg);
    std::fill(vol.data.begin(), vol.data.end(), 0.01f);
    return vol;
  }
};

// Repeated reconstructions leave device memory where it was: every call frees what it
// allocated (buffers, arrays, textures, graphs; cuFFT plans stay cached per shape, and the
// warm-up round creates every shape used). Each call here allocates ~13 MiB in buffers of 0.7
// to 3 MiB; 12 rounds after the warm-up make the smallest leak of one buffer per round 8.4 MiB,
// twice the 4 MiB of slack that covers the driver's allocation granularity (2 MiB pages) and
// bookkeeping.
TEST_F(CudaPipeline, RepeatedCallsDoNotGrowDeviceMemory) {
  const problem p = make(96, 64);
  recon_options opt;
  detail::cuda_options copt;
  // The slab path: a budget of the batch buffers plus 20 of the 48 planes.
  detail::cuda_options small = copt;
  small.views_per_batch = 8;
  small.gpu_memory_limit_bytes = slab_budget(p, 8, 20);
  detail::cuda_options tiny = copt;
  tiny.gpu_memory_limit_bytes = 1 << 20;
  // Forward projection, whole volume and in slabs of 10 planes.
  const volume vol = constant_volume(p);
  detail::cuda_options fp_slabs = copt;
  fp_slabs.gpu_memory_limit_bytes = forward_slab_budget(p);
  const auto all_paths = [&] {
    (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, copt);
    (void)detail::cuda_back_project(p.proj, p.g, p.vg, copt);
    (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, small);
    EXPECT_GT(detail::cuda_last_pipeline_stats().slabs, 1);
    EXPECT_THROW((void)detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, tiny), ctforge::error);
    (void)detail::cuda_forward_project(vol, p.g, copt);
    (void)detail::cuda_forward_project(vol, p.g, fp_slabs);
    EXPECT_GT(detail::cuda_last_forward_stats().slabs, 1);
    EXPECT_THROW((void)detail::cuda_forward_project(vol, p.g, tiny), ctforge::error);
  };
  // Warm-up: module loading and library initialisation allocate once per process.
  all_paths();
  const std::int64_t before = detail::cuda_device_memory(0).free_bytes;
  for (int i = 0; i < 12; ++i) all_paths();
  const std::int64_t after = detail::cuda_device_memory(0).free_bytes;
  EXPECT_GE(after, before - (4 << 20)) << "device memory grew by " << (before - after) << " bytes";
}

// Page-locked staging is leased from a pool: after the first call of a shape, the same call
// pins nothing new (cudaHostAlloc costs tens of ms per 100 MB), for FDK, back-projection and
// forward projection alike, and the results do not depend on whether the staging was reused.
TEST_F(CudaPipeline, StagingBuffersAreReusedAcrossCalls) {
  const problem p = make(40, 30);
  detail::cuda_clear_pinned_pool();
  EXPECT_EQ(detail::cuda_pinned_pool_held_bytes(), 0);
  recon_options opt;
  const volume first = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, {});
  EXPECT_GT(detail::cuda_last_pipeline_stats().pinned_bytes_allocated, 0);
  EXPECT_GT(detail::cuda_pinned_pool_held_bytes(), 0) << "the staging returns to the pool";
  const volume again = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, {});
  EXPECT_EQ(detail::cuda_last_pipeline_stats().pinned_bytes_allocated, 0);
  EXPECT_EQ(again.data, first.data);
  (void)detail::cuda_back_project(p.proj, p.g, p.vg, {});
  EXPECT_EQ(detail::cuda_last_pipeline_stats().pinned_bytes_allocated, 0);
  const volume vol = voxelize(shepp_logan_phantom(25), p.vg, 1);
  const projection_stack fp1 = detail::cuda_forward_project(vol, p.g, {});
  const projection_stack fp2 = detail::cuda_forward_project(vol, p.g, {});
  EXPECT_EQ(detail::cuda_last_forward_stats().pinned_bytes_allocated, 0);
  EXPECT_EQ(fp2.data, fp1.data);
  detail::cuda_clear_pinned_pool();
  EXPECT_EQ(detail::cuda_pinned_pool_held_bytes(), 0);
}

// The one-line report the CLI prints after a GPU call names the plan that ran: batches, the
// slab split and where the filtered projections were kept, and the forward projector's slabs.
TEST_F(CudaPipeline, LastCallDescriptionNamesThePlan) {
  const problem p = make(96, 64);
  recon_options opt;
  detail::cuda_options copt;
  (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, copt);
  std::string d = describe_last_gpu_call(gpu_call::reconstruction);
  EXPECT_NE(d.find("the whole volume on the device"), std::string::npos) << d;
  EXPECT_NE(d.find("filtering"), std::string::npos) << d;
  copt.views_per_batch = 8;
  copt.gpu_memory_limit_bytes = slab_budget(p, 8, 20);
  (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, copt);
  const detail::cuda_pipeline_stats st = detail::cuda_last_pipeline_stats();
  d = describe_last_gpu_call(gpu_call::reconstruction);
  EXPECT_NE(d.find(std::to_string(st.slabs) + " slabs"), std::string::npos) << d;
  EXPECT_NE(d.find(st.device_store ? "device memory" : "pinned host memory"), std::string::npos)
      << d;
  detail::cuda_options fp = {};
  fp.gpu_memory_limit_bytes = forward_slab_budget(p);
  (void)detail::cuda_forward_project(constant_volume(p), p.g, fp);
  d = describe_last_gpu_call(gpu_call::forward_projection);
  EXPECT_NE(d.find("5 slabs of 10 planes"), std::string::npos) << d;
}

// Page-locked input (ctforge::pinned_host_range) is uploaded straight from the caller's memory,
// skipping the host copy into staging, with a bit-identical result (only the transfer's source
// differs), in the streaming and the slab paths. Pinning twice, moving and unpinning behave.
TEST_F(CudaPipeline, PageLockedInputIsUploadedDirectly) {
  const problem p = make(96, 64);
  recon_options opt;
  detail::cuda_options slabs;
  slabs.views_per_batch = 8;
  slabs.gpu_memory_limit_bytes = slab_budget(p, 8, 20);
  const volume staged = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, {});
  EXPECT_FALSE(detail::cuda_last_pipeline_stats().input_page_locked);
  const volume staged_slabs = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, slabs);
  {
    pinned_host_range pin(p.proj.data.data(), p.proj.data.size() * sizeof(float));
    // Containers and sandboxes may refuse page-locking (locked-memory limits): then there is
    // nothing to test here, and pinned_host_range says why instead of throwing.
    if (!pin.active()) GTEST_SKIP() << "page-locking refused here: " << pin.why_not();
    EXPECT_TRUE(pin.why_not().empty());
    const pinned_host_range twice(p.proj.data.data(), p.proj.data.size() * sizeof(float));
    EXPECT_FALSE(twice.active()) << "an already page-locked range is left to its owner";
    EXPECT_NE(twice.why_not().find("page-locked already"), std::string::npos) << twice.why_not();
    const volume direct = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, {});
    EXPECT_TRUE(detail::cuda_last_pipeline_stats().input_page_locked);
    EXPECT_EQ(direct.data, staged.data);
    const pinned_host_range moved = std::move(pin);
    EXPECT_FALSE(pin.active());  // NOLINT(bugprone-use-after-move): moved-from state is specified
    EXPECT_TRUE(moved.active());
    const volume direct_slabs = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, slabs);
    EXPECT_TRUE(detail::cuda_last_pipeline_stats().input_page_locked);
    EXPECT_GT(detail::cuda_last_pipeline_stats().slabs, 1);
    EXPECT_EQ(direct_slabs.data, staged_slabs.data);
    EXPECT_NE(describe_last_gpu_call(gpu_call::reconstruction).find("page-locked input"),
              std::string::npos);
  }
  (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, {});
  EXPECT_FALSE(detail::cuda_last_pipeline_stats().input_page_locked) << "unpinned at scope end";
}

// cuFFT plans are made once per shape and device and reused by later calls (the filter window
// changes only the response, not the plans); results do not depend on whether a plan was cached.
TEST_F(CudaPipeline, FftPlansAreReusedAcrossCalls) {
  const problem p = make(40, 30);
  detail::cuda_clear_fft_plan_cache();
  EXPECT_EQ(detail::cuda_fft_plan_cache_size(), 0u);
  recon_options opt;
  const volume first = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, {});
  EXPECT_GE(detail::cuda_last_pipeline_stats().fft_plans_created, 1);
  const std::size_t cached = detail::cuda_fft_plan_cache_size();
  EXPECT_GE(cached, 1u);
  const volume again = detail::cuda_reconstruct(p.proj, p.g, p.vg, opt, {});
  EXPECT_EQ(detail::cuda_last_pipeline_stats().fft_plans_created, 0);
  EXPECT_EQ(again.data, first.data) << "the same call on cached plans must give the same volume";
  recon_options hann = opt;
  hann.filter = filter_window::hann;
  (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, hann, {});
  EXPECT_EQ(detail::cuda_last_pipeline_stats().fft_plans_created, 0);
  EXPECT_EQ(detail::cuda_fft_plan_cache_size(), cached);
  // Plain back-projection plans nothing.
  (void)detail::cuda_back_project(p.proj, p.g, p.vg, {});
  EXPECT_EQ(detail::cuda_last_pipeline_stats().fft_plans_created, 0);
}

TEST_F(CudaPipeline, TooSmallMemoryBudgetNamesTheOption) {
  const problem p = make(32, 16);
  detail::cuda_options copt;
  copt.gpu_memory_limit_bytes = 1 << 20;
  try {
    (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, recon_options{}, copt);
    FAIL() << "expected ctforge::error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-memory-limit"), std::string::npos) << e.what();
  }
}

TEST_F(CudaPipeline, InvalidDeviceIsAUsageError) {
  const problem p = make(16, 8);
  detail::cuda_options copt;
  copt.device = 4096;
  try {
    (void)detail::cuda_reconstruct(p.proj, p.g, p.vg, recon_options{}, copt);
    FAIL() << "expected usage_error";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("--device"), std::string::npos) << e.what();
  }
}

TEST_F(CudaPipeline, InvalidInputIsAUsageError) {
  const problem p = make(16, 8);
  projection_stack wrong(p.proj.views, p.proj.rows, p.proj.cols + 1);
  EXPECT_THROW((void)detail::cuda_reconstruct(wrong, p.g, p.vg, recon_options{}, {}), usage_error);
  EXPECT_THROW((void)detail::cuda_back_project(wrong, p.g, p.vg, {}), usage_error);
  recon_options fbp;
  fbp.algo = algorithm::fbp;  // needs a parallel geometry
  EXPECT_THROW((void)detail::cuda_reconstruct(p.proj, p.g, p.vg, fbp, {}), usage_error);
}

// Batch size, slab split and store location change nothing but round-off.
TEST_F(CudaPipeline, ResultIndependentOfBatchingAndSlabs) {
  const problem p = make(40, 30);
  const volume ref = detail::cuda_reconstruct(p.proj, p.g, p.vg, recon_options{}, {});
  const double peak = ctforge::testing::peak_abs(ref.data);
  struct variant {
    int batch;
    std::int64_t planes;  // 0: no budget; > 0: batch buffers + this many planes (+ the store)
    bool device_store;
  };
  // Slab variants: budgets of the batch buffers plus 8 (the least the planner accepts) or 10 of
  // the 20 planes; the projection store (48 planes here) then goes to mapped host memory
  // (FdkGpu.slabs_device_store covers the device store; CudaPipelinePlan checks these plans).
  for (const variant& v : {variant{1, 0, false}, variant{4, 0, false}, variant{29, 0, false},
                           variant{30, 0, false}, variant{2, 8, false}, variant{1, 10, false}}) {
    detail::cuda_options copt;
    copt.views_per_batch = v.batch;
    if (v.planes > 0)
      copt.gpu_memory_limit_bytes =
          slab_budget(p, v.batch, v.planes) + (v.device_store ? p.proj.size() * 4 : 0);
    const volume out = detail::cuda_reconstruct(p.proj, p.g, p.vg, recon_options{}, copt);
    const detail::cuda_pipeline_stats st = detail::cuda_last_pipeline_stats();
    if (v.planes > 0) {
      EXPECT_GT(st.slabs, 1) << "batch " << v.batch;
      EXPECT_EQ(st.device_store, v.device_store) << "batch " << v.batch;
    }
    // Without slabs only the order of the float sums over views changes: ~sqrt(30) * 6e-8 of
    // the peak. Slabs also round the row-shifted float matrices and each slab's z origin
    // differently (a few 1e-6 pixel, on steep filtered edges), as CudaPlan.SlabSampling*
    // measures on the CPU: 1e-5 there.
    EXPECT_LE(mean_abs_error(out.data, ref.data), (v.planes > 0 ? 1e-5 : 1e-6) * peak)
        << "batch " << v.batch << ", " << st.slabs << " slabs";
    if (v.batch > 0) EXPECT_EQ(st.views_per_batch, v.batch);
  }
}

}  // namespace

#else

TEST(CudaPipeline, Skipped) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
