// Cleaning raw scans before reconstruction: zinger (outlier) removal on projections and stripe
// removal on sinograms. Each step works in place on line integrals [view][row][col] (zingers
// may also be removed from raw counts) and leaves the shape unchanged; the sinogram of detector
// row r is the [view][col] plane of that row. See docs/guide/real-data.md, "Preparing raw
// scans".
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// Projections changed in place: views x rows x cols floats [view][row][col], the caller's
/// memory (a projection_stack converts implicitly).
struct projections_ref {
  std::int64_t views = 0, rows = 0, cols = 0;
  std::span<float> data;

  projections_ref(std::int64_t v, std::int64_t r, std::int64_t c, std::span<float> d);
  projections_ref(projection_stack& p)  // NOLINT(google-explicit-constructor)
      : projections_ref(p.views, p.rows, p.cols, p.data) {}
  float& at(std::int64_t v, std::int64_t r, std::int64_t c) const {
    return data[static_cast<std::size_t>((v * rows + r) * cols + c)];
  }
};

/// Zingers: hot pixels and cosmic-ray hits, single values far above their neighbours.
struct outlier_options {
  /// A value at least this far above the median of its neighbourhood is replaced by that
  /// median (tomopy's remove_outlier rule, `dif`). In the data's units: line integrals, or
  /// counts when applied before normalisation. > 0.
  double threshold = 0;
  /// The neighbourhood: `size` x `size` pixels (rows x columns) of the view, odd, >= 3.
  int size = 3;
  /// ... times `views` neighbouring views centred on the pixel's (odd, >= 1; 1: within the view
  /// only). Borders repeat the edge values mirrored (scipy.ndimage's "reflect").
  int views = 1;
  int threads = 0;  ///< 0: all cores
};

/// Replaces every zinger of `p` (see outlier_options) by the median of its neighbourhood, as
/// computed on the input; every other value stays bit-identical. Returns how many were
/// replaced. usage_error naming the option for invalid options, and naming view, row and
/// column for a non-finite value.
std::int64_t remove_outliers(projections_ref p, const outlier_options& opt);

/// Stripe (ring) removal of Vo, Atwood and Drakopoulos, "Superior techniques for eliminating
/// ring artifacts in X-ray micro-tomography", Opt. Express 26, 28396 (2018), as the authors'
/// algotom implements them (tests compare with it).
enum class stripe_method {
  /// Algorithm 3: sort each detector column of the sinogram along the views, median-filter
  /// across the columns (window `size`), sort back. Removes full and partial stripes.
  sorting,
  /// Algorithm 2: split each column into its low-pass part along the views (a Gaussian window
  /// of `sigma` in the Fourier domain) and the rest; the sorting method on the low-pass part.
  filtering,
  /// Algorithm 5: large stripes. Columns whose sorted profile (ranks outside the top and bottom
  /// drop_ratio / 2) deviates from its median across `la_size` columns by more than `snr` times
  /// the noise level are detected (with one neighbour each side) and replaced by the sorted,
  /// median-filtered values; with `norm`, every column is first divided by its deviation.
  large,
  /// Algorithm 6: dead (unresponsive) stripes. Columns whose variation along the views differs
  /// from their neighbours' (median across `la_size` columns) by more than `snr` times the noise
  /// level are detected (with one neighbour each side, never the two outermost columns each
  /// side) and interpolated linearly across the columns from their good neighbours (when fewer
  /// than a third are detected); then `large` on what remains.
  dead,
  /// Algorithm 6, then 5, then 3: dead stripes (without the residual step), large stripes
  /// (`la_size`), then the sorting method with `size` (algotom's and tomopy's remove_all_stripe).
  all,
};

/// "sorting", "filtering", "large", "dead", "all" (usage_error naming --rings otherwise).
stripe_method parse_stripe_method(std::string_view name);
std::string to_string(stripe_method m);

struct stripe_options {
  stripe_method method = stripe_method::sorting;
  int size = 21;       ///< median window across detector columns, odd, >= 3 (sorting, filtering,
                       ///< all: the small stripes' window; the papers' size / sm_size)
  double sigma = 3.0;  ///< filtering: sigma of the Gaussian window (the papers' sigma), > 0
  int la_size = 51;    ///< large, dead, all: median window for large stripes (odd, >= 3)
  double snr = 3.0;    ///< large, dead, all: detection ratio over the noise level, > 0
  /// large, all: fraction of the sorted values left out (half at each end) when comparing a
  /// column with its neighbours, in [0, 0.8]
  double drop_ratio = 0.1;
  bool norm = true;  ///< large: divide every column by its deviation before replacing
  int threads = 0;   ///< 0: all cores
};

/// Removes stripes from the sinogram of every detector row of `p`. usage_error naming the
/// option for invalid options, and naming view, row and column for a non-finite value.
void remove_stripes(projections_ref p, const stripe_options& opt);

/// 360-degree scans with an offset rotation axis (half acquisition): a parallel-beam detector
/// whose rotation axis projects near one edge sees one side of the object during one half-turn
/// and the other side during the next. Since p(t + 180 deg, x) = p(t, -x) (x: detector position
/// about the axis), the view at t + 180 deg mirrored about the axis continues the view at t past
/// the axis: the two make one view of about twice the width, a 180-degree scan.
///
/// Views: v is paired with v + M, M = views / 2: an even count over [0, 360) deg, or an odd
/// count 2M + 1 over [0, 360] deg whose last view repeats the first (dropped); see
/// stitch_options::angles_rad.
enum class stitch_side {
  left,   ///< the axis near column 0: each stitched row is [second half flipped | first half]
  right,  ///< the axis near the last column: [first half | second half flipped]
};
/// "left" or "right".
std::string to_string(stitch_side s);

struct stitch_options {
  /// Detector column (0-based pixels, sub-pixel) onto which the rotation axis projects, within
  /// [0, cols - 1]; required (NaN: usage_error; the overload taking a geometry reads it from
  /// the geometry's offset_u). The side is left when center < cols / 2, else right.
  double center = std::numeric_limits<double>::quiet_NaN();
  /// Width, in detector pixels, of the linear blend centred on the axis across which the first
  /// half's view takes over from the second's (kernels::stitch_weight); >= 0, clamped to the
  /// overlap 2 x (distance from the axis to the near edge), which is the default (infinity):
  /// the smoothest join, as algotom's convert_sinogram_360_to_180. 0: a hard cut at the axis.
  double blend = std::numeric_limits<double>::infinity();
  /// View angles (radians), one per view; empty: evenly spaced over 360 deg, and then an odd
  /// view count is refused (only the angles tell a repeated 360-degree view from an uneven
  /// scan). Given: view v + M must lie 180 deg (within 5% of the angular step) from view v for
  /// every v < M; with an odd count, the last view 360 deg from the first.
  std::vector<double> angles_rad;
  int threads = 0;  ///< 0: all cores
};

/// The stitched scan of `p` (views x rows x cols over 360 deg, see above): M views (the first
/// half-turn's angles) x rows x W columns with the rotation axis on the middle column
/// (W - 1) / 2. W = 2 d + 1 rounded down to the lattice of the axis, d the distance (pixels)
/// from the axis to the far edge: W is odd (axis on a pixel centre) when the axis's fractional
/// part is below 1/4 or above 3/4, else even (axis between two pixels); the source columns are
/// then linearly interpolated by at most a quarter pixel (none for integer and half-integer
/// centres). Every output value is stitch_weight(x) * first + (1 - stitch_weight(x)) * second,
/// x the column's signed distance from the axis. usage_error naming the option for an invalid
/// center, blend or angle list, an odd view count without angles, fewer than 2 views, and for
/// non-finite input (naming view, row and column).
projection_stack stitch_360(const projection_view& p, const stitch_options& opt);

/// Projections and their geometry after stitch_360.
struct stitched_scan {
  projection_stack projections;
  /// Circular parallel beam: W columns, the input's rows and pixel pitch, the first M views'
  /// angles and offset_v, offset_u = 0 (the axis on the middle column).
  geometry geom;
};
/// stitch_360 of projections `p` described by `g`, a circular "parallel" geometry: the angles
/// come from g (opt.angles_rad must be empty), and a NaN opt.center from g's offset_u (the
/// same on every view): center = (cols - 1) / 2 - offset_u / pixel_u.
stitched_scan stitch_360(const projection_view& p, const geometry& g, stitch_options opt);

/// Options of find_center_360.
struct center_360_options {
  /// Detector row whose sinogram is compared; -1: up to 4 rows spread over the detector (their
  /// sums pooled).
  std::int64_t row = -1;
  /// Smallest overlap (pixels) of the two half-turns' views a candidate may have, >= 3: the
  /// axis is searched within [(min_overlap - 1) / 2, cols - 1 - (min_overlap - 1) / 2].
  std::int64_t min_overlap = 16;
  int threads = 0;  ///< 0: all cores
};

/// Result of find_center_360.
struct center_360_estimate {
  double center = 0;  ///< detector column (0-based, sub-pixel) of the rotation axis
  stitch_side side = stitch_side::left;
  double overlap = 0;     ///< 2 x (distance from the axis to the near edge) + 1, pixels
  double confidence = 0;  ///< 0 (another column fits as well) ... 1 (one clear minimum)
  /// The coarse search: candidate centres (steps of half a binned column) and their metric
  /// (lower is better).
  std::vector<double> candidates, metric;
};

/// Rotation axis of a 360-degree offset-axis scan (views paired as for stitch_360, an odd count
/// taken as [0, 360] deg), from the data alone: for each candidate axis column c the view of
/// the second half-turn mirrored about c, s2(2c - col), is compared with the first half's,
/// s1(col), over the columns both cover; the metric is 1 - the Pearson correlation of the two
/// over those columns and all view pairs (offsets and gain differences between the halves do
/// not matter). Coarse: 2c over every integer (half-pixel steps of c) on views binned to at
/// most 512 columns and 256 view pairs; fine: full resolution (at most 1024 view pairs) within
/// two binned pixels of the coarse minimum, a parabola through the lowest metric and its two
/// neighbours giving the sub-pixel column. Confidence 1 - m1 / m2 in [0, 1], m1 the chosen
/// minimum's metric and m2 that of the lowest other local minimum (an end of the searched range
/// counting as one) at least 3 pixels away: 1 when no other minimum exists. usage_error for fewer
/// than 2 views, a detector narrower than min_overlap, a row off the detector, and non-finite
/// input.
center_360_estimate find_center_360(const projection_view& p, const center_360_options& opt = {});

}  // namespace ctforge
