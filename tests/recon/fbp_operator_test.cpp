// ctforge::fbp_apply / fbp_adjoint (FDK / FBP as a linear operator R and its adjoint R^T):
// R is reconstruct's computation (the same floats); <R p, v> = <p, R^T v> to float rounding on
// parallel, fan, cone, cylindrical, short-scan, displaced-detector, one-view and one-row
// geometries with odd sizes and size-1 grid dimensions, and on vector geometries (as written,
// reordered, and resampled onto a turned detector's circular equivalent); the pieces of the transposed chain
// (the bilinear splat is the sampler's transpose, the ramp filter's matrix is symmetric); the
// Joseph forward projector, though the matched projector's transpose, is not R's adjoint (the
// negative control); the adjoint does not depend on the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <vector>

#include "adjoint_cases.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "math/backproject.hpp"
#include "recon/fdk_geometry.hpp"
#include "recon/filter.hpp"

namespace ctforge {
namespace {

using testing::dot;
using testing::norm;
using testing::random_values;
constexpr double k_pi = std::numbers::pi;

struct fbp_case {
  std::string name;
  geometry g;
  volume_geometry vg;
  algorithm algo;
  filter_window filter = filter_window::ram_lak;
  double cutoff = 1.0;
};

volume_geometry grid(std::int64_t nx, std::int64_t ny, std::int64_t nz, double sp) {
  volume_geometry vg;
  vg.nx = nx;
  vg.ny = ny;
  vg.nz = nz;
  vg.spacing_mm = {sp, sp, sp};
  vg.origin_mm = {-0.5 * sp * static_cast<double>(nx - 1), -0.5 * sp * static_cast<double>(ny - 1),
                  -0.5 * sp * static_cast<double>(nz - 1)};
  return vg;
}

std::vector<double> turn(std::int64_t n, double range_deg = 360) {
  return angle_range(0.1, deg_to_rad(range_deg) / static_cast<double>(n), n);
}

// The views of `g` with the detector turned in its plane by `deg` about its centre (Rodrigues),
// and with its columns reversed when `flip_u` (a reordering: no interpolation).
geometry vectors_of(const geometry& g, double deg, bool flip_u = false) {
  std::vector<view_vectors> views = g.views;
  const double t = deg_to_rad(deg);
  for (auto& w : views) {
    const vec3 n = (1.0 / norm(cross(w.u, w.v))) * cross(w.u, w.v);
    const auto rot = [&](vec3 x) {
      return std::cos(t) * x + std::sin(t) * cross(n, x) + (1 - std::cos(t)) * dot(n, x) * n;
    };
    w.u = rot(w.u);
    w.v = rot(w.v);
    if (flip_u) w.u = -1.0 * w.u;
  }
  return make_vec_geometry(g.beam, g.cols, g.rows, views);
}

std::vector<fbp_case> cases() {
  std::vector<fbp_case> c;
  const auto fbp = algorithm::fbp, fdk = algorithm::fdk;
  c.push_back({"parallel", make_parallel_geometry(17, 3, 1.0, 1.0, turn(21)), grid(13, 11, 3, 1.1),
               fbp});
  c.push_back({"parallel short scan (Parker), hann 0.8",
               make_parallel_geometry(15, 1, 1.0, 1.0, turn(19, 190)), grid(11, 9, 1, 1.0), fbp,
               filter_window::hann, 0.8});
  c.push_back({"parallel one view", make_parallel_geometry(9, 3, 1.0, 1.0, turn(1)),
               grid(7, 1, 3, 1.0), fbp});
  c.push_back({"parallel displaced detector", make_parallel_geometry(21, 1, 1.0, 1.0, turn(25),
                                                                     {4.0}),
               grid(15, 15, 1, 1.2), fbp});
  c.push_back({"fan", make_cone_geometry(23, 1, 1.0, 1.0, 60, 90, turn(31)), grid(15, 13, 1, 0.6),
               fdk, filter_window::shepp_logan});
  c.push_back({"cone", make_cone_geometry(19, 7, 1.0, 1.0, 50, 80, turn(24)),
               grid(11, 9, 5, 0.55), fdk});
  c.push_back({"cone short scan (Parker)",
               make_cone_geometry(19, 5, 1.0, 1.0, 50, 80, turn(27, 240)), grid(9, 11, 3, 0.6),
               fdk, filter_window::cosine});
  c.push_back({"cone displaced detector",
               make_cone_geometry(21, 5, 1.0, 1.0, 50, 80, turn(26), {3.5}), grid(13, 13, 3, 0.8),
               fdk});
  c.push_back({"cone displaced short scan",
               make_cone_geometry(21, 3, 1.0, 1.0, 50, 80, turn(27, 260), {3.5}),
               grid(11, 11, 1, 0.8), fdk});
  c.push_back({"cylindrical cone",
               make_cone_geometry(19, 5, 1.0, 1.0, 50, 80, turn(22), {}, {},
                                  detector_shape::cylindrical),
               grid(11, 9, 3, 0.55), fdk});
  c.push_back({"cone grid 1 x 9 x 1", make_cone_geometry(15, 3, 1.0, 1.0, 50, 80, turn(17)),
               grid(1, 9, 1, 0.5), fdk});
  // Vector geometries: R = R_c S, S resampling onto the circular equivalent's detectors.
  const geometry cone = make_cone_geometry(19, 7, 1.0, 1.0, 50, 80, turn(24));
  c.push_back({"cone_vec as written (no resampling)", vectors_of(cone, 0), grid(11, 9, 5, 0.55),
               fdk});
  c.push_back({"cone_vec columns reversed (reordered)", vectors_of(cone, 0, true),
               grid(11, 9, 5, 0.55), fdk});
  c.push_back({"cone_vec detector turned 7 deg (resampled, hann 0.8)", vectors_of(cone, 7),
               grid(11, 9, 5, 0.55), fdk, filter_window::hann, 0.8});
  c.push_back({"parallel_vec detector turned 5 deg (resampled)",
               vectors_of(make_parallel_geometry(17, 3, 1.0, 1.0, turn(21)), 5),
               grid(13, 11, 3, 1.1), fbp});
  return c;
}

recon_options options_of(const fbp_case& c, int threads = 2) {
  recon_options o;
  o.algo = c.algo;
  o.where = backend::cpu;
  o.threads = threads;
  o.filter = c.filter;
  o.cutoff = c.cutoff;
  return o;
}

// fbp_apply runs reconstruct's own code: the same floats (same thread count).
TEST(FbpOperator, ApplyIsReconstruct) {
  for (const fbp_case& c : cases()) {
    projection_stack p(c.g.view_count(), c.g.rows, c.g.cols);
    p.data = random_values(p.data.size(), 3);
    const recon_options o = options_of(c);
    EXPECT_EQ(fbp_apply(p, c.g, c.vg, o).data, reconstruct(p, c.g, c.vg, o).data) << c.name;
  }
}

struct adjoint_gap {
  double matched, forward_projector;
};

// |<R p, v> - <p, B v>| / (|R p| |v|) for B = fbp_adjoint and for B = the Joseph forward
// projector A scaled to |A v| = |R^T v| (the negative control: the best a wrong operator of
// the right size could do with a scale fitted to this v).
adjoint_gap gaps(const fbp_case& c, unsigned seed) {
  const recon_options o = options_of(c);
  projection_stack p(c.g.view_count(), c.g.rows, c.g.cols);
  p.data = random_values(p.data.size(), seed);
  volume v(c.vg);
  v.data = random_values(v.data.size(), seed + 1);
  const volume rp = fbp_apply(p, c.g, c.vg, o);
  const projection_stack rtv = fbp_adjoint(v, c.g, o);
  const projection_stack av = forward_project(v, c.g, 2);
  const double lhs = dot(rp.data, v.data), scale = norm(rp.data) * norm(v.data);
  const double ratio = norm(rtv.data) / norm(av.data);
  return {std::abs(lhs - dot(p.data, rtv.data)) / scale,
          std::abs(lhs - ratio * dot(p.data, av.data)) / scale};
}

// Tolerance: both sides are sums of ~1e4..1e5 products of float operators (FFT filtering,
// float detector positions, float bilinear weights), each term off by a few float ulps
// (1e-7 relative) in random directions; 1e-6 of |R p| |v| leaves a factor ~10 over what such
// rounding gives. The control must miss by at least 1e3 times more.
TEST(FbpOperator, AdjointIdentityAndNegativeControl) {
  for (const fbp_case& c : cases()) {
    for (unsigned seed : {5u, 17u}) {
      const adjoint_gap gap = gaps(c, seed);
      EXPECT_LT(gap.matched, 1e-6) << c.name << " seed " << seed;
      EXPECT_GT(gap.forward_projector, 1e3 * std::max(gap.matched, 1e-7))
          << c.name << " seed " << seed << ": the forward projector passes for R's adjoint";
      char text[64];
      std::snprintf(text, sizeof text, "%.3g / %.3g", gap.matched, gap.forward_projector);
      RecordProperty(c.name + " " + std::to_string(seed), text);
    }
  }
}

TEST(FbpOperator, AdjointDoesNotDependOnTheThreadCount) {
  const fbp_case c = cases()[5];
  volume v(c.vg);
  v.data = random_values(v.data.size(), 9);
  EXPECT_EQ(fbp_adjoint(v, c.g, options_of(c, 1)).data, fbp_adjoint(v, c.g, options_of(c, 3)).data);
}

// B_w^T's building block: <sample(img, x), a> = <img, splat(a at x)> for positions inside, on
// and outside the image's border, and the zero-bordered sampler of the fast loops reads the
// same taps (so the splat is its transpose too).
TEST(FbpOperator, SplatIsTheBilinearSamplersTranspose) {
  for (const auto [cols, rows] : {std::pair{7, 5}, std::pair{1, 1}, std::pair{6, 1}}) {
    const std::vector<float> img = random_values(static_cast<std::size_t>(cols * rows), 1);
    std::vector<float> padded(static_cast<std::size_t>(kernels::padded_size(cols, rows)), 0.0f);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        padded[static_cast<std::size_t>((r + 1) * (cols + 3) + c + 1)] = img[r * cols + c];
    const kernels::padded_view pv{padded.data(), cols, rows, cols + 3};
    const std::vector<float> pos = random_values(400, 2, -2.5f, static_cast<float>(cols) + 1.5f);
    const std::vector<float> rpos = random_values(400, 3, -2.5f, static_cast<float>(rows) + 1.5f);
    std::vector<float> a = random_values(400, 4);
    // exact borders and pixel centres
    const float specials[] = {-1.0f, -0.5f, 0.0f, static_cast<float>(cols - 1),
                              static_cast<float>(cols) - 0.25f, static_cast<float>(cols)};
    std::vector<float> cs(pos), rs(rpos);
    for (float s : specials)
      for (float t : {-1.0f, 0.0f, static_cast<float>(rows - 1), static_cast<float>(rows)}) {
        cs.push_back(s);
        rs.push_back(t);
        a.push_back(1.0f);
      }
    double lhs = 0;
    std::vector<double> splat(img.size(), 0.0);
    for (std::size_t k = 0; k < cs.size(); ++k) {
      const float s = kernels::sample_bilinear_border(img.data(), cols, rows, cs[k], rs[k]);
      EXPECT_NEAR(kernels::sample_bilinear_padded(pv, cs[k], rs[k]), s, 1e-6f)
          << cs[k] << " " << rs[k];
      lhs += static_cast<double>(s) * a[k];
      kernels::splat_bilinear_border<double>(splat.data(), cols, rows, cs[k], rs[k], a[k]);
    }
    double rhs = 0;
    for (std::size_t i = 0; i < img.size(); ++i) rhs += splat[i] * img[i];
    // float sampler vs double splat: ~1e-7 relative per term over ~400 terms.
    EXPECT_NEAR(lhs, rhs, 1e-5 * (1 + std::abs(lhs))) << cols << "x" << rows;
  }
}

// F^T = F: the filter's matrix (rows filtered from unit vectors) is symmetric to float rounding
// (a real, even kernel on zero-padded rows), for every window, cut-offs and the equiangular
// kernel; and it is not trivially so (far from diagonal).
TEST(FbpOperator, RampFilterMatrixIsSymmetric) {
  for (const std::int64_t cols : {1, 2, 13, 40}) {
    for (const auto w : {filter_window::ram_lak, filter_window::hann, filter_window::shepp_logan}) {
      for (const double eq : {0.0, 0.01}) {
        const detail::ramp_filter f(cols, 0.7, w, w == filter_window::hann ? 0.6 : 1.0, eq);
        std::vector<float> m(static_cast<std::size_t>(cols * cols), 0.0f);
        for (std::int64_t i = 0; i < cols; ++i) m[static_cast<std::size_t>(i * cols + i)] = 1.0f;
        f.apply(m.data(), cols, 1);  // row i = F e_i = column i of F
        double peak = 0, asym = 0, off = 0;
        for (std::int64_t i = 0; i < cols; ++i)
          for (std::int64_t j = 0; j < cols; ++j) {
            const double a = m[static_cast<std::size_t>(i * cols + j)];
            const double b = m[static_cast<std::size_t>(j * cols + i)];
            peak = std::max(peak, std::abs(a));
            asym = std::max(asym, std::abs(a - b));
            if (i != j) off = std::max(off, std::abs(a));
          }
        // FFT rounding of float rows of length N <= 128: a few 1e-7 of the peak.
        EXPECT_LE(asym, 1e-6 * peak) << cols << " " << to_string(w) << " " << eq;
        if (cols > 1) EXPECT_GT(off, 1e-2 * peak) << cols;
      }
    }
  }
}

// S^T's building block: <S p, q> = <p, S^T q> for the resampling of a turned detector onto
// its circular equivalent (bicubic, edge taps clamped, twice the columns); the control, S^T
// with its taps half a column off, misses by far more.
TEST(FbpOperator, ResampleAdjointIsTheResamplingsTranspose) {
  const geometry g = vectors_of(make_cone_geometry(19, 7, 1.0, 1.0, 50, 80, turn(24)), 7);
  detail::circular_equivalent eq = detail::make_circular_equivalent(g, "fdk");
  ASSERT_TRUE(eq.needs_resampling);
  ASSERT_EQ(eq.oversample, 2);
  projection_stack p(g.view_count(), g.rows, g.cols);
  p.data = random_values(p.data.size(), 21);
  projection_stack q(g.view_count(), eq.geom.rows, eq.geom.cols);
  q.data = random_values(q.data.size(), 22);
  const projection_stack sp = detail::resample(eq, p, 2);
  const double lhs = dot(sp.data, q.data), scale = norm(sp.data) * norm(q.data);
  const double gap = std::abs(lhs - dot(p.data, detail::resample_adjoint(eq, q, 2).data)) / scale;
  EXPECT_LT(gap, 1e-6);
  for (auto& H : eq.maps)  // every tap half a column off: col' = col + 1/2
    for (int k = 0; k < 3; ++k) H.h[k] += 0.5 * H.h[6 + k];
  const double wrong = std::abs(lhs - dot(p.data, detail::resample_adjoint(eq, q, 2).data)) / scale;
  EXPECT_GT(wrong, 1e3 * std::max(gap, 1e-7));
  char text[64];
  std::snprintf(text, sizeof text, "%.3g / %.3g", gap, wrong);
  RecordProperty("gap / control", text);
}

TEST(FbpOperator, RefusesWhatItCannotTranspose) {
  const fbp_case c = cases()[0];
  volume v(c.vg);
  recon_options o = options_of(c);
  o.algo = algorithm::sirt;
  EXPECT_THROW(fbp_adjoint(v, c.g, o), usage_error);
  o = options_of(c);
  o.where = backend::cuda;
  EXPECT_THROW(fbp_adjoint(v, c.g, o), usage_error);
  // A helical scan: helical-fbp, which has no adjoint here.
  const geometry helix = make_helical_geometry(15, 4, 1.0, 1.0, 50, 80, turn(30, 720), 6.0);
  EXPECT_THROW(fbp_adjoint(v, helix, options_of(c)), usage_error);
  v.data[4] = std::nanf("");
  EXPECT_THROW(fbp_adjoint(v, c.g, options_of(c)), usage_error);
}

}  // namespace
}  // namespace ctforge
