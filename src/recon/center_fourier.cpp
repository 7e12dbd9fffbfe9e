// Rotation centre with a confidence figure: Vo's Fourier-space method for parallel beams, the
// opposite-view registration (center_of_rotation.cpp) for everything else. The method, the
// coarse-to-fine search and the confidence are described at find_center_of_rotation in
// formats.hpp; the comments here cover the arithmetic.
#include <fftw3.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <numbers>
#include <numeric>
#include <optional>
#include <vector>

#include "core/fftw_planner.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/preprocess.hpp"
#include "recon/center_internal.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// Sinograms of a few detector rows: rows x views x cols, row-major.
struct sinograms {
  std::int64_t rows = 0, views = 0, cols = 0;
  std::vector<float> data;
  const float* line(std::int64_t r, std::int64_t v) const {
    return data.data() + (r * views + v) * cols;
  }
};

/// The views covering [first angle, first angle + 180 deg) at an even step, in angle order; empty
/// when the scan does not (shorter than 180 deg, holes, duplicates): Vo's method needs a 360-deg
/// sinogram sampled evenly once the mirrored half is stacked under it.
std::vector<std::int64_t> half_turn_views(const std::vector<double>& angles) {
  const auto n = static_cast<std::int64_t>(angles.size());
  if (n < 8) return {};
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return angles[static_cast<std::size_t>(a)] < angles[static_cast<std::size_t>(b)];
  });
  auto at = [&](std::size_t k) { return angles[static_cast<std::size_t>(order[k])]; };
  std::vector<double> gaps;
  for (std::size_t k = 0; k + 1 < order.size(); ++k) gaps.push_back(at(k + 1) - at(k));
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(gaps.size() / 2),
                   gaps.end());
  const double step = gaps[gaps.size() / 2];
  if (!(step > 0)) return {};
  std::vector<std::int64_t> kept;
  for (std::size_t k = 0; k < order.size() && at(k) - at(0) < pi - 0.5 * step; ++k) {
    if (k > 0 && std::abs(at(k) - at(k - 1) - step) > 0.25 * step) return {};  // uneven
    kept.push_back(order[k]);
  }
  // The kept views must span 180 deg: m steps of `step` within 2% of pi.
  if (std::abs(static_cast<double>(kept.size()) * step - pi) > 0.02 * pi) return {};
  return kept;
}

/// Sinograms of `rows` from every `stride`-th of `views`, columns averaged in groups of `bin`
/// (the remainder at the right dropped); non-finite values count as 0.
sinograms gather(const projection_view& p, const std::vector<std::int64_t>& rows,
                 const std::vector<std::int64_t>& views, std::int64_t stride, std::int64_t bin) {
  sinograms s;
  s.rows = static_cast<std::int64_t>(rows.size());
  s.views = (static_cast<std::int64_t>(views.size()) + stride - 1) / stride;
  s.cols = p.cols / bin;
  s.data.assign(static_cast<std::size_t>(s.rows * s.views * s.cols), 0.0f);
  for (std::int64_t r = 0; r < s.rows; ++r)
    for (std::int64_t v = 0; v < s.views; ++v) {
      const float* src = p.view(views[static_cast<std::size_t>(v * stride)]) +
                         rows[static_cast<std::size_t>(r)] * p.cols;
      float* dst = s.data.data() + (r * s.views + v) * s.cols;
      for (std::int64_t c = 0; c < s.cols; ++c) {
        double sum = 0;
        for (std::int64_t k = 0; k < bin; ++k) {
          const float x = src[c * bin + k];
          sum += std::isfinite(x) ? x : 0.0f;
        }
        dst[c] = static_cast<float>(sum / static_cast<double>(bin));
      }
    }
  return s;
}

/// Catmull-Rom interpolation of `line` (n samples, clamped at the ends) at position x.
float catmull_rom(const float* line, std::int64_t n, double x) {
  const double fl = std::floor(x);
  const double t = x - fl;
  const auto i = static_cast<std::int64_t>(fl);
  auto p = [&](std::int64_t k) {
    return static_cast<double>(line[std::clamp<std::int64_t>(k, 0, n - 1)]);
  };
  if (t == 0) return static_cast<float>(p(i));
  const double p0 = p(i - 1), p1 = p(i), p2 = p(i + 1), p3 = p(i + 2);
  return static_cast<float>(
      p1 +
      0.5 * t * (p2 - p0 + t * (2 * p0 - 5 * p1 + 4 * p2 - p3 + t * (3 * (p1 - p2) + p3 - p0))));
}

struct fftwf_free_deleter {
  void operator()(void* p) const { fftwf_free(p); }
};

/// Vo's metric of candidate shift d (the mirrored copy g(col) = s(n - 1 - col + d), i.e. the axis
/// at column (n - 1 + d) / 2): the sinogram stacked over the mirrored copy (whose columns
/// without a mirror partner on the detector take the sinogram's own values, as Vo does: the
/// stack's edges then match and add nothing that depends on d), 2D FFT, mean magnitude in the
/// double wedge |harmonic| > 2 pi f radius (f in cycles per column; f < 2 / w left out: the
/// views' sums, which truncation makes vary), over the sinogram's norm; summed over the rows.
/// Planning is serialised (FFTW's planner is not thread-safe), execution runs in parallel.
double wedge_metric(const sinograms& s, double d, double radius) {
  const std::int64_t nv = s.views, h = 2 * nv, w = s.cols, wc = w / 2 + 1;
  std::unique_ptr<float, fftwf_free_deleter> x(
      static_cast<float*>(fftwf_malloc(sizeof(float) * static_cast<std::size_t>(h * w))));
  std::unique_ptr<fftwf_complex, fftwf_free_deleter> f(static_cast<fftwf_complex*>(
      fftwf_malloc(sizeof(fftwf_complex) * static_cast<std::size_t>(h * wc))));
  CTFORGE_CHECK(x && f, "center of rotation: out of memory for FFT buffers");
  fftwf_plan plan = nullptr;
  {
    const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
    plan = fftwf_plan_dft_r2c_2d(static_cast<int>(h), static_cast<int>(w), x.get(), f.get(),
                                 FFTW_ESTIMATE);
  }
  CTFORGE_CHECK(plan != nullptr, "center of rotation: FFTW planning failed");
  double magnitude = 0, norm = 0;
  for (std::int64_t r = 0; r < s.rows; ++r) {
    double energy = 0;
    for (std::int64_t v = 0; v < nv; ++v) {
      const float* line = s.line(r, v);
      float* top = x.get() + v * w;
      float* bottom = x.get() + (nv + v) * w;
      for (std::int64_t j = 0; j < w; ++j) {
        const double src = static_cast<double>(w - 1 - j) + d;  // mirrored about the axis
        top[j] = line[j];
        bottom[j] =
            src < 0 || src > static_cast<double>(w - 1) ? line[j] : catmull_rom(line, w, src);
        energy += 2 * static_cast<double>(line[j]) * line[j];
      }
    }
    fftwf_execute(plan);
    double sum = 0;
    std::int64_t count = 0;
    for (std::int64_t k = 0; k < h; ++k) {
      const double n = static_cast<double>(k <= nv ? k : h - k);  // |angular harmonic|
      for (std::int64_t j = 2; j < wc; ++j) {
        if (n <= 2 * pi * radius * static_cast<double>(j) / static_cast<double>(w)) break;
        const fftwf_complex& c = f.get()[k * wc + j];
        sum += std::hypot(static_cast<double>(c[0]), static_cast<double>(c[1]));
        ++count;
      }
    }
    if (count > 0) magnitude += sum / static_cast<double>(count);
    norm += std::sqrt(energy);
  }
  {
    const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
    fftwf_destroy_plan(plan);
  }
  return norm > 0 ? magnitude / norm : nan;
}

/// How clearly m[best] stands out: the metric minus its running median over +-`window`
/// candidates (which removes the slow swell of the curve and keeps the dips), r; then
/// 1 - r2 / r1 clamped to [0, 1], r1 = -r[best] the depth of the best dip and r2 the depth of the
/// deepest other dip (a local minimum of r at least `sep` candidates away).
double contrast(const std::vector<double>& m, std::size_t best, std::int64_t sep,
                std::int64_t window) {
  const auto n = static_cast<std::int64_t>(m.size());
  std::vector<double> r(m.size());
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<double> w(m.begin() + std::max<std::int64_t>(0, i - window),
                          m.begin() + std::min(n, i + window + 1));
    std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(w.size() / 2), w.end());
    r[static_cast<std::size_t>(i)] = m[static_cast<std::size_t>(i)] - w[w.size() / 2];
  }
  const double r1 = -r[best];
  if (!(r1 > 0)) return 0.0;
  double r2 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::abs(i - static_cast<std::int64_t>(best)) < sep) continue;
    const auto u = static_cast<std::size_t>(i);
    const bool local = (i == 0 || r[u] <= r[u - 1]) && (i == n - 1 || r[u] <= r[u + 1]);
    if (local) r2 = std::max(r2, -r[u]);
  }
  return std::clamp(1.0 - r2 / r1, 0.0, 1.0);
}

/// Detector rows searched: the option's, or up to 4 spread over the detector.
std::vector<std::int64_t> search_rows(const projection_view& p, std::int64_t row) {
  if (row >= 0) {
    CTFORGE_EXPECTS(row < p.rows, fmt::format("center of rotation: row {} is off the detector "
                                              "(rows 0 .. {})",
                                              row, p.rows - 1));
    return {row};
  }
  const std::int64_t n = std::min<std::int64_t>(p.rows, 4);
  std::vector<std::int64_t> rows;
  for (std::int64_t r = 0; r < n; ++r) rows.push_back((2 * r + 1) * p.rows / (2 * n));
  return rows;
}

/// Vo's method on the views `half` (see formats.hpp); fills column, confidence and the curve.
void fourier_search(const projection_view& p, const std::vector<std::int64_t>& half,
                    const center_search_options& opt, center_estimate& out) {
  const std::vector<std::int64_t> rows = search_rows(p, opt.row);
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  const std::int64_t n = p.cols, nv = static_cast<std::int64_t>(half.size());
  const std::int64_t bin = std::max<std::int64_t>(1, (n + 511) / 512);
  const sinograms coarse = gather(p, rows, half, std::max<std::int64_t>(1, (nv + 511) / 512), bin);
  const std::int64_t nb = coarse.cols;
  // Column range -> shift range of the binned sinogram: c_full = bin c_b + (bin - 1) / 2,
  // d_b = 2 c_b - (nb - 1); at most half the width either way (overlap >= half the detector).
  auto to_shift = [&](double col) {
    return 2 * (col - 0.5 * static_cast<double>(bin - 1)) / static_cast<double>(bin) -
           static_cast<double>(nb - 1);
  };
  const double limit = 0.5 * static_cast<double>(nb);
  const double d_lo =
      std::isnan(opt.min_column) ? -limit : std::max(-limit, to_shift(opt.min_column));
  const double d_hi =
      std::isnan(opt.max_column) ? limit : std::min(limit, to_shift(opt.max_column));
  const auto first = static_cast<std::int64_t>(std::ceil(d_lo));
  const auto last = static_cast<std::int64_t>(std::floor(d_hi));
  CTFORGE_EXPECTS(last >= first,
                  fmt::format("center of rotation: the search range [{}, {}] holds no candidate "
                              "in the middle half of the detector",
                              opt.min_column, opt.max_column));
  const double radius = opt.wedge_ratio * 0.5 * static_cast<double>(nb);
  const std::int64_t count = last - first + 1;
  out.candidates.assign(static_cast<std::size_t>(count), 0.0);
  out.metric.assign(static_cast<std::size_t>(count), 0.0);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t d = first + i;
    out.metric[static_cast<std::size_t>(i)] = wedge_metric(coarse, static_cast<double>(d), radius);
    out.candidates[static_cast<std::size_t>(i)] =
        static_cast<double>(bin) * 0.5 * static_cast<double>(nb - 1 + d) +
        0.5 * static_cast<double>(bin - 1);
  }
  for (double& m : out.metric)
    if (!std::isfinite(m)) m = std::numeric_limits<double>::infinity();
  const auto best = static_cast<std::size_t>(
      std::min_element(out.metric.begin(), out.metric.end()) - out.metric.begin());
  CTFORGE_CHECK(std::isfinite(out.metric[best]),
                "center of rotation: the projections hold no structure (zero sinograms)");
  // Dips at least 3 px apart; the running median over +-4 px (+-8 candidates at bin 1).
  out.confidence = count < 3
                       ? 0.0
                       : contrast(out.metric, best, std::max<std::int64_t>(2, (6 + bin - 1) / bin),
                                  std::max<std::int64_t>(3, 8 / bin));

  // Fine: full resolution, quarter-pixel shifts within bin + 1 pixels of the coarse minimum.
  const sinograms full = gather(p, rows, half, std::max<std::int64_t>(1, (nv + 1023) / 1024), 1);
  const double d0 = 2 * out.candidates[best] - static_cast<double>(n - 1);
  const double reach = static_cast<double>(bin + 1);
  const double fine_limit = 0.5 * static_cast<double>(n);
  std::vector<double> shifts;
  for (double t = -reach; t <= reach + 1e-9; t += 0.25)
    if (std::abs(d0 + t) <= fine_limit) shifts.push_back(d0 + t);
  std::vector<double> fine(shifts.size());
  const auto nf = static_cast<std::int64_t>(shifts.size());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (std::int64_t i = 0; i < nf; ++i)
    fine[static_cast<std::size_t>(i)] = wedge_metric(
        full, shifts[static_cast<std::size_t>(i)], opt.wedge_ratio * 0.5 * static_cast<double>(n));
  const auto k =
      static_cast<std::size_t>(std::min_element(fine.begin(), fine.end()) - fine.begin());
  double d = shifts[k];
  if (k > 0 && k + 1 < fine.size()) {
    const double den = fine[k - 1] - 2 * fine[k] + fine[k + 1];
    if (den > 0) d += 0.25 * std::clamp(0.5 * (fine[k - 1] - fine[k + 1]) / den, -0.5, 0.5);
  }
  out.column = 0.5 * (static_cast<double>(n - 1) + d);
  out.method = "fourier";
}

/// Whether the views, in their stored order, pair as a 360-degree half acquisition does: view
/// v + m lies 180 deg from view v for every v < m = views / 2, within a twentieth of a step (an
/// odd count: the last view repeats the first 360 deg on).
bool pairs_over_a_full_turn(const std::vector<double>& a) {
  const auto views = static_cast<std::int64_t>(a.size());
  if (views < 8) return false;
  const std::int64_t n = views % 2 ? views - 1 : views, m = n / 2;
  const double tol = 0.05 * 2 * pi / static_cast<double>(n);
  if (views % 2 && std::abs(std::abs(a.back() - a.front()) - 2 * pi) > tol) return false;
  for (std::int64_t v = 0; v < m; ++v)
    if (std::abs(std::abs(a[static_cast<std::size_t>(v + m)] - a[static_cast<std::size_t>(v)]) -
                 pi) > tol)
      return false;
  return true;
}

/// A 360-degree parallel scan whose axis lies outside the middle half of the detector, where
/// Vo's method searches (a half acquisition, the axis near one edge): find_center_360's
/// estimate over the whole width, as a center_estimate; nothing when the scan is no full turn,
/// the axis lies in the middle half, or outside the caller's range.
std::optional<center_estimate> half_acquisition_center(const projection_view& p, const geometry& g,
                                                       const center_search_options& opt) {
  if (g.beam != beam_kind::parallel || !pairs_over_a_full_turn(g.orbit->angles_rad)) return {};
  center_360_options o;
  o.row = opt.row;
  o.threads = opt.threads;
  o.min_overlap = std::min<std::int64_t>(o.min_overlap, p.cols);
  const center_360_estimate h = find_center_360(p, o);
  const double middle = 0.5 * static_cast<double>(p.cols - 1);
  const bool in_range = (std::isnan(opt.min_column) || h.center >= opt.min_column) &&
                        (std::isnan(opt.max_column) || h.center <= opt.max_column);
  if (std::abs(h.center - middle) <= 0.25 * static_cast<double>(p.cols) || !in_range) return {};
  center_estimate e;
  e.column = h.center;
  e.confidence = h.confidence;
  e.method = "half-acquisition";
  e.candidates = h.candidates;
  e.metric = h.metric;
  return e;
}

}  // namespace

center_estimate find_center_of_rotation(const projection_view& proj, const geometry& g,
                                        const center_search_options& opt) {
  require_host(proj, "find_center_of_rotation");
  CTFORGE_EXPECTS(
      std::isfinite(opt.wedge_ratio) && opt.wedge_ratio > 0 && opt.wedge_ratio <= 1,
      fmt::format("center of rotation: wedge ratio must be in (0, 1] (got {})", opt.wedge_ratio));
  center_estimate out;
  // The registration: the fallback, and a second opinion (it throws the usage errors for
  // geometries neither method takes).
  std::vector<double> pairs;
  try {
    pairs = detail::registration_estimates(proj, g);
  } catch (const usage_error&) {
    throw;
  } catch (const error&) {  // no structure in any pair: Vo's method may still find some
  }
  if (!pairs.empty()) {
    const std::size_t m = pairs.size();
    out.registration_column = m % 2 ? pairs[m / 2] : 0.5 * (pairs[m / 2 - 1] + pairs[m / 2]);
  }
  const std::vector<std::int64_t> half = g.beam == beam_kind::parallel
                                             ? half_turn_views(g.orbit->angles_rad)
                                             : std::vector<std::int64_t>{};
  if (!half.empty() && proj.cols >= 16) {
    if (auto h = half_acquisition_center(proj, g, opt)) {
      h->registration_column = out.registration_column;
      return *h;
    }
    fourier_search(proj, half, opt, out);
    return out;
  }
  CTFORGE_CHECK(!pairs.empty(),
                "center of rotation: the projections hold no structure to register (constant "
                "views)");
  out.method = "registration";
  out.column = out.registration_column;
  std::size_t agree = 0;
  for (const double e : pairs) agree += std::abs(e - out.column) <= 1.0 ? 1 : 0;
  out.confidence = static_cast<double>(agree) / static_cast<double>(pairs.size());
  return out;
}

}  // namespace ctforge
