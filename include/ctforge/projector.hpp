// Forward and back projection of voxel volumes for any (vector) geometry, on the CPU or a
// CUDA device.
#pragma once

#include <cstdint>

#include "ctforge/backend.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// Where and how a projector runs.
struct projector_options {
  backend where = backend::automatic;  ///< automatic: CUDA when a usable device exists
  int threads = 0;                     ///< CPU threads (also the GPU path's host copies); 0 = all
  int device = 0;                      ///< CUDA device ordinal
  /// Upper bound on GPU memory (bytes); 0 = free memory less a safety margin. Back-projection
  /// and forward projection split the volume into z-slabs when it does not fit (forward
  /// projection first tries fewer views at a time).
  std::int64_t gpu_memory_limit_bytes = 0;
  /// CUDA backend: texture-unit bilinear / trilinear interpolation (faster; ~1e-4 of the peak
  /// from the CPU result) instead of the exact fp32 arithmetic of the CPU path.
  bool gpu_hardware_interpolation = false;
};

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

}  // namespace ctforge
