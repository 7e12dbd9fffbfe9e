// The Fourier-wavelet (Münch et al. 2009) and Titarenko stripe removals and their wavelet
// transform (include/ctforge/preprocess.hpp, src/preprocess/wavelet.hpp). The comparisons with
// tomopy's published outputs are in python/tests/test_stripes_tomopy.py; here: the properties
// each must have.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "preprocess/wavelet.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

// Daubechies' conditions on the scaling filter h of dbN (2 N taps), written from their
// definitions: sum h = sqrt(2); sum h[k] h[k + 2 m] = delta(m) (orthonormal shifts); N vanishing
// moments of the wavelet: sum (-1)^k k^p h[k] = 0 for p < N. Tolerances: the table is computed in
// double precision (1e-14 on the coefficients); the moments are compared with sum |k^p h[k]|.
TEST(Wavelet, DaubechiesFiltersMeetTheirDefinition) {
  for (int n = 1; n <= 10; ++n) {
    const detail::wavelet_filters w = detail::daubechies("db" + std::to_string(n));
    const std::vector<double>& h = w.rec_lo;
    ASSERT_EQ(h.size(), static_cast<std::size_t>(2 * n));
    double sum = 0;
    for (double x : h) sum += x;
    EXPECT_NEAR(sum, std::sqrt(2.0), 1e-13) << "db" << n;
    for (std::size_t m = 0; 2 * m < h.size(); ++m) {
      double dot = 0;
      for (std::size_t k = 0; k + 2 * m < h.size(); ++k) dot += h[k] * h[k + 2 * m];
      EXPECT_NEAR(dot, m == 0 ? 1.0 : 0.0, 1e-13) << "db" << n << " shift " << m;
    }
    for (int p = 0; p < n; ++p) {
      double moment = 0, scale = 0;
      for (std::size_t k = 0; k < h.size(); ++k) {
        const double t = std::pow(static_cast<double>(k), p) * h[k];
        moment += (k % 2 == 0 ? t : -t), scale += std::abs(t);
      }
      EXPECT_LT(std::abs(moment), 1e-12 * scale) << "db" << n << " moment " << p;
    }
  }
  // db2 in closed form: (1 + sqrt 3, 3 + sqrt 3, 3 - sqrt 3, 1 - sqrt 3) / (4 sqrt 2).
  const double s3 = std::sqrt(3.0), d = 4 * std::sqrt(2.0);
  const std::vector<double> db2 = {(1 + s3) / d, (3 + s3) / d, (3 - s3) / d, (1 - s3) / d};
  const detail::wavelet_filters w = detail::daubechies("db2");
  for (std::size_t k = 0; k < 4; ++k) EXPECT_NEAR(w.rec_lo[k], db2[k], 1e-15);
  EXPECT_EQ(detail::daubechies("haar").rec_lo, detail::daubechies("db1").rec_lo);
}

struct plane_shape {
  std::int64_t rows, cols;
  const char* wname;
};

class WaveletRoundTrip : public ::testing::TestWithParam<plane_shape> {};

// dwt2 then idwt2 gives the input back (perfect reconstruction of the symmetric extension),
// for odd sizes and lines shorter than the filter; float arithmetic: 1e-5 of values ~1.
TEST_P(WaveletRoundTrip, InverseRestoresTheInput) {
  const plane_shape s = GetParam();
  const detail::wavelet_filters w = detail::daubechies(s.wname);
  detail::plane x, a, h, v, d, tmp, out;
  x.resize(s.rows, s.cols);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& e : x.v) e = u(rng);
  detail::dwt2(x, w, a, h, v, d, tmp);
  EXPECT_EQ(a.rows, detail::dwt_length(s.rows, w.taps()));
  EXPECT_EQ(a.cols, detail::dwt_length(s.cols, w.taps()));
  detail::idwt2(a, h, v, d, w, out, tmp);
  ASSERT_GE(out.rows, s.rows);
  ASSERT_GE(out.cols, s.cols);
  for (std::int64_t r = 0; r < s.rows; ++r)
    for (std::int64_t c = 0; c < s.cols; ++c) ASSERT_NEAR(out.at(r, c), x.at(r, c), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, WaveletRoundTrip,
                         ::testing::Values(plane_shape{16, 16, "db5"}, plane_shape{17, 23, "db5"},
                                           plane_shape{1, 9, "db5"}, plane_shape{7, 1, "db3"},
                                           plane_shape{3, 4, "db10"}, plane_shape{33, 12, "haar"},
                                           plane_shape{12, 31, "db2"}));

/// A smooth sinogram, views x cols (one row), of a few Gaussian traces over a background, and
/// the same with `offset` added to column `col` (a full stripe) in every view.
projection_stack traces(std::int64_t views, std::int64_t cols) {
  projection_stack p(views, 1, cols);
  for (std::int64_t v = 0; v < views; ++v)
    for (std::int64_t c = 0; c < cols; ++c) {
      const double a = 3.14159265358979 * static_cast<double>(v) / static_cast<double>(views);
      const double x = static_cast<double>(c) - 0.5 * static_cast<double>(cols - 1);
      double s = 1.0;
      for (int k = 1; k <= 3; ++k) {
        const double t = (x - 0.25 * static_cast<double>(cols) * std::cos(a + k) / k) / 6.0;
        s += std::exp(-0.5 * t * t);
      }
      p.at(v, 0, c) = static_cast<float>(s);
    }
  return p;
}

/// Mean over the views of |p - ref| in column c.
double column_error(const projection_stack& p, const projection_stack& ref, std::int64_t c) {
  double e = 0;
  for (std::int64_t v = 0; v < p.views; ++v) e += std::abs(p.at(v, 0, c) - ref.at(v, 0, c));
  return e / static_cast<double>(p.views);
}

// A full stripe (+0.3 on one column, outside the traces) falls to less than half with fw (its
// defaults) and to less than 3/4 with ti (alpha 0: its combination sqrt(d1 d2 + alpha |min d1
// d2|) otherwise lifts every value; its regularisation 1 / (2 x range of the views' sums) is
// strong on such smooth data). Measured: fw 0.3 -> 0.124, ti 0.3 -> 0.212. Near the middle
// column fw also damps the nearly vertical trace there, as a stripe: not a place to measure.
TEST(StripesFwTi, FullStripeReduced) {
  const projection_stack clean = traces(90, 61);
  projection_stack bad = clean;
  for (std::int64_t v = 0; v < bad.views; ++v) bad.at(v, 0, 52) += 0.3f;
  for (const auto& [m, bound] : {std::pair{stripe_method::fourier_wavelet, 0.15},
                                 std::pair{stripe_method::titarenko, 0.225}}) {
    projection_stack p = bad;
    stripe_options o;
    o.method = m;
    o.alpha = 0;
    remove_stripes(p, o);
    const double e = column_error(p, clean, 52);
    EXPECT_LT(e, bound) << to_string(m);
  }
}

// What each method must leave alone. fw damps only the detail across the columns: a sinogram
// constant across the columns (each view its own value) has none, and comes back unchanged to
// float rounding (perfect reconstruction through padding, every level and cropping). ti
// corrects the columns' mean profile only where the views' sums vary: with equal sums and
// alpha 0 it returns the input.
TEST(StripesFwTi, NegativeControlsLeaveTheInput) {
  projection_stack rows_only(37, 2, 21);
  for (std::int64_t v = 0; v < rows_only.views; ++v)
    for (std::int64_t r = 0; r < rows_only.rows; ++r)
      for (std::int64_t c = 0; c < rows_only.cols; ++c)
        rows_only.at(v, r, c) = 1.0f + 0.5f * std::sin(0.3f * static_cast<float>(v + r));
  projection_stack same = rows_only;
  stripe_options fw;
  fw.method = stripe_method::fourier_wavelet;
  remove_stripes(same, fw);
  for (std::size_t i = 0; i < same.data.size(); ++i)
    ASSERT_NEAR(same.data[i], rows_only.data[i], 1e-5);  // float rounding of values ~1
  projection_stack flat(8, 1, 5);
  for (std::int64_t v = 0; v < 8; ++v)
    for (std::int64_t c = 0; c < 5; ++c) flat.at(v, 0, c) = 1.0f + static_cast<float>(c % 2);
  projection_stack kept = flat;
  stripe_options ti;
  ti.method = stripe_method::titarenko;
  ti.alpha = 0;
  remove_stripes(kept, ti);
  for (std::size_t i = 0; i < kept.data.size(); ++i) EXPECT_NEAR(kept.data[i], flat.data[i], 1e-6);
}

struct stack_shape {
  std::int64_t views, rows, cols;
};

class StripesFwTiShapes : public ::testing::TestWithParam<stack_shape> {};

// Odd sizes and size-1 dimensions: finite output of the input's shape, with blocks of views too.
TEST_P(StripesFwTiShapes, FiniteOutput) {
  const stack_shape s = GetParam();
  projection_stack p(s.views, s.rows, s.cols);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  for (float& e : p.data) e = u(rng);
  for (int nblock : {0, 1, static_cast<int>(s.views)}) {
    for (stripe_method m : {stripe_method::fourier_wavelet, stripe_method::titarenko}) {
      projection_stack q = p;
      stripe_options o;
      o.method = m;
      o.nblock = nblock;
      remove_stripes(q, o);
      for (float e : q.data) ASSERT_TRUE(std::isfinite(e)) << to_string(m);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, StripesFwTiShapes,
                         ::testing::Values(stack_shape{1, 1, 1}, stack_shape{1, 3, 7},
                                           stack_shape{9, 2, 1}, stack_shape{13, 3, 17},
                                           stack_shape{40, 1, 33}));

TEST(StripesFwTi, BadOptionsAreRefusedNamingTheOption) {
  using testing::expect_usage_error_naming;
  projection_stack p = traces(6, 9);
  stripe_options o;
  o.method = stripe_method::fourier_wavelet;
  o.level = 31;
  expect_usage_error_naming([&] { remove_stripes(p, o); }, "stripe level");
  o.level = 0;
  o.fw_sigma = 0;
  expect_usage_error_naming([&] { remove_stripes(p, o); }, "stripe fw_sigma");
  o.fw_sigma = 2;
  for (const char* bad : {"db11", "sym5", "db", "db5x", ""}) {
    o.wname = bad;
    expect_usage_error_naming([&] { remove_stripes(p, o); }, "stripe wname");
  }
  o.method = stripe_method::titarenko;
  o.alpha = -1;
  expect_usage_error_naming([&] { remove_stripes(p, o); }, "stripe alpha");
  o.alpha = 1.5;
  o.nblock = 7;
  expect_usage_error_naming([&] { remove_stripes(p, o); }, "stripe nblock");
  // alpha 0.5 on values of both signs about 0: where d1 = s + q1 and d2 = s + q2 straddle 0 (the
  // two corrections differ) d1 d2 < 0, and min(d1 d2) + 0.5 |min(d1 d2)| < 0 under the root.
  projection_stack mixed(40, 1, 33);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& e : mixed.data) e = u(rng);
  o.nblock = 0;
  o.alpha = 0.5;
  expect_usage_error_naming([&] { remove_stripes(mixed, o); }, "stripe alpha");
  EXPECT_EQ(parse_stripe_method("fw"), stripe_method::fourier_wavelet);
  EXPECT_EQ(parse_stripe_method("ti"), stripe_method::titarenko);
  for (const char* name : {"fourier_wavelet", "titarenko"})
    EXPECT_EQ(to_string(parse_stripe_method(name)), name);
}

}  // namespace
}  // namespace ctforge
