// Stripe (ring) removal on sinograms, Vo et al. 2018: include/ctforge/preprocess.hpp. The
// Fourier-wavelet and Titarenko methods are in stripes_fw.cpp and stripes_ti.cpp.
#include <fftw3.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <mutex>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "core/enum_names.hpp"
#include "core/fftw_planner.hpp"
#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "math/vo_stripes.hpp"
#include "preprocess/common.hpp"
#include "preprocess/stripe_methods.hpp"

namespace ctforge {

namespace {
constexpr detail::enum_name<stripe_method> k_methods[] = {
    {stripe_method::sorting, "sorting"},
    {stripe_method::filtering, "filtering"},
    {stripe_method::large, "large"},
    {stripe_method::dead, "dead"},
    {stripe_method::all, "all"},
    {stripe_method::fourier_wavelet, "fourier_wavelet"},
    {stripe_method::titarenko, "titarenko"}};
}  // namespace

stripe_method parse_stripe_method(std::string_view name, std::string_view spelling) {
  for (const auto& [m, n] : k_methods)
    if (name == n) return m;
  if (name == "fw") return stripe_method::fourier_wavelet;
  if (name == "ti") return stripe_method::titarenko;
  throw usage_error(
      fmt::format("{}: unknown method '{}' (expected sorting, filtering, large, dead, all, "
                  "fourier_wavelet (fw) or titarenko (ti))",
                  spelling, name));
}

std::string to_string(stripe_method m) {
  return detail::name_of(m, k_methods, "?");
}

namespace {

/// One detector row's sinogram, [view][col], and the buffers one thread needs for it.
struct sinogram_work {
  std::int64_t views = 0, cols = 0;
  std::vector<float> sino, sorted, smooth, line, scratch;
  std::vector<std::int32_t> order;  // order[k * cols + c]: the view of rank k in column c

  sinogram_work(std::int64_t v, std::int64_t c, int max_size)
      : views(v),
        cols(c),
        sino(static_cast<std::size_t>(v * c)),
        sorted(sino.size()),
        smooth(sino.size()),
        line(static_cast<std::size_t>(std::max<std::int64_t>(v, c))),
        scratch(static_cast<std::size_t>(std::max<std::int64_t>(max_size, 1))),
        order(sino.size()) {}
  std::size_t at(std::int64_t v, std::int64_t c) const {
    return static_cast<std::size_t>(v * cols + c);
  }
};

/// w.sorted, w.order: each column of w.sino sorted along the views (ties keep view order, so
/// that equal values map back where they came from).
void sort_columns(sinogram_work& w) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(w.views));
  for (std::int64_t c = 0; c < w.cols; ++c) {
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
      return w.sino[w.at(a, c)] < w.sino[w.at(b, c)];
    });
    for (std::int64_t k = 0; k < w.views; ++k) {
      w.order[w.at(k, c)] = idx[static_cast<std::size_t>(k)];
      w.sorted[w.at(k, c)] = w.sino[w.at(idx[static_cast<std::size_t>(k)], c)];
    }
  }
}

/// w.smooth: each rank of w.sorted median-filtered across the columns (window `size`).
void median_across_columns(sinogram_work& w, int size) {
  for (std::int64_t k = 0; k < w.views; ++k)
    for (std::int64_t c = 0; c < w.cols; ++c)
      w.smooth[w.at(k, c)] = kernels::column_window_median(&w.sorted[w.at(k, 0)], 1, c, w.cols,
                                                           size, w.scratch.data());
}

/// dst[view][col] = w.smooth sorted back (dst may be w.sino).
void unsort(const sinogram_work& w, std::vector<float>& dst) {
  for (std::int64_t k = 0; k < w.views; ++k)
    for (std::int64_t c = 0; c < w.cols; ++c)
      dst[w.at(w.order[w.at(k, c)], c)] = w.smooth[w.at(k, c)];
}

/// Vo's algorithm 3 on w.sino in place.
void sort_filter_unsort(sinogram_work& w, int size) {
  sort_columns(w);
  median_across_columns(w, size);
  unsort(w, w.sino);
}

}  // namespace

namespace detail {

std::vector<std::uint8_t> detect_stripes(std::span<const double> fact, double snr) {
  const auto n = static_cast<std::int64_t>(fact.size());
  std::vector<std::uint8_t> mask(fact.size(), 0);
  std::vector<double> sorted(fact.begin(), fact.end());
  std::sort(sorted.begin(), sorted.end());
  const std::int64_t drop = static_cast<std::int64_t>(0.25 * static_cast<double>(n));
  const std::int64_t lo = drop, hi = n - drop - 1;  // the fit over [lo, hi)
  if (hi - lo < 2) return mask;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::int64_t i = lo; i < hi; ++i) {
    const double x = static_cast<double>(i), y = sorted[static_cast<std::size_t>(i)];
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double m = static_cast<double>(hi - lo);
  const double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  const double intercept = (sy - slope * sx) / m;
  const double y_end = intercept + slope * static_cast<double>(n - 1);
  const double noise = std::abs(y_end - intercept);
  if (noise < 1e-5) return mask;
  std::vector<std::uint8_t> raw(fact.size(), 0);
  if (std::abs(sorted.back() - y_end) / noise >= snr)
    for (std::size_t i = 0; i < fact.size(); ++i) raw[i] |= fact[i] > y_end + noise * snr * 0.5;
  if (std::abs(intercept - sorted.front()) / noise >= snr)
    for (std::size_t i = 0; i < fact.size(); ++i)
      raw[i] |= fact[i] <= intercept - noise * snr * 0.5;
  for (std::int64_t i = 0; i < n; ++i)
    mask[static_cast<std::size_t>(i)] = raw[static_cast<std::size_t>(i)] ||
                                        (i > 0 && raw[static_cast<std::size_t>(i - 1)]) ||
                                        (i + 1 < n && raw[static_cast<std::size_t>(i + 1)]);
  return mask;
}

dead_column_plan plan_dead_columns(std::span<const double> diff, const stripe_options& o) {
  const auto C = static_cast<std::int64_t>(diff.size());
  std::vector<double> bck(diff.size());
  std::vector<double> win(static_cast<std::size_t>(o.la_size));
  const std::int64_t h = o.la_size / 2;
  for (std::int64_t c = 0; c < C; ++c) {
    for (std::int64_t j = -h; j <= h; ++j)
      win[static_cast<std::size_t>(j + h)] =
          diff[static_cast<std::size_t>(kernels::reflect_index(c + j, C))];
    std::nth_element(win.begin(), win.begin() + h, win.end());
    bck[static_cast<std::size_t>(c)] = win[static_cast<std::size_t>(h)];
  }
  double mean_bck = 0;
  for (double b : bck) mean_bck += std::abs(b);
  mean_bck /= static_cast<double>(C);
  std::vector<double> fact(diff.size());
  for (std::size_t c = 0; c < diff.size(); ++c)
    fact[c] = diff[c] / (bck[c] == 0.0 ? mean_bck : bck[c]);
  std::vector<std::uint8_t> mask = detect_stripes(fact, o.snr);
  for (std::int64_t c = 0; c < std::min<std::int64_t>(2, C); ++c)
    mask[static_cast<std::size_t>(c)] = mask[static_cast<std::size_t>(C - 1 - c)] = 0;
  dead_column_plan plan;
  plan.left.assign(diff.size(), -1);
  plan.right.assign(diff.size(), -1);
  const auto missing = std::count(mask.begin(), mask.end(), std::uint8_t{1});
  if (missing == 0 || missing >= C / 3) return plan;
  // Between the nearest good neighbours (the two outermost columns each side are good, so
  // every missing one has both).
  std::int64_t left = 0;
  for (std::int64_t c = 1; c < C; ++c) {
    if (mask[static_cast<std::size_t>(c)]) continue;
    for (std::int64_t m = left + 1; m < c; ++m) {
      plan.left[static_cast<std::size_t>(m)] = static_cast<std::int32_t>(left);
      plan.right[static_cast<std::size_t>(m)] = static_cast<std::int32_t>(c);
    }
    left = c;
  }
  plan.any = true;
  return plan;
}

std::int64_t large_stripe_drop(std::int64_t views, double drop_ratio) {
  const double ratio = std::clamp(drop_ratio, 0.0, 0.8);
  return static_cast<std::int64_t>(0.5 * ratio * static_cast<double>(views));
}

}  // namespace detail

namespace {

/// Vo's algorithm 5 on w.sino in place (algotom's remove_large_stripe).
void remove_large(sinogram_work& w, const stripe_options& o) {
  const std::int64_t V = w.views, C = w.cols;
  const std::int64_t drop = detail::large_stripe_drop(V, o.drop_ratio);
  sort_columns(w);
  median_across_columns(w, o.la_size);
  std::vector<double> fact(static_cast<std::size_t>(C), 1.0);
  for (std::int64_t c = 0; c < C; ++c)
    fact[static_cast<std::size_t>(c)] =
        kernels::sorted_column_ratio(&w.sorted[w.at(0, c)], &w.smooth[w.at(0, c)], C, V, drop);
  const std::vector<std::uint8_t> mask = detail::detect_stripes(fact, o.snr);
  if (o.norm)
    for (std::int64_t v = 0; v < V; ++v)
      for (std::int64_t c = 0; c < C; ++c)
        w.sino[w.at(v, c)] =
            kernels::divide_by_ratio(w.sino[w.at(v, c)], fact[static_cast<std::size_t>(c)]);
  unsort(w, w.sorted);  // the corrected sinogram, in the sorted buffer (no longer needed)
  for (std::int64_t c = 0; c < C; ++c)
    if (mask[static_cast<std::size_t>(c)])
      for (std::int64_t v = 0; v < V; ++v) w.sino[w.at(v, c)] = w.sorted[w.at(v, c)];
}

/// Vo's algorithm 6 on w.sino in place (algotom's remove_dead_stripe), with the large-stripe
/// step after it when `residual`.
void remove_dead(sinogram_work& w, const stripe_options& o, bool residual) {
  const std::int64_t V = w.views, C = w.cols;
  std::vector<double> diff(static_cast<std::size_t>(C));
  for (std::int64_t c = 0; c < C; ++c)
    diff[static_cast<std::size_t>(c)] = kernels::column_roughness(&w.sino[w.at(0, c)], C, V);
  const detail::dead_column_plan plan = detail::plan_dead_columns(diff, o);
  for (std::int64_t c = 0; plan.any && c < C; ++c) {
    const std::int32_t l = plan.left[static_cast<std::size_t>(c)];
    const std::int32_t r = plan.right[static_cast<std::size_t>(c)];
    if (l < 0) continue;
    const double t = static_cast<double>(c - l) / static_cast<double>(r - l);
    for (std::int64_t v = 0; v < V; ++v)
      w.sino[w.at(v, c)] = kernels::interpolate_between(w.sino[w.at(v, l)], w.sino[w.at(v, r)], t);
  }
  if (residual) remove_large(w, o);
}

/// The low-pass part along the views of each column (Vo's algorithm 2, as algotom's
/// separate_frequency_component computes it): the column padded by min(150, 10 % of the views)
/// mirrored values each side, modulated by (-1)^n, transformed, multiplied by a Gaussian window
/// of `sigma` centred on the zero frequency, transformed back.
class lowpass_along_views {
 public:
  lowpass_along_views(std::int64_t views, double sigma)
      : views_(views), pad_(kernels::lowpass_pad(views)) {
    const std::int64_t m = views_ + 2 * pad_;
    window_.resize(static_cast<std::size_t>(m));
    for (std::int64_t n = 0; n < m; ++n)
      window_[static_cast<std::size_t>(n)] = kernels::lowpass_window(n, m, sigma);
    fftwf_complex* a = fftwf_alloc_complex(static_cast<std::size_t>(m));
    fftwf_complex* b = fftwf_alloc_complex(static_cast<std::size_t>(m));
    {
      const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
      forward_ = fftwf_plan_dft_1d(static_cast<int>(m), a, b, FFTW_FORWARD, FFTW_ESTIMATE);
      backward_ = fftwf_plan_dft_1d(static_cast<int>(m), b, a, FFTW_BACKWARD, FFTW_ESTIMATE);
    }
    fftwf_free(a);
    fftwf_free(b);
    CTFORGE_CHECK(forward_ && backward_,
                  fmt::format("stripe removal: FFTW could not plan a transform of {} values", m));
  }
  ~lowpass_along_views() {
    const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
    fftwf_destroy_plan(forward_);
    fftwf_destroy_plan(backward_);
  }
  lowpass_along_views(const lowpass_along_views&) = delete;
  lowpass_along_views& operator=(const lowpass_along_views&) = delete;

  std::int64_t length() const { return views_ + 2 * pad_; }

  /// smooth[v] = the low-pass part of column c of `sino` ([view][col], `cols` columns).
  /// `a` and `b` hold length() values each (fftwf_alloc_complex).
  void apply(const float* sino, std::int64_t cols, std::int64_t c, float* smooth, fftwf_complex* a,
             fftwf_complex* b) const {
    const std::int64_t m = length();
    for (std::int64_t n = 0; n < m; ++n) {
      a[n][0] =
          sino[kernels::lowpass_source(n, pad_, views_) * cols + c] * kernels::alternating_sign(n);
      a[n][1] = 0.0f;
    }
    fftwf_execute_dft(forward_, a, b);
    for (std::int64_t n = 0; n < m; ++n) {
      b[n][0] *= window_[static_cast<std::size_t>(n)];
      b[n][1] *= window_[static_cast<std::size_t>(n)];
    }
    fftwf_execute_dft(backward_, b, a);
    const float scale = 1.0f / static_cast<float>(m);
    for (std::int64_t v = 0; v < views_; ++v)
      smooth[v] = a[v + pad_][0] * scale * kernels::alternating_sign(v + pad_);
  }

 private:
  std::int64_t views_, pad_;
  std::vector<float> window_;
  fftwf_plan forward_ = nullptr, backward_ = nullptr;
};

}  // namespace

void detail::check_stripe_options(const stripe_options& o) {
  CTFORGE_EXPECTS(o.size >= 3 && o.size % 2 == 1 && o.size <= 999,
                  fmt::format("stripe size: an odd window of 3 to 999 columns (got {})", o.size));
  CTFORGE_EXPECTS(std::isfinite(o.sigma) && o.sigma > 0,
                  fmt::format("stripe sigma: must be positive (got {})", o.sigma));
  CTFORGE_EXPECTS(
      o.la_size >= 3 && o.la_size % 2 == 1 && o.la_size <= 999,
      fmt::format("stripe la_size: an odd window of 3 to 999 columns (got {})", o.la_size));
  CTFORGE_EXPECTS(std::isfinite(o.snr) && o.snr > 0,
                  fmt::format("stripe snr: must be positive (got {})", o.snr));
  CTFORGE_EXPECTS(std::isfinite(o.drop_ratio) && o.drop_ratio >= 0 && o.drop_ratio <= 0.8,
                  fmt::format("stripe drop_ratio: must be in [0, 0.8] (got {})", o.drop_ratio));
}

namespace {

/// One row's sinogram through the method of `o`.
void clean_sinogram(sinogram_work& w, const stripe_options& o, const lowpass_along_views* lp,
                    std::vector<float>& sharp, fftwf_complex* a, fftwf_complex* b);

/// Vo's algorithm 2 on w.sino in place.
void filter_sort_unsort(sinogram_work& w, int size, const lowpass_along_views& lp,
                        std::vector<float>& sharp, fftwf_complex* a, fftwf_complex* b) {
  const std::int64_t V = w.views, C = w.cols;
  std::vector<float>& smooth_col = w.line;  // views values
  sharp.resize(w.sino.size());
  for (std::int64_t c = 0; c < C; ++c) {
    lp.apply(w.sino.data(), C, c, smooth_col.data(), a, b);
    for (std::int64_t v = 0; v < V; ++v) {
      const auto i = static_cast<std::size_t>(v * C + c);
      sharp[i] = w.sino[i] - smooth_col[static_cast<std::size_t>(v)];
      w.sino[i] = smooth_col[static_cast<std::size_t>(v)];
    }
  }
  sort_filter_unsort(w, size);
  for (std::size_t i = 0; i < w.sino.size(); ++i) w.sino[i] += sharp[i];
}

void clean_sinogram(sinogram_work& w, const stripe_options& o, const lowpass_along_views* lp,
                    std::vector<float>& sharp, fftwf_complex* a, fftwf_complex* b) {
  switch (o.method) {
    case stripe_method::sorting:
      return sort_filter_unsort(w, o.size);
    case stripe_method::filtering:
      return filter_sort_unsort(w, o.size, *lp, sharp, a, b);
    case stripe_method::large:
      return remove_large(w, o);
    case stripe_method::dead:
      return remove_dead(w, o, /*residual=*/true);
    case stripe_method::all:
      remove_dead(w, o, /*residual=*/false);
      remove_large(w, o);
      return sort_filter_unsort(w, o.size);
    case stripe_method::fourier_wavelet:
    case stripe_method::titarenko:
      return;  // whole projections at once: remove_stripes dispatches them
  }
}

}  // namespace

void remove_stripes(projections_ref p, const stripe_options& opt) {
  detail::check_stripe_options(opt);
  const int threads = detail::thread_count(opt.threads);
  detail::require_finite(p, "stripe removal", threads);
  if (opt.method == stripe_method::fourier_wavelet)
    return detail::remove_stripes_fw(p, opt, threads);
  if (opt.method == stripe_method::titarenko) return detail::remove_stripes_ti(p, opt, threads);
  if (p.data.empty()) return;
  CTFORGE_EXPECTS(p.views <= INT32_MAX,
                  fmt::format("stripe removal: {} views, more than {}", p.views, INT32_MAX));
  std::optional<lowpass_along_views> lp;
  if (opt.method == stripe_method::filtering) lp.emplace(p.views, opt.sigma);
#pragma omp parallel num_threads(threads)
  {
    sinogram_work w(p.views, p.cols, std::max(opt.size, opt.la_size));
    std::vector<float> sharp;
    fftwf_complex *a = nullptr, *b = nullptr;
    if (lp) {
      a = fftwf_alloc_complex(static_cast<std::size_t>(lp->length()));
      b = fftwf_alloc_complex(static_cast<std::size_t>(lp->length()));
    }
#pragma omp for schedule(dynamic)
    for (std::int64_t r = 0; r < p.rows; ++r) {
      for (std::int64_t v = 0; v < p.views; ++v)
        std::copy_n(&p.at(v, r, 0), p.cols, &w.sino[static_cast<std::size_t>(v * p.cols)]);
      clean_sinogram(w, opt, lp ? &*lp : nullptr, sharp, a, b);
      for (std::int64_t v = 0; v < p.views; ++v)
        std::copy_n(&w.sino[static_cast<std::size_t>(v * p.cols)], p.cols, &p.at(v, r, 0));
    }
    if (a) fftwf_free(a);
    if (b) fftwf_free(b);
  }
}

}  // namespace ctforge
