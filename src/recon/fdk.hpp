// Internal entry points of the CPU FDK / FBP path (src/recon/fdk.cpp) used by benchmarks and
// tests. They are compiled into the library with its CPU flags (-march=${CTFORGE_CPU_ARCH}), so
// callers time exactly the code ctforge::reconstruct runs.
#pragma once

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "math/cylinder.hpp"
#include "math/geometry.hpp"
#include "recon/backproject_cpu.hpp"
#include "recon/fdk_setup.hpp"

namespace ctforge::detail {

/// The loops of backproject_filtered_cpu: automatic shares a voxel column's detector column,
/// 1/w and weight between z-planes where every view allows it (untilted circular orbits: p0 and
/// p2 independent of z); per_plane computes them for each voxel (the loop of every other
/// geometry; for tests and benchmarks of the shared loop). Both give the same values up to a few
/// ulp.
enum class bp_loop { automatic, per_plane };

/// Back-projects every view of `proj` (zero-bordered, see make_padded_projections) into all of
/// `out` (geometry `vg`, [z][y][x]); ADDS to `out`. `mats` holds proj.views float matrices.
/// distance_weighting: FDK weight 1/w^2 (cone beam) or none (parallel beam).
/// threads = 0: all cores.
void backproject_filtered_cpu(const padded_projections& proj, const kernels::proj_matrix* mats,
                              const volume_geometry& vg, bool distance_weighting, float* out,
                              int threads, bp_loop loop = bp_loop::automatic);
/// The same for a cylindrical detector: `maps` holds proj.views kernels::cyl_map
/// (backproject_cpu_curved: each voxel column's mapping computed once for all z).
void backproject_filtered_cpu(const padded_projections& proj, const kernels::cyl_map* maps,
                              const volume_geometry& vg, bool distance_weighting, float* out,
                              int threads);

/// FDK / FBP on the CPU of a circular geometry `g` after make_fdk_setup (pre-weighting, ramp
/// filter, back-projection: the fast loop, or opt.reference's double-precision one). Reports
/// progress through opt.progress and checks opt.cancel.
volume fdk_reconstruct_cpu(const projection_view& proj, const geometry& g,
                           const volume_geometry& vg, const recon_options& opt,
                           const fdk_setup& setup);

}  // namespace ctforge::detail
