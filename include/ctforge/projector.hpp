// Forward and back projection of voxel volumes for any (vector) geometry on the CPU.
#pragma once

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// Ray-driven forward projection (Joseph's method: one sample per voxel plane along the
/// dominant axis, bilinear in the other two; zero outside the volume). Result in mm * density.
/// One ray through each pixel centre. threads = 0: all cores.
projection_stack forward_project(const volume& vol, const geometry& g, int threads = 0);

/// Voxel-driven back-projection through per-view projection matrices with bilinear detector
/// interpolation (unweighted: sum over views of the interpolated projection value).
/// reference = true runs the plain double-accumulating reference loop instead of the fast path.
volume back_project(const projection_stack& proj, const geometry& g, const volume_geometry& vg,
                    int threads = 0, bool reference = false);

}  // namespace ctforge
