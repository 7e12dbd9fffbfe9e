#include "core/fftw_planner.hpp"
#include "core/parallel_copy.hpp"
#include "recon/filter.hpp"

#include <fftw3.h>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <utility>

#include "ctforge/error.hpp"

namespace ctforge::detail {

namespace {
constexpr double k_pi = std::numbers::pi;
constexpr std::int64_t k_batch_rows = 16;  // rows per FFTW batch (one plan per padded length)

bool is_smooth(std::int64_t n) {
  for (std::int64_t p : {2, 3, 5})
    while (n % p == 0) n /= p;
  return n == 1;
}
}  // namespace

std::int64_t padded_length(std::int64_t cols) {
  CTFORGE_EXPECTS(cols >= 1 && cols < (std::int64_t{1} << 40),
                  fmt::format("ramp filter: detector width must be >= 1 column (got {})", cols));
  std::int64_t n = 2 * cols;
  while (!is_smooth(n)) n += 2;  // stays even
  return n;
}

double ramp_kernel(std::int64_t n, double pixel_mm, double equiangular_rad) {
  const double t2 = pixel_mm * pixel_mm;
  if (n == 0) return 1.0 / (4.0 * t2);
  if (n % 2 == 0) return 0.0;
  const double d = static_cast<double>(n);
  const double h = -1.0 / (d * d * k_pi * k_pi * t2);
  const double x = std::abs(d * equiangular_rad);
  if (!(equiangular_rad > 0) || x >= 3.0) return h;
  const double f = x / std::sin(x);
  return h * f * f;
}

double window_value(filter_window w, double x, double cutoff) {
  if (x > cutoff) return 0.0;
  const double r = x / cutoff;  // in [0, 1]
  switch (w) {
    case filter_window::ram_lak:
      return 1.0;
    case filter_window::shepp_logan: {
      const double t = 0.5 * k_pi * r;
      return t == 0 ? 1.0 : std::sin(t) / t;
    }
    case filter_window::cosine:
      return std::cos(0.5 * k_pi * r);
    case filter_window::hamming:
      return 0.54 + 0.46 * std::cos(k_pi * r);
    case filter_window::hann:
      return 0.5 + 0.5 * std::cos(k_pi * r);
  }
  return 1.0;
}

std::vector<float> ramp_response(std::int64_t padded_len, double pixel_mm, filter_window w,
                                 double cutoff, double equiangular_rad) {
  const std::int64_t n = padded_len;
  CTFORGE_EXPECTS(n >= 2 && n % 2 == 0,
                  fmt::format("ramp filter: padded length must be even and >= 2 (got {})", n));
  CTFORGE_EXPECTS(std::isfinite(pixel_mm) && pixel_mm > 0,
                  fmt::format("ramp filter: pixel pitch must be positive (got {} mm)", pixel_mm));
  CTFORGE_EXPECTS(std::isfinite(cutoff) && cutoff > 0 && cutoff <= 1,
                  fmt::format("ramp filter: cut-off must be in (0, 1] (got {})", cutoff));
  const std::int64_t half = n / 2;
  // cos(2 pi j / n) for j in [0, n)
  std::vector<double> cos_tab(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j)
    cos_tab[static_cast<std::size_t>(j)] =
        std::cos(2.0 * k_pi * static_cast<double>(j) / static_cast<double>(n));
  // Circular, even kernel: h_c[d] = h_c[n - d] = h[d] for d <= n / 2. Its DFT is real:
  //   H[k] = h[0] + 2 sum_{0 < d < n/2} h[d] cos(2 pi k d / n) + h[n/2] cos(pi k).
  // Only odd d contribute.
  std::vector<float> out(static_cast<std::size_t>(half + 1));
  const double h_half = ramp_kernel(half, pixel_mm, equiangular_rad);
  for (std::int64_t k = 0; k <= half; ++k) {
    double sum = 0;
    std::int64_t idx = k % n;               // (k * d) mod n for d = 1
    const std::int64_t step = (2 * k) % n;  // d advances by 2
    for (std::int64_t d = 1; d < half; d += 2) {
      sum += ramp_kernel(d, pixel_mm, equiangular_rad) * cos_tab[static_cast<std::size_t>(idx)];
      idx += step;
      if (idx >= n) idx -= n;
    }
    double hk = ramp_kernel(0, pixel_mm) + 2.0 * sum + h_half * ((k % 2 == 0) ? 1.0 : -1.0);
    const double x = static_cast<double>(k) / static_cast<double>(half);
    out[static_cast<std::size_t>(k)] =
        static_cast<float>(hk * pixel_mm / static_cast<double>(n) * window_value(w, x, cutoff));
  }
  return out;
}

struct ramp_filter::plan_pair {
  fftwf_plan r2c = nullptr;
  fftwf_plan c2r = nullptr;
};

namespace {

// Process-wide plan cache keyed by (padded length, batch rows). Plans are never destroyed:
// there are few distinct shapes per process and FFTW plans are cheap to keep.
const ramp_filter::plan_pair& cached_plans(std::int64_t n, std::int64_t batch) {
  static std::map<std::pair<std::int64_t, std::int64_t>, ramp_filter::plan_pair> cache;
  std::lock_guard<std::mutex> lock(fftw_planner_mutex());
  auto it = cache.find({n, batch});
  if (it != cache.end()) return it->second;
  const std::int64_t nc = n / 2 + 1;
  float* in = fftwf_alloc_real(static_cast<std::size_t>(batch * n));
  fftwf_complex* out = fftwf_alloc_complex(static_cast<std::size_t>(batch * nc));
  CTFORGE_CHECK(in && out, "ramp filter: out of memory for FFT buffers");
  const int len = static_cast<int>(n);
  ramp_filter::plan_pair p;
  // FFTW_ESTIMATE: planning leaves the arrays alone and takes microseconds; the filter is a
  // small part of the reconstruction time next to the back-projection.
  p.r2c = fftwf_plan_many_dft_r2c(1, &len, static_cast<int>(batch), in, nullptr, 1, len, out,
                                  nullptr, 1, static_cast<int>(nc), FFTW_ESTIMATE);
  p.c2r = fftwf_plan_many_dft_c2r(1, &len, static_cast<int>(batch), out, nullptr, 1,
                                  static_cast<int>(nc), in, nullptr, 1, len, FFTW_ESTIMATE);
  fftwf_free(in);
  fftwf_free(out);
  CTFORGE_CHECK(p.r2c && p.c2r, fmt::format("ramp filter: FFTW could not plan a length-{} FFT", n));
  return cache.emplace(std::make_pair(n, batch), p).first->second;
}

}  // namespace

ramp_filter::ramp_filter(std::int64_t cols, double pixel_mm, filter_window w, double cutoff,
                         double equiangular_rad)
    : cols_(cols),
      padded_(padded_length(cols)),
      response_(ramp_response(padded_, pixel_mm, w, cutoff, equiangular_rad)) {}

ramp_filter::~ramp_filter() = default;

void ramp_filter::apply(float* rows, std::int64_t n_rows, int threads) const {
  if (n_rows <= 0) return;
  const std::int64_t n = padded_, nc = n / 2 + 1, cols = cols_;
  const std::int64_t batch = std::min(k_batch_rows, n_rows);
  const plan_pair& plans = cached_plans(n, batch);
  const std::int64_t chunks = (n_rows + batch - 1) / batch;
  const int nt = static_cast<int>(
      std::min<std::int64_t>(resolve_threads(threads), chunks));
  const float* resp = response_.data();
  std::atomic<bool> alloc_failed{false};
#pragma omp parallel num_threads(nt)
  {
    // fftwf_alloc_* returns the same (SIMD) alignment as the planning buffers, which the
    // new-array execute functions require.
    float* in = fftwf_alloc_real(static_cast<std::size_t>(batch * n));
    fftwf_complex* out = fftwf_alloc_complex(static_cast<std::size_t>(batch * nc));
    if (!in || !out) alloc_failed = true;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      if (!in || !out) continue;
      const std::int64_t r0 = ch * batch, nr = std::min(batch, n_rows - r0);
      for (std::int64_t r = 0; r < batch; ++r) {
        float* dst = in + r * n;
        if (r < nr) {
          std::memcpy(dst, rows + (r0 + r) * cols, static_cast<std::size_t>(cols) * sizeof(float));
          std::fill(dst + cols, dst + n, 0.0f);
        } else {
          std::fill(dst, dst + n, 0.0f);
        }
      }
      fftwf_execute_dft_r2c(plans.r2c, in, out);
      for (std::int64_t r = 0; r < nr; ++r) {
        fftwf_complex* o = out + r * nc;
        for (std::int64_t k = 0; k < nc; ++k) {
          o[k][0] *= resp[k];
          o[k][1] *= resp[k];
        }
      }
      fftwf_execute_dft_c2r(plans.c2r, out, in);
      for (std::int64_t r = 0; r < nr; ++r)
        std::memcpy(rows + (r0 + r) * cols, in + r * n,
                    static_cast<std::size_t>(cols) * sizeof(float));
    }
    fftwf_free(in);
    fftwf_free(out);
  }
  CTFORGE_CHECK(!alloc_failed, "ramp filter: out of memory for FFT buffers");
}

void ramp_filter::apply(projection_stack& proj, int threads) const {
  CTFORGE_EXPECTS(
      proj.cols == cols_,
      fmt::format("ramp filter: projections have {} columns, the filter was built for {}",
                  proj.cols, cols_));
  apply(proj.data.data(), proj.views * proj.rows, threads);
}

}  // namespace ctforge::detail
