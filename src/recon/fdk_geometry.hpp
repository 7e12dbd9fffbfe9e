// FDK / FBP for per-view vector geometries whose orbit is circular (ASTRA cone_vec files,
// tilted, rotated, flipped or transposed detectors, calibrated per-view jitter).
//
// FDK needs a detector whose rows run perpendicular to the rotation axis, on a plane parallel
// to the axis and perpendicular to the central ray (the ray from the source through the axis);
// its weights need the source angle of each view. make_circular_equivalent fits the orbit
// (rotation axis, centre, radius, source angles) to the views and builds, per view, such a
// virtual detector through the view's own source: the result is a circular geometry (orbit set)
// that make_fdk_setup and both backends reconstruct as they do the plain "cone" and "parallel"
// types. The projections are resampled onto the virtual detectors along the same rays
// (bicubic, kernels::resample_pixel; at half the column pitch unless the pixels only need
// reordering); when the virtual detectors are the real ones (a cone or parallel scan written as
// vectors, flipped axes included) the data is used as it is. Virtual pixels beyond the real
// detector (the corners of a turned one) were not measured: they continue its nearest edge, as
// a truncated detector's rows are continued, rather than read as rays that cross nothing.
//
// Orbit fit (cone beam): the axis is the normal of the plane of the sources (sum of the cross
// products of consecutive source positions about their centroid), oriented towards +z (world
// up) when it has a z component; the centre and radius come from a least-squares circle fit
// (Kasa) in that plane. Every source must lie within 1% of the radius of that circle, radially
// and along the axis (otherwise: a helix or an irregular trajectory, refused with the numbers
// and a pointer to SIRT). Parallel beam: the axis is normal to the ray directions, which must be
// within 0.01 rad of perpendicular to it, and passes through the world origin (as for the
// parallel_vec type, whose rotation is about the origin). At least 3 views (cone) or 2 views
// (parallel) are needed to determine the orbit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "math/resample.hpp"

namespace ctforge::detail {

struct circular_equivalent {
  geometry geom;  ///< circular geometry (orbit set) on the virtual detectors
  /// false: the virtual detectors are the input's (same pixels within 1e-6 pixel), so the
  /// projections are used unchanged; true: resample() them first.
  bool needs_resampling = false;
  /// Every virtual pixel is an input pixel (a reordering: flips, transposition); otherwise the
  /// virtual detector has twice the columns (half the pitch) and is interpolated (bicubic).
  bool integral = true;
  /// Virtual columns per input column pitch (2 when interpolated, else 1): the filter cut-off
  /// is divided by it, so that --cutoff stays a fraction of the real detector's Nyquist.
  int oversample = 1;
  /// Per view: virtual pixel (col', row') -> pixel of the input detector.
  std::vector<kernels::homography> maps;
  std::int64_t input_cols = 0, input_rows = 0;
  // Informational (messages, tests).
  double radius_mm = 0;                ///< fitted source-to-axis distance (cone)
  double max_radial_deviation_mm = 0;  ///< largest |distance from the axis - radius| (cone)
  double max_axial_deviation_mm = 0;   ///< largest distance of a source from the orbit plane
  double max_axis_tilt_rad = 0;        ///< parallel: largest |90 deg - angle(ray, axis)|
};

/// Fits a circular orbit to vector geometry `g` and builds the virtual detectors (see the file
/// comment). `algo` ("fdk" or "fbp") prefixes the usage_error thrown for a geometry whose orbit
/// is not circular, whose beam does not fit the algorithm, or whose detector faces away from
/// the source.
circular_equivalent make_circular_equivalent(const geometry& g, const std::string& algo);

/// The projections `proj` (on the input detector) resampled onto the virtual detectors of `eq`.
/// OpenMP over views; threads = 0: all cores.
projection_stack resample(const circular_equivalent& eq, const projection_view& proj,
                          int threads = 0);

/// The transpose of resample(): `virt` (on the virtual detectors of `eq`) taken back onto the
/// input detector, each virtual pixel's value added to the input pixels its interpolation
/// reads, with the same weights (double accumulation per view, views in parallel: the same
/// floats for every thread count). <resample(p), q> = <p, resample_adjoint(q)>.
projection_stack resample_adjoint(const circular_equivalent& eq, const projection_view& virt,
                                  int threads = 0);

/// The options reconstruct uses on the virtual detectors of `eq`: at `eq.oversample` virtual
/// columns per real one, --cutoff divided by it (so that it stays a fraction of the real
/// detector's Nyquist) and the displaced-detector transition multiplied by it (it is in real
/// pixels); `opt` itself when nothing is resampled.
recon_options options_on_virtual_detector(const circular_equivalent& eq, const recon_options& opt);

}  // namespace ctforge::detail
