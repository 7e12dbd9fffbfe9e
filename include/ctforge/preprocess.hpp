// Cleaning raw scans before reconstruction: zinger (outlier) removal on projections and stripe
// removal on sinograms. Each step works in place on line integrals [view][row][col] (zingers
// may also be removed from raw counts) and leaves the shape unchanged; the sinogram of detector
// row r is the [view][col] plane of that row. See docs/guide/real-data.md, "Preparing raw
// scans".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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
  /// Münch, Trtik, Marone and Stampanoni, "Stripe and ring artifact removal with combined
  /// wavelet-Fourier filtering", Opt. Express 17, 8567 (2009): `level` levels of the 2D wavelet
  /// transform `wname` of the sinogram (views padded with zeros when `pad`); in each level's
  /// vertical detail band (detail across the columns) the Fourier coefficients along the views
  /// are damped by 1 - exp(-k^2 / (2 fw_sigma^2)); transformed back. tomopy's remove_stripe_fw
  /// (its parameters; tests compare with its published output).
  fourier_wavelet,
  /// Titarenko's regularisation (Titarenko, Withers and Yagola, Appl. Math. Lett. 23, 1489
  /// (2010), generalised by Miqueles, Rinkel, O'Dowd and Bermúdez, J. Synchrotron Rad. 21, 1333
  /// (2014)), as tomopy's remove_stripe_ti (tests compare with its published output): the columns'
  /// mean profile is replaced by its Tikhonov-smoothed
  /// version with a first- and with a second-difference penalty (regularisation 1 / (2 x the
  /// range of the views' sums)); the two corrected sinograms d1, d2 are combined as
  /// sqrt(d1 d2 + alpha |min(d1 d2)|). Per block of views when `nblock` > 0.
  titarenko,
};

/// "sorting", "filtering", "large", "dead", "all", "fourier_wavelet" (or "fw"), "titarenko"
/// (or "ti") (usage_error naming --rings otherwise).
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
  /// fourier_wavelet: wavelet levels, 0: ceil(log2(max(views, cols))) (tomopy's default rule,
  /// which takes the largest of all three dimensions), else 1 ... 30
  int level = 0;
  /// fourier_wavelet: the wavelet, "haar" or "db1" ... "db10" (Daubechies, 2 N taps)
  std::string wname = "db5";
  /// fourier_wavelet: the damping's width in Fourier samples along the views (the paper's and
  /// tomopy's sigma), > 0
  double fw_sigma = 2.0;
  /// fourier_wavelet: pad the views with views / 8 zeros (half before, half after)
  bool pad = true;
  double alpha = 1.5;  ///< titarenko: the damping factor of the combination (tomopy's), >= 0
  int nblock = 0;      ///< titarenko: blocks of views corrected apart (0: one), <= views
  int threads = 0;     ///< 0: all cores
};

/// Removes stripes from the sinogram of every detector row of `p`. usage_error naming the
/// option for invalid options, and naming view, row and column for a non-finite value.
void remove_stripes(projections_ref p, const stripe_options& opt);

}  // namespace ctforge
