// Phase retrieval for propagation-based phase contrast (Paganin et al. 2002, and the
// generalised method of Paganin et al. 2020): include/ctforge/preprocess.hpp.
#include <fftw3.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/enum_names.hpp"
#include "core/fftw_planner.hpp"
#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "math/phase_filter.hpp"
#include "preprocess/common.hpp"
#include "preprocess/steps.hpp"

namespace ctforge {

namespace {
constexpr detail::enum_name<phase_method> k_phase_methods[] = {
    {phase_method::paganin, "paganin"}, {phase_method::generalized, "generalized"}};
constexpr double pi = 3.14159265358979323846;
constexpr double hc_ev_mm = 1.23984198e-3;  // h c in eV mm (1.23984198e-6 eV m)
}  // namespace

phase_method parse_phase_method(std::string_view name) {
  for (const auto& [m, n] : k_phase_methods)
    if (name == n) return m;
  throw usage_error(
      fmt::format("phase method: unknown method '{}' (expected paganin or generalized)", name));
}

std::string to_string(phase_method m) {
  return detail::name_of(m, k_phase_methods, "?");
}

namespace {

void require_positive(double value, const char* name) {
  CTFORGE_EXPECTS(std::isfinite(value) && value > 0,
                  fmt::format("phase {}: must be positive (got {})", name, value));
}

void check_options(const phase_options& o) {
  require_positive(o.energy_kev, "energy_kev");
  require_positive(o.distance_mm, "distance_mm");
  require_positive(o.delta_beta, "delta_beta");
  CTFORGE_EXPECTS(std::isfinite(o.pixel_u_mm) && o.pixel_u_mm >= 0,
                  fmt::format("phase pixel_u_mm: must be positive, or 0 for pixel_size_mm (got {})",
                              o.pixel_u_mm));
  CTFORGE_EXPECTS(std::isfinite(o.pixel_v_mm) && o.pixel_v_mm >= 0,
                  fmt::format("phase pixel_v_mm: must be positive, or 0 for pixel_size_mm (got {})",
                              o.pixel_v_mm));
  if (o.pixel_u_mm == 0 || o.pixel_v_mm == 0) require_positive(o.pixel_size_mm, "pixel_size_mm");
  CTFORGE_EXPECTS(o.pad_rows >= -1 && o.pad_rows <= (std::int64_t{1} << 24),
                  fmt::format("phase pad_rows: -1 (automatic) or 0 to 2^24 (got {})", o.pad_rows));
  CTFORGE_EXPECTS(o.pad_cols >= -1 && o.pad_cols <= (std::int64_t{1} << 24),
                  fmt::format("phase pad_cols: -1 (automatic) or 0 to 2^24 (got {})", o.pad_cols));
}

/// The filter constants c = pi lambda R (delta/beta) / pitch^2 along the columns (u) and the
/// rows (v), in pixels^2.
struct filter_constants {
  double cu = 0, cv = 0;
};

filter_constants constants_of(const phase_options& o) {
  const double lambda_mm = hc_ev_mm / (o.energy_kev * 1e3);
  const double a = pi * lambda_mm * o.distance_mm * o.delta_beta;  // mm^2
  const double wu = o.pixel_u_mm > 0 ? o.pixel_u_mm : o.pixel_size_mm;
  const double wv = o.pixel_v_mm > 0 ? o.pixel_v_mm : o.pixel_size_mm;
  return {a / (wu * wu), a / (wv * wv)};
}

/// An upper bound on sum_{|n| > m} |h[n]|, h the filter's kernel along one axis (constant c in
/// pixels^2) summed over the other axis, i.e. the inverse DTFT of H(f) = 1 / (1 + c f^2) on
/// [-1/2, 1/2] (Paganin) or 1 / (1 + c sin^2(pi f) / pi^2) (generalised).
double kernel_tail(phase_method method, double c, std::int64_t m) {
  const double md = static_cast<double>(m);
  if (method == phase_method::generalized) {
    // The symbol of the tridiagonal operator (1 + c'/2) d_n - (c'/4)(d_{n-1} + d_{n+1}), c' =
    // c / pi^2: its inverse is ((1 - rho) / (1 + rho)) rho^|n|, rho + 1 / rho = 2 (1 + 2 / c').
    const double s = 1.0 + 2.0 * pi * pi / c;
    const double rho = 1.0 / (s + std::sqrt(s * s - 1.0));
    return 2.0 * std::pow(rho, md + 1.0) / (1.0 + rho);
  }
  // The continuous kernel (pi / sqrt(c)) exp(-2 pi |n| / sqrt(c)), minus the part of its
  // spectrum beyond the Nyquist frequency: integrating that part by parts twice bounds it by
  // |g'(1/2)| / (pi^2 n^2), g = H; alternating in sign, its sum beyond m over data that vary
  // slowly on the pixel scale is at most about that at n = m.
  const double r = 2.0 * pi / std::sqrt(c);
  const double continuous = 2.0 * (pi / std::sqrt(c)) * std::exp(-r * (md + 1.0)) / -std::expm1(-r);
  const double slope = c / ((1.0 + 0.25 * c) * (1.0 + 0.25 * c));
  const double ripple = slope / (pi * pi * std::max(md, 1.0) * std::max(md, 1.0));
  return continuous + ripple;
}

/// The smallest m >= 0 with kernel_tail(method, c, m) <= tolerance.
std::int64_t margin_for(phase_method method, double c, double tolerance) {
  std::int64_t hi = 1;
  constexpr std::int64_t cap = std::int64_t{1} << 40;
  while (kernel_tail(method, c, hi) > tolerance && hi < cap) hi *= 2;
  std::int64_t lo = 0;  // invariant: tail(hi) <= tolerance (or hi == cap), answer in [lo, hi]
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (kernel_tail(method, c, mid) <= tolerance)
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi;
}

constexpr double k_auto_pad_tolerance = 1e-6;

/// The smallest 2^a 3^b 5^c 7^d >= n.
std::int64_t fft_size(std::int64_t n) {
  for (std::int64_t m = std::max<std::int64_t>(n, 1);; ++m) {
    std::int64_t r = m;
    for (std::int64_t f : {2, 3, 5, 7})
      while (r % f == 0) r /= f;
    if (r == 1) return m;
  }
}

/// The padded grid, filter table and FFTW plans for views of rows x cols (one per call of
/// retrieve_phase, shared by the threads; each thread brings its own buffers).
class phase_plan {
 public:
  explicit phase_plan(const kernels::phase_grid& grid) : g_(grid) { make_plans(); }
  ~phase_plan() {
    const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
    if (forward_) fftwf_destroy_plan(forward_);
    if (backward_) fftwf_destroy_plan(backward_);
  }
  phase_plan(const phase_plan&) = delete;
  phase_plan& operator=(const phase_plan&) = delete;

  std::int64_t real_size() const { return g_.nr * g_.nc; }
  std::int64_t spectrum_size() const { return g_.nr * (g_.nc / 2 + 1); }

  /// One view [row][col] of line integrals in place. Returns -1, or the index in the view of
  /// the first pixel whose filtered transmission is not positive and finite (the view is then
  /// left partly written). `real` and `spec` hold real_size() / spectrum_size() values.
  std::int64_t run(float* view, float* real, fftwf_complex* spec, float* bad_value) const;

 private:
  void make_plans();
  void pad(const float* view, float* real) const;

  const kernels::phase_grid& g_;
  fftwf_plan forward_ = nullptr, backward_ = nullptr;
};

void phase_plan::make_plans() {
  float* real = fftwf_alloc_real(static_cast<std::size_t>(real_size()));
  fftwf_complex* spec = fftwf_alloc_complex(static_cast<std::size_t>(spectrum_size()));
  {
    const std::lock_guard<std::mutex> lock(detail::fftw_planner_mutex());
    forward_ = fftwf_plan_dft_r2c_2d(static_cast<int>(g_.nr), static_cast<int>(g_.nc), real, spec,
                                     FFTW_ESTIMATE);
    backward_ = fftwf_plan_dft_c2r_2d(static_cast<int>(g_.nr), static_cast<int>(g_.nc), spec, real,
                                      FFTW_ESTIMATE);
  }
  fftwf_free(real);
  fftwf_free(spec);
  CTFORGE_CHECK(
      forward_ && backward_,
      fmt::format("phase retrieval: FFTW could not plan a {} x {} transform", g_.nr, g_.nc));
}

void phase_plan::pad(const float* view, float* real) const {
  const std::int64_t rows = g_.rows, cols = g_.cols, nr = g_.nr, nc = g_.nc;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = real + r * nc;
    for (std::int64_t c = 0; c < cols; ++c) row[c] = std::exp(-view[r * cols + c]);
    for (std::int64_t c = cols; c < nc; ++c) row[c] = row[kernels::phase_pad_source(c, cols, nc)];
  }
  for (std::int64_t r = rows; r < nr; ++r)
    std::copy_n(real + kernels::phase_pad_source(r, rows, nr) * nc, nc, real + r * nc);
}

std::int64_t phase_plan::run(float* view, float* real, fftwf_complex* spec,
                             float* bad_value) const {
  pad(view, real);
  fftwf_execute_dft_r2c(forward_, real, spec);
  for (std::int64_t i = 0; i < spectrum_size(); ++i) {
    spec[i][0] *= g_.filter[static_cast<std::size_t>(i)];
    spec[i][1] *= g_.filter[static_cast<std::size_t>(i)];
  }
  fftwf_execute_dft_c2r(backward_, spec, real);
  for (std::int64_t r = 0; r < g_.rows; ++r)
    for (std::int64_t c = 0; c < g_.cols; ++c) {
      const float t = real[r * g_.nc + c];
      if (!(std::isfinite(t) && t > 0)) {
        *bad_value = t;
        return r * g_.cols + c;
      }
      view[r * g_.cols + c] = -std::log(t);
    }
  return -1;
}

}  // namespace

void retrieve_phase(projections_ref p, const phase_options& opt) {
  check_options(opt);
  const int threads = detail::thread_count(opt.threads);
  detail::require_finite(p, "phase retrieval", threads);
  if (p.data.empty()) return;
  const kernels::phase_grid grid = detail::make_phase_grid(p.rows, p.cols, opt);
  const phase_plan plan(grid);
  std::atomic<std::int64_t> bad_view{INT64_MAX};
  std::int64_t bad_pixel = 0;
  float bad_value = 0;
#pragma omp parallel num_threads(threads)
  {
    float* real = fftwf_alloc_real(static_cast<std::size_t>(plan.real_size()));
    fftwf_complex* spec = fftwf_alloc_complex(static_cast<std::size_t>(plan.spectrum_size()));
#pragma omp for schedule(dynamic)
    for (std::int64_t v = 0; v < p.views; ++v) {
      if (!real || !spec || v > bad_view.load()) continue;
      float value = 0;
      const std::int64_t i = plan.run(&p.at(v, 0, 0), real, spec, &value);
      if (i < 0) continue;
#pragma omp critical(ctforge_phase_failure)
      if (v < bad_view.load()) {
        bad_view = v;
        bad_pixel = i;
        bad_value = value;
      }
    }
    if (!real || !spec) bad_view = -1;
    fftwf_free(real);
    fftwf_free(spec);
  }
  CTFORGE_CHECK(bad_view.load() != -1, "phase retrieval: out of memory for the FFT buffers");
  if (bad_view.load() != INT64_MAX)
    detail::throw_phase_failure(bad_view.load(), bad_pixel / p.cols, bad_pixel % p.cols, bad_value);
}

namespace detail {

kernels::phase_grid make_phase_grid(std::int64_t rows, std::int64_t cols, const phase_options& o) {
  check_options(o);
  kernels::phase_grid g;
  g.rows = rows;
  g.cols = cols;
  const filter_constants k = constants_of(o);
  const std::int64_t pr =
      o.pad_rows >= 0 ? o.pad_rows : margin_for(o.method, k.cv, k_auto_pad_tolerance);
  const std::int64_t pc =
      o.pad_cols >= 0 ? o.pad_cols : margin_for(o.method, k.cu, k_auto_pad_tolerance);
  g.nr = fft_size(rows + 2 * std::min<std::int64_t>(pr, std::int64_t{1} << 24));
  g.nc = fft_size(cols + 2 * std::min<std::int64_t>(pc, std::int64_t{1} << 24));
  CTFORGE_EXPECTS(g.nr <= INT_MAX / 2 && g.nc <= INT_MAX / 2 && g.nr * g.nc <= (INT64_C(1) << 31),
                  fmt::format("phase retrieval: padded views of {} x {} pixels are too large "
                              "for the FFT (reduce pad_rows / pad_cols)",
                              g.nr, g.nc));
  const std::int64_t nh = g.nc / 2 + 1;
  g.filter.resize(static_cast<std::size_t>(g.nr * nh));
  const auto cu = static_cast<float>(k.cu), cv = static_cast<float>(k.cv);
  const double scale = 1.0 / (static_cast<double>(g.nr) * static_cast<double>(g.nc));
  for (std::int64_t i = 0; i < g.nr; ++i) {
    const std::int64_t ki = i <= g.nr / 2 ? i : i - g.nr;
    const auto fv = static_cast<float>(static_cast<double>(ki) / static_cast<double>(g.nr));
    for (std::int64_t j = 0; j < nh; ++j) {
      const auto fu = static_cast<float>(static_cast<double>(j) / static_cast<double>(g.nc));
      const float h = o.method == phase_method::paganin
                          ? kernels::paganin_response(cu, cv, fu, fv)
                          : kernels::generalized_paganin_response(cu, cv, fu, fv);
      g.filter[static_cast<std::size_t>(i * nh + j)] = static_cast<float>(h * scale);
    }
  }
  return g;
}

void throw_phase_failure(std::int64_t view, std::int64_t row, std::int64_t col, float value) {
  throw error(fmt::format(
      "phase retrieval: view {}: the filtered transmission at row {}, col {} is {}, not "
      "positive (cannot take its logarithm)",
      view, row, col, value));
}

}  // namespace detail

std::int64_t phase_row_margin(const phase_options& opt, double tolerance) {
  check_options(opt);
  CTFORGE_EXPECTS(std::isfinite(tolerance) && tolerance > 0 && tolerance < 1,
                  fmt::format("phase tolerance: must be in (0, 1) (got {})", tolerance));
  return margin_for(opt.method, constants_of(opt).cv, tolerance);
}

row_band phase_input_rows(row_band out, std::int64_t detector_rows, std::int64_t margin) {
  CTFORGE_EXPECTS(0 <= out.begin && out.begin < out.end && out.end <= detector_rows,
                  fmt::format("phase rows: [{}, {}) is not a band of the detector's {} rows",
                              out.begin, out.end, detector_rows));
  CTFORGE_EXPECTS(margin >= 0, fmt::format("phase margin: must be >= 0 (got {})", margin));
  return {out.begin - std::min(margin, out.begin),
          out.end + std::min(margin, detector_rows - out.end)};
}

projection_stack retrieve_phase_rows(projections_ref input, row_band in_rows, row_band out,
                                     const phase_options& opt) {
  CTFORGE_EXPECTS(in_rows.end - in_rows.begin == input.rows && in_rows.begin >= 0,
                  fmt::format("phase rows: the input holds {} rows, not rows [{}, {})", input.rows,
                              in_rows.begin, in_rows.end));
  CTFORGE_EXPECTS(in_rows.begin <= out.begin && out.begin < out.end && out.end <= in_rows.end,
                  fmt::format("phase rows: output rows [{}, {}) outside the input rows [{}, {})",
                              out.begin, out.end, in_rows.begin, in_rows.end));
  retrieve_phase(input, opt);
  projection_stack result(input.views, out.end - out.begin, input.cols);
  for (std::int64_t v = 0; v < input.views; ++v)
    std::copy_n(&input.at(v, out.begin - in_rows.begin, 0), result.rows * input.cols,
                &result.at(v, 0, 0));
  return result;
}

}  // namespace ctforge
