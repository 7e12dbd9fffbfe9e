// Small dense linear least squares in double, for the beam-hardening fits
// (src/preprocess/beam_hardening.cpp, src/recon/water_precorrection.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace ctforge::detail {

/// The x (n values) minimising |A x - b|_2, A m x n stored column by column (a[j * m + i] is
/// row i, column j), m >= n >= 1, by Householder QR on the columns scaled to unit norm (so that
/// columns of very different sizes, such as powers of a value, keep their precision). Throws
/// ctforge::error when A's columns are (numerically) linearly dependent.
std::vector<double> least_squares(std::vector<double> a, std::vector<double> b, std::int64_t m,
                                  std::int64_t n);

}  // namespace ctforge::detail
