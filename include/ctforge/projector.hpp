// Forward and back projection of voxel volumes for any (vector) geometry, on the CPU or a
// CUDA device.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "ctforge/backend.hpp"
#include "ctforge/execution.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// Where and how a projector runs: the execution context (ctforge/execution.hpp). The
/// projectors run to completion: they neither call `progress` nor check `cancel`, and
/// `memory_limit_bytes` (host) does not apply to them.
struct projector_options : execution_context {};

/// Ray-driven forward projection (Joseph's method: one sample per voxel plane along the
/// dominant axis, bilinear in the other two; zero outside the volume). Result in mm * density.
/// One ray through each pixel centre. threads = 0: all cores. A non-finite voxel is a
/// usage_error naming it (as is a non-finite projection value for back_project), on every
/// backend.
projection_stack forward_project(const volume_view& vol, const geometry& g, int threads = 0);

/// forward_project on the backend `opt` selects. The GPU reads the volume through a 3D texture
/// with the CPU's trilinear arithmetic (agreement ~1e-6 of the peak). Synchronises before
/// returning.
projection_stack forward_project(const volume_view& vol, const geometry& g,
                                 const projector_options& opt);

/// Voxel-driven back-projection through per-view projection matrices with bilinear detector
/// interpolation (unweighted: sum over views of the interpolated projection value).
/// reference = true runs the plain double-accumulating reference loop instead of the fast path.
volume back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                    int threads = 0, bool reference = false);

/// back_project (fast path) on the backend `opt` selects; the adjoint of forward_project only
/// up to the interpolation models (voxel-driven here, ray-driven there). Synchronises before
/// returning.
volume back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                    const projector_options& opt);

/// The exact transpose of forward_project (CPU): each ray scatters its value along the samples
/// and trilinear weights forward_project reads it with, so that <A x, y> = <x, A^T y> up to
/// float rounding for any volume x and projections y (the matched pair CGLS needs). Holds one
/// volume per thread; deterministic for a given thread count.
volume back_project_matched(const projection_view& proj, const geometry& g,
                            const volume_geometry& vg, int threads = 0);

/// A back-projector paired with the Joseph forward projector: matched, its exact transpose
/// (back_project_matched's scatter), or voxel, the voxel-driven back-projector (back_project:
/// faster, the transpose only up to the interpolation models). automatic: a projector_pair
/// takes matched; an iterative method (recon_options::backprojector) takes voxel for SIRT and
/// OS-SART and matched for the others (CGLS and FISTA-TV need the exact transpose and refuse
/// voxel).
enum class backprojector { automatic, voxel, matched };

/// What a projector_pair has done so far. On CUDA every device allocation (arrays, textures,
/// buffers, per-view geometry) is made by the constructor, so `allocations` stays constant from
/// the first call on; bytes count host <-> device copies. On the CPU nothing crosses a bus and
/// the counters of bytes and allocations stay 0.
struct projector_pair_stats {
  std::int64_t allocations = 0;
  std::int64_t bytes_uploaded = 0, bytes_downloaded = 0;
  std::int64_t apply_calls = 0, adjoint_calls = 0;
};

/// A forward projector and its adjoint for one geometry and voxel grid, kept for repeated use
/// (the operator A of an iterative solver, e.g. scipy's LinearOperator). On the CPU it runs
/// forward_project and back_project_matched (or back_project) straight into the caller's
/// memory, keeping the matched back-projector's per-thread volumes (threads - 1 volumes) from
/// the first apply_adjoint to its destruction. On CUDA it keeps the volume texture, the
/// projection buffers, the per-view geometry and its stream on the device between calls: one
/// upload and one download per call, no allocation. Calls on one object are serialised by the
/// caller (not thread-safe); move-only.
class projector_pair {
 public:
  /// opt.where automatic: CUDA when a usable device exists. Throws usage_error for an invalid
  /// geometry, grid or options, and on CUDA when the volume and projections do not fit in the
  /// device memory budget (opt.gpu_memory_limit_bytes or the free memory).
  projector_pair(const geometry& g, const volume_geometry& vg, const projector_options& opt = {},
                 backprojector adjoint = backprojector::matched);
  ~projector_pair();
  projector_pair(projector_pair&&) noexcept;
  projector_pair& operator=(projector_pair&&) noexcept;
  projector_pair(const projector_pair&) = delete;
  projector_pair& operator=(const projector_pair&) = delete;

  /// projections = A volume. volume: volume_size() floats [z][y][x]; projections:
  /// projection_size() floats [view][row][col]. usage_error naming the expected size otherwise,
  /// or for a non-finite voxel.
  void apply(std::span<const float> volume, std::span<float> projections);
  /// volume = A^T projections (the adjoint chosen at construction). usage_error naming the
  /// expected size, or for a non-finite projection value.
  void apply_adjoint(std::span<const float> projections, std::span<float> volume);

  std::int64_t volume_size() const;      ///< nz * ny * nx
  std::int64_t projection_size() const;  ///< views * rows * cols
  const geometry& geom() const;
  const volume_geometry& grid() const;
  backend where() const;  ///< cpu or cuda (resolved)
  backprojector adjoint() const;
  projector_pair_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ctforge
