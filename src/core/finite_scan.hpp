// Scan for non-finite floats (NaN, +-Inf): a parallel, vectorised pass for the common all-finite
// case, then a search for the first bad element only when there is one. Shared by the
// reconstruction input checks and the file readers.
#pragma once

#include <cstdint>

namespace ctforge::detail {

/// Index of the first non-finite value of data[0, n), or -1 when all are finite. OpenMP over
/// chunks of 1 Mi floats (threads = 0: all cores); memory bound (about 10 GB/s per thread here).
std::int64_t first_non_finite(const float* data, std::int64_t n, int threads = 0);

}  // namespace ctforge::detail
