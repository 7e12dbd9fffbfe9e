// Cleaning raw scans before reconstruction: zinger (outlier) removal on projections and stripe
// removal on sinograms. Each step works in place on line integrals [view][row][col] (zingers
// may also be removed from raw counts) and leaves the shape unchanged; the sinogram of detector
// row r is the [view][col] plane of that row. See docs/guide/real-data.md, "Preparing raw
// scans".
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctforge/execution.hpp"
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
/// (or "ti") (usage_error naming `spelling`, the option as the caller spelled it, otherwise).
stripe_method parse_stripe_method(std::string_view name, std::string_view spelling = "method");
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
/// Phase retrieval for propagation-based phase contrast, single material (one delta/beta).
/// The filters act on each view's transmission T = exp(-p), a 2-D image [row][col]; the output
/// is -ln of the filtered transmission: a dimensionless attenuation line integral mu * t (mu =
/// 4 pi beta / lambda), so reconstructing it gives mu; the projected thickness t is the output
/// divided by mu.
enum class phase_method {
  /// Paganin, Mayo, Gureyev, Miller and Wilkins, J. Microsc. 206, 33 (2002): T's spectrum times
  /// 1 / (1 + pi lambda R (delta/beta) |f|^2), f in cycles per unit length.
  paganin,
  /// The generalised Paganin method of Paganin et al. (2020), "Boosting spatial resolution by
  /// incorporating periodic boundary conditions into single-distance hard-x-ray phase
  /// retrieval": |2 pi f|^2 replaced per axis by the discrete Laplacian's 2 (1 - cos(2 pi f W))
  /// / W^2 (W the pitch); the same filter at low frequencies, less blur near the pixel scale.
  generalized,
};

/// "paganin", "generalized" (usage_error naming phase method otherwise).
phase_method parse_phase_method(std::string_view name);
std::string to_string(phase_method m);

struct phase_options {
  phase_method method = phase_method::paganin;
  double energy_kev = 0;     ///< photon energy, keV (lambda = h c / E, h c = 1.23984198e-6 eV m)
  double distance_mm = 0;    ///< sample-detector distance R, mm, > 0
  double pixel_size_mm = 0;  ///< detector pitch, mm (both axes unless pixel_u_mm / pixel_v_mm)
  double pixel_u_mm = 0;     ///< pitch along the columns, mm (0: pixel_size_mm)
  double pixel_v_mm = 0;     ///< pitch along the rows, mm (0: pixel_size_mm)
  double delta_beta = 0;     ///< delta / beta of the material, > 0
  /// Rows (columns) added each side before the FFT, filled with the edge row's (column's)
  /// values; the FFT size is the smallest 2^a 3^b 5^c 7^d >= rows + 2 pad_rows. -1: automatic,
  /// the filter's margin (phase_row_margin's rule per axis) for a tolerance of 1e-6, so that the
  /// result equals the filter applied to the view extended by its edge values.
  std::int64_t pad_rows = -1, pad_cols = -1;
  int threads = 0;  ///< 0: all cores
};

/// Replaces every view of line integrals p = -ln(I / I0) by -ln(F^-1[H(f) F[exp(-p)]]), H the
/// method's filter on the padded DFT grid, f = k / (N pitch) cycles per mm for the DFT index
/// k in [-N/2, N/2] of a padded size N. usage_error naming the option for invalid options and
/// naming view, row and col for a non-finite input; error naming the view where a filtered
/// transmission is not positive and finite (p is then left partly changed).
void retrieve_phase(projections_ref p, const phase_options& opt);

/// The extra detector rows each side of a band of rows such that phase retrieval of the widened
/// band (clipped to the detector, padded by its edge rows) gives the band's rows within
/// `tolerance` times the view's largest transmission max exp(-p) of the whole-view result
/// (the output -ln T then within tolerance * max T / T there). Derived from the filter's decay
/// along the rows: the continuous Paganin kernel (pi / sqrt(c)) exp(-2 pi |n| / sqrt(c)), c =
/// pi lambda R (delta/beta) / pitch_v^2 in pixels^2, plus the 1 / n^2 ripple of its cut at the
/// Nyquist frequency (for data smooth on the pixel scale beyond the margin); the generalised
/// filter's kernel decays exactly as rho^|n|. tolerance in (0, 1).
std::int64_t phase_row_margin(const phase_options& opt, double tolerance);

/// Detector rows [begin, end).
struct row_band {
  std::int64_t begin = 0, end = 0;
};

/// The rows to read for output rows `out`: widened by `margin` each side, clipped to
/// [0, detector_rows).
row_band phase_input_rows(row_band out, std::int64_t detector_rows, std::int64_t margin);

/// Phase retrieval of a band: `input` holds the detector rows `in_rows` of every view (as
/// phase_input_rows gives them) and is changed (retrieved in place); returns its rows `out`
/// (inside in_rows), views x (out.end - out.begin) x cols.
projection_stack retrieve_phase_rows(projections_ref input, row_band in_rows, row_band out,
                                     const phase_options& opt);
// ---- the steps together, as the command line, Python and the distributed layer name them ----

/// The cleaning steps applied between normalisation and reconstruction, in this order by
/// preprocess(): zingers, rings, phase retrieval, beam hardening. A step is off when its
/// optional is empty.
/// The largest zinger window (size^2 x views values) zinger removal runs on the GPU; larger
/// windows run on the CPU.
inline constexpr int k_gpu_zinger_window = 343;
/// The widest median window (size, la_size) of Vo's stripe methods on the GPU; wider windows
/// run on the CPU.
inline constexpr int k_gpu_stripe_window = 101;

/// The steps, and where they run (the execution context: `where`, `device`, `threads`,
/// `gpu_memory_limit_bytes`). With the CUDA backend (automatic: when a usable device exists)
/// zinger removal (windows of at most k_gpu_zinger_window values), Vo's stripe methods
/// (sorting, filtering, large, dead, all; windows of at most k_gpu_stripe_window columns) and
/// phase retrieval run on the GPU; the Fourier-wavelet and Titarenko stripe methods and the
/// beam-hardening polynomial (one pass, faster on the host than a transfer) on the CPU.
struct preprocess_options : execution_context {
  std::optional<outlier_options> zingers;
  std::optional<stripe_options> rings;
  /// Its pitches come from the scan's geometry: set_detector().
  std::optional<phase_options> phase;
  std::optional<std::vector<double>> beam_hardening;  ///< coefficients c_0..c_n
  /// Phase retrieval works in the sample's plane: pitch and distance divided by this
  /// (set_detector; 1 for parallel beams).
  double magnification = 1;
  bool empty() const noexcept { return !zingers && !rings && !phase && !beam_hardening; }
};

/// Phase retrieval's pitch from the scan's detector: the pitch of `g`, and for a cone beam the
/// magnification M = SDD / SID, so that preprocess() filters with the Fresnel-scaled pitch / M
/// and distance / M (the distance given is the sample's to the detector). Nothing to do
/// without phase retrieval.
void set_detector(preprocess_options& opt, const geometry& g);

/// One option of the preprocessing steps. The command line (flag), Python's keyword arguments
/// and run records (name) all take them from this table.
struct preprocess_option {
  std::string_view name;  ///< keyword and run-record key, e.g. "ring_size"
  std::string_view flag;  ///< command line, e.g. "--ring-size"
  std::string_view type;  ///< the value's placeholder in help texts: "T", "N", "METHOD"
  /// The option that turns this one's step on ("zingers", "rings"); empty for those two.
  std::string_view step;
  /// For a stripe option: the --rings methods it applies to, e.g. "large dead all"; empty: all.
  std::string_view methods;
  std::string_view help;  ///< one paragraph, as `ctforge recon --help` prints it
};

/// Every preprocessing option, in the order `--help` lists them.
std::span<const preprocess_option> preprocess_option_table();

/// An option as given: spelled by its name or its flag, with its value as text.
struct preprocess_setting {
  std::string spelling, value;
};

/// The options `given` describes (each spelled by name or flag, at most once). usage_error
/// naming the spelling for an unknown option, a malformed or out-of-range value, an option
/// whose step is off ("--ring-size: needs --rings") or that does not apply to the chosen
/// method ("--ring-alpha: applies to --rings titarenko only").
preprocess_options parse_preprocess_options(std::span<const preprocess_setting> given);

/// Every setting of the steps that are on, by name, with its effective value (defaults
/// included), in table order: for run records and notes. Empty when no step is on.
std::vector<preprocess_setting> preprocess_settings(const preprocess_options& opt);

/// What preprocess() did.
struct preprocess_report {
  std::int64_t zingers_replaced = 0;
};

/// Applies the steps of `opt` to `p` in place, in order (zingers, rings, phase retrieval, beam
/// hardening), where opt.where says (see preprocess_options; the GPU's results equal the CPU's
/// for zingers, within 1e-5 of the peak for phase retrieval).
preprocess_report preprocess(projections_ref p, const preprocess_options& opt);

/// Detector rows on each side of a band of rows that the steps of `opt` read: a band cleaned
/// with this many neighbouring rows on each side (fewer at the detector's edges) equals the
/// same rows of the whole cleaned projections bit for bit, or with phase retrieval within
/// k_phase_band_tolerance of the largest transmission (phase_row_margin). 0 for steps that
/// work row by row (rings, beam hardening).
std::int64_t preprocess_row_margin(const preprocess_options& opt);

/// The tolerance preprocess_row_margin asks of phase retrieval's margin (phase_row_margin).
inline constexpr double k_phase_band_tolerance = 1e-6;

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
