// CPU forward projection split into z-slabs, the decomposition the CUDA forward projector uses
// when the volume does not fit in device memory (src/kernels/forward_project.cu).
#pragma once

#include <cstdint>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// ctforge::forward_project computed slab by slab: planes [z0, z0 + slab_nz) are projected on
/// their own with kernels::joseph_ray_window (window [z0 - 1, z0 + slab_nz]) and the slabs'
/// projections summed in float, in slab order. Equal to forward_project up to float rounding of
/// that sum (bit-identical with slab_nz >= nz). For tests of the GPU's slab arithmetic.
projection_stack forward_project_slabs(const volume_view& vol, const geometry& g, std::int64_t slab_nz,
                                       int threads = 0);

}  // namespace ctforge::detail
