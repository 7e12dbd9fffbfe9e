// Titarenko's regularisation-based stripe removal (stripe_method::titarenko):
// include/ctforge/preprocess.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "math/stripes.hpp"
#include "preprocess/stripe_methods.hpp"

namespace ctforge::detail {

namespace {

/// The difference operators of the penalty (first and second differences).
const std::vector<double> k_first = {1.0, -1.0};
const std::vector<double> k_second = {-1.0, 2.0, -1.0};

/// Solves (D^T D + reg I) x = b in place of b, D the (n - taps + 1) x n matrix with
/// D[i][i + k] = h[k] (no rows when n < taps: x = b / reg). The matrix is symmetric positive
/// definite and banded (half-bandwidth taps - 1): Cholesky in band storage.
void solve_regularised(const std::vector<double>& h, double reg, std::vector<double>& b) {
  const auto n = static_cast<std::int64_t>(b.size());
  const auto taps = static_cast<std::int64_t>(h.size()), bw = taps - 1;
  // a[i * (bw + 1) + k] = A[i][i - k], k = 0 ... bw
  std::vector<double> a(static_cast<std::size_t>(n * (bw + 1)), 0.0);
  auto at = [&](std::int64_t i, std::int64_t k) -> double& {
    return a[static_cast<std::size_t>(i * (bw + 1) + k)];
  };
  for (std::int64_t i = 0; i < n; ++i) at(i, 0) = reg;
  for (std::int64_t row = 0; row + taps <= n; ++row)  // D^T D = sum over D's rows
    for (std::int64_t p = 0; p < taps; ++p)
      for (std::int64_t q = 0; q <= p; ++q)
        at(row + p, p - q) += h[static_cast<std::size_t>(p)] * h[static_cast<std::size_t>(q)];
  for (std::int64_t i = 0; i < n; ++i) {  // A = L L^T, L over A's lower band
    for (std::int64_t k = std::min(bw, i); k >= 1; --k) {
      double s = at(i, k);  // L[i][i - k]
      for (std::int64_t m = k + 1; m <= std::min(bw, i); ++m) s -= at(i, m) * at(i - k, m - k);
      at(i, k) = s / at(i - k, 0);
    }
    double s = at(i, 0);
    for (std::int64_t m = 1; m <= std::min(bw, i); ++m) s -= at(i, m) * at(i, m);
    at(i, 0) = std::sqrt(s);
  }
  for (std::int64_t i = 0; i < n; ++i) {  // L y = b
    double s = b[static_cast<std::size_t>(i)];
    for (std::int64_t m = 1; m <= std::min(bw, i); ++m)
      s -= at(i, m) * b[static_cast<std::size_t>(i - m)];
    b[static_cast<std::size_t>(i)] = s / at(i, 0);
  }
  for (std::int64_t i = n - 1; i >= 0; --i) {  // L^T x = y
    double s = b[static_cast<std::size_t>(i)];
    for (std::int64_t m = 1; m <= bw && i + m < n; ++m)
      s -= at(i + m, m) * b[static_cast<std::size_t>(i + m)];
    b[static_cast<std::size_t>(i)] = s / at(i, 0);
  }
}

/// The per-column correction q of views [v0, v1) of the sinogram `s` ([view][col], `cols`
/// columns) with penalty h: the columns' mean profile m moves to reg (D^T D + reg I)^-1 m, the
/// Tikhonov solution, reg = 1 / (2 x the range of the views' sums); q = 0 when that range is 0.
std::vector<double> column_correction(const std::vector<float>& s, std::int64_t cols,
                                      std::int64_t v0, std::int64_t v1,
                                      const std::vector<double>& h) {
  std::vector<double> mean(static_cast<std::size_t>(cols), 0.0);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (std::int64_t v = v0; v < v1; ++v) {
    double sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double x = s[static_cast<std::size_t>(v * cols + c)];
      sum += x;
      mean[static_cast<std::size_t>(c)] += x;
    }
    lo = std::min(lo, sum), hi = std::max(hi, sum);
  }
  std::vector<double> q(mean.size(), 0.0);
  if (!(hi > lo)) return q;
  const double reg = 1.0 / (2.0 * (hi - lo));
  for (double& m : mean) m /= static_cast<double>(v1 - v0);
  q = mean;
  solve_regularised(h, reg, q);
  for (std::size_t c = 0; c < q.size(); ++c) q[c] = reg * q[c] - mean[c];
  return q;
}

/// Row r of p: the two corrected sinograms d1, d2, block by block, combined.
void clean_row(projections_ref p, std::int64_t r, const stripe_options& o, std::vector<float>& s,
               std::vector<float>& d1, std::vector<float>& d2) {
  const std::int64_t V = p.views, C = p.cols;
  s.resize(static_cast<std::size_t>(V * C));
  d1.resize(s.size());
  d2.resize(s.size());
  for (std::int64_t v = 0; v < V; ++v)
    std::copy_n(&p.at(v, r, 0), C, &s[static_cast<std::size_t>(v * C)]);
  const std::int64_t blocks = o.nblock > 0 ? o.nblock : 1, step = V / blocks;
  double lowest = std::numeric_limits<double>::infinity();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t v0 = b * step, v1 = b + 1 == blocks ? V : v0 + step;
    const std::vector<double> q1 = column_correction(s, C, v0, v1, k_first);
    const std::vector<double> q2 = column_correction(s, C, v0, v1, k_second);
    for (std::int64_t v = v0; v < v1; ++v)
      for (std::int64_t c = 0; c < C; ++c) {
        const auto i = static_cast<std::size_t>(v * C + c);
        d1[i] = static_cast<float>(s[i] + q1[static_cast<std::size_t>(c)]);
        d2[i] = static_cast<float>(s[i] + q2[static_cast<std::size_t>(c)]);
        lowest = std::min(lowest, static_cast<double>(d1[i] * d2[i]));
      }
  }
  const double offset = o.alpha * std::abs(lowest);
  for (std::int64_t v = 0; v < V; ++v)
    for (std::int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<std::size_t>(v * C + c);
      const double x = kernels::titarenko_combine(d1[i], d2[i], offset);
      if (x < 0)
        throw usage_error(fmt::format(
            "stripe alpha: {} leaves d1 d2 + alpha |min(d1 d2)| negative at view {}, row {}, col "
            "{} (alpha >= 1 never does)",
            o.alpha, v, r, c));
      p.at(v, r, c) = static_cast<float>(x);
    }
}

}  // namespace

void remove_stripes_ti(projections_ref p, const stripe_options& o, int threads) {
  CTFORGE_EXPECTS(std::isfinite(o.alpha) && o.alpha >= 0,
                  fmt::format("stripe alpha: must be >= 0 (got {})", o.alpha));
  CTFORGE_EXPECTS(
      o.nblock >= 0 && o.nblock <= std::max<std::int64_t>(p.views, 1),
      fmt::format("stripe nblock: 0 ... the number of views, {} (got {})", p.views, o.nblock));
  if (p.data.empty()) return;
  bool failed = false;
  std::string message;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> s, d1, d2;
#pragma omp for schedule(dynamic)
    for (std::int64_t r = 0; r < p.rows; ++r) {
      try {
        clean_row(p, r, o, s, d1, d2);
      } catch (const usage_error& e) {
#pragma omp critical(ctforge_stripes_ti)
        if (!failed) failed = true, message = e.what();
      }
    }
  }
  if (failed) throw usage_error(message);
}

}  // namespace ctforge::detail
