// Checks and thread counts shared by the preprocessing steps.
#pragma once

#include <fmt/format.h>
#include <omp.h>

#include <cstdint>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"

namespace ctforge::detail {

/// OpenMP threads for `threads` (0: all cores), after require_thread_count's check.
inline int thread_count(int threads) {
  require_thread_count(threads, "threads");
  return threads > 0 ? threads : omp_get_max_threads();
}

/// usage_error "<step>: non-finite value (nan) at view v, row r, col c" for the first NaN / Inf.
inline void require_finite(const projections_ref& p, const char* step, int threads) {
  const std::int64_t i =
      first_non_finite(p.data.data(), static_cast<std::int64_t>(p.data.size()), threads);
  if (i < 0) return;
  const std::int64_t plane = p.rows * p.cols;
  throw usage_error(fmt::format("{}: non-finite value ({}) at view {}, row {}, col {}", step,
                                p.data[static_cast<std::size_t>(i)], i / plane, i % plane / p.cols,
                                i % p.cols));
}

}  // namespace ctforge::detail
