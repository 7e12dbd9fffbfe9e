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

/// usage_error "<step>: non-finite value (nan) at view v, row r, col c" for the first NaN / Inf
/// of the n values of views of rows x cols at `data`.
inline void require_finite(const float* data, std::int64_t n, std::int64_t rows, std::int64_t cols,
                           const char* step, int threads) {
  const std::int64_t i = first_non_finite(data, n, threads);
  if (i < 0) return;
  const std::int64_t plane = rows * cols;
  throw usage_error(fmt::format("{}: non-finite value ({}) at view {}, row {}, col {}", step,
                                data[i], i / plane, i % plane / cols, i % cols));
}

/// The same for projections in place, and for read-only ones.
inline void require_finite(const projections_ref& p, const char* step, int threads) {
  require_finite(p.data.data(), static_cast<std::int64_t>(p.data.size()), p.rows, p.cols, step,
                 threads);
}
inline void require_finite(const projection_view& p, const char* step, int threads) {
  require_finite(p.data.data(), static_cast<std::int64_t>(p.data.size()), p.rows, p.cols, step,
                 threads);
}

}  // namespace ctforge::detail
