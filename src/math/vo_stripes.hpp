// Per-value arithmetic of Vo's stripe (ring) removal methods (include/ctforge/preprocess.hpp,
// remove_stripes: sorting, filtering, large, dead, all), shared by the CPU loop
// (src/preprocess/stripes.cpp) and the CUDA kernels (src/cuda/stripes.cu). Each function
// reads one column or one rank line of a sinogram through a base pointer and a stride, so
// that the CPU's [view][col] sinogram and the GPU's batched layouts use the same code.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/hd.hpp"
#include "math/select.hpp"

namespace ctforge::kernels {

/// The median of the `size` values base[reflect_index(c + j, cols) * stride], j in
/// [-size/2, size/2] (size odd): column c of one rank of the sorted sinogram, median-filtered
/// across the detector columns. `scratch` holds `size` floats. The value of rank size / 2, as
/// std::nth_element and scipy.ndimage.median_filter pick it.
CTFORGE_HD float column_window_median(const float* base, std::int64_t stride, std::int64_t c,
                                      std::int64_t cols, int size, float* scratch) {
  const int h = size / 2;
  for (int j = -h; j <= h; ++j) scratch[j + h] = base[reflect_index(c + j, cols) * stride];
  return select_rank(scratch, size, h);
}

/// Large stripes (Vo's algorithm 5): the ratio of a column's sorted values to their smoothed
/// counterparts, summed over the ranks [drop, views - drop) in double; 1 when no rank is left
/// or the smoothed sum is 0. sorted[k * stride], smooth[k * stride]: rank k of the column.
CTFORGE_HD double sorted_column_ratio(const float* sorted, const float* smooth, std::int64_t stride,
                                      std::int64_t views, std::int64_t drop) {
  double s1 = 0, s2 = 0;
  for (std::int64_t k = drop; k < views - drop; ++k) {
    s1 += sorted[k * stride];
    s2 += smooth[k * stride];
  }
  return views - 2 * drop > 0 && s2 != 0 ? s1 / s2 : 1.0;
}

/// Views in the running mean of the dead-stripe detection (algotom's smooth_strength).
inline constexpr std::int64_t k_dead_smooth = 10;

/// Dead stripes (Vo's algorithm 6): sum over the views of |x(v) - the mean of the 10 values
/// x(v - 5 .. v + 4)| (reflect border), in double; col[v * stride] is view v of the column.
CTFORGE_HD double column_roughness(const float* col, std::int64_t stride, std::int64_t views) {
  double diff = 0;
  for (std::int64_t v = 0; v < views; ++v) {
    double mean = 0;
    for (std::int64_t j = -k_dead_smooth / 2; j < k_dead_smooth - k_dead_smooth / 2; ++j)
      mean += col[reflect_index(v + j, views) * stride];
    const double d = col[v * stride] - mean / static_cast<double>(k_dead_smooth);
    diff += d < 0 ? -d : d;
  }
  return diff;
}

/// Large stripes with normalisation: a value divided by its column's ratio.
CTFORGE_HD float divide_by_ratio(float x, double ratio) {
  return static_cast<float>(x / ratio);
}

/// Dead columns: the value at fraction t of the way from the good column on the left (a) to
/// the good column on the right (b): t b + (1 - t) a with one fused multiply-add on both
/// backends (the host compiler may contract a * b + c or not, nvcc does), so that they agree
/// bit for bit.
CTFORGE_HD float interpolate_between(float a, float b, double t) {
  const double left = (1 - t) * static_cast<double>(a);
#if defined(__CUDA_ARCH__)
  return static_cast<float>(fma(t, static_cast<double>(b), left));
#else
  return static_cast<float>(std::fma(t, static_cast<double>(b), left));
#endif
}

/// Filtering (Vo's algorithm 2): the low-pass part along the views is taken over the column
/// padded by `pad` values each side, mirrored without repeating the edge (numpy's "reflect"):
/// the view that padded sample n holds. pad < views.
CTFORGE_HD std::int64_t lowpass_source(std::int64_t n, std::int64_t pad, std::int64_t views) {
  std::int64_t i = n - pad;
  if (i < 0) i = -i;
  if (i >= views) i = 2 * (views - 1) - i;
  return i;
}

/// (-1)^n: the modulation that centres the zero frequency of the padded column.
CTFORGE_HD float alternating_sign(std::int64_t n) {
  return n % 2 == 0 ? 1.0f : -1.0f;
}

/// The Gaussian window of width sigma (Fourier samples) centred on the zero frequency of m
/// samples (after the alternating modulation): sample n. Host only: the GPU path uploads the
/// table the host computes.
inline float lowpass_window(std::int64_t n, std::int64_t m, double sigma) {
  const double t = (static_cast<double>(n) - 0.5 * static_cast<double>(m - 1)) / sigma;
  return static_cast<float>(std::exp(-0.5 * t * t));
}

/// The padding of the filtering method: min(150, 10 % of the views).
CTFORGE_HD std::int64_t lowpass_pad(std::int64_t views) {
  const auto p = static_cast<std::int64_t>(0.1 * static_cast<double>(views));
  return p < 150 ? p : 150;
}

}  // namespace ctforge::kernels
