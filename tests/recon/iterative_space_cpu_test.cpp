// The CPU iterative space (src/recon/iterative_space_cpu.cpp): element-wise steps against plain
// loops, reductions (double, the same for a thread count), subsets and select_views, the
// projector pair against ctforge::forward_project / back_project, and the TV prox (2D and 3D):
// an exact small problem, TV reduction, identity at weight -> 0, prox optimality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "recon/iterative_space.hpp"
#include "adjoint_cases.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

using detail::backprojector_kind;
using detail::iterative_space;
using detail::space_buffer;
using detail::space_config;

constexpr double pi = std::numbers::pi;
using testing::random_values;

struct fixture {
  geometry g = make_cone_geometry(21, 13, 1.3, 1.1, 80, 150, angle_range(0.1, 0.7, 9));
  volume_geometry vg = volume_geometry::centered(15, 11, 9, {1.0, 1.2, 0.9});
};

/// Odd sizes above the space's serial threshold (16384 elements), so that the element-wise
/// loops and reductions run in parallel.
struct large_fixture : fixture {
  large_fixture() { vg = volume_geometry::centered(31, 27, 23, {1.0, 1.0, 1.0}); }
};

std::unique_ptr<iterative_space> cpu_space(const geometry& g, const volume_geometry& vg,
                                           int subsets = 1, int threads = 2) {
  space_config cfg;
  cfg.where = backend::cpu;
  cfg.threads = threads;
  cfg.subset_count = subsets;
  return detail::make_space(g, vg, cfg);
}

std::vector<float> host(iterative_space& sp, const space_buffer& b) {
  std::vector<float> h(static_cast<std::size_t>(b.size()));
  sp.download(b, h);
  return h;
}

space_buffer with(iterative_space& sp, const std::vector<float>& v) {
  space_buffer b = sp.volume();
  sp.upload(v, b);
  return b;
}

// Each step equals its plain loop (float arithmetic; 1 ulp of slack where the library may fuse
// a multiply-add the loop does not).
TEST(CpuSpace, ElementWiseStepsMatchPlainLoops) {
  const large_fixture f;
  auto sp = cpu_space(f.g, f.vg);
  const std::size_t n = static_cast<std::size_t>(f.vg.voxel_count());
  const auto a = random_values(n, 1), b = random_values(n, 2), c = random_values(n, 3, 0, 2);
  const auto near = [](const std::vector<float>& got, const std::vector<float>& want,
                       const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 4e-7 * (1 + std::abs(want[i]))) << what << " at " << i;
  };
  std::vector<float> want(n);
  {
    space_buffer y = with(*sp, b);
    sp->axpby(0.5f, with(*sp, a), -2.0f, y);
    for (std::size_t i = 0; i < n; ++i) want[i] = 0.5f * a[i] + -2.0f * b[i];
    near(host(*sp, y), want, "axpby");
  }
  {
    space_buffer x = with(*sp, a), y = with(*sp, b);
    sp->lincomb(1.5f, x, 0.25f, y, x);  // out aliases x
    for (std::size_t i = 0; i < n; ++i) want[i] = 1.5f * a[i] + 0.25f * b[i];
    near(host(*sp, x), want, "lincomb");
  }
  {
    space_buffer x = with(*sp, c);
    sp->invert_above(x, 0.5f);
    for (std::size_t i = 0; i < n; ++i) want[i] = c[i] > 0.5f ? 1.0f / c[i] : 0.0f;
    EXPECT_EQ(host(*sp, x), want);
  }
  {
    space_buffer w = with(*sp, c), p = with(*sp, a), q = with(*sp, b);
    sp->weighted_residual(w, p, q, q);
    for (std::size_t i = 0; i < n; ++i) want[i] = c[i] * (a[i] - b[i]);
    near(host(*sp, q), want, "weighted_residual");
  }
  for (const bool nonneg : {false, true}) {
    space_buffer x = with(*sp, a);
    sp->weighted_update(x, 0.7f, with(*sp, c), with(*sp, b), nonneg);
    for (std::size_t i = 0; i < n; ++i) {
      const float v = a[i] + 0.7f * c[i] * b[i];
      want[i] = nonneg ? std::max(v, 0.0f) : v;
    }
    near(host(*sp, x), want, "weighted_update");
  }
  {
    space_buffer x = with(*sp, a);
    sp->clamp_nonnegative(x);
    for (std::size_t i = 0; i < n; ++i) want[i] = std::max(a[i], 0.0f);
    EXPECT_EQ(host(*sp, x), want);
  }
  {
    space_buffer out = sp->volume();
    sp->ratio(with(*sp, a), with(*sp, c), 0.3f, out);
    for (std::size_t i = 0; i < n; ++i) want[i] = c[i] > 0.3f ? a[i] / c[i] : 0.0f;
    EXPECT_EQ(host(*sp, out), want);
  }
  {
    space_buffer x = with(*sp, a);
    sp->multiply_ratio(x, with(*sp, b), with(*sp, c), 0.3f);
    for (std::size_t i = 0; i < n; ++i) want[i] = c[i] > 0.3f ? a[i] * b[i] / c[i] : a[i];
    EXPECT_EQ(host(*sp, x), want);
  }
  {
    space_buffer x = sp->volume();
    sp->fill(x, 2.5f);
    EXPECT_EQ(host(*sp, x), std::vector<float>(n, 2.5f));
    space_buffer y = sp->volume();
    sp->copy(with(*sp, a), y);
    EXPECT_EQ(host(*sp, y), a);
  }
  // Mismatched sizes are refused.
  space_buffer p = sp->projections(-1);
  space_buffer v = sp->volume();
  EXPECT_THROW(sp->copy(p, v), usage_error);
}

// Reductions in double: equal to a double loop up to summation order (1e-12 relative), the same
// bits for the same thread count; the Poisson log-likelihood with its 0 log 0 = 0 and -inf cases.
TEST(CpuSpace, ReductionsInDoubleDeterministicForAThreadCount) {
  const large_fixture f;
  const std::size_t n = static_cast<std::size_t>(f.vg.voxel_count());
  const auto a = random_values(n, 4), b = random_values(n, 5);
  double want = 0;
  for (std::size_t i = 0; i < n; ++i) want += static_cast<double>(a[i]) * b[i];
  for (const int threads : {1, 2, 3}) {
    auto sp = cpu_space(f.g, f.vg, 1, threads);
    const space_buffer x = with(*sp, a), y = with(*sp, b);
    const double got = sp->dot(x, y);
    EXPECT_NEAR(got, want, 1e-12 * n);
    EXPECT_EQ(got, sp->dot(x, y));
  }
  auto sp = cpu_space(f.g, f.vg);
  std::vector<float> p(n, 0.0f), q(n, 1.0f);
  p[0] = 2.0f;
  q[0] = 0.5f;  // 2 log 0.5 - 0.5; the others 0 log 1 - 1 = -1
  q[1] = 0.0f;  // p = 0, q = 0: contributes 0
  const double ll = sp->poisson_log_likelihood(with(*sp, p), with(*sp, q));
  EXPECT_NEAR(ll, 2 * std::log(0.5) - 0.5 - static_cast<double>(n - 2), 1e-9);
  p[1] = 1.0f;  // data where the model is 0
  EXPECT_EQ(sp->poisson_log_likelihood(with(*sp, p), with(*sp, q)),
            -std::numeric_limits<double>::infinity());
}

// forward / back on subsets equal the library projectors on the subset's views; subsets are
// interleaved, clamped to the view count, and select_views keeps the orbit's per-view data.
TEST(CpuSpace, ProjectorPairOnSubsetsMatchesTheLibrary) {
  const fixture f;
  auto sp = cpu_space(f.g, f.vg, 4);
  ASSERT_EQ(sp->subset_count(), 4);
  EXPECT_EQ(sp->views_of(1), (std::vector<std::int64_t>{1, 5}));
  EXPECT_EQ(sp->views_of(0), (std::vector<std::int64_t>{0, 4, 8}));
  EXPECT_EQ(sp->views_of(-1).size(), 9u);
  EXPECT_EQ(cpu_space(f.g, f.vg, 50)->subset_count(), 9);
  const geometry g1 = detail::select_views(f.g, sp->views_of(1));
  ASSERT_TRUE(g1.orbit.has_value());
  EXPECT_EQ(g1.orbit->angles_rad,
            (std::vector<double>{f.g.orbit->angles_rad[1], f.g.orbit->angles_rad[5]}));
  const volume truth = voxelize(shepp_logan_phantom(12), f.vg, 2);
  const space_buffer x = with(*sp, truth.data);
  space_buffer y = sp->projections(1);
  sp->forward(x, y, 1);
  EXPECT_EQ(host(*sp, y), forward_project(truth, g1, 2).data);
  space_buffer bx = sp->volume();
  for (const auto kind : {backprojector_kind::voxel, backprojector_kind::matched}) {
    sp->back(y, bx, 1, kind);
    const projection_stack ps = forward_project(truth, g1, 2);
    const volume want = kind == backprojector_kind::matched ? back_project_matched(ps, g1, f.vg, 2)
                                                            : back_project(ps, g1, f.vg, 2);
    EXPECT_EQ(host(*sp, bx), want.data);
  }
  const auto st = sp->stats();
  EXPECT_EQ(st.forward_calls, 1);
  EXPECT_EQ(st.back_calls, 2);
  EXPECT_EQ(st.buffers_allocated, 3);
}

// total_variation: a step of height 1 across a plane of nx * nz voxels has TV nx * nz; on
// random values it equals a plain loop over forward differences to rounding.
TEST(CpuSpace, TotalVariation) {
  const geometry g = make_cone_geometry(8, 4, 1, 1, 60, 120, {0.0});
  const volume_geometry vg = volume_geometry::centered(5, 4, 3, {1, 1, 1});
  auto sp = cpu_space(g, vg);
  std::vector<float> step(60, 0.0f);
  for (std::int64_t k = 0; k < 3; ++k)
    for (std::int64_t j = 2; j < 4; ++j)
      for (std::int64_t i = 0; i < 5; ++i) step[static_cast<std::size_t>((k * 4 + j) * 5 + i)] = 1;
  EXPECT_DOUBLE_EQ(sp->total_variation(with(*sp, step)), 15.0);
  const auto r = random_values(60, 8);
  const space_buffer x = with(*sp, r);
  double tv = 0;
  for (std::int64_t k = 0; k < 3; ++k)
    for (std::int64_t j = 0; j < 4; ++j)
      for (std::int64_t i = 0; i < 5; ++i) {
        const auto at = [&](std::int64_t a, std::int64_t b, std::int64_t c) {
          return static_cast<double>(r[static_cast<std::size_t>((c * 4 + b) * 5 + a)]);
        };
        const double gx = i + 1 < 5 ? at(i + 1, j, k) - at(i, j, k) : 0.0;
        const double gy = j + 1 < 4 ? at(i, j + 1, k) - at(i, j, k) : 0.0;
        const double gz = k + 1 < 3 ? at(i, j, k + 1) - at(i, j, k) : 0.0;
        tv += std::sqrt(gx * gx + gy * gy + gz * gz);
      }
  EXPECT_NEAR(sp->total_variation(x), tv, 1e-9 * tv);
}

/// 0.5 |z - b|^2 + w TV(z), TV as total_variation computes it.
double prox_objective(iterative_space& sp, const std::vector<float>& z, const std::vector<float>& b,
                      double w) {
  double d = 0;
  for (std::size_t i = 0; i < z.size(); ++i) d += 0.5 * (z[i] - b[i]) * (z[i] - b[i]);
  return d + w * sp.total_variation(with(sp, z));
}

std::vector<float> prox(iterative_space& sp, const std::vector<float>& b, float w, int iterations,
                        bool nonneg = false) {
  space_buffer x = with(sp, b);
  sp.tv_prox(x, w, iterations, nonneg);
  return host(sp, x);
}

// Two voxels b = (0, 1): the prox of w |z1 - z0| moves each by w towards the other (w < 1/2),
// exactly: (w, 1 - w). A sign error in the dual or the primal step moves them apart instead.
TEST(CpuSpace, TvProxSolvesATwoVoxelProblemExactly) {
  const geometry g = make_cone_geometry(4, 1, 1, 1, 60, 120, {0.0});
  const volume_geometry vg = volume_geometry::centered(2, 1, 1, {1, 1, 1});
  auto sp = cpu_space(g, vg);
  const auto z = prox(*sp, {0.0f, 1.0f}, 0.2f, 200);
  EXPECT_NEAR(z[0], 0.2f, 1e-4);
  EXPECT_NEAR(z[1], 0.8f, 1e-4);
  const auto flat = prox(*sp, {0.0f, 1.0f}, 0.7f, 200);  // w >= 1/2: both at the mean
  EXPECT_NEAR(flat[0], 0.5f, 1e-4);
  EXPECT_NEAR(flat[1], 0.5f, 1e-4);
}

// On a noisy phantom (2D: nz = 1, and 3D): the prox lowers TV and its own objective below the
// identity's (b itself); 20 FGP steps come within 1% of 500 steps' objective; no random
// perturbation of the 500-step result lowers the objective (optimality, to 1e-6 relative); at
// weight 1e-7 it is the identity to 2e-6 where weight 0.02 moves voxels by more than 0.005
// (negative control); nonnegative clamps.
TEST(CpuSpace, TvProxReducesTvIsIdentityAtZeroWeightAndIsOptimal) {
  const geometry g = make_cone_geometry(24, 16, 1.2, 1.2, 120, 200, angle_range(0, 0.5, 4));
  for (const std::int64_t nz : {1, 7}) {
    const volume_geometry vg = volume_geometry::centered(16, 13, nz, {1, 1, 1});
    auto sp = cpu_space(g, vg);
    const volume truth = voxelize(shepp_logan_phantom(14), vg, 2);
    std::vector<float> b = truth.data;
    const auto noise = random_values(b.size(), 9, -0.01f, 0.01f);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] += noise[i];
    const float w = 0.004f;
    const auto z20 = prox(*sp, b, w, 20), z500 = prox(*sp, b, w, 500);
    const double tv_b = sp->total_variation(with(*sp, b));
    const double tv_z = sp->total_variation(with(*sp, z20));
    std::cout << "[ metric   ] nz " << nz << ": TV " << tv_b << " -> " << tv_z << "\n";
    EXPECT_LT(tv_z, 0.7 * tv_b) << nz;
    const double f_b = prox_objective(*sp, b, b, w);
    const double f20 = prox_objective(*sp, z20, b, w), f500 = prox_objective(*sp, z500, b, w);
    EXPECT_LT(f20, f_b) << nz;
    EXPECT_LT(f20, 1.01 * f500) << nz;
    std::mt19937 rng(11);
    std::normal_distribution<float> step(0.0f, 1e-4f);
    for (int k = 0; k < 20; ++k) {
      std::vector<float> t = z500;
      for (float& v : t) v += step(rng);
      EXPECT_GE(prox_objective(*sp, t, b, w), f500 * (1 - 1e-6)) << nz << " trial " << k;
    }
    const auto ident = prox(*sp, b, 1e-7f, 20);
    const auto moved = prox(*sp, b, 0.02f, 20);
    double d_ident = 0, d_moved = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      d_ident = std::max(d_ident, static_cast<double>(std::abs(ident[i] - b[i])));
      d_moved = std::max(d_moved, static_cast<double>(std::abs(moved[i] - b[i])));
    }
    EXPECT_LT(d_ident, 2e-6) << nz;
    EXPECT_GT(d_moved, 0.005) << nz;
    const auto pos = prox(*sp, b, w, 20, true);
    EXPECT_GE(*std::min_element(pos.begin(), pos.end()), 0.0f);
    EXPECT_EQ(prox(*sp, b, w, 20), z20) << "deterministic";
  }
}

}  // namespace
}  // namespace ctforge
