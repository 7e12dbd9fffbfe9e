// preprocessed_rows (include/ctforge/checkpoint.hpp): a band of detector rows cleaned with the
// margin the steps need equals the same rows of the whole cleaned projections, bit for bit, at
// the detector's edges and inside; without the margin it does not (the negative control).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "ctforge/checkpoint.hpp"
#include "ctforge/preprocess.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

projection_stack rows_of(const projection_stack& p, std::int64_t r0, std::int64_t r1) {
  projection_stack out(p.views, r1 - r0, p.cols);
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t c = 0; c < p.cols; ++c) out.at(v, r - r0, c) = p.at(v, r, c);
  return out;
}

preprocess_options steps(int zinger_size) {
  return parse_preprocess_options(
      std::vector<preprocess_setting>{{"zingers", "1"},
                                      {"zinger_size", std::to_string(zinger_size)},
                                      {"zinger_views", "3"},
                                      {"rings", "all"},
                                      {"ring_size", "5"},
                                      {"ring_la_size", "9"}});
}

class PreprocessedRows : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(PreprocessedRows, BandEqualsTheWholeCleanedRows) {
  const auto [zinger_size, r0, r1] = GetParam();
  const std::int64_t rows = 13;
  const projection_stack raw = testing::dirty_scan(24, rows, 31);
  const preprocess_options o = steps(zinger_size);
  projection_stack whole = raw;
  (void)preprocess(whole, o);
  std::vector<std::pair<std::int64_t, std::int64_t>> asked;
  const row_band_source source = [&](std::int64_t a, std::int64_t b) {
    asked.emplace_back(a, b);
    return rows_of(raw, a, b);
  };
  const projection_stack band = preprocessed_rows(source, rows, o)(r0, r1);
  ASSERT_EQ(band.rows, r1 - r0);
  EXPECT_EQ(band.data, rows_of(whole, r0, r1).data);
  // It read the margin, clipped to the detector, and no more.
  const std::int64_t m = zinger_size / 2;
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].first, std::max<std::int64_t>(0, r0 - m));
  EXPECT_EQ(asked[0].second, std::min<std::int64_t>(rows, r1 + m));
  // The negative control: the band cleaned alone differs where the window reaches past it.
  if (r0 > 0 || r1 < rows) {
    projection_stack alone = rows_of(raw, r0, r1);
    (void)preprocess(alone, o);
    EXPECT_NE(alone.data, band.data);
  }
}

INSTANTIATE_TEST_SUITE_P(Bands, PreprocessedRows,
                         ::testing::Values(std::tuple{3, 0, 4}, std::tuple{3, 4, 9},
                                           std::tuple{5, 6, 7}, std::tuple{5, 10, 13},
                                           std::tuple{7, 0, 13}, std::tuple{7, 2, 11}));

// With phase retrieval the margin is its kernel's reach at k_phase_band_tolerance: bands
// agree with the whole retrieval to that tolerance (times max T / T in line integrals), and
// without the margin by far less (the negative control).
TEST(PreprocessedRowsPhase, BandEqualsTheWholeWithinTheTolerance) {
  // The margin is set by the 1 / n^2 ripple of the kernel's cut at Nyquist (186 rows here):
  // the detector is taller than a band with its margins on both sides.
  const std::int64_t rows = 420;
  projection_stack raw(3, rows, 40);
  for (std::int64_t v = 0; v < raw.views; ++v)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < raw.cols; ++c) {
        const double x = (c - 20.0) / 8.0, y = (r - 210.0 - 3.0 * v) / 12.0;
        raw.at(v, r, c) = static_cast<float>(0.8 * std::exp(-(x * x + y * y)));
      }
  preprocess_options o =
      parse_preprocess_options(std::vector<preprocess_setting>{{"phase", "paganin"},
                                                               {"phase_energy", "20"},
                                                               {"phase_distance", "100"},
                                                               {"delta_beta", "200"}});
  set_detector(o, make_parallel_geometry(40, rows, 0.01, 0.01, {0.0, 1.0, 2.0}));
  const std::int64_t m = preprocess_row_margin(o);
  ASSERT_GT(m, 2);
  ASSERT_LT(2 * m + 6, rows);  // the band with its margins is narrower than the detector
  projection_stack whole = raw;
  (void)preprocess(whole, o);
  const row_band_source source = [&](std::int64_t a, std::int64_t b) { return rows_of(raw, a, b); };
  const projection_stack band = preprocessed_rows(source, rows, o)(205, 211);
  const projection_stack expected = rows_of(whole, 205, 211);
  double worst = 0;
  for (std::size_t i = 0; i < band.data.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(band.data[i] - expected.data[i])));
  EXPECT_LT(worst, 3 * k_phase_band_tolerance) << "margin " << m;  // max T / T <= e^0.8
  projection_stack alone = rows_of(raw, 205, 211);
  (void)preprocess(alone, o);
  double worst_alone = 0;
  for (std::size_t i = 0; i < alone.data.size(); ++i)
    worst_alone =
        std::max(worst_alone, static_cast<double>(std::abs(alone.data[i] - expected.data[i])));
  EXPECT_GT(worst_alone, 100 * k_phase_band_tolerance);
}

// No step: the source itself, untouched.
TEST(PreprocessedRowsNoStep, IsTheSource) {
  const projection_stack raw = testing::dirty_scan(6, 4, 9);
  const row_band_source source = [&](std::int64_t a, std::int64_t b) { return rows_of(raw, a, b); };
  EXPECT_EQ(preprocessed_rows(source, 4, {})(1, 3).data, rows_of(raw, 1, 3).data);
}

}  // namespace
}  // namespace ctforge
