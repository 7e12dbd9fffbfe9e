// Reconstruction API: one entry point for every algorithm and backend.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctforge/backend.hpp"
#include "ctforge/cancel.hpp"
#include "ctforge/device.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"  // backprojector
#include "ctforge/volume.hpp"

namespace ctforge {

/// fdk: filtered back-projection for circular cone / fan beam; fbp: for circular parallel beam;
/// helical_fbp: weighted filtered back-projection for helical cone-beam scans (geometry type
/// "helical"; docs/guide/helical.md).
/// The iterative methods take any geometry (vector geometries included):
///  * sirt: Simultaneous Iterative Reconstruction Technique, robust, slow to converge;
///  * os_sart: SIRT's update per ordered subset of views (OS-SART): several updates per pass
///    over the data, for fast first iterations;
///  * cgls: conjugate gradients on the least-squares problem: fastest on consistent data;
///  * fista_tv: least squares plus total variation (FISTA): sparse-view, limited-angle and
///    noisy (low-dose) scans of piecewise-constant objects;
///  * osem: ordered-subsets expectation maximisation (Poisson likelihood): low-count data,
///    non-negative by construction.
enum class algorithm { fdk, fbp, sirt, cgls, os_sart, fista_tv, osem, helical_fbp };

/// Every method but FDK / FBP / helical FBP (iterations, any geometry).
inline bool is_iterative(algorithm a) {
  return a != algorithm::fdk && a != algorithm::fbp && a != algorithm::helical_fbp;
}

/// What an iterative method reports after each iteration (recon_options::on_iteration). For
/// OS-SART and OSEM an iteration is one pass over every subset.
struct iteration_info {
  int iteration = 0;    ///< iterations done (1 after the first)
  double residual = 0;  ///< |A x - p| / |p| of the new iterate (0 when p = 0)
  /// SIRT, OS-SART, CGLS: 0.5 |A x - p|^2; FISTA-TV: 0.5 |A x - p|^2 / L + tv_weight TV(x)
  /// (L = ||A||^2 estimated, see recon_options::tv_weight); OSEM: the negative Poisson
  /// log-likelihood sum (A x - p log A x) (up to a constant in p; +inf when a ray with data
  /// sees no activity).
  double objective = 0;
  double relative_update = 0;  ///< |x_k+1 - x_k| / |x_k+1| (0 when x_k+1 = 0)
  double seconds = 0;          ///< since the start of the reconstruction
  /// What recon_options::tolerance is compared with: the relative update, or for CGLS the
  /// relative gradient |A^T r| / |A^T p|.
  double stop_criterion = 0;
};
enum class filter_window { ram_lak, shepp_logan, cosine, hamming, hann };

/// FDK / FBP: the weighting of a displaced (half-fan) detector, one that reaches further to one
/// side of the ray through the rotation axis than to the other.
///  * automatic: displaced-detector weights when the pixel centres reach on average more than
///    one pixel further to one side than to the other;
///  * on: displaced-detector weights whatever the offset;
///  * off: the weights of a centred detector (1/2 per ray, Parker for short scans); the wide
///    side's unmatched columns then count half: a displaced detector's outer ring is wrong.
enum class displaced_detector_mode { automatic, on, off };

/// Default recon_options::offset_transition_px: 16 pixels (see there).
inline constexpr double k_default_offset_transition_px = 16;

/// "fdk", "fbp", "sirt", "os-sart", "cgls", "fista-tv", "osem" (case-insensitive; '_' for '-').
algorithm parse_algorithm(std::string_view name);
std::string to_string(algorithm a);
backprojector parse_backprojector(std::string_view name);  ///< "auto", "voxel", "matched"
std::string to_string(backprojector b);
filter_window parse_filter(std::string_view name);  ///< "ram-lak", "shepp-logan", ...
std::string to_string(filter_window w);
/// "auto", "on", "off" (case-insensitive); usage_error naming --displaced-detector otherwise.
displaced_detector_mode parse_displaced_detector(std::string_view name);
std::string to_string(displaced_detector_mode m);
/// Whether FDK / FBP's automatic rule takes g's detector as displaced (half-fan); false for
/// geometries without a circular orbit. For warnings about displaced_detector_mode::off.
bool detector_is_displaced(const geometry& g);

/// The analytic method when the orbit is circular: fdk for cone beam, fbp for parallel beam,
/// vector geometries included when their sources (ray directions) fit a circular orbit (see
/// reconstruct); sirt otherwise (helical and other trajectories).
algorithm default_algorithm(const geometry& g);

/// What a caller fixes of the reconstruction grid; the rest is chosen by default_grid.
struct grid_request {
  std::optional<std::array<std::int64_t, 3>> size;  ///< voxels along x, y, z (each >= 1)
  std::optional<std::array<double, 3>> spacing_mm;  ///< voxel size along x, y, z (mm, > 0)
  std::optional<std::array<double, 3>> origin_mm;   ///< centre of voxel (0, 0, 0), mm
  /// Names used in error messages ("--size" on the command line, "shape" in Python, ...).
  const char* size_option = "--size";
  const char* spacing_option = "--spacing";
  const char* origin_option = "--origin";
  /// Refuse grids larger than this machine's memory (false: the volume is never held whole,
  /// e.g. written slab by slab into a file).
  bool whole_in_memory = true;
};

/// The grid the command line reconstructs on (docs/guide/reconstruct.md, "The volume grid"):
/// without a size, cols x cols x rows voxels (more across when a displaced detector covers a
/// wider circle); without a spacing, the detector's field of view at the isocentre divided by
/// the size (pixel pitch / magnification without a size); without an origin, centred on the
/// isocentre. Helical scans: along z, the heights the rows see on the axis for half a turn or
/// more (helical_coverage_of), in slices of the row pitch at the isocentre, centred there.
/// Throws usage_error naming the option on invalid values or a grid too large for memory.
volume_geometry default_grid(const geometry& g, const grid_request& request = {});

/// SDD / SID for cone beams (vector geometries: from the first view's distances to the
/// detector plane), 1 for parallel beams.
double magnification(const geometry& g);

/// The state of an iterative method after some iterations: everything it continues from, bit for
/// bit on the same backend and thread count (what it derives, such as SIRT's weights R and C or
/// the subsets' sensitivities, is recomputed exactly). The arrays and scalars are the method's:
///  * SIRT, OS-SART, OSEM: {x}, no scalars;
///  * CGLS: {x, r = p - A x, d (search direction)}, {gamma = |A^T r|^2, |A^T p|^2, gamma_0};
///  * FISTA-TV: {x, y (extrapolated point), A x, A y}, {t (momentum), L (step, ||A||^2 x 1.1)}.
/// Volumes are [z][y][x] (vg.voxel_count() values), projections [view][row][col].
struct iterative_state {
  int iterations = 0;                          ///< iterations done; 0: none (start afresh)
  std::vector<std::span<const float>> arrays;  ///< the iterate x first
  /// Instead of `arrays` (then empty): the arrays' sizes, and read(k, out), which fills `out`
  /// (sizes[k] floats) with array k. A state read one array at a time, so that at most one of
  /// them is in memory here: how a run whose parts hold the volumes saves (partitioned.hpp),
  /// and how a checkpoint directory resumes.
  std::vector<std::size_t> sizes;
  std::function<void(std::size_t k, std::span<float> out)> read;
  std::vector<double> scalars;
  /// The figures of iterations 1..iterations as recon_options::on_iteration received them, when
  /// it was set (else empty). A resumed run passes them to on_iteration again before its own
  /// iterations, whose seconds continue from the last one: the log of a resumed run is the
  /// whole run's.
  std::vector<iteration_info> log;

  /// How many arrays it holds, and how many values array k holds (either form).
  std::size_t array_count() const { return read ? sizes.size() : arrays.size(); }
  std::size_t array_size(std::size_t k) const { return read ? sizes.at(k) : arrays.at(k).size(); }
  /// Array k into `out` (array_size(k) values; either form).
  void read_array(std::size_t k, std::span<float> out) const;
};

/// Saving and resuming an iterative method's state (ctforge recon --checkpoint-dir).
struct iterative_checkpoint {
  /// Called with the state after every `every` iterations, after `seconds` have passed since the
  /// last call, and before a cancelled call throws (never after the last iteration: the result
  /// is returned instead); its spans are valid during the call. May be empty.
  std::function<void(const iterative_state&)> save;
  int every = 0;       ///< 0: not by count
  double seconds = 0;  ///< 0: not by time
  /// The state to continue from (iterations = 0: none); its arrays are read during the call.
  /// Shapes that do not fit the method, grid and geometry are refused (usage_error).
  iterative_state resume;
};

/// What reconstruct() computes, and where and how (the execution_context it derives from:
/// backend, device, threads, host and GPU memory limits, GPU interpolation, progress and
/// cancellation; see ctforge/execution.hpp).
struct recon_options : execution_context {
  algorithm algo = algorithm::fdk;
  filter_window filter = filter_window::ram_lak;
  double cutoff = 1.0;  ///< window cut-off as a fraction of Nyquist, (0, 1]
  /// FDK / FBP: the weighting of a displaced (half-fan) detector (see displaced_detector_mode).
  displaced_detector_mode displaced_detector = displaced_detector_mode::automatic;
  /// FDK / FBP, displaced detector: width, in detector pixels (>= 1), of the smooth ramps at
  /// the two ends of the overlap both sides of the detector cover; between them each of a
  /// line's two measurements weighs 1/2 (as on a centred detector: the least noise). Clamped to
  /// the overlap's width, which gives Wang's ramp across the whole overlap. The default, 16
  /// pixels, keeps the ramp's slope under pi / (4 x 16) per pixel, smooth for the ramp filter,
  /// while only 2 x 16 columns weigh other than 1/2 (5.5-pixel offset on 201 pixels: the
  /// background noise of uniform 1/2 weights; Wang's ramp: 10% more, tests/recon/
  /// fdk_setup_test.cpp).
  double offset_transition_px = k_default_offset_transition_px;
  /// Helical FBP: the share Q of the detector's height, in [0, 1), where a ray weighs fully;
  /// between Q and the detector's edge its weight falls to 0 as cos^2 (Stierstorfer's WFBP
  /// window), and each ray's weight is divided by the sum over its conjugate rays. Larger Q
  /// uses more of the data (less noise), smaller Q smooths the transitions (fewer cone-beam
  /// artefacts at high pitch).
  double helical_q = 0.7;
  // Iterative methods (filter and cutoff do not apply):
  int iterations = 50;      ///< iterations (OS-SART, OSEM: passes over all subsets), >= 1
  double relaxation = 1.0;  ///< SIRT / OS-SART step length lambda, in (0, 2)
  /// SIRT / OS-SART: clamp the volume at 0 after every update; FISTA-TV: non-negativity in
  /// the prox. OSEM is non-negative by construction; CGLS has no constraint (refused).
  bool nonnegative = false;
  /// OS-SART / OSEM: ordered subsets of views (subset s holds views s, s + n, s + 2n, ...),
  /// >= 1, clamped to the view count. 1 = SIRT's simultaneous update (OS-SART) / MLEM (OSEM).
  int subsets = 10;
  /// FISTA-TV: weight of the total variation, > 0 (required), in units of the volume's values:
  /// FISTA-TV minimises 0.5 |A x - p|^2 / L + tv_weight TV(x), L = ||A||^2, so each iteration
  /// is a gradient step of length 1 and a TV prox of weight tv_weight (isotropic TV, forward
  /// differences; TV(x) = sum over voxels of |grad x| in value units). Typical: 1e-4 to 1e-3
  /// of the object's peak value (5e-4 of it suits 30 views with 2% noise); larger smooths more.
  double tv_weight = 0;
  int tv_iterations = 20;  ///< FISTA-TV: inner FGP steps of the TV prox, in [1, 10000]
  /// Iterative methods: the back-projector (see ctforge::backprojector).
  ctforge::backprojector backprojector = ctforge::backprojector::automatic;
  /// Iterative methods: stop once the relative update |x_k+1 - x_k| / |x_k+1| falls below
  /// this (CGLS: the relative normal-equation residual |A^T (p - A x)| / |A^T p|); 0 = run
  /// every iteration. In [0, 1).
  double tolerance = 0;
  /// Iterative methods: the starting volume, vg.voxel_count() values [z][y][x] (a warm start,
  /// e.g. an FDK result or an earlier run); empty: 0 (OSEM: a positive constant; a warm start
  /// for OSEM must be non-negative, its zeros stay zero). Not with a SIRT resume.
  std::span<const float> initial;
  /// Iterative methods: called after every iteration (from the calling thread) with its
  /// figures. Computing them costs one more forward projection per iteration for OS-SART and
  /// OSEM (SIRT, CGLS and FISTA-TV have A x at hand). May be empty.
  std::function<void(const iteration_info&)> on_iteration;
  /// Reference CPU path (simple loops, double accumulation); slow, for tests.
  bool reference = false;
  /// Iterative methods: save and resume their state (see iterative_checkpoint).
  iterative_checkpoint checkpoint;
};

/// FDK / FBP: the warning for a displaced (half-fan) detector on a short scan, empty when there
/// is none. A displaced detector measures each line that passes farther from the rotation axis
/// than the overlap both sides of the detector cover only once per turn, from its wide side:
/// a scan of less than 360 deg measures only that fraction of them, so the ring of voxels
/// beyond the overlap's radius is reconstructed from incomplete data (the inner disc is
/// right). The text gives the displacement, the covered arc, the radius range (mm about the
/// axis) and the fraction of its lines measured. Empty for full scans, centred detectors (under
/// opt.displaced_detector and its automatic rule), iterative methods, geometries without a
/// circular orbit and inputs reconstruct refuses. `ctforge recon` prints it on stderr and goes
/// on (exit 0); Python's reconstruct issues it as a UserWarning.
std::string displaced_short_scan_warning(const geometry& g, const recon_options& opt);

/// Reconstructs `vg` from line integrals `proj` (views x rows x cols, matching `g`).
/// FDK requires a cone-beam geometry with a circular source orbit (rows = 1 is fan beam), FBP a
/// parallel one whose rays turn about one axis: the "cone" / "parallel" types, and vector
/// geometries whose views fit such an orbit (sources within 1% of the radius of a fitted circle;
/// tilted, rotated, flipped or transposed detectors and per-view jitter are fine), which are
/// resampled onto virtual detectors perpendicular to the central ray first. Full scans
/// (>= 360 deg) get weight 1/2 per redundant ray, or displaced-detector weights when the
/// detector reaches further to one side of the rotation axis than to the other (half-fan: 1/2
/// in the overlap, 1 on the wide side's unmatched columns, smooth ramps of
/// opt.offset_transition_px between; opt.displaced_detector forces or forbids them);
/// short scans with at least 180 deg + fan angle get Parker weights (combined with the
/// displaced-detector weights when both apply). The iterative methods take any geometry and
/// run in an iterative space (CPU arrays, or GPU arrays that stay on the device), with
/// A = forward_project (Joseph), B its back-projector (opt.backprojector), x0 = opt.initial or 0:
///  * SIRT: x <- x + lambda C B (R (p - A x)), R = 1 / A(1) (inverse ray lengths through the
///    grid, 0 for rays that miss it), C = 1 / B(1) (0 for voxels no view sees);
///  * OS-SART: the same update per subset s with R_s = 1 / A_s(1), C_s = 1 / B_s(1);
///  * CGLS: conjugate gradients on A^T A x = A^T p (matched pair), no non-negativity, stops
///    early when the gradient vanishes;
///  * FISTA-TV: x <- prox_{tv_weight TV}(y - A^T (A y - p) / L), y the FISTA momentum point,
///    L = ||A||^2 by power iteration (fixed seed) times 1.05;
///  * OSEM: x <- x A_s^T(p / A_s x) / A_s^T 1 per subset, from a positive constant; refuses
///    negative projections.
/// Throws usage_error on mismatched input or options that do not apply to opt.algo.
volume reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                   const recon_options& opt);

/// reconstruct() on the CUDA backend leaving the volume in GPU memory (device opt.device), shape
/// {nz, ny, nx}: for callers that go on computing on the GPU. FDK / FBP only, and the volume
/// and two batches of views must fit in GPU memory at once (no slabs); usage_error otherwise.
/// `proj` may lie in host memory or (memory_space::cuda_device) on the same device.
device_array reconstruct_to_device(const projection_view& proj, const geometry& g,
                                   const volume_geometry& vg, const recon_options& opt);

/// FDK / FBP as a linear operator R (projections -> volume) with its exact adjoint R^T
/// (volume -> projections), for differentiable pipelines (ctforge.torch.FBP, ctforge.jax.fbp)
/// and adjoint tests. CPU only; circular 'cone' (opt.algo fdk) and 'parallel' (fbp) geometries,
/// flat or cylindrical detectors, full and short scans, displaced detectors (vector geometries
/// are refused: reconstruct resamples them, a step without an adjoint here). R is the chain
///   R = B_w F W P
/// of reconstruct: P pads a displaced detector's narrow side with zero columns, W multiplies
/// each pixel by its pre-weight (angular weight, redundancy or Parker / displaced-detector
/// weight, (SID/SDD)^2, cosine), F ramp filters each row (zero padded to >= 2 cols, cropped
/// back), B_w back-projects voxel by voxel (bilinear detector reads, weight 1/w^2 for cone
/// beam). Its adjoint is the transposed chain R^T = P^T W F B_w^T: B_w^T splats each voxel's
/// weighted value into the four pixels its bilinear read takes, F is symmetric (a real, even
/// kernel on zero-padded rows: F^T = F), W diagonal, P^T crops the padding. Both are linear in
/// their input for fixed g, grid and opt; <R p, v> = <p, R^T v> holds to float rounding.

/// R p: exactly reconstruct(proj, g, vg, opt) with opt.where = cpu and opt.reference = false
/// (the same computation: same floats). opt.algo must be fdk or fbp. A vector geometry with a
/// circular orbit is reconstructed as reconstruct does it: on its circular equivalent, the
/// projections resampled onto its virtual detectors (bicubic) where those are not the real
/// ones. usage_error for a helical geometry, backend cuda, and everything reconstruct refuses
/// (non-finite values included).
volume fbp_apply(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                 const recon_options& opt);

/// R^T v: projections (g.view_count() x g.rows x g.cols) from a volume on the grid vol.geom,
/// with the weights, filter (opt.filter, opt.cutoff) and displaced-detector handling (opt.
/// displaced_detector, opt.offset_transition_px) fbp_apply uses. Deterministic (the splat is
/// parallel over views, each accumulated in double by one thread); for a vector geometry the
/// transposed resampling follows (each virtual pixel splatted back with its interpolation
/// weights). usage_error as fbp_apply, and for a non-finite voxel.
projection_stack fbp_adjoint(const volume_view& vol, const geometry& g, const recon_options& opt);

}  // namespace ctforge
