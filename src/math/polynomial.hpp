// Polynomials of one value, shared by the CPU loops and any CUDA kernel: the beam-hardening
// correction (include/ctforge/preprocess.hpp, correct_beam_hardening) maps each line integral
// p to sum_k c_k p^k.
#pragma once

#include <cstdint>

#include "math/hd.hpp"

namespace ctforge::kernels {

/// sum_{k=0}^{n-1} c[k] x^k by Horner's rule, in double (c in increasing order of power, n >= 1).
/// c[0] = 0 is not added, so that c = {0, 1} returns x itself (-0 included).
CTFORGE_HD double polynomial(const double* c, std::int64_t n, double x) {
  if (n == 1) return c[0];
  double y = c[n - 1];
  for (std::int64_t k = n - 2; k >= 1; --k) y = y * x + c[k];
  y *= x;
  return c[0] == 0 ? y : y + c[0];
}

/// Whether y is finite and within a float's range (the beam-hardening result can be stored).
CTFORGE_HD bool fits_float(double y) {
  constexpr double float_max = 3.4028234663852886e38;  // FLT_MAX
  return y >= -float_max && y <= float_max;            // false for NaN and +-Inf
}

}  // namespace ctforge::kernels
