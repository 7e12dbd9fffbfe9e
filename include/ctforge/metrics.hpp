// Image quality figures used by tests, the demo and benchmarks.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "ctforge/volume.hpp"

namespace ctforge {

/// Mean absolute error between two equally sized arrays.
double mean_abs_error(std::span<const float> a, std::span<const float> b);
/// Root mean squared error.
double rms_error(std::span<const float> a, std::span<const float> b);
/// Peak signal-to-noise ratio in dB: 20 log10(peak / rmse).
double psnr_db(std::span<const float> a, std::span<const float> b, double peak);
/// Pearson correlation coefficient.
double correlation(std::span<const float> a, std::span<const float> b);

/// The values of `a` and `b` (volumes on one grid) at the voxels whose centres lie within
/// `radius_mm` of the rotation axis (the z axis), in memory order: the region where a scan has
/// complete data, for the figures above.
std::pair<std::vector<float>, std::vector<float>> values_within_radius(const volume& a,
                                                                       const volume& b,
                                                                       double radius_mm);

}  // namespace ctforge
