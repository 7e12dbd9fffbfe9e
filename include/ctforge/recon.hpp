// Reconstruction API: one entry point for every algorithm and backend.
#pragma once

#include <cstdint>
#include <array>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ctforge/backend.hpp"
#include "ctforge/cancel.hpp"
#include "ctforge/device.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// fdk: filtered back-projection for circular cone / fan beam; fbp: for circular parallel beam;
/// sirt: the iterative Simultaneous Iterative Reconstruction Technique, for any geometry
/// (vector geometries included) on the Joseph forward and voxel-driven back projectors.
enum class algorithm { fdk, fbp, sirt, cgls };

/// SIRT and CGLS (iterations, any geometry) as opposed to FDK / FBP (analytic, circular orbits).
inline bool is_iterative(algorithm a) {
  return a == algorithm::sirt || a == algorithm::cgls;
}
enum class filter_window { ram_lak, shepp_logan, cosine, hamming, hann };

algorithm parse_algorithm(std::string_view name);   ///< "fdk", "fbp", "sirt", "cgls"
std::string to_string(algorithm a);
filter_window parse_filter(std::string_view name);  ///< "ram-lak", "shepp-logan", ...
std::string to_string(filter_window w);

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

/// The grid the command line reconstructs on (README, "Default grid"): without a size,
/// cols x cols x rows voxels (more across when a displaced detector covers a wider circle);
/// without a spacing, the detector's field of view at the isocentre divided by the size (pixel
/// pitch / magnification without a size); without an origin, centred on the isocentre.
/// Throws usage_error naming the option on invalid values or a grid too large for memory.
volume_geometry default_grid(const geometry& g, const grid_request& request = {});

/// SDD / SID for cone beams (vector geometries: from the first view's distances to the
/// detector plane), 1 for parallel beams.
double magnification(const geometry& g);

/// Resumable SIRT: the iterate after a number of iterations is SIRT's whole state (the weights
/// R and C are recomputed exactly from the geometry), so saving it and starting again from it
/// continues bit for bit.
struct sirt_checkpoint {
  /// Called with the iterations done and the iterate ([z][y][x], valid during the call) after
  /// every `every` iterations, after `seconds` have passed since the last call, and before a
  /// cancelled call throws. May be empty.
  std::function<void(int iterations_done, std::span<const float> x)> save;
  int every = 0;        ///< 0: not by count
  double seconds = 0;   ///< 0: not by time
  int resume_iterations = 0;      ///< iterations already done in resume_x (0: start from x = 0)
  std::span<const float> resume_x;  ///< the iterate after them, vg.voxel_count() values
};

struct recon_options {
  algorithm algo = algorithm::fdk;
  filter_window filter = filter_window::ram_lak;
  double cutoff = 1.0;  ///< window cut-off as a fraction of Nyquist, (0, 1]
  // SIRT and CGLS (filter and cutoff do not apply):
  int iterations = 50;       ///< SIRT / CGLS iterations, >= 1
  double relaxation = 1.0;   ///< SIRT step length lambda, in (0, 2)
  bool nonnegative = false;  ///< SIRT: clamp the volume at 0 after every iteration
  backend where = backend::automatic;
  int threads = 0;  ///< CPU threads, 0 = all
  int device = 0;   ///< CUDA device ordinal
  /// Upper bound on GPU memory the CUDA backend may use (bytes); 0 = automatic (free memory
  /// less a safety margin). Forwarded into detail::cuda_options::memory_limit_bytes.
  std::int64_t gpu_memory_limit_bytes = 0;
  /// CUDA backend: interpolate the detector with the texture unit (one fetch per sample;
  /// faster, but its 8-bit fractional weights put results ~1e-4 of the peak from the CPU's)
  /// instead of the default exact fp32 bilinear arithmetic of the CPU path (~1e-6).
  bool gpu_hardware_interpolation = false;
  /// Reference CPU path (simple loops, double accumulation); slow, for tests.
  bool reference = false;
  /// Called with the fraction done in [0, 1]; may be empty. Called from the calling thread,
  /// after every batch of views (CPU: at most 8 per pass), z-slab or SIRT iteration.
  std::function<void(double)> progress;
  /// Checked at the same points as progress (right after it is called): once requested, the
  /// call stops there, frees what it holds and throws ctforge::cancelled. A progress callback
  /// may request it itself (the Python module does so on KeyboardInterrupt).
  cancellation_token cancel;
  /// SIRT only: save and resume the iterate (see sirt_checkpoint).
  sirt_checkpoint sirt_state;
};

/// Reconstructs `vg` from line integrals `proj` (views x rows x cols, matching `g`).
/// FDK requires a cone-beam geometry with a circular source orbit (rows = 1 is fan beam), FBP a
/// parallel one whose rays turn about one axis: the "cone" / "parallel" types, and vector
/// geometries whose views fit such an orbit (sources within 1% of the radius of a fitted circle;
/// tilted, rotated, flipped or transposed detectors and per-view jitter are fine), which are
/// resampled onto virtual detectors perpendicular to the central ray first. Full scans
/// (>= 360 deg) get weight 1/2 per redundant ray, or Wang's displaced-detector weights when the
/// detector reaches further to one side of the rotation axis than to the other (half-fan);
/// short scans with at least 180 deg + fan angle get Parker weights (combined with the
/// displaced-detector weights when both apply). SIRT takes any geometry:
///   x <- x + lambda C B (R (p - A x)),   x0 = 0,
/// A = forward_project (Joseph), B = back_project (voxel-driven), R = 1 / A(1) (inverse ray
/// lengths through the grid, 0 for rays that miss it), C = 1 / B(1) (inverse count of views
/// seeing each voxel, 0 for voxels none sees); each iteration runs one forward and one back
/// projection on the chosen backend (on CUDA, volume and projections cross PCIe every
/// iteration). CGLS (CPU) minimises ||A x - p||^2 by conjugate gradients on the normal
/// equations from x0 = 0, with A = forward_project and its exact transpose
/// back_project_matched: fewer iterations than SIRT for the same error on consistent data, no
/// non-negativity, stops early when the gradient vanishes. Throws usage_error on mismatched
/// input.
volume reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                   const recon_options& opt);

/// reconstruct() on the CUDA backend leaving the volume in GPU memory (device opt.device), shape
/// {nz, ny, nx}: for callers that go on computing on the GPU. FDK / FBP only, and the volume
/// and two batches of views must fit in GPU memory at once (no z-slabs); usage_error otherwise.
/// `proj` may lie in host memory or (memory_space::cuda_device) on the same device.
device_array reconstruct_to_device(const projection_view& proj, const geometry& g,
                                   const volume_geometry& vg, const recon_options& opt);

}  // namespace ctforge
