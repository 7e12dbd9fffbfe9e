// Host-side preparation of an FDK (cone / fan beam) or FBP (parallel beam) reconstruction,
// shared by the CPU path (src/recon/fdk.cpp) and the CUDA backend: validation of the inputs and
// the projection pre-weights of src/kernels/fdk_weights.cuh, computed in double precision.
//
// Weighting (see kernels::preweight): every pixel of view i is multiplied by
//   views[i].scale * cosine(a, b) * parker(beta_i, gamma(a))
// then each detector row is ramp filtered with the pixel pitch `filter_pixel_mm`, and the
// filtered views are back-projected, with the FDK distance weight 1/w^2 when
// `distance_weighting` (cone beam) and unweighted otherwise (parallel beam).
#pragma once

#include <cstdint>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "kernels/fdk_weights.cuh"

namespace ctforge::detail {

struct fdk_setup {
  kernels::preweight_params params;            ///< geometry-wide pre-weight constants
  std::vector<kernels::preweight_view> views;  ///< one per view
  /// Pixel pitch (mm) the ramp filter is built for: cone beam du * SID / SDD (the pitch on the
  /// virtual detector through the isocentre), parallel beam du.
  double filter_pixel_mm = 1;
  /// true (cone beam): back-project with kernels::bp_weighting::fdk (1/w^2);
  /// false (parallel beam): kernels::bp_weighting::none.
  bool distance_weighting = true;

  // Informational (for messages, tests and logs).
  bool full_scan = true;          ///< covered arc >= 360 deg (redundancy 1/2, no Parker)
  double scan_range_rad = 0;      ///< covered arc: |last - first| + mean step (rad)
  double fan_half_angle_rad = 0;  ///< max |atan(a / SDD)| over the pixel centres (cone); 0 parallel
};

/// Validates `proj` / `g` / `opt` (usage_error naming the field: geometry type for the
/// algorithm, projection shape, cut-off in (0, 1], strictly monotonic angles, enough angular
/// coverage for a short scan, finite projection values) and computes the pre-weights.
///
/// Angles: beta_i = |angle_i - angle_0| + mean_step / 2 (the scan is taken to cover the arc
/// [0, range], each view the centre of its angular cell); angular weight of view i = half the
/// distance between its neighbours (ends: half a local step + half a mean step), so the weights
/// sum to the covered arc range = |last - first| + mean step. Non-uniform lists work.
/// range >= 360 deg (relative tolerance 1e-3): full scan, redundancy 1/2. Otherwise Parker
/// weights with delta = (range - 180 deg) / 2, which needs range >= 180 deg + fan angle
/// (parallel beam: >= 180 deg). A single view is treated as a full scan sampled once
/// (angular weight 2 pi, redundancy 1/2).
/// check_values = false skips the scan for non-finite projection values (the CUDA backend checks
/// them on the device, while pre-weighting, instead of reading the projections twice).
fdk_setup make_fdk_setup(const projection_stack& proj, const geometry& g, const recon_options& opt,
                         bool check_values = true);

/// Throws usage_error naming view, row and column of the first non-finite value of `p`; returns
/// when there is none. A parallel, vectorised scan (threads = 0: all cores).
void check_finite_values(const projection_stack& p, int threads = 0);

/// Throws the usage_error of check_finite_values for the value at linear index `index`.
[[noreturn]] void throw_non_finite(const projection_stack& p, std::int64_t index);

/// Everything make_fdk_setup checks, plus the volume geometry. Throws usage_error.
void validate_recon_input(const projection_stack& proj, const geometry& g,
                          const volume_geometry& vg, const recon_options& opt);

/// Multiplies every pixel of `proj` by its pre-weight (kernels::preweight). OpenMP over views;
/// threads = 0: all cores.
void apply_preweights(const fdk_setup& s, projection_stack& proj, int threads = 0);

}  // namespace ctforge::detail
