// Per-element arithmetic of the iterative space's element-wise steps and reductions
// (src/recon/iterative_space.hpp), shared by the CUDA kernels (src/cuda/iterative_space.cu)
// and any host loop (the tests compare the device against a host loop over these functions).
#pragma once

#include <cmath>
#include <limits>

#include "math/hd.hpp"

namespace ctforge::kernels {

/// a x + b y
CTFORGE_HD float ew_lincomb(float a, float x, float b, float y) {
  return a * x + b * y;
}

/// 1 / x where x > floor, else 0 (the SIRT / SART weights).
CTFORGE_HD float ew_invert_above(float x, float floor) {
  return x > floor ? 1.0f / x : 0.0f;
}

/// w (p - q)
CTFORGE_HD float ew_weighted_residual(float w, float p, float q) {
  return w * (p - q);
}

/// x + lambda c u, clamped at 0 when nonnegative.
CTFORGE_HD float ew_weighted_update(float x, float lambda, float c, float u, bool nonnegative) {
  const float v = x + lambda * c * u;
  return nonnegative ? max_f(v, 0.0f) : v;
}

/// max(x, 0)
CTFORGE_HD float ew_clamp_nonnegative(float x) {
  return max_f(x, 0.0f);
}

/// p / q where q > eps, else 0 (the OSEM ratio).
CTFORGE_HD float ew_ratio(float p, float q, float eps) {
  return q > eps ? p / q : 0.0f;
}

/// x u / s where s > eps, else x (the OSEM update).
CTFORGE_HD float ew_multiply_ratio(float x, float u, float s, float eps) {
  return s > eps ? x * u / s : x;
}

/// One term of the dot product, in double.
CTFORGE_HD double dot_term(float a, float b) {
  return static_cast<double>(a) * static_cast<double>(b);
}

/// One term of the Poisson log-likelihood sum p log q - q (double): p log q taken as 0 where
/// p == 0; where q <= 0 the term is 0 when p == 0 and -inf when p > 0.
CTFORGE_HD double poisson_term(float p, float q) {
  const double pd = p, qd = q;
  if (qd > 0.0) return (pd == 0.0 ? 0.0 : pd * log(qd)) - qd;
  return pd > 0.0 ? -std::numeric_limits<double>::infinity() : 0.0;
}

}  // namespace ctforge::kernels
