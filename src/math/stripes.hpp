// Per-value arithmetic of the Fourier-wavelet and Titarenko stripe removals
// (src/preprocess/stripes_fw.cpp, stripes_ti.cpp), shareable with a CUDA kernel.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/hd.hpp"

namespace ctforge::kernels {

/// Münch et al.'s damping of the Fourier coefficient at frequency y (in samples):
/// 1 - exp(-y^2 / (2 sigma^2)).
CTFORGE_HD double munch_damping(double y, double sigma) {
  return -std::expm1(-y * y / (2.0 * sigma * sigma));
}

/// The real gain applied to frequency k (0 <= k <= m / 2) of m samples, with the damping sampled
/// on the centred grid (2 j - m + 1) / 2, j = 0 ... m - 1, of tomopy's implementation: the
/// frequencies themselves for odd m; for even m the grid is offset by half a sample, so that
/// frequency k gets g(k + 1/2) and -k gets g(k - 1/2), and keeping the real part of the inverse
/// transform of a real signal applies their mean (the last, self-paired frequency m / 2 gets
/// g(m / 2 - 1/2)).
CTFORGE_HD double fw_gain(std::int64_t k, std::int64_t m, double sigma) {
  const auto y = static_cast<double>(k);
  if (m % 2 == 1) return munch_damping(y, sigma);
  if (2 * k == m) return munch_damping(y - 0.5, sigma);
  return 0.5 * (munch_damping(y + 0.5, sigma) + munch_damping(y - 0.5, sigma));
}

/// Titarenko's combination of the first- and second-order corrections d1, d2 of one value:
/// sqrt(d1 d2 + offset), offset = alpha |min(d1 d2)| over the sinogram; negative when the
/// argument is (the caller reports it).
CTFORGE_HD double titarenko_combine(float d1, float d2, double offset) {
  const double p = static_cast<double>(d1 * d2) + offset;
  return p >= 0.0 ? std::sqrt(p) : -1.0;
}

}  // namespace ctforge::kernels
