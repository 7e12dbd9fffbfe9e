// Scan for non-finite floats (NaN, +-Inf): a parallel, vectorised pass for the common all-finite
// case, then a search for the first bad element only when there is one. Shared by the
// reconstruction input checks and the file readers.
#pragma once

#include <cstdint>
#include <string>

#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// Index of the first non-finite value of data[0, n), or -1 when all are finite. OpenMP over
/// chunks of 1 Mi floats (threads = 0: all cores); memory bound (about 10 GB/s per thread here).
std::int64_t first_non_finite(const float* data, std::int64_t n, int threads = 0);

/// The first non-finite voxel of a volume on grid `vg` (vg.voxel_count() floats, [z][y][x]) as
/// "(<value>) at voxel (x i, y j, z k)", or "" when every voxel is finite: for the messages of
/// the checks that refuse such a volume. first_non_finite's scan (threads = 0: all cores).
std::string first_non_finite_voxel(const float* data, const volume_geometry& vg,
                                   int threads = 0);

/// Writers call this before writing a result: throws ctforge::error "<path>: refusing to write
/// a non-finite value (inf) at [a][b][c] (<axes>)" for the first NaN / Inf of the
/// d0 x d1 x d2 array `data`, so that no output holds one (a phantom density of 1e38 overflows
/// its line integrals to +Inf). `axes` names the indices ("view, row, col").
void refuse_non_finite(const float* data, std::int64_t d0, std::int64_t d1, std::int64_t d2,
                       const std::string& path, const char* axes);

/// Readers call this on what they read, so that every volume format refuses NaN / Inf as the
/// HDF5 reader does: throws ctforge::error "<path>: <what> holds a non-finite value (nan) at
/// index [a][b][c] (<axes>)" for the first NaN / Inf of the d0 x d1 x d2 array `data`.
void refuse_non_finite_input(const float* data, std::int64_t d0, std::int64_t d1, std::int64_t d2,
                             const std::string& path, const std::string& what, const char* axes);

}  // namespace ctforge::detail
