// Rotation-centre estimation by registering opposite views (see formats.hpp).
//
// Parallel beam: a view at t + pi is the view at t mirrored about the axis column c:
//     b(col) = a(2 c - col).
// Reversing b (b_rev(col) = b(N - 1 - col)) turns the mirror into a shift:
//     b_rev(col) = a(col + d),  d = 2 c - (N - 1),
// found as the peak of the cross-correlation  C(d) = sum_col b_rev(col) a(col + d), refined to
// sub-pixel precision by a parabola through the peak and its neighbours. Both profiles are
// differentiated first (first differences): this removes constant offsets (imperfect flat
// fields) and the bias of zero-padded correlation towards small shifts, and sharpens the peak.
// Correlations are summed over detector rows; each pair of views gives one estimate and the
// median over pairs is the estimate (center_fourier.cpp takes the median and the pairs'
// agreement as the confidence).
#include <fftw3.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <memory>
#include <mutex>
#include <numbers>
#include <vector>

#include "core/fftw_planner.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "recon/center_internal.hpp"

namespace ctforge {
namespace {

constexpr double two_pi = 2 * std::numbers::pi;

double wrap(double a) {
  a = std::fmod(a, two_pi);
  return a < 0 ? a + two_pi : a;
}

/// Angular distance on the circle, in [0, pi].
double circular_distance(double a, double b) {
  const double d = wrap(a - b);
  return std::min(d, two_pi - d);
}

struct fftwf_deleter {
  void operator()(fftwf_plan_s* p) const {
    if (!p) return;
    const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
    fftwf_destroy_plan(p);
  }
};
using plan_ptr = std::unique_ptr<fftwf_plan_s, fftwf_deleter>;

struct fftwf_buffer_deleter {
  void operator()(void* p) const { fftwf_free(p); }
};

/// Cross-correlation machinery for profiles of n samples (zero padded to avoid wrap-around).
class correlator {
 public:
  explicit correlator(std::int64_t n) : n_(n) {
    len_ = 1;
    while (len_ < 2 * n) len_ *= 2;
    real_.reset(static_cast<float*>(fftwf_malloc(sizeof(float) * static_cast<std::size_t>(len_))));
    spec_a_.reset(static_cast<fftwf_complex*>(
        fftwf_malloc(sizeof(fftwf_complex) * static_cast<std::size_t>(len_ / 2 + 1))));
    spec_b_.reset(static_cast<fftwf_complex*>(
        fftwf_malloc(sizeof(fftwf_complex) * static_cast<std::size_t>(len_ / 2 + 1))));
    acc_.assign(static_cast<std::size_t>(len_ / 2 + 1), {0.0, 0.0});
    CTFORGE_CHECK(real_ && spec_a_ && spec_b_, "center of rotation: out of memory for FFT buffers");
    const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
    fwd_a_.reset(
        fftwf_plan_dft_r2c_1d(static_cast<int>(len_), real_.get(), spec_a_.get(), FFTW_ESTIMATE));
    fwd_b_.reset(
        fftwf_plan_dft_r2c_1d(static_cast<int>(len_), real_.get(), spec_b_.get(), FFTW_ESTIMATE));
    inv_.reset(
        fftwf_plan_dft_c2r_1d(static_cast<int>(len_), spec_a_.get(), real_.get(), FFTW_ESTIMATE));
    CTFORGE_CHECK(fwd_a_ && fwd_b_ && inv_, "center of rotation: FFTW planning failed");
  }

  void reset() { std::fill(acc_.begin(), acc_.end(), std::complex<double>(0, 0)); }

  /// Adds the correlation of row profiles a and b_rev (first differences taken here).
  void add(const float* a, const float* b_rev) {
    load_difference(a);
    fftwf_execute(fwd_a_.get());
    load_difference(b_rev);
    fftwf_execute(fwd_b_.get());
    for (std::size_t k = 0; k < acc_.size(); ++k) {
      const std::complex<double> fa(spec_a_.get()[k][0], spec_a_.get()[k][1]);
      const std::complex<double> fb(spec_b_.get()[k][0], spec_b_.get()[k][1]);
      acc_[k] += std::conj(fb) * fa;  // C(d) = sum b_rev(c) a(c + d)
    }
  }

  /// Sub-pixel shift d maximising the accumulated correlation, |d| <= max_shift.
  /// Returns NaN when the correlation is flat (no structure).
  double peak(std::int64_t max_shift) {
    for (std::size_t k = 0; k < acc_.size(); ++k) {
      spec_a_.get()[k][0] = static_cast<float>(acc_[k].real());
      spec_a_.get()[k][1] = static_cast<float>(acc_[k].imag());
    }
    fftwf_execute(inv_.get());
    auto at = [&](std::int64_t d) {
      return static_cast<double>(real_.get()[(d % len_ + len_) % len_]);
    };
    std::int64_t best = 0;
    double best_value = -std::numeric_limits<double>::infinity();
    double lowest = std::numeric_limits<double>::infinity();
    for (std::int64_t d = -max_shift; d <= max_shift; ++d) {
      const double c = at(d);
      if (c > best_value) {
        best_value = c;
        best = d;
      }
      lowest = std::min(lowest, c);
    }
    if (!(best_value > lowest)) return std::numeric_limits<double>::quiet_NaN();
    const double cm = at(best - 1), c0 = at(best), cp = at(best + 1);
    const double den = cm - 2 * c0 + cp;
    double frac = den < 0 ? 0.5 * (cm - cp) / den : 0.0;
    frac = std::clamp(frac, -0.5, 0.5);
    return static_cast<double>(best) + frac;
  }

 private:
  void load_difference(const float* p) {
    float* r = real_.get();
    std::fill(r, r + len_, 0.0f);
    for (std::int64_t c = 0; c + 1 < n_; ++c) {
      const float d = p[c + 1] - p[c];
      r[c] = std::isfinite(d) ? d : 0.0f;
    }
  }

  std::int64_t n_, len_;
  std::unique_ptr<float, fftwf_buffer_deleter> real_;
  std::unique_ptr<fftwf_complex, fftwf_buffer_deleter> spec_a_, spec_b_;
  std::vector<std::complex<double>> acc_;
  plan_ptr fwd_a_, fwd_b_, inv_;
};

}  // namespace

std::vector<double> detail::registration_estimates(const projection_view& proj,
                                                   const geometry& g) {
  require_host(proj, "estimate_center_of_rotation");
  CTFORGE_EXPECTS(
      g.orbit.has_value(),
      fmt::format("center of rotation: needs a circular geometry (cone or parallel), got {}",
                  g.type_name()));
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  fmt::format("center of rotation: projections {}x{}x{} do not match the geometry "
                              "({} views, {} rows, {} cols)",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(proj.cols >= 8, "center of rotation: needs at least 8 detector columns");
  const auto& angles = g.orbit->angles_rad;
  const std::int64_t nv = proj.views, n = proj.cols;

  // Typical angular step: median of the gaps between sorted angles (on the circle).
  std::vector<std::pair<double, std::int64_t>> sorted;
  for (std::int64_t i = 0; i < nv; ++i)
    sorted.push_back({wrap(angles[static_cast<std::size_t>(i)]), i});
  std::sort(sorted.begin(), sorted.end());
  std::vector<double> gaps;
  for (std::size_t i = 0; i + 1 < sorted.size(); ++i)
    if (sorted[i + 1].first - sorted[i].first > 1e-12)
      gaps.push_back(sorted[i + 1].first - sorted[i].first);
  CTFORGE_EXPECTS(!gaps.empty(), "center of rotation: needs views at two or more distinct angles");
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                   gaps.end());
  const double step = gaps[gaps.size() / 2];

  // Opposite view of each view i: the view nearest to t_i + pi (it must lie within one angular
  // step, 1% slack), linearly interpolated towards its neighbour on the target's side, or, at
  // the end of a scan that covers just 180 (or 360) degrees, extrapolated from its neighbour on
  // the other side, so that the partner sits at t_i + pi exactly (a profile rotated by one step
  // would bias the registration). Views without a partner are skipped.
  struct partner {
    std::int64_t i, j, k;
    double w;  // mirrored view = (1 - w) view j + w view k
  };
  auto signed_diff = [](double a, double b) {  // a - b on the circle, in (-pi, pi]
    double d = wrap(a - b);
    return d > std::numbers::pi ? d - two_pi : d;
  };
  std::vector<partner> pairs;
  for (std::int64_t i = 0; i < nv; ++i) {
    const double target = wrap(angles[static_cast<std::size_t>(i)] + std::numbers::pi);
    std::int64_t j = -1;
    double dj = 1e300;
    for (std::int64_t v = 0; v < nv; ++v) {
      const double d = circular_distance(angles[static_cast<std::size_t>(v)], target);
      if (d < dj) {
        dj = d;
        j = v;
      }
    }
    if (dj > 1.01 * step) continue;
    const double t = signed_diff(target, angles[static_cast<std::size_t>(j)]);
    // Neighbours of j about one step away; prefer the one on the target's side.
    std::int64_t k = -1;
    double best_score = 1e300;
    for (std::int64_t v = 0; v < nv; ++v) {
      const double u =
          signed_diff(angles[static_cast<std::size_t>(v)], angles[static_cast<std::size_t>(j)]);
      if (std::abs(u) <= 0.5 * step || std::abs(u) > 1.5 * step) continue;
      const double score = std::abs(std::abs(u) - step) + ((u > 0) == (t > 0) ? 0.0 : 10.0 * step);
      if (score < best_score) {
        best_score = score;
        k = v;
      }
    }
    if (k < 0 || std::abs(t) < 1e-9 * step) {
      pairs.push_back({i, j, j, 0.0});
    } else {
      const double u =
          signed_diff(angles[static_cast<std::size_t>(k)], angles[static_cast<std::size_t>(j)]);
      pairs.push_back({i, j, k, t / u});
    }
  }
  CTFORGE_EXPECTS(
      !pairs.empty(),
      "center of rotation: no pair of views 180 degrees apart (the scan must cover about "
      "180 degrees or more)");
  // Bound the work: at most 180 pairs, evenly spread.
  if (pairs.size() > 180) {
    std::vector<partner> kept;
    for (std::size_t t = 0; t < 180; ++t) kept.push_back(pairs[t * pairs.size() / 180]);
    pairs.swap(kept);
  }
  // Rows used: all, or 64 evenly spread.
  std::vector<std::int64_t> rows;
  const std::int64_t nr = std::min<std::int64_t>(proj.rows, 64);
  for (std::int64_t r = 0; r < nr; ++r)
    rows.push_back(proj.rows == nr ? r : (2 * r + 1) * proj.rows / (2 * nr));

  correlator corr(n);
  const std::int64_t max_shift = std::max<std::int64_t>(1, (3 * n) / 4);
  std::vector<float> rev(static_cast<std::size_t>(n));
  std::vector<double> estimates;
  for (const auto& p : pairs) {
    corr.reset();
    for (std::int64_t r : rows) {
      const float* a = proj.view(p.i) + r * n;
      const float* bj = proj.view(p.j) + r * n;
      const float* bk = proj.view(p.k) + r * n;
      for (std::int64_t c = 0; c < n; ++c) {
        const std::int64_t src = n - 1 - c;
        rev[static_cast<std::size_t>(c)] = static_cast<float>((1 - p.w) * bj[src] + p.w * bk[src]);
      }
      corr.add(a, rev.data());
    }
    const double d = corr.peak(max_shift);
    if (std::isfinite(d)) estimates.push_back(0.5 * (d + static_cast<double>(n - 1)));
  }
  CTFORGE_CHECK(
      !estimates.empty(),
      "center of rotation: the projections hold no structure to register (constant views)");
  std::sort(estimates.begin(), estimates.end());
  return estimates;
}

double estimate_center_of_rotation(const projection_view& proj, const geometry& g) {
  return find_center_of_rotation(proj, g).column;
}

geometry with_center_of_rotation(const geometry& g, double col) {
  CTFORGE_EXPECTS(std::isfinite(col), "--center-of-rotation: the column must be finite");
  // The axis must project onto the detector (pixel centres 0 .. cols - 1, half a pixel of
  // slack): elsewhere no ray crosses it and the reconstruction would be empty.
  CTFORGE_EXPECTS(col >= -0.5 && col <= static_cast<double>(g.cols) - 0.5,
                  fmt::format("--center-of-rotation: column {} is off the detector (columns 0 .. "
                              "{}); the rotation axis must project onto it",
                              col, g.cols - 1));
  const double mid = 0.5 * static_cast<double>(g.cols - 1);
  if (g.orbit) {
    const auto& o = *g.orbit;
    std::vector<double> ou(o.angles_rad.size(), (mid - col) * g.pixel_u_mm);
    if (g.beam == beam_kind::cone)
      return make_cone_geometry(g.cols, g.rows, g.pixel_u_mm, g.pixel_v_mm,
                                o.source_to_isocenter_mm, o.source_to_detector_mm, o.angles_rad, ou,
                                o.offset_v_mm, g.shape);
    return make_parallel_geometry(g.cols, g.rows, g.pixel_u_mm, g.pixel_v_mm, o.angles_rad, ou,
                                  o.offset_v_mm);
  }
  // Vector geometry: the axis is the world z axis; move each detector along u so that the
  // origin projects onto `col` (moving the detector by s * u lowers every column by s).
  std::vector<view_vectors> views = g.views;
  for (std::int64_t i = 0; i < g.view_count(); ++i) {
    const auto m = compute_projection_matrix(g, i);
    const double now = m[3] / m[11];
    views[static_cast<std::size_t>(i)].detector_center =
        views[static_cast<std::size_t>(i)].detector_center +
        (now - col) * views[static_cast<std::size_t>(i)].u;
  }
  return make_vec_geometry(g.beam, g.cols, g.rows, std::move(views));
}

}  // namespace ctforge
