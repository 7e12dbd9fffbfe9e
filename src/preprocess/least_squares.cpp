// Householder QR least squares: src/preprocess/least_squares.hpp.
#include "preprocess/least_squares.hpp"

#include <fmt/format.h>

#include <cmath>

#include "ctforge/error.hpp"

namespace ctforge::detail {

namespace {

/// Scales each column of `a` to unit norm; returns the factors (x_true = x_scaled / factor).
std::vector<double> normalise_columns(std::vector<double>& a, std::int64_t m, std::int64_t n) {
  std::vector<double> scale(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) {
    double* col = a.data() + j * m;
    double s = 0;
    for (std::int64_t i = 0; i < m; ++i) s += col[i] * col[i];
    s = std::sqrt(s);
    if (!(s > 0) || !std::isfinite(s))
      throw error(fmt::format("least squares: column {} is zero or not finite", j));
    for (std::int64_t i = 0; i < m; ++i) col[i] /= s;
    scale[static_cast<std::size_t>(j)] = s;
  }
  return scale;
}

/// Applies the reflection making column j of rows j.. a multiple of e_j to the columns j.. and
/// to b; returns R's diagonal entry.
double reflect_column(std::vector<double>& a, std::vector<double>& b, std::int64_t m,
                      std::int64_t n, std::int64_t j) {
  double* col = a.data() + j * m;
  double norm = 0;
  for (std::int64_t i = j; i < m; ++i) norm += col[i] * col[i];
  norm = std::sqrt(norm);
  const double alpha = col[j] > 0 ? -norm : norm;
  // v = col - alpha e_j over rows j..; H = I - 2 v v^T / (v^T v).
  std::vector<double> v(col + j, col + m);
  v[0] -= alpha;
  double vv = 0;
  for (double x : v) vv += x * x;
  if (vv == 0) return alpha;
  const auto apply = [&](double* y) {
    double dot = 0;
    for (std::int64_t i = j; i < m; ++i) dot += v[static_cast<std::size_t>(i - j)] * y[i];
    const double f = 2 * dot / vv;
    for (std::int64_t i = j; i < m; ++i) y[i] -= f * v[static_cast<std::size_t>(i - j)];
  };
  for (std::int64_t k = j; k < n; ++k) apply(a.data() + k * m);
  apply(b.data());
  return alpha;
}

}  // namespace

std::vector<double> least_squares(std::vector<double> a, std::vector<double> b, std::int64_t m,
                                  std::int64_t n) {
  CTFORGE_EXPECTS(
      n >= 1 && m >= n && static_cast<std::int64_t>(a.size()) == m * n &&
          static_cast<std::int64_t>(b.size()) == m,
      fmt::format("least squares: {} x {} system with {} and {} values", m, n, a.size(), b.size()));
  const std::vector<double> scale = normalise_columns(a, m, n);
  std::vector<double> diag(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j)
    diag[static_cast<std::size_t>(j)] = reflect_column(a, b, m, n, j);
  // Back substitution on R (diagonal `diag`, above it a[k * m + j]); unit columns bound |R|.
  std::vector<double> x(static_cast<std::size_t>(n));
  for (std::int64_t j = n - 1; j >= 0; --j) {
    const double r = diag[static_cast<std::size_t>(j)];
    if (!(std::abs(r) > 1e-12))
      throw error("least squares: the columns are linearly dependent (rank-deficient fit)");
    double s = b[static_cast<std::size_t>(j)];
    for (std::int64_t k = j + 1; k < n; ++k)
      s -= a[static_cast<std::size_t>(k * m + j)] * x[static_cast<std::size_t>(k)];
    x[static_cast<std::size_t>(j)] = s / r;
  }
  for (std::int64_t j = 0; j < n; ++j)
    x[static_cast<std::size_t>(j)] /= scale[static_cast<std::size_t>(j)];
  return x;
}

}  // namespace ctforge::detail
