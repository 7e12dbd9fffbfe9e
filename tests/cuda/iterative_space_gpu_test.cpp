// The CUDA iterative space (src/cuda/iterative_space.cu): every element-wise step and
// reduction against a host loop over the same per-element functions (math/elementwise.hpp),
// forward / back(voxel) / back(matched) against the CPU projectors (all views and one ordered
// subset), tv_prox against a host loop over the same FGP functions (math/tv.hpp) in 3D and
// 2D, the checks of sizes and subsets, and the persistence: a sequence of iterations after
// set-up allocates nothing and copies nothing between host and device.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "adjoint_cases.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"
#include "cuda/cuda_api.hpp"
#include "math/elementwise.hpp"
#include "math/tv.hpp"
#include "math/tv_host.hpp"
#include "recon/iterative_space.hpp"

using namespace ctforge;
using namespace ctforge::detail;
namespace k = ctforge::kernels;

namespace {

using ctforge::testing::host_total_variation;
using ctforge::testing::host_tv_prox;
using ctforge::testing::mae_over_peak;
using ctforge::testing::random_values;

// Element-wise results: the device may contract a * x + b * y into one FMA (one rounding
// instead of two), so results may differ by about one ulp of the largest term; 4 ulp of
// max(1, |reference|) bounds that while any wrong formula misses by far more.
void expect_elementwise(const std::vector<float>& got, const std::vector<float>& ref,
                        const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double tol = 4.0 * 1.2e-7 * std::max(1.0, std::abs(static_cast<double>(ref[i])));
    if (!(std::abs(static_cast<double>(got[i]) - ref[i]) <= tol)) {
      if (bad++ < 5)
        ADD_FAILURE() << what << " [" << i << "]: device " << got[i] << ", host " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

struct scan {
  geometry g = make_cone_geometry(41, 27, 1.3, 1.1, 80, 150, angle_range(0.1, 0.3, 23));
  volume_geometry vg = volume_geometry::centered(31, 27, 19, {1.0, 1.2, 0.9});
};

space_config cuda_config(int subsets) {
  space_config cfg;
  cfg.where = backend::cuda;
  cfg.subset_count = subsets;
  return cfg;
}

struct helper {
  iterative_space& sp;
  space_buffer put(const std::vector<float>& host, bool volume, int subset = -1) {
    space_buffer b = volume ? sp.volume() : sp.projections(subset);
    sp.upload(host, b);
    return b;
  }
  std::vector<float> get(const space_buffer& b) {
    std::vector<float> h(static_cast<std::size_t>(b.size()));
    sp.download(b, h);
    return h;
  }
};

class IterativeSpaceGpu : public ctforge::testing::gpu_test {};

TEST_F(IterativeSpaceGpu, ElementwiseStepsMatchAHostLoop) {
  const scan s;
  auto sp = make_cuda_space(s.g, s.vg, cuda_config(1));
  ASSERT_EQ(sp->where(), backend::cuda);
  helper h{*sp};
  const std::size_t n = static_cast<std::size_t>(s.vg.voxel_count());
  const std::vector<float> a = random_values(n, 1), b = random_values(n, 2),
                           c = random_values(n, 3), pos = random_values(n, 4, -0.2f, 2.0f);
  std::vector<float> ref(n);

  {  // zero-filled buffers, fill, copy
    space_buffer x = sp->volume();
    EXPECT_EQ(h.get(x), std::vector<float>(n, 0.0f));
    sp->fill(x, 2.5f);
    EXPECT_EQ(h.get(x), std::vector<float>(n, 2.5f));
    space_buffer y = h.put(a, true);
    sp->copy(y, x);
    EXPECT_EQ(h.get(x), a);
  }
  {  // axpby: y = a x + b y
    space_buffer x = h.put(a, true), y = h.put(b, true);
    sp->axpby(0.7f, x, -1.3f, y);
    for (std::size_t i = 0; i < n; ++i) ref[i] = k::ew_lincomb(0.7f, a[i], -1.3f, b[i]);
    expect_elementwise(h.get(y), ref, "axpby");
  }
  {  // lincomb into a third buffer and aliasing its first operand
    space_buffer x = h.put(a, true), y = h.put(b, true), out = sp->volume();
    sp->lincomb(1.5f, x, 0.25f, y, out);
    for (std::size_t i = 0; i < n; ++i) ref[i] = k::ew_lincomb(1.5f, a[i], 0.25f, b[i]);
    expect_elementwise(h.get(out), ref, "lincomb");
    sp->lincomb(1.5f, x, 0.25f, y, x);
    expect_elementwise(h.get(x), ref, "lincomb aliasing x");
  }
  {  // invert_above
    space_buffer x = h.put(pos, true);
    sp->invert_above(x, 0.1f);
    for (std::size_t i = 0; i < n; ++i) ref[i] = k::ew_invert_above(pos[i], 0.1f);
    expect_elementwise(h.get(x), ref, "invert_above");
  }
  {  // weighted_residual, out aliasing q
    space_buffer w = h.put(pos, true), p = h.put(a, true), q = h.put(b, true);
    sp->weighted_residual(w, p, q, q);
    for (std::size_t i = 0; i < n; ++i) ref[i] = k::ew_weighted_residual(pos[i], a[i], b[i]);
    expect_elementwise(h.get(q), ref, "weighted_residual");
  }
  for (const bool nonneg : {false, true}) {  // weighted_update
    space_buffer x = h.put(a, true), cw = h.put(pos, true), u = h.put(c, true);
    sp->weighted_update(x, 0.9f, cw, u, nonneg);
    for (std::size_t i = 0; i < n; ++i)
      ref[i] = k::ew_weighted_update(a[i], 0.9f, pos[i], c[i], nonneg);
    expect_elementwise(h.get(x), ref, nonneg ? "weighted_update nonnegative" : "weighted_update");
  }
  {  // clamp_nonnegative
    space_buffer x = h.put(a, true);
    sp->clamp_nonnegative(x);
    for (std::size_t i = 0; i < n; ++i) ref[i] = k::ew_clamp_nonnegative(a[i]);
    expect_elementwise(h.get(x), ref, "clamp_nonnegative");
  }
  {  // ratio, out aliasing q
    space_buffer p = h.put(a, true), q = h.put(pos, true);
    sp->ratio(p, q, 0.05f, q);
    for (std::size_t i = 0; i < n; ++i) ref[i] = k::ew_ratio(a[i], pos[i], 0.05f);
    expect_elementwise(h.get(q), ref, "ratio");
  }
  {  // multiply_ratio
    space_buffer x = h.put(a, true), u = h.put(b, true), sn = h.put(pos, true);
    sp->multiply_ratio(x, u, sn, 0.05f);
    for (std::size_t i = 0; i < n; ++i) ref[i] = k::ew_multiply_ratio(a[i], b[i], pos[i], 0.05f);
    expect_elementwise(h.get(x), ref, "multiply_ratio");
  }
  {  // unequal sizes are usage errors
    space_buffer v = sp->volume(), p = sp->projections(-1);
    EXPECT_THROW(sp->axpby(1.0f, v, 1.0f, p), usage_error);
    EXPECT_THROW(sp->copy(v, p), usage_error);
    EXPECT_THROW(sp->dot(v, p), usage_error);
    EXPECT_THROW(sp->forward(p, v, -1), usage_error);
  }
}

// Double accumulation: the device and host sums differ only by the order of ~2e4 double
// additions (relative ~1e-13); a float accumulation would miss by ~1e-6. Repeated calls give
// the same double (fixed partition and combination order).
TEST_F(IterativeSpaceGpu, ReductionsMatchAHostLoopAndAreDeterministic) {
  const scan s;
  auto sp = make_cuda_space(s.g, s.vg, cuda_config(1));
  helper h{*sp};
  const std::size_t n = static_cast<std::size_t>(s.vg.voxel_count());
  std::vector<float> a = random_values(n, 5), b = random_values(n, 6);
  std::vector<float> counts = random_values(n, 7, 0.0f, 50.0f),
                     mean = random_values(n, 8, 0.1f, 40.0f);
  for (std::size_t i = 0; i < n; i += 7) counts[i] = 0.0f;  // p == 0 terms
  double d_ref = 0, l_ref = 0;
  for (std::size_t i = 0; i < n; ++i) {
    d_ref += k::dot_term(a[i], b[i]);
    l_ref += k::poisson_term(counts[i], mean[i]);
  }
  space_buffer A = h.put(a, true), B = h.put(b, true), P = h.put(counts, true),
               Q = h.put(mean, true);
  const double d = sp->dot(A, B);
  EXPECT_NEAR(d, d_ref, 1e-12 * std::max(1.0, std::abs(d_ref)));
  EXPECT_EQ(sp->dot(A, B), d);
  const double l = sp->poisson_log_likelihood(P, Q);
  EXPECT_NEAR(l, l_ref, 1e-12 * std::abs(l_ref));
  EXPECT_EQ(sp->poisson_log_likelihood(P, Q), l);
  // q <= 0 where p > 0: -inf; q <= 0 where p == 0 counts 0.
  std::vector<float> mean0 = mean, counts0 = counts;
  mean0[3] = 0.0f;
  counts0[3] = 0.0f;
  sp->upload(mean0, Q);
  sp->upload(counts0, P);
  double l0_ref = 0;
  for (std::size_t i = 0; i < n; ++i) l0_ref += k::poisson_term(counts0[i], mean0[i]);
  EXPECT_NEAR(sp->poisson_log_likelihood(P, Q), l0_ref, 1e-12 * std::abs(l0_ref));
  counts0[3] = 2.0f;
  sp->upload(counts0, P);
  EXPECT_EQ(sp->poisson_log_likelihood(P, Q), -std::numeric_limits<double>::infinity());
}

// The projector pair on device buffers against the CPU projectors (exact interpolation: the
// same per-ray / per-voxel float code, ~1e-6 of the peak apart; see projector_gpu_test.cpp).
// A subset's back-projection equals the CPU back-projection of all views with the other
// views' projections zeroed (both back-projectors are linear and a zero view adds nothing).
TEST_F(IterativeSpaceGpu, ProjectorsMatchTheCpuForAllViewsAndASubset) {
  const scan s;
  const int subsets = 4;
  auto sp = make_cuda_space(s.g, s.vg, cuda_config(subsets));
  ASSERT_EQ(sp->subset_count(), subsets);
  helper h{*sp};
  const std::int64_t V = s.g.view_count(), pix = s.g.rows * s.g.cols;
  const std::vector<float> x = random_values(static_cast<std::size_t>(s.vg.voxel_count()), 9, 0.0f);
  const std::vector<float> y = random_values(static_cast<std::size_t>(V * pix), 10, 0.0f);
  const projection_stack ref_fwd = forward_project(volume_view(s.vg, x), s.g, 2);
  const projection_view yv(V, s.g.rows, s.g.cols, y);
  const volume ref_matched = back_project_matched(yv, s.g, s.vg, 2);
  const volume ref_voxel = back_project(yv, s.g, s.vg, 2);

  space_buffer X = h.put(x, true);
  space_buffer Y = sp->projections(-1);
  sp->forward(X, Y, -1);
  EXPECT_LE(mae_over_peak(h.get(Y), ref_fwd.data), 1e-5) << "forward, all views";
  sp->upload(y, Y);
  space_buffer B = sp->volume();
  sp->back(Y, B, -1, backprojector_kind::matched);
  EXPECT_LE(mae_over_peak(h.get(B), ref_matched.data), 1e-5) << "back matched, all views";
  sp->back(Y, B, -1, backprojector_kind::voxel);
  EXPECT_LE(mae_over_peak(h.get(B), ref_voxel.data), 1e-5) << "back voxel, all views";

  const int sub = 1;
  const std::vector<std::int64_t>& views = sp->views_of(sub);
  ASSERT_EQ(views.size(), 6u);  // 1, 5, 9, 13, 17, 21 of 23
  for (std::size_t i = 0; i < views.size(); ++i)
    EXPECT_EQ(views[i], sub + static_cast<std::int64_t>(i) * subsets);
  std::vector<float> ref_sub_fwd, y_sub, y_masked(y.size(), 0.0f);
  for (const std::int64_t v : views) {
    ref_sub_fwd.insert(ref_sub_fwd.end(), ref_fwd.data.begin() + v * pix,
                       ref_fwd.data.begin() + (v + 1) * pix);
    y_sub.insert(y_sub.end(), y.begin() + v * pix, y.begin() + (v + 1) * pix);
    std::copy(y.begin() + v * pix, y.begin() + (v + 1) * pix, y_masked.begin() + v * pix);
  }
  space_buffer Ys = sp->projections(sub);
  ASSERT_EQ(static_cast<std::size_t>(Ys.size()), y_sub.size());
  sp->forward(X, Ys, sub);
  EXPECT_LE(mae_over_peak(h.get(Ys), ref_sub_fwd), 1e-5) << "forward, subset";
  sp->upload(y_sub, Ys);
  const projection_view ym(V, s.g.rows, s.g.cols, y_masked);
  sp->back(Ys, B, sub, backprojector_kind::matched);
  EXPECT_LE(mae_over_peak(h.get(B), back_project_matched(ym, s.g, s.vg, 2).data), 1e-5)
      << "back matched, subset";
  sp->back(Ys, B, sub, backprojector_kind::voxel);
  EXPECT_LE(mae_over_peak(h.get(B), back_project(ym, s.g, s.vg, 2).data), 1e-5)
      << "back voxel, subset";

  EXPECT_THROW(sp->projections(subsets), usage_error);
  EXPECT_THROW(sp->forward(X, Ys, 3), usage_error);  // subset 3 holds 5 views, Ys 6
}

// The device FGP against the host loop over the same functions: float code that differs only
// by FMA contraction and rsqrtf (2 ulp) per step; over 20 steps that stays below 1e-5 of the
// peak. The prox must lower the total variation (a prox that returned its input would not).
TEST_F(IterativeSpaceGpu, TvProxMatchesAHostLoopIn3dAnd2d) {
  const scan s3;
  const geometry g2 = make_cone_geometry(25, 1, 1.0, 1.0, 60, 120, angle_range(0, 0.5, 12));
  const volume_geometry vg2 = volume_geometry::centered(24, 20, 1, {1, 1, 1});
  const struct {
    const geometry* g;
    const volume_geometry* vg;
    const char* name;
  } spaces[] = {{&s3.g, &s3.vg, "3D"}, {&g2, &vg2, "2D"}};
  for (const auto& c : spaces) {
    auto sp = make_cuda_space(*c.g, *c.vg, cuda_config(1));
    helper h{*sp};
    const k::tv_dims d{c.vg->nx, c.vg->ny, c.vg->nz};
    const std::vector<float> b =
        random_values(static_cast<std::size_t>(c.vg->voxel_count()), 11, -0.2f, 1.0f);
    for (const bool nonneg : {false, true}) {
      space_buffer X = h.put(b, true);
      sp->tv_prox(X, 0.05f, 20, nonneg);
      const std::vector<float> got = h.get(X);
      const std::vector<float> ref = host_tv_prox(b, d, 0.05f, 20, nonneg).x;
      const std::string what = std::string(c.name) + (nonneg ? " nonnegative" : "");
      EXPECT_LE(mae_over_peak(got, ref), 1e-5) << what;
      EXPECT_LT(host_total_variation(got, d), 0.9 * host_total_variation(b, d)) << what;
      if (nonneg) EXPECT_GE(*std::min_element(got.begin(), got.end()), 0.0f) << what;
    }
    space_buffer X = h.put(b, true);
    sp->tv_prox(X, 0.0f, 20, false);  // weight 0: the identity
    EXPECT_EQ(h.get(X), b) << c.name;
    EXPECT_THROW(sp->tv_prox(X, -1.0f, 5, false), usage_error);
  }
}

// Set-up (buffers, the TV fields at a first tv_prox, uploads of the data), then iterations of
// SIRT, CGLS and TV steps on the device: no buffer, no device allocation, no byte across PCIe.
TEST_F(IterativeSpaceGpu, IterationsNeitherAllocateNorTransfer) {
  const scan s;
  auto sp = make_cuda_space(s.g, s.vg, cuda_config(3));
  helper h{*sp};
  const std::size_t n = static_cast<std::size_t>(s.vg.voxel_count());
  space_buffer x = sp->volume(), c = sp->volume(), u = sp->volume();
  space_buffer p =
      h.put(random_values(static_cast<std::size_t>(sp->projections(0).size()), 12, 0.0f), false, 0);
  space_buffer q = sp->projections(0), r = sp->projections(0);
  sp->tv_prox(x, 0.01f, 2, true);  // allocates the TV fields
  const space_stats s0 = sp->stats();
  const std::int64_t alloc0 = sp->resource_allocations();
  for (int it = 0; it < 3; ++it) {
    sp->fill(r, 1.0f);
    sp->back(r, c, 0, backprojector_kind::voxel);
    sp->invert_above(c, 1e-6f);
    sp->forward(x, q, 0);
    sp->weighted_residual(r, p, q, q);
    sp->back(q, u, 0, backprojector_kind::voxel);
    sp->weighted_update(x, 1.0f, c, u, true);
    sp->back(q, u, 0, backprojector_kind::matched);
    (void)sp->dot(u, u);
    (void)sp->poisson_log_likelihood(p, r);
    sp->tv_prox(x, 0.01f, 5, true);
  }
  const space_stats s1 = sp->stats();
  EXPECT_EQ(s1.buffers_allocated, s0.buffers_allocated);
  EXPECT_EQ(sp->resource_allocations(), alloc0);
  EXPECT_EQ(s1.bytes_uploaded, s0.bytes_uploaded);
  EXPECT_EQ(s1.bytes_downloaded, s0.bytes_downloaded);
  EXPECT_EQ(s1.forward_calls, s0.forward_calls + 3);
  EXPECT_EQ(s1.back_calls, s0.back_calls + 9);
  // and the iterate is a real result: finite, non-negative, not all zero
  const std::vector<float> xs = h.get(x);
  EXPECT_EQ(sp->stats().bytes_downloaded, s1.bytes_downloaded + static_cast<std::int64_t>(n * 4));
  EXPECT_TRUE(
      std::all_of(xs.begin(), xs.end(), [](float v) { return std::isfinite(v) && v >= 0; }));
  EXPECT_GT(*std::max_element(xs.begin(), xs.end()), 0.0f);
}

TEST_F(IterativeSpaceGpu, RefusesWhatDoesNotFitTheMemoryLimit) {
  const scan s;
  space_config cfg = cuda_config(1);
  cfg.gpu_memory_limit_bytes = 256 << 10;
  try {
    auto sp = make_cuda_space(s.g, s.vg, cfg);
    ADD_FAILURE() << "no error";
  } catch (const usage_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("device memory"), std::string::npos) << w;
    EXPECT_NE(w.find("--gpu-memory-limit"), std::string::npos) << w;
  }
}

}  // namespace

#else

TEST(IterativeSpaceGpu, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
