// Stripe (ring) removal on sinograms, Vo et al. 2018: include/ctforge/preprocess.hpp.
#include <fftw3.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <mutex>
#include <numeric>
#include <optional>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "preprocess/common.hpp"
#include "preprocess/median.hpp"

namespace ctforge {

stripe_method parse_stripe_method(std::string_view name) {
  if (name == "sorting") return stripe_method::sorting;
  if (name == "filtering") return stripe_method::filtering;
  throw usage_error(
      fmt::format("--rings: unknown method '{}' (expected sorting or filtering)", name));
}

std::string to_string(stripe_method m) {
  return m == stripe_method::sorting ? "sorting" : "filtering";
}

namespace {

/// One detector row's sinogram, [view][col], and the buffers one thread needs for it.
struct sinogram_work {
  std::int64_t views = 0, cols = 0;
  std::vector<float> sino, sorted, filtered, scratch;
  std::vector<std::int32_t> order;  // order[k * cols + c]: the view of rank k in column c

  sinogram_work(std::int64_t v, std::int64_t c, int size)
      : views(v),
        cols(c),
        sino(static_cast<std::size_t>(v * c)),
        sorted(sino.size()),
        filtered(std::max<std::int64_t>(v, c)),
        scratch(static_cast<std::size_t>(size)),
        order(sino.size()) {}
};

/// Vo's algorithm 3 on w.sino in place: sort each column along the views, median-filter each
/// rank across the columns (window `size`, reflect border), sort back.
void sort_filter_unsort(sinogram_work& w, int size) {
  const std::int64_t V = w.views, C = w.cols;
  std::vector<std::int32_t> idx(static_cast<std::size_t>(V));
  for (std::int64_t c = 0; c < C; ++c) {
    std::iota(idx.begin(), idx.end(), 0);
    // Ties keep view order, so that equal values map back where they came from.
    std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
      return w.sino[static_cast<std::size_t>(a * C + c)] <
             w.sino[static_cast<std::size_t>(b * C + c)];
    });
    for (std::int64_t k = 0; k < V; ++k) {
      w.order[static_cast<std::size_t>(k * C + c)] = idx[static_cast<std::size_t>(k)];
      w.sorted[static_cast<std::size_t>(k * C + c)] =
          w.sino[static_cast<std::size_t>(idx[static_cast<std::size_t>(k)] * C + c)];
    }
  }
  for (std::int64_t k = 0; k < V; ++k) {
    detail::median_filter_line(&w.sorted[static_cast<std::size_t>(k * C)], C, size,
                               w.filtered.data(), w.scratch.data());
    for (std::int64_t c = 0; c < C; ++c)
      w.sino[static_cast<std::size_t>(w.order[static_cast<std::size_t>(k * C + c)] * C + c)] =
          w.filtered[static_cast<std::size_t>(c)];
  }
}

/// The low-pass part along the views of each column (Vo's algorithm 2, as algotom's
/// separate_frequency_component computes it): the column padded by min(150, 10 % of the views)
/// mirrored values each side, modulated by (-1)^n, transformed, multiplied by a Gaussian window
/// of `sigma` centred on the zero frequency, transformed back.
class lowpass_along_views {
 public:
  lowpass_along_views(std::int64_t views, double sigma)
      : views_(views), pad_(std::min<std::int64_t>(150, static_cast<std::int64_t>(0.1 * views))) {
    const std::int64_t m = views_ + 2 * pad_;
    window_.resize(static_cast<std::size_t>(m));
    for (std::int64_t n = 0; n < m; ++n) {
      const double t = (static_cast<double>(n) - 0.5 * static_cast<double>(m - 1)) / sigma;
      window_[static_cast<std::size_t>(n)] = static_cast<float>(std::exp(-0.5 * t * t));
    }
    fftwf_complex* a = fftwf_alloc_complex(static_cast<std::size_t>(m));
    fftwf_complex* b = fftwf_alloc_complex(static_cast<std::size_t>(m));
    {
      static std::mutex planner;  // FFTW's planner is not thread-safe
      const std::lock_guard<std::mutex> lock(planner);
      forward_ = fftwf_plan_dft_1d(static_cast<int>(m), a, b, FFTW_FORWARD, FFTW_ESTIMATE);
      backward_ = fftwf_plan_dft_1d(static_cast<int>(m), b, a, FFTW_BACKWARD, FFTW_ESTIMATE);
    }
    fftwf_free(a);
    fftwf_free(b);
    CTFORGE_CHECK(forward_ && backward_,
                  fmt::format("stripe removal: FFTW could not plan a transform of {} values", m));
  }
  ~lowpass_along_views() {
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
      std::int64_t i = n - pad_;  // numpy's "reflect": the edge value is not repeated
      if (i < 0) i = -i;
      if (i >= views_) i = 2 * (views_ - 1) - i;
      const float sign = (n % 2 == 0) ? 1.0f : -1.0f;
      a[n][0] = sino[i * cols + c] * sign;
      a[n][1] = 0.0f;
    }
    fftwf_execute_dft(forward_, a, b);
    for (std::int64_t n = 0; n < m; ++n) {
      b[n][0] *= window_[static_cast<std::size_t>(n)];
      b[n][1] *= window_[static_cast<std::size_t>(n)];
    }
    fftwf_execute_dft(backward_, b, a);
    const float scale = 1.0f / static_cast<float>(m);
    for (std::int64_t v = 0; v < views_; ++v) {
      const std::int64_t n = v + pad_;
      const float sign = (n % 2 == 0) ? 1.0f : -1.0f;
      smooth[v] = a[n][0] * scale * sign;
    }
  }

 private:
  std::int64_t views_, pad_;
  std::vector<float> window_;
  fftwf_plan forward_ = nullptr, backward_ = nullptr;
};

void check_options(const stripe_options& o) {
  CTFORGE_EXPECTS(o.size >= 3 && o.size % 2 == 1 && o.size <= 999,
                  fmt::format("stripe size: an odd window of 3 to 999 columns (got {})", o.size));
  CTFORGE_EXPECTS(std::isfinite(o.sigma) && o.sigma > 0,
                  fmt::format("stripe sigma: must be positive (got {})", o.sigma));
}

/// Vo's algorithm 2 on w.sino in place.
void filter_sort_unsort(sinogram_work& w, int size, const lowpass_along_views& lp,
                        std::vector<float>& sharp, fftwf_complex* a, fftwf_complex* b) {
  const std::int64_t V = w.views, C = w.cols;
  std::vector<float>& smooth_col = w.filtered;  // views values
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

}  // namespace

void remove_stripes(projections_ref p, const stripe_options& opt) {
  check_options(opt);
  const int threads = detail::thread_count(opt.threads);
  detail::require_finite(p, "stripe removal", threads);
  if (p.data.empty()) return;
  CTFORGE_EXPECTS(p.views <= INT32_MAX,
                  fmt::format("stripe removal: {} views, more than {}", p.views, INT32_MAX));
  std::optional<lowpass_along_views> lp;
  if (opt.method == stripe_method::filtering) lp.emplace(p.views, opt.sigma);
#pragma omp parallel num_threads(threads)
  {
    sinogram_work w(p.views, p.cols, opt.size);
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
      if (lp)
        filter_sort_unsort(w, opt.size, *lp, sharp, a, b);
      else
        sort_filter_unsort(w, opt.size);
      for (std::int64_t v = 0; v < p.views; ++v)
        std::copy_n(&w.sino[static_cast<std::size_t>(v * p.cols)], p.cols, &p.at(v, r, 0));
    }
    if (a) fftwf_free(a);
    if (b) fftwf_free(b);
  }
}

}  // namespace ctforge
