// Phase retrieval (include/ctforge/preprocess.hpp, retrieve_phase). The comparisons with the
// papers' formulas evaluated independently (numpy float64 FFTs) and the simulated propagation
// are in python/tests/test_phase.py; here: the band / margin contract, invariants on odd and
// size-1 shapes, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

/// 20 keV, 100 mm, 5 um pixels, delta/beta 500: c = pi lambda R (delta/beta) / W^2 = 390 pixels^2
/// (a kernel decay length sqrt(c) / (2 pi) of 3.1 pixels).
phase_options typical(phase_method m = phase_method::paganin) {
  phase_options o;
  o.method = m;
  o.energy_kev = 20;
  o.distance_mm = 100;
  o.pixel_size_mm = 0.005;
  o.delta_beta = 500;
  o.threads = 2;
  return o;
}

/// Line integrals in [0, ~0.9]: a few Gaussian blobs and a bar, plus uniform noise of 0.02
/// (pixel-scale content everywhere, so that data beyond a band's margin matter).
projection_stack structured_view(std::int64_t views, std::int64_t rows, std::int64_t cols) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> noise(0.0f, 0.02f);
  return testing::scan_from(views, rows, cols, [&](std::int64_t v, std::int64_t r, std::int64_t c) {
    double s = 0;
    for (int k = 0; k < 4; ++k) {
      const double cr = static_cast<double>(rows) * (0.15 + 0.23 * k + 0.02 * v);
      const double cc = static_cast<double>(cols) * (0.2 + 0.2 * k);
      const double d2 = ((r - cr) * (r - cr) + (c - cc) * (c - cc)) / 20.0;
      s += 0.6 * std::exp(-0.5 * d2);
    }
    if (c > cols / 3 && c < cols / 3 + 4) s += 0.25;  // a bar across all rows
    return static_cast<float>(s) + noise(rng);
  });
}

/// The band's retrieval of rows `out` widened by `margin`, against rows `out` of `whole`.
double band_difference(const projection_stack& input, const projection_stack& whole, row_band out,
                       std::int64_t margin, const phase_options& o) {
  const row_band in = phase_input_rows(out, input.rows, margin);
  projection_stack band(input.views, in.end - in.begin, input.cols);
  for (std::int64_t v = 0; v < input.views; ++v)
    std::copy_n(input.view(v) + in.begin * input.cols, band.rows * input.cols, band.view(v));
  const projection_stack got = retrieve_phase_rows(band, in, out, o);
  EXPECT_EQ(got.rows, out.end - out.begin);
  double worst = 0;
  for (std::int64_t v = 0; v < input.views; ++v)
    for (std::int64_t r = out.begin; r < out.end; ++r)
      for (std::int64_t c = 0; c < input.cols; ++c)
        worst = std::max(
            worst, std::abs(static_cast<double>(got.at(v, r - out.begin, c)) - whole.at(v, r, c)));
  return worst;
}

class PhaseBands : public ::testing::TestWithParam<phase_method> {};

// A band widened by phase_row_margin gives the whole view's rows within 1e-5 of the output's
// peak, in the middle and at both detector edges; without the margin the middle band differs by
// far more (the negative control).
TEST_P(PhaseBands, MarginMakesBandEqualWholeView) {
  const phase_options o = typical(GetParam());
  const projection_stack input = structured_view(2, 120, 37);
  projection_stack whole = input;
  retrieve_phase(whole, o);
  const float peak = *std::max_element(whole.data.begin(), whole.data.end());
  const float tmax = std::exp(-*std::min_element(input.data.begin(), input.data.end()));
  // The margin bounds the filtered transmission's change by tolerance * max T; the output -ln T
  // changes by that over T, at least exp(-peak): this tolerance keeps the output within 1e-5 of
  // its peak.
  const double tolerance = 1e-5 * peak * std::exp(-peak) / tmax;
  const std::int64_t m = phase_row_margin(o, tolerance);
  EXPECT_GT(m, 3);
  EXPECT_LT(m, 120);
  for (const row_band out : {row_band{50, 70}, row_band{0, 15}, row_band{100, 120}}) {
    const double d = band_difference(input, whole, out, m, o);
    EXPECT_LE(d, 1e-5 * peak) << "rows " << out.begin << ".." << out.end << " margin " << m;
  }
  const double unwidened = band_difference(input, whole, row_band{50, 70}, 0, o);
  EXPECT_GT(unwidened, 100 * 1e-5 * peak);
}

INSTANTIATE_TEST_SUITE_P(Methods, PhaseBands,
                         ::testing::Values(phase_method::paganin, phase_method::generalized));

// The margin follows the kernel's decay length sqrt(c) / (2 pi): about that many more rows per
// factor e of tolerance (the generalised kernel, exactly geometric: c = 390 gives 3.14 rows;
// Paganin's with c = 16 x 390, where its Nyquist ripple is negligible: 12.6 rows). Paganin's
// margin is never below the generalised one's (same decay, plus the ripple of its cut at the
// Nyquist frequency, which dominates at small tolerances when c is small).
TEST(PhaseMargin, GrowsWithTheDecayLength) {
  const auto rows_per_e = [](const phase_options& o) {
    return static_cast<double>(phase_row_margin(o, 1e-8) - phase_row_margin(o, 1e-4)) /
           std::log(1e4);
  };
  const phase_options g = typical(phase_method::generalized);
  EXPECT_NEAR(rows_per_e(g), 3.14, 0.3);
  phase_options far = typical(phase_method::paganin);
  far.distance_mm *= 16;  // c x 16: decay length x 4
  EXPECT_NEAR(rows_per_e(far), 12.6, 1.0);
  for (double tol : {1e-3, 1e-5, 1e-7})
    EXPECT_GE(phase_row_margin(typical(phase_method::paganin), tol), phase_row_margin(g, tol));
}

using shape = testing::scan_shape;

class PhaseShapes : public ::testing::TestWithParam<shape> {};

// H(0) = 1: a uniform view is returned unchanged (to float rounding); a view with structure
// changes (its fringes are smoothed), odd and size-1 shapes included.
TEST_P(PhaseShapes, UniformViewUnchangedStructureSmoothed) {
  const shape s = GetParam();
  for (phase_method m : {phase_method::paganin, phase_method::generalized}) {
    projection_stack flat(s.views, s.rows, s.cols);
    std::fill(flat.data.begin(), flat.data.end(), 0.7f);
    retrieve_phase(flat, typical(m));
    for (float x : flat.data) EXPECT_NEAR(x, 0.7f, 2e-6f);
    if (s.cols < 3) continue;
    projection_stack p(s.views, s.rows, s.cols);
    for (std::int64_t i = 0; i < p.size(); ++i)
      p.data[static_cast<std::size_t>(i)] = (i % s.cols) % 2 == 0 ? 0.2f : 0.6f;
    const projection_stack before = p;
    retrieve_phase(p, typical(m));
    double change = 0;
    for (std::int64_t i = 0; i < p.size(); ++i)
      change = std::max(change, std::abs(static_cast<double>(p.data[static_cast<std::size_t>(i)]) -
                                         before.data[static_cast<std::size_t>(i)]));
    EXPECT_GT(change, 0.1) << to_string(m);  // a 0.4 checkerboard in columns nearly flattened
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, PhaseShapes,
                         ::testing::Values(shape{1, 1, 1}, shape{2, 1, 17}, shape{1, 9, 1},
                                           shape{3, 13, 31}, shape{1, 64, 48}));

TEST(Phase, BadInputIsRefusedNamingTheOption) {
  using testing::expect_usage_error_naming;
  projection_stack p = structured_view(2, 5, 7);
  const auto refused = [&](phase_options o, const char* name) {
    expect_usage_error_naming([&] { retrieve_phase(p, o); }, name);
  };
  phase_options o = typical();
  o.energy_kev = 0;
  refused(o, "phase energy_kev");
  o = typical();
  o.distance_mm = -1;
  refused(o, "phase distance_mm");
  o = typical();
  o.pixel_size_mm = 0;
  refused(o, "phase pixel_size_mm");
  o.pixel_u_mm = o.pixel_v_mm = 0.01;  // both pitches given: pixel_size_mm not needed
  EXPECT_NO_THROW(retrieve_phase(p, o));
  o.pixel_v_mm = -0.01;
  refused(o, "phase pixel_v_mm");
  o = typical();
  o.delta_beta = std::nan("");
  refused(o, "phase delta_beta");
  o = typical();
  o.pad_rows = -2;
  refused(o, "phase pad_rows");
  o = typical();
  o.threads = -1;
  refused(o, "threads");
  expect_usage_error_naming([&] { (void)phase_row_margin(typical(), 0); }, "phase tolerance");
  expect_usage_error_naming([&] { (void)parse_phase_method("tie"); }, "phase method");
  for (const char* name : {"paganin", "generalized"})
    EXPECT_EQ(to_string(parse_phase_method(name)), name);
  expect_usage_error_naming([&] { (void)phase_input_rows(row_band{3, 9}, 8, 2); }, "phase rows");
  p.at(1, 2, 3) = std::nanf("");
  expect_usage_error_naming([&] { retrieve_phase(p, typical()); }, "view 1, row 2, col 3");
}

// A view whose transmission underflows to 0 (line integrals of 200) cannot be logged: an error
// naming that view, not NaN or Inf in the output.
TEST(Phase, NonPositiveFilteredTransmissionNamesTheView) {
  projection_stack p = structured_view(4, 6, 9);
  for (std::int64_t i = 0; i < 6 * 9; ++i) p.view(2)[i] = 200.0f;
  testing::expect_runtime_error_naming([&] { retrieve_phase(p, typical()); }, "view 2");
}

}  // namespace
}  // namespace ctforge
