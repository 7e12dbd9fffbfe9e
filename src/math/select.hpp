// Window medians of the zinger step (include/ctforge/preprocess.hpp, remove_outliers), shared
// by the CPU loop and the CUDA kernel: the border rule, the rank selection and the flag test.
#pragma once

#include <cstdint>

#include "math/hd.hpp"

namespace ctforge::kernels {

/// Index i of a line of n values under scipy.ndimage's "reflect" border (the edge value
/// repeated, mirrored: d c b a | a b c d | d c b a); n >= 1.
CTFORGE_HD std::int64_t reflect_index(std::int64_t i, std::int64_t n) {
  const std::int64_t period = 2 * n;
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - 1 - i;
}

/// The value of rank k (0-based) of a[0 .. n), reordering a: Hoare's selection with the
/// middle element as pivot. The value is that of std::nth_element (ranks are of values).
CTFORGE_HD float select_rank(float* a, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const float pivot = a[lo + (hi - lo) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (a[i] < pivot) ++i;
      while (pivot < a[j]) --j;
      if (i <= j) {
        const float t = a[i];
        a[i] = a[j];
        a[j] = t;
        ++i;
        --j;
      }
    }
    if (k <= j)
      hi = j;
    else if (k >= i)
      lo = i;
    else
      return a[k];
  }
  return a[k];
}

/// Whether x is a zinger above the median `med` of its window: x - med >= threshold, in double
/// (tomopy's remove_outlier rule).
CTFORGE_HD bool is_zinger(float x, float med, double threshold) {
  return static_cast<double>(x) - static_cast<double>(med) >= threshold;
}

}  // namespace ctforge::kernels
