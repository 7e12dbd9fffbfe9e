// Frequency responses of the single-material phase-retrieval filters (include/ctforge/
// preprocess.hpp, phase_method), shared by the CPU path and, later, a CUDA kernel.
// Frequencies in cycles per pixel: f = k / N for the DFT index k in [-N/2, N/2] of a padded size
// N; c_u, c_v = pi lambda R (delta/beta) / pitch^2 along the columns / rows, in pixels^2.
#pragma once

#include "math/hd.hpp"

namespace ctforge::kernels {

/// sin(pi x).
CTFORGE_HD float sin_pi_f(float x) {
#if defined(__CUDA_ARCH__)
  return sinpif(x);
#else
  return std::sin(3.14159265358979f * x);
#endif
}

/// Paganin et al. 2002: 1 / (1 + pi lambda R (delta/beta) |f|^2) with f in cycles per length,
/// i.e. 1 / (1 + c_u f_u^2 + c_v f_v^2) in pixel units.
CTFORGE_HD float paganin_response(float cu, float cv, float fu, float fv) {
  return 1.0f / (1.0f + cu * fu * fu + cv * fv * fv);
}

/// Paganin et al. 2020, the generalised method: the denominator 1 - (2 delta R / (mu W^2))
/// (cos(W k_x) + cos(W k_y) - 2), k = 2 pi f, mu = 4 pi beta / lambda; with 1 - cos(2 pi f) =
/// 2 sin^2(pi f) (no cancellation at low f) it is 1 + (c_u sin^2(pi f_u) + c_v sin^2(pi f_v)) /
/// pi^2, equal to paganin_response's to second order in f.
CTFORGE_HD float generalized_paganin_response(float cu, float cv, float fu, float fv) {
  const float su = sin_pi_f(fu), sv = sin_pi_f(fv);
  constexpr float inv_pi2 = 0.101321183642338f;  // 1 / pi^2
  return 1.0f / (1.0f + (cu * su * su + cv * sv * sv) * inv_pi2);
}

}  // namespace ctforge::kernels
