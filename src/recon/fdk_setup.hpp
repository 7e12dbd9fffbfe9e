// Host-side preparation of an FDK (cone / fan beam) or FBP (parallel beam) reconstruction,
// shared by the CPU path (src/recon/fdk.cpp) and the CUDA backend: validation of the inputs and
// the projection pre-weights of src/math/fdk_weights.hpp, computed in double precision.
//
// Weighting (see kernels::preweight): every pixel of view i is multiplied by
//   views[i].scale * cosine(a, b) * parker(beta_i, gamma(a))
// then each detector row is ramp filtered with the pixel pitch `filter_pixel_mm`, and the
// filtered views are back-projected, with the FDK distance weight 1/w^2 when
// `distance_weighting` (cone beam) and unweighted otherwise (parallel beam).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/projection_checks.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "cuda/cuda_api.hpp"
#include "math/fdk_weights.hpp"

namespace ctforge::detail {

struct fdk_setup {
  kernels::preweight_params params;            ///< geometry-wide pre-weight constants
  std::vector<kernels::preweight_view> views;  ///< one per view
  /// Pixel pitch (mm) the ramp filter is built for: cone beam du * SID / SDD (the pitch on the
  /// virtual detector through the isocentre), parallel beam du.
  double filter_pixel_mm = 1;
  /// Cylindrical detectors: the angular pitch du / SDD (rad) of the equiangular columns; the
  /// ramp kernel is then Kak & Slaney's equiangular one, h[n] (n alpha / sin(n alpha))^2
  /// (ramp_response). 0: flat detector (plain ramp).
  double filter_equiangular_rad = 0;
  /// true (cone beam): back-project with kernels::bp_weighting::fdk (1/w^2);
  /// false (parallel beam): kernels::bp_weighting::none.
  bool distance_weighting = true;

  // Informational (for messages, tests and logs).
  bool full_scan = true;          ///< covered arc >= 360 deg (redundancy 1/2, no Parker)
  double scan_range_rad = 0;      ///< covered arc: |last - first| + mean step (rad)
  double fan_half_angle_rad = 0;  ///< max |atan(a / SDD)| over the pixel centres (cone); 0 parallel
  /// Displaced (half-fan) detector: the pixel centres reach on average more than one pixel
  /// further to one side of the ray through the rotation axis than to the other.
  bool displaced = false;
  double overlap_mm = 0;  ///< displaced: half-width of the overlap both sides cover (mm)
  /// displaced: width (mm) of the ramps at the ends of the overlap (recon_options::
  /// offset_transition_px x |pixel pitch|, clamped to 2 overlap_mm)
  double transition_mm = 0;
  double wide_sign = 1;  ///< +1: the detector extends further along +u_hat, -1: along -u_hat
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
/// Displaced detectors (see fdk_setup::displaced; opt.displaced_detector forces or forbids it)
/// get kernels::displaced_weight instead of the 1/2 (1/2 in the overlap, ramps of
/// opt.offset_transition_px pixels at its ends), also combined with a short scan
/// (kernels::displaced_redundancy); an offset that leaves less than one pixel of overlap is
/// refused with the numbers, as is an --offset-transition below one pixel.
/// check_values = false skips the scan for non-finite projection values (the CUDA backend checks
/// them on the device, while pre-weighting, instead of reading the projections twice).
/// `displacement_from`: take the displaced-detector weighting (displaced, overlap_mm,
/// transition_mm, wide_sign) from this setup instead of detecting it: the setup of the same scan
/// before its detector was padded (pad_narrow_side), whose padded columns hold no data.
fdk_setup make_fdk_setup(const projection_view& proj, const geometry& g, const recon_options& opt,
                         bool check_values = true, const fdk_setup* displacement_from = nullptr);

/// Mean over the views of (lowest + highest pixel centre along u_hat, mm, about the ray through
/// the rotation axis): twice how far the detector's middle sits off that ray. The automatic
/// displaced-detector rule: |value| > one pixel. Needs g.orbit.
double mean_detector_asymmetry_mm(const geometry& g);

/// The warning of ctforge::displaced_short_scan_warning for circular geometry `g` (orbit set);
/// empty when the scan covers a full turn or opt's weighting takes the detector as centred.
/// Throws usage_error where make_fdk_setup would refuse the displacement or the transition.
std::string displaced_short_scan_warning(const geometry& g, const recon_options& opt);

/// Zero columns that make a displaced detector reach as far to its narrow side as to its wide
/// side, on every view. The ramp filter's response to the weighted views extends past the
/// narrow edge, and voxels farther from the axis than the overlap project there on the
/// conjugate views: without these columns their filtered values are lost (a low-frequency
/// bias that grows with the offset: 12 dB of PSNR at 45% of the detector width).
struct narrow_side_padding {
  std::int64_t columns = 0;  ///< 0: nothing to pad (centred detector)
  bool prepend = true;       ///< true: before column 0; false: after the last column
};
narrow_side_padding narrow_side_padding_for(const fdk_setup& s, const geometry& g);
/// `g` with `pad.columns` more columns on the narrow side; every pixel keeps its position.
geometry pad_narrow_side(const geometry& g, const narrow_side_padding& pad);
/// `p` with `pad.columns` zero columns on the narrow side. OpenMP over views.
projection_stack pad_narrow_side(const projection_view& p, const narrow_side_padding& pad,
                                 int threads = 0);

/// The input FDK / FBP runs on for a displaced detector: the projections and geometry padded
/// on the narrow side, with the setup made for them (the weights of the unpadded detector).
struct padded_fdk_input {
  geometry geo;
  projection_stack proj;
  fdk_setup setup;
};
/// `data` on `g` padded as narrow_side_padding_for(setup, g) says, before either backend runs;
/// nothing when the detector needs no padding. Throws usage_error for projections in GPU
/// memory that need padding (the padding is done on the host).
std::optional<padded_fdk_input> pad_for_displaced_detector(const projection_view& data,
                                                           const geometry& g,
                                                           const fdk_setup& setup,
                                                           const recon_options& opt);

/// Everything make_fdk_setup checks, plus the volume geometry. Throws usage_error.
void validate_recon_input(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                          const recon_options& opt);

/// Multiplies every pixel of `proj` by its pre-weight (kernels::preweight). OpenMP over views;
/// threads = 0: all cores.
void apply_preweights(const fdk_setup& s, projection_stack& proj, int threads = 0);

/// The GPU's FDK / FBP job (detail::fdk_job of src/cuda/cuda_api.hpp) for `proj`: the
/// pre-weights of `setup` (which must match the projections' shape) or, when nullptr, of
/// make_fdk_setup(proj, g, opt) without the scan for non-finite values (the device checks them
/// while pre-weighting), and the ramp filter's response for padded_length(proj.cols), opt's
/// window and cut-off.
fdk_job make_fdk_job(const projection_view& proj, const geometry& g, const recon_options& opt,
                     const fdk_setup* setup = nullptr);

/// FDK / FBP on the GPU with the same inputs, outputs and validation as ctforge::reconstruct on
/// the CPU: make_fdk_job, then the backend's cuda_reconstruct (src/cuda/cuda_api.hpp, which
/// says what it does with non-finite values, `device_out` and projections in device memory).
/// `setup`: the pre-weights to use (reconstruct passes those of a displaced detector before it
/// was padded); nullptr: make_fdk_setup(proj, g, opt). CUDA builds only.
volume cuda_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, const cuda_options& copt,
                        const fdk_setup* setup = nullptr, device_array* device_out = nullptr);

}  // namespace ctforge::detail
