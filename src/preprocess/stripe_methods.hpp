// The stripe-removal methods in their own files, dispatched from remove_stripes (stripes.cpp);
// options checked there already for the shared fields, here for their own.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ctforge/preprocess.hpp"

namespace ctforge::detail {

/// stripe_method::fourier_wavelet on every row of p (stripes_fw.cpp), `threads` resolved.
void remove_stripes_fw(projections_ref p, const stripe_options& o, int threads);

/// stripe_method::titarenko on every row of p (stripes_ti.cpp), `threads` resolved.
void remove_stripes_ti(projections_ref p, const stripe_options& o, int threads);

/// The options the Vo methods share (size, sigma, la_size, snr, drop_ratio): usage_error naming
/// the option.
void check_stripe_options(const stripe_options& o);

// The decisions of Vo's methods made from per-column statistics of one sinogram, shared by the
// CPU loop (stripes.cpp) and the GPU path (src/recon/preprocess_backend.cpp), whose kernels
// compute the statistics with the arithmetic of math/vo_stripes.hpp.

/// Vo's stripe detection (algotom's detect_stripe): 1 where `fact` stands out of the straight
/// line fitted to its sorted middle half by more than snr / 2 noise levels (the fitted line's
/// rise over all points); all 0 when the noise level is below 1e-5 (noise-free data: nothing
/// can be told apart). Then dilated by one point each side.
std::vector<std::uint8_t> detect_stripes(std::span<const double> fact, double snr);

/// The dead columns of one sinogram and the good columns each is interpolated between.
struct dead_column_plan {
  std::vector<std::int32_t> left, right;  ///< per column; -1: kept
  bool any = false;                       ///< some column is interpolated
};
/// From the roughness of every column (kernels::column_roughness): the columns standing out of
/// the median background over la_size columns (detect_stripes; never the two outermost columns
/// each side), interpolated when fewer than a third of the columns are dead.
dead_column_plan plan_dead_columns(std::span<const double> diff, const stripe_options& o);

/// Ranks left out at each end when comparing a sorted column with its neighbours.
std::int64_t large_stripe_drop(std::int64_t views, double drop_ratio);

}  // namespace ctforge::detail
