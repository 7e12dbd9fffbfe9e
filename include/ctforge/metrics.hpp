// Image quality figures used by tests, the demo and benchmarks.
#pragma once

#include <cstddef>
#include <span>

namespace ctforge {

/// Mean absolute error between two equally sized arrays.
double mean_abs_error(std::span<const float> a, std::span<const float> b);
/// Root mean squared error.
double rms_error(std::span<const float> a, std::span<const float> b);
/// Peak signal-to-noise ratio in dB: 20 log10(peak / rmse).
double psnr_db(std::span<const float> a, std::span<const float> b, double peak);
/// Pearson correlation coefficient.
double correlation(std::span<const float> a, std::span<const float> b);

}  // namespace ctforge
