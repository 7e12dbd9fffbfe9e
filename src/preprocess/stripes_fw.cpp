// Fourier-wavelet stripe removal of Münch et al. 2009 (stripe_method::fourier_wavelet):
// include/ctforge/preprocess.hpp. The wavelet transform is preprocess/wavelet.hpp.
#include <fftw3.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/fftw_planner.hpp"
#include "ctforge/error.hpp"
#include "math/stripes.hpp"
#include "preprocess/stripe_methods.hpp"
#include "preprocess/wavelet.hpp"

namespace ctforge::detail {

namespace {

/// One level's damping along axis 0 of its vertical band (my x mx values): FFTW plans for the
/// transforms of all mx columns at once, and the gain of each of the my / 2 + 1 frequencies.
class level_damping {
 public:
  level_damping(std::int64_t my, std::int64_t mx, double sigma) : my_(my), mx_(mx) {
    for (std::int64_t k = 0; k <= my / 2; ++k)
      gain_.push_back(static_cast<float>(kernels::fw_gain(k, my, sigma) / static_cast<double>(my)));
    float* re = fftwf_alloc_real(static_cast<std::size_t>(my * mx));
    fftwf_complex* sp = fftwf_alloc_complex(spectrum_size());
    const int n = static_cast<int>(my), howmany = static_cast<int>(mx);
    const int stride = static_cast<int>(mx);
    {
      const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
      constexpr unsigned flags = FFTW_ESTIMATE | FFTW_UNALIGNED;
      forward_ = fftwf_plan_many_dft_r2c(1, &n, howmany, re, nullptr, stride, 1, sp, nullptr,
                                         stride, 1, flags);
      backward_ = fftwf_plan_many_dft_c2r(1, &n, howmany, sp, nullptr, stride, 1, re, nullptr,
                                          stride, 1, flags);
    }
    fftwf_free(re);
    fftwf_free(sp);
    CTFORGE_CHECK(
        forward_ && backward_,
        fmt::format("stripe removal: FFTW could not plan {} transforms of {} values", mx, my));
  }
  ~level_damping() {
    const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    fftwf_destroy_plan(forward_);
    fftwf_destroy_plan(backward_);
  }
  level_damping(const level_damping&) = delete;
  level_damping& operator=(const level_damping&) = delete;

  std::size_t spectrum_size() const { return static_cast<std::size_t>((my_ / 2 + 1) * mx_); }

  /// band (my x mx) damped in place; `sp` holds spectrum_size() values.
  void apply(plane& band, std::vector<std::complex<float>>& sp) const {
    sp.resize(spectrum_size());
    auto* s = reinterpret_cast<fftwf_complex*>(sp.data());
    fftwf_execute_dft_r2c(forward_, band.v.data(), s);
    for (std::int64_t k = 0; k <= my_ / 2; ++k)
      for (std::int64_t x = 0; x < mx_; ++x)
        sp[static_cast<std::size_t>(k * mx_ + x)] *= gain_[static_cast<std::size_t>(k)];
    fftwf_execute_dft_c2r(backward_, s, band.v.data());
  }

 private:
  std::int64_t my_, mx_;
  std::vector<float> gain_;
  fftwf_plan forward_ = nullptr, backward_ = nullptr;
};

/// The top-left rows x cols of p (p at least that large).
void crop(plane& p, std::int64_t rows, std::int64_t cols, plane& tmp) {
  if (p.rows == rows && p.cols == cols) return;
  tmp.resize(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(&p.at(r, 0), cols, &tmp.at(r, 0));
  std::swap(p, tmp);
}

/// A thread's buffers: the padded sinogram, and per level its three detail bands.
struct fw_work {
  plane x, next, tmp, tmp2;
  std::vector<plane> h, v, d;
  std::vector<std::complex<float>> spectrum;
  explicit fw_work(int level) : h(level), v(level), d(level) {}
};

/// Row r of p through the decomposition, the damping, the reconstruction.
void clean_row(projections_ref p, std::int64_t r, std::int64_t padded, const wavelet_filters& wf,
               const std::vector<std::unique_ptr<level_damping>>& damp, fw_work& w) {
  const std::int64_t shift = (padded - p.views) / 2;
  w.x.resize(padded, p.cols);  // zeros outside the views
  for (std::int64_t v = 0; v < p.views; ++v)
    std::copy_n(&p.at(v, r, 0), p.cols, &w.x.at(shift + v, 0));
  const auto levels = static_cast<std::int64_t>(damp.size());
  for (std::int64_t n = 0; n < levels; ++n) {
    const auto i = static_cast<std::size_t>(n);
    dwt2(w.x, wf, w.next, w.h[i], w.v[i], w.d[i], w.tmp);
    std::swap(w.x, w.next);
    damp[i]->apply(w.v[i], w.spectrum);
  }
  for (std::int64_t n = levels - 1; n >= 0; --n) {
    const auto i = static_cast<std::size_t>(n);
    crop(w.x, w.h[i].rows, w.h[i].cols, w.tmp2);
    idwt2(w.x, w.h[i], w.v[i], w.d[i], wf, w.next, w.tmp);
    std::swap(w.x, w.next);
  }
  for (std::int64_t v = 0; v < p.views; ++v)
    std::copy_n(&w.x.at(shift + v, 0), p.cols, &p.at(v, r, 0));
}

}  // namespace

void remove_stripes_fw(projections_ref p, const stripe_options& o, int threads) {
  CTFORGE_EXPECTS(o.level >= 0 && o.level <= 30,
                  fmt::format("stripe level: 0 (automatic) or 1 ... 30 (got {})", o.level));
  CTFORGE_EXPECTS(std::isfinite(o.fw_sigma) && o.fw_sigma > 0,
                  fmt::format("stripe fw_sigma: must be positive (got {})", o.fw_sigma));
  const wavelet_filters wf = daubechies(o.wname);
  if (p.data.empty()) return;
  const std::int64_t padded = o.pad ? p.views + p.views / 8 : p.views;
  int level = o.level;
  if (level == 0)
    level = static_cast<int>(std::ceil(std::log2(static_cast<double>(std::max(p.views, p.cols)))));
  level = std::max(level, 1);
  std::vector<std::unique_ptr<level_damping>> damp;
  std::int64_t rows = padded, cols = p.cols;
  for (int n = 0; n < level; ++n) {
    rows = dwt_length(rows, wf.taps()), cols = dwt_length(cols, wf.taps());
    damp.push_back(std::make_unique<level_damping>(rows, cols, o.fw_sigma));
  }
#pragma omp parallel num_threads(threads)
  {
    fw_work w(level);
#pragma omp for schedule(dynamic)
    for (std::int64_t r = 0; r < p.rows; ++r) clean_row(p, r, padded, wf, damp, w);
  }
}

}  // namespace ctforge::detail
