// Ramp filter: padded length, frequency response built from the Kak-Slaney kernel, FFTW row
// filtering equal to the direct spatial convolution, windows.
#include "recon/filter.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/recon.hpp"

using namespace ctforge;
using detail::padded_length;
using detail::ramp_kernel;
using detail::ramp_response;

namespace {
bool smooth235(std::int64_t n) {
  for (std::int64_t p : {2, 3, 5})
    while (n % p == 0) n /= p;
  return n == 1;
}
const filter_window k_windows[] = {filter_window::ram_lak, filter_window::shepp_logan,
                                   filter_window::cosine, filter_window::hamming,
                                   filter_window::hann};
}  // namespace

TEST(RampFilter, PaddedLength) {
  for (std::int64_t cols : {1, 2, 3, 7, 64, 100, 127, 560, 1000, 1021, 4097}) {
    const std::int64_t n = padded_length(cols);
    EXPECT_GE(n, 2 * cols);
    EXPECT_EQ(n % 2, 0);
    EXPECT_TRUE(smooth235(n)) << n;
    for (std::int64_t m = 2 * cols; m < n; m += 2) EXPECT_FALSE(smooth235(m)) << "smaller " << m;
  }
  EXPECT_EQ(padded_length(64), 128);
  EXPECT_THROW(padded_length(0), usage_error);
}

// DC value: the response at frequency 0 is tau / N * sum of the circular kernel, i.e. tau times
// the sum of h[d] over one period d in (-N/2, N/2]. Computed here independently (long double,
// both signs of d) from the closed-form kernel.
TEST(RampFilter, DcMatchesKernelSum) {
  for (std::int64_t n : {2, 6, 128, 1000, 1152}) {
    for (double tau : {0.2, 1.0, 2.5}) {
      long double sum = 0;
      for (std::int64_t d = -n / 2 + 1; d <= n / 2; ++d) {
        const std::int64_t a = d < 0 ? -d : d;
        long double h =
            a == 0 ? 1.0L / (4.0L * tau * tau)
                   : (a % 2 ? -1.0L / (static_cast<long double>(a) * a * M_PIl * M_PIl * tau * tau)
                            : 0.0L);
        sum += h;
      }
      const auto r = ramp_response(n, tau, filter_window::ram_lak, 1.0);
      ASSERT_EQ(r.size(), static_cast<std::size_t>(n / 2 + 1));
      const double expected = static_cast<double>(sum) * tau / static_cast<double>(n);
      // float storage of the response: 1e-6 relative
      EXPECT_NEAR(r[0], expected, 1e-6 * std::abs(expected) + 1e-12) << "n " << n << " tau " << tau;
      // The truncated kernel's DC is small and positive (the ramp's DC is 0; truncation leaves
      // 2 / (pi^2 tau^2) * sum_{odd d >= N/2} 1/d^2 > 0).
      EXPECT_GT(expected, 0.0);
    }
  }
}

// Away from DC the response approaches the continuous ramp: the DTFT of the sampled band-limited
// ramp kernel is |f| / tau for |f| < 1 / (2 tau), so response[k] = tau / N * |f| / tau = f / N
// with f = k / (N tau), up to the truncation of the kernel to one period.
TEST(RampFilter, ResponseIsRampShaped) {
  const std::int64_t n = 1024;
  const double tau = 0.7;
  const auto r = ramp_response(n, tau, filter_window::ram_lak, 1.0);
  for (std::int64_t k : {64, 256, 400, 512}) {
    const double f = static_cast<double>(k) / (static_cast<double>(n) * tau);  // cycles / mm
    const double expected = f / static_cast<double>(n);
    // Truncation of the kernel at |d| < N/2 changes the response by O(1 / (N tau^2)) * tau / N,
    // i.e. relative O(1 / k): 1 % for k >= 64 is generous.
    EXPECT_NEAR(r[static_cast<std::size_t>(k)], expected, 0.01 * expected) << k;
  }
}

// Filtering rows with FFTW equals the direct linear convolution q[n] = tau sum_m h[n-m] p[m]
// (no wrap-around thanks to the padding to >= 2 cols). Odd widths, a single column, a row count
// that is not a multiple of the FFT batch, several threads.
struct conv_case {
  std::int64_t cols, rows;
  double tau;
  int threads;
};
class RampFilterConvolution : public ::testing::TestWithParam<conv_case> {};

TEST_P(RampFilterConvolution, EqualsSpatialConvolution) {
  const auto c = GetParam();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 3.0f);
  std::vector<float> data(static_cast<std::size_t>(c.cols * c.rows));
  for (float& x : data) x = u(rng);
  std::vector<float> filtered = data;
  const detail::ramp_filter f(c.cols, c.tau, filter_window::ram_lak, 1.0);
  EXPECT_EQ(f.padded_cols(), padded_length(c.cols));
  f.apply(filtered.data(), c.rows, c.threads);
  double max_err = 0;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const float* p = data.data() + r * c.cols;
    for (std::int64_t n = 0; n < c.cols; ++n) {
      double q = 0;
      for (std::int64_t m = 0; m < c.cols; ++m)
        q += ramp_kernel(n - m < 0 ? m - n : n - m, c.tau) * p[m];
      q *= c.tau;
      max_err = std::max(max_err, std::abs(q - filtered[static_cast<std::size_t>(r * c.cols + n)]));
    }
  }
  // |q| <= max|p| * tau * sum|h| = max|p| / (2 tau) (sum |h| = 1/(4 tau^2) + 2/(pi^2 tau^2) *
  // pi^2/8 = 1/(2 tau^2)); float FFTs of length N <= 2^12 are accurate to ~1e-6 of that bound.
  const double bound = 3.0 / (2 * c.tau);
  EXPECT_LT(max_err, 1e-5 * bound) << "max error " << max_err;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RampFilterConvolution,
                         ::testing::Values(conv_case{1, 1, 1.0, 1}, conv_case{7, 3, 0.5, 1},
                                           conv_case{64, 37, 1.0, 2}, conv_case{101, 16, 2.0, 2},
                                           conv_case{560, 5, 0.148, 2},
                                           conv_case{33, 100, 1.3, 0}));

TEST(RampFilter, ProjectionStackShapeChecked) {
  const detail::ramp_filter f(10, 1.0, filter_window::ram_lak, 1.0);
  projection_stack p(3, 4, 11);
  EXPECT_THROW(f.apply(p), usage_error);
  projection_stack ok(3, 4, 10);
  ok.at(1, 2, 5) = 1.0f;  // an impulse: the filtered row is tau h[n - 5], others stay 0
  f.apply(ok);
  for (std::int64_t c = 0; c < 10; ++c)  // float FFT: 1e-6 of h[0] tau = 0.25
    EXPECT_NEAR(ok.at(1, 2, c), ramp_kernel(c > 5 ? c - 5 : 5 - c, 1.0), 1e-6) << c;
  for (std::int64_t r = 0; r < 4; ++r)
    if (r != 2)
      for (std::int64_t c = 0; c < 10; ++c) EXPECT_EQ(ok.at(1, r, c), 0.0f);
}

// Windows: never above ram-lak, equal at DC, zero above the cut-off; hann/hamming/cosine/
// shepp-logan are decreasing.
TEST(RampFilter, Windows) {
  const std::int64_t n = 256;
  for (double cutoff : {1.0, 0.5, 0.3}) {
    const auto ramp = ramp_response(n, 1.0, filter_window::ram_lak, 1.0);
    for (filter_window w : k_windows) {
      const auto r = ramp_response(n, 1.0, w, cutoff);
      EXPECT_FLOAT_EQ(r[0], ramp[0]) << to_string(w);
      for (std::size_t k = 0; k < r.size(); ++k) {
        EXPECT_LE(r[k], ramp[k] * (1 + 1e-6f)) << to_string(w) << " k " << k;
        EXPECT_GE(r[k], 0.0f);
        const double x = static_cast<double>(k) / (n / 2);
        if (x > cutoff) EXPECT_EQ(r[k], 0.0f) << to_string(w) << " k " << k;
      }
    }
  }
  // Closed forms at the Nyquist frequency with cut-off 1.
  EXPECT_NEAR(detail::window_value(filter_window::shepp_logan, 1.0, 1.0), 2 / M_PI, 1e-12);
  EXPECT_NEAR(detail::window_value(filter_window::cosine, 1.0, 1.0), 0.0, 1e-12);
  EXPECT_NEAR(detail::window_value(filter_window::hamming, 1.0, 1.0), 0.08, 1e-12);
  EXPECT_NEAR(detail::window_value(filter_window::hann, 1.0, 1.0), 0.0, 1e-12);
  EXPECT_NEAR(detail::window_value(filter_window::hann, 0.25, 0.5), 0.5, 1e-12);
}

TEST(RampFilter, RejectsBadParameters) {
  EXPECT_THROW(ramp_response(7, 1.0, filter_window::ram_lak, 1.0), usage_error);
  EXPECT_THROW(ramp_response(8, 0.0, filter_window::ram_lak, 1.0), usage_error);
  EXPECT_THROW(ramp_response(8, 1.0, filter_window::ram_lak, 0.0), usage_error);
  EXPECT_THROW(ramp_response(8, 1.0, filter_window::ram_lak, 1.01), usage_error);
}
