// The flat-detector loops of the CPU back-projection written with SIMD intrinsics (defined in
// recon/backproject_simd.cpp). Callers go through detail::backproject (recon/backproject.hpp),
// which chooses them by detail::cpu_simd_level().
#pragma once

#include "ctforge/volume.hpp"
#include "math/geometry.hpp"
#include "recon/backproject_cpu.hpp"
#include "recon/cpu_simd.hpp"

namespace ctforge::detail {

/// Back-projects every view of `proj` (zero-bordered) into all of `out` (geometry `vg`,
/// [z][y][x]); ADDS to `out`. `mats` holds proj.views float matrices. distance_weighting: FDK
/// weight 1/w^2 or none. shared_z: the loop that computes a voxel column's detector column,
/// 1/w and weight once for 16 z-planes (only for views whose p0 and p2 do not depend on z;
/// AVX2, or AVX-512 when `level` is avx512); otherwise the per-plane loop (AVX2 at either
/// level). `level` must be avx2 or avx512 and supported by this CPU (usage_error otherwise).
/// threads = 0: all cores.
void backproject_simd(const padded_projections& proj, const kernels::proj_matrix* mats,
                      const volume_geometry& vg, bool distance_weighting, float* out, int threads,
                      bool shared_z, simd_level level);

}  // namespace ctforge::detail
