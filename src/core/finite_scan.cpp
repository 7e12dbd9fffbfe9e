#include "core/finite_scan.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"

namespace ctforge::detail {

std::int64_t first_non_finite(const float* data, std::int64_t n, int threads) {
  // Exponent bits all ones <=> Inf or NaN; the integer test vectorises (std::isfinite did not).
  constexpr std::int64_t k_chunk = std::int64_t{1} << 20;
  const std::int64_t chunks = (n + k_chunk - 1) / k_chunk;
  std::int64_t bad_chunks = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad_chunks) \
    num_threads(resolve_threads(threads)) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t i0 = c * k_chunk, i1 = std::min(n, i0 + k_chunk);
    std::uint32_t any = 0;
    for (std::int64_t i = i0; i < i1; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, data + i, sizeof bits);
      any |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    bad_chunks += any;
  }
  if (bad_chunks == 0) return -1;
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(data[i])) return i;
  return -1;
}

}  // namespace ctforge::detail

namespace ctforge::detail {

std::string first_non_finite_voxel(const float* data, const volume_geometry& vg, int threads) {
  const std::int64_t i = first_non_finite(data, vg.voxel_count(), threads);
  if (i < 0) return {};
  const std::int64_t plane = vg.nx * vg.ny;
  return fmt::format("({}) at voxel (x {}, y {}, z {})", data[i], i % vg.nx, (i % plane) / vg.nx,
                     i / plane);
}

void refuse_non_finite(const float* data, std::int64_t d0, std::int64_t d1, std::int64_t d2,
                       const std::string& path, const char* axes) {
  const std::int64_t i = first_non_finite(data, d0 * d1 * d2);
  if (i < 0) return;
  CTFORGE_FAIL(
      fmt::format("{}: refusing to write a non-finite value ({}) at [{}][{}][{}] ({}); "
                  "the result overflowed or its input holds NaN / Inf",
                  path, data[i], i / (d1 * d2), (i / d2) % d1, i % d2, axes));
}

void refuse_non_finite_input(const float* data, std::int64_t d0, std::int64_t d1, std::int64_t d2,
                             const std::string& path, const std::string& what, const char* axes) {
  const std::int64_t i = first_non_finite(data, d0 * d1 * d2);
  if (i < 0) return;
  CTFORGE_FAIL(fmt::format("{}: {} holds a non-finite value ({}) at index [{}][{}][{}] ({})", path,
                           what, data[i], i / (d1 * d2), (i / d2) % d1, i % d2, axes));
}

}  // namespace ctforge::detail
