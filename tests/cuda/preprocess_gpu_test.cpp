// The preprocessing steps on the GPU (src/cuda/preprocess.cu, stripes.cu through
// ctforge::preprocess with where = cuda) against the CPU steps: zinger removal equal value for
// value (the same window medians and flag test), Vo's stripe methods and phase retrieval within
// 1e-5 of the peak (float contraction; cuFFT against FFTW); odd
// sizes, one row, one column, one view; batches of views forced by a small memory budget; the
// same errors.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ctforge/preprocess.hpp"
#include "test_support.hpp"

using namespace ctforge;

namespace {

struct shape {
  std::string name;
  std::int64_t views, rows, cols;
  std::int64_t memory = 0;  // > 0: GPU memory budget in bytes (forces batches of views)
};

std::ostream& operator<<(std::ostream& os, const shape& s) {
  return os << s.name;
}

/// Smooth line integrals in [0.1, 1.6] with zingers (+2 at every 37th value) unless not asked.
projection_stack scan_of(const shape& s, bool zingers = true) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> noise(-0.02f, 0.02f);
  projection_stack p = ctforge::testing::scan_from(
      s.views, s.rows, s.cols, [&](std::int64_t v, std::int64_t r, std::int64_t c) {
        const double x = (c - 0.5 * s.cols) / (0.3 * s.cols + 1);
        const double y = (r - 0.5 * s.rows) / (0.3 * s.rows + 1);
        return static_cast<float>(0.1 + 1.5 * std::exp(-(x * x + y * y) - 0.01 * v)) + noise(rng);
      });
  for (std::int64_t i = 0; zingers && i < p.size(); i += 37)
    p.data[static_cast<std::size_t>(i)] += 2.0f;
  return p;
}

preprocess_options on(backend where, const shape& s) {
  preprocess_options o;
  o.where = where;
  o.gpu_memory_limit_bytes = where == backend::cuda ? s.memory : 0;
  return o;
}

double peak_of(const projection_stack& p) {
  double peak = 0;
  for (const float v : p.data) peak = std::max(peak, std::abs(static_cast<double>(v)));
  return peak;
}

class PreprocessGpu : public ctforge::testing::gpu_param_test<shape> {};

// Zinger removal: the same window medians and the same double comparison, so the same values
// and count; windows of 9, 75 and 343 values (the GPU's largest), and 405 (run on the CPU).
TEST_P(PreprocessGpu, ZingersEqualTheCpu) {
  const shape& s = GetParam();
  const projection_stack raw = scan_of(s);
  for (const auto [size, views] : {std::pair{3, 1}, {5, 3}, {7, 7}, {9, 5}}) {
    preprocess_options cpu = on(backend::cpu, s), gpu = on(backend::cuda, s);
    cpu.zingers = gpu.zingers = outlier_options{.threshold = 0.5, .size = size, .views = views};
    projection_stack a = raw, b = raw;
    const preprocess_report ra = preprocess(a, cpu), rb = preprocess(b, gpu);
    EXPECT_EQ(ra.zingers_replaced, rb.zingers_replaced) << s.name << " " << size << "x" << views;
    EXPECT_EQ(a.data, b.data) << s.name << " " << size << "x" << views;
    if (s.views * s.rows * s.cols >= 37 * 4) EXPECT_GT(rb.zingers_replaced, 0);
  }
}

// Phase retrieval: the same padding, filter table and logarithm; cuFFT and FFTW round
// differently (~1e-7 of a view's norm per transform), well inside 1e-5 of the peak, while a
// 10 % different delta/beta moves the result by more than 1e-3 of it (the negative control).
TEST_P(PreprocessGpu, PhaseRetrievalEqualsTheCpuWithinTheTolerance) {
  const shape& s = GetParam();
  const projection_stack raw = scan_of(s);
  const auto run = [&](backend where, double delta_beta) {
    preprocess_options o = on(where, s);
    o.phase = phase_options{
        .energy_kev = 20, .distance_mm = 200, .pixel_size_mm = 0.01, .delta_beta = delta_beta};
    o.phase->pixel_u_mm = o.phase->pixel_v_mm = 0.01;  // as set_detector gives them
    projection_stack p = raw;
    (void)preprocess(p, o);
    return p;
  };
  const projection_stack a = run(backend::cpu, 300), b = run(backend::cuda, 300);
  const double peak = peak_of(a);
  double worst = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a.data[i]) - b.data[i]));
  EXPECT_LE(worst, 1e-5 * peak) << s.name;
  const projection_stack other = run(backend::cuda, 330);
  double moved = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    moved = std::max(moved, std::abs(static_cast<double>(other.data[i]) - b.data[i]));
  if (s.rows * s.cols > 1) EXPECT_GT(moved, 1e-3 * peak) << s.name;
}

/// `p` with stripes: +0.3 on column cols / 3, x 1.2 on column cols / 2 (partial: the first half
/// of the views) and a dead column (0.05 throughout) at 2 cols / 3, where the detector has
/// room for them.
projection_stack with_stripes(projection_stack p) {
  if (p.cols < 9) return p;
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = 0; r < p.rows; ++r) {
      p.at(v, r, p.cols / 3) += 0.3f;
      if (2 * v < p.views) p.at(v, r, p.cols / 2) *= 1.2f;
      p.at(v, r, 2 * p.cols / 3) = 0.05f;
    }
  return p;
}

// Vo's methods: the same column sort (ties in view order), rank medians, column statistics
// (double sums in the same order) and host decisions, and the dead columns' interpolation with
// one fused multiply-add on both backends: sorting, large, dead and all give the CPU's values
// exactly. Filtering goes through cuFFT instead of FFTW: its low-pass values differ by ~1e-7,
// and where two of a column's values lie closer than that their ranks swap, moving those two
// views by the gap between neighbouring rank medians (~1e-4 here) instead: at most 1 % of the
// values may differ by more than 1e-5 of the peak, none by more than 1e-2 of it. Windows of 5
// and 9 columns, the GPU's widest (101, wider than the detector: reflected), and 103 (run on
// the CPU). Controls: the GPU's result differs from the input by more than 1e-3 of the peak,
// and dead and all repair the dead column (constant 0.05): its mean distance from its
// neighbours' mean falls below 0.3 of the input's (measured on the CPU: 0 to 0.28; the large
// stripe step alone leaves up to 0.7).
TEST_P(PreprocessGpu, StripesEqualTheCpu) {
  const shape& s = GetParam();
  const projection_stack raw = with_stripes(scan_of(s, false));
  const double peak = peak_of(raw);
  const auto dead_gap = [&](const projection_stack& p) {
    const std::int64_t c = 2 * s.cols / 3;
    double sum = 0;
    for (std::int64_t v = 0; v < s.views; ++v)
      for (std::int64_t r = 0; r < s.rows; ++r)
        sum += std::abs(p.at(v, r, c) - 0.5 * (p.at(v, r, c - 1) + p.at(v, r, c + 1)));
    return sum;
  };
  using enum stripe_method;
  for (const stripe_method m : {sorting, filtering, large, dead, all})
    for (const auto [size, la_size] : {std::pair{5, 9}, {101, 101}, {103, 21}}) {
      const std::string what = s.name + " " + to_string(m) + " " + std::to_string(size);
      preprocess_options cpu = on(backend::cpu, s), gpu = on(backend::cuda, s);
      cpu.rings = gpu.rings =
          stripe_options{.method = m, .size = size, .la_size = la_size, .snr = 1.5};
      projection_stack a = raw, b = raw;
      (void)preprocess(a, cpu);
      (void)preprocess(b, gpu);
      if (m != filtering) {
        EXPECT_EQ(a.data, b.data) << what;
      } else {
        double worst = 0;
        std::int64_t off = 0;
        for (std::size_t i = 0; i < a.data.size(); ++i) {
          const double d = std::abs(static_cast<double>(a.data[i]) - b.data[i]);
          worst = std::max(worst, d);
          off += d > 1e-5 * peak;
        }
        EXPECT_LE(worst, 1e-2 * peak) << what;
        EXPECT_LE(off, a.size() / 100) << what;
      }
      if (s.cols < 9 || s.views < 5) continue;
      double moved = 0;
      for (std::size_t i = 0; i < b.data.size(); ++i)
        moved = std::max(moved, std::abs(static_cast<double>(raw.data[i]) - b.data[i]));
      EXPECT_GT(moved, 1e-3 * peak) << what;
      if (m == dead || m == all) EXPECT_LT(dead_gap(b), 0.3 * dead_gap(raw)) << what;
    }
}

std::vector<shape> shapes() {
  return {{"odd", 11, 13, 17},
          {"one_row", 9, 1, 31},
          {"one_col", 9, 21, 1},
          {"one_view", 1, 15, 19},
          {"one_pixel", 3, 1, 1},
          // 2 views' worth of input and output per batch: batches of one view with halos;
          // stripe removal: below one row's sinogram buffers, batches of one row.
          {"batches", 12, 9, 23, 2 * 2 * 9 * 23 * 4 + 6 * 9 * 23 * 4},
          {"many_views", 181, 3, 29},
          // Stripe removal: about 3 rows of 40 x 97 per batch (fewer with the low-pass
          // transforms): batches smaller than the buffers, the last one partial.
          {"partial_batches", 40, 7, 97, 3 * (40 * 97 * 48 + 97 * 32)},
          // More than 500 of the sort's segments (columns) in one batch.
          {"wide", 16, 9, 71}};
}

INSTANTIATE_TEST_SUITE_P(Shapes, PreprocessGpu, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<shape>& i) { return i.param.name; });

class PreprocessGpuErrors : public ctforge::testing::gpu_test {};

// The GPU refuses as the CPU does: a non-finite input is a usage error naming its place.
TEST_F(PreprocessGpuErrors, SameErrorsAsTheCpu) {
  const shape s{"errors", 4, 5, 6};
  projection_stack p = scan_of(s);
  p.at(2, 3, 4) = std::numeric_limits<float>::quiet_NaN();
  for (const int step : {0, 1, 2}) {
    preprocess_options o = on(backend::cuda, s);
    if (step == 1) {
      o.phase = phase_options{
          .energy_kev = 20, .distance_mm = 200, .pixel_size_mm = 0.01, .delta_beta = 300};
      o.phase->pixel_u_mm = o.phase->pixel_v_mm = 0.01;
    } else if (step == 2) {
      o.rings = stripe_options{.method = stripe_method::all};
    } else {
      o.zingers = outlier_options{.threshold = 0.5};
    }
    ctforge::testing::expect_usage_error_naming([&] { (void)preprocess(p, o); },
                                                "view 2, row 3, col 4");
  }
}

}  // namespace

#else

TEST(PreprocessGpu, Skipped) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
