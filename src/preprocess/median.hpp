// Medians of small windows with scipy.ndimage's "reflect" border (the edge value repeated,
// mirrored: d c b a | a b c d | d c b a), as the preprocessing steps use them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "math/select.hpp"

namespace ctforge::detail {

using kernels::reflect_index;

/// The median of `buf` (odd length), reordering it: the value of rank size / 2, as
/// scipy.ndimage.median_filter picks it.
inline float median_of(std::span<float> buf) {
  const auto mid = buf.begin() + static_cast<std::ptrdiff_t>(buf.size() / 2);
  std::nth_element(buf.begin(), mid, buf.end());
  return *mid;
}

/// out[i] = the median of line[i - size/2 .. i + size/2] (size odd; reflect border) for every
/// i of the n values; `scratch` holds at least size floats.
inline void median_filter_line(const float* line, std::int64_t n, int size, float* out,
                               float* scratch) {
  const std::int64_t h = size / 2;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = -h; j <= h; ++j) scratch[j + h] = line[reflect_index(i + j, n)];
    out[i] = median_of(std::span<float>(scratch, static_cast<std::size_t>(size)));
  }
}

}  // namespace ctforge::detail
