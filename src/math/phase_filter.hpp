// Frequency responses of the single-material phase-retrieval filters (include/ctforge/
// preprocess.hpp, phase_method), the padding rule and the grid a view is filtered on, shared by
// the CPU path (src/preprocess/phase.cpp) and the CUDA kernels (src/cuda/preprocess.cu).
// Frequencies in cycles per pixel: f = k / N for the DFT index k in [-N/2, N/2] of a padded size
// N; c_u, c_v = pi lambda R (delta/beta) / pitch^2 along the columns / rows, in pixels^2.
#pragma once

#include <cstdint>
#include <vector>

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

/// Index into the data of padded position i in [0, n_padded): the data occupy [0, n); after
/// them ceil(extra / 2) copies of the last one, then copies of the first one (which lie before
/// the data on the circular FFT grid).
CTFORGE_HD std::int64_t phase_pad_source(std::int64_t i, std::int64_t n, std::int64_t n_padded) {
  if (i < n) return i;
  return i - n < (n_padded - n + 1) / 2 ? n - 1 : 0;
}

/// The padded FFT grid of views of rows x cols and the filter on it: nr x (nc / 2 + 1) values
/// of the real-to-complex spectrum (row-major), each the method's response times 1 / (nr nc)
/// (the inverse transform's normalisation). Made on the host (detail::make_phase_grid).
struct phase_grid {
  std::int64_t rows = 0, cols = 0;  ///< the views
  std::int64_t nr = 0, nc = 0;      ///< the padded size
  std::vector<float> filter;
};

}  // namespace ctforge::kernels
