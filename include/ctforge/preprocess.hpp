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
#include <vector>

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

/// Beam hardening. A polychromatic beam hardens along its path (the low energies are absorbed
/// first), so the measured line integral p = -ln(I / I0) grows less than linearly with the
/// thickness crossed and homogeneous objects reconstruct darker in their centre (cupping).
/// The correction maps every line integral through a polynomial, p' = sum_k c_k p^k
/// (k = 0..n, coefficients in increasing order of power: RTK's water precorrection
/// convention; usually c_0 = 0 and c_1 near 1). The coefficients come from the spectrum and
/// the material (fit_linearisation) or from a calibration scan of a homogeneous object
/// (fit_water_precorrection, include/ctforge/beam_hardening.hpp). See
/// docs/guide/real-data.md, "Beam hardening".
///
/// Replaces every value p of `p` by sum_k coefficients[k] p^k, evaluated in double and stored
/// as float (coefficients = {0, 1} leaves every value bit-identical). usage_error naming
/// `coefficients` when the list is empty or holds a non-finite value, naming view, row and
/// column for a non-finite input value; ctforge::error naming view, row and column when a
/// result does not fit a float (the projections are then left unchanged).
void correct_beam_hardening(projections_ref p, std::span<const double> coefficients,
                            int threads = 0);

/// What fit_linearisation samples and fits.
struct linearisation_options {
  int degree = 3;               ///< degree n of the polynomial, in [1, 10]
  double max_thickness_mm = 0;  ///< thickest path of the material to linearise, mm, > 0
  int samples = 256;  ///< thicknesses t_i = i max_thickness_mm / samples, i = 1..samples; > degree
};

/// Coefficients c_0..c_n (c_0 = 0) linearising one material: for thicknesses t sampled in
/// (0, max_thickness_mm] the polychromatic line integral P(t) = -ln(sum_E w_E exp(-mu_E t) /
/// sum_E w_E) is computed and the polynomial with c_0 = 0 fitted (least squares in double)
/// that maps P(t) to mu_ref t, mu_ref = sum_E w_E mu_E / sum_E w_E the spectrum-weighted mean
/// attenuation (the slope of P at t = 0: thin paths keep their values, c_1 is near 1).
/// `weights`: the detected signal of each energy bin (photon fluence times the detector's
/// response; for an energy-integrating detector, times the energy), >= 0 with a positive sum.
/// `mu_per_mm`: the material's linear attenuation coefficient at each bin's energy, 1/mm
/// (mass attenuation coefficient, cm^2/g, times density, g/cm^3, divided by 10), >= 0, the
/// same count as `weights`, with a positive weighted mean. Pass the
/// coefficients to correct_beam_hardening. usage_error naming the argument for bad inputs.
std::vector<double> fit_linearisation(std::span<const double> weights,
                                      std::span<const double> mu_per_mm,
                                      const linearisation_options& opt);

}  // namespace ctforge
