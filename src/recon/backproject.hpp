// The CPU back-projection: one entry, detail::backproject, for every CPU caller (the FDK / FBP
// backend in recon/fdk.cpp, ctforge::back_project and the voxel-driven adjoint of the iterative
// CPU space in recon/projector.cpp, benchmarks and tests).
//
// Usage (FDK, one batch of views):
//   auto padded = detail::make_padded_projections(filtered);    // recon/backproject_cpu.hpp
//   auto mats   = kernels::float_matrices(g);                   // one per view
//   volume out(vg);                                             // zero
//   detail::bp_job job;
//   job.padded = &padded; job.mats = mats.data(); job.grid = vg; job.out = out.data.data();
//   job.distance_weighting = true; job.threads = threads;
//   detail::backproject(job);                                   // ADDS to out
//
// The strategies (all ADD to job.out; every one is the arithmetic of kernels::bp_contribution
// with a border-zero bilinear detector, up to rounding):
//  * reference: double matrices (or project_to_detector for a cylindrical detector), double
//    accumulation over the views, the bounds-checked sampler (recon_options::reference);
//  * per_plane: each voxel's detector position computed in its own plane; SIMD (AVX2) where
//    cpu_simd_level() allows (recon/backproject_simd.cpp), else the portable loop
//    (recon/backproject_cpu.hpp);
//  * shared_z: a voxel column's detector column, 1/w and weight computed once for 16 z-planes,
//    only the row per plane; needs views whose p0 and p2 do not depend on z (untilted circular
//    orbits); AVX2 or AVX-512 by cpu_simd_level(), the portable loop without SIMD;
//  * automatic: shared_z where every view allows it and the grid has more than one plane, else
//    per_plane.
// A cylindrical detector (job.maps) has one fast loop (backproject_cpu_curved, which shares each
// voxel column's mapping between all planes) whatever the fast strategy.
#pragma once

#include <functional>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"
#include "math/cylinder.hpp"
#include "math/geometry.hpp"
#include "recon/backproject_cpu.hpp"

namespace ctforge::detail {

enum class bp_strategy { automatic, reference, per_plane, shared_z };

/// "automatic", "reference", "per-plane", "shared-z".
const char* to_string(bp_strategy s);

/// What to back-project, where to, and how weighted.
struct bp_job {
  /// Fast strategies: the views, zero-bordered (make_padded_projections), with one float matrix
  /// per view (flat detector, kernels::float_matrices) or one cylinder map (cylindrical
  /// detector, kernels::cylinder_maps), padded->views of them.
  const padded_projections* padded = nullptr;
  const kernels::proj_matrix* mats = nullptr;
  const kernels::cyl_map* maps = nullptr;
  /// Reference strategy: the views as they are and their geometry (double matrices, or
  /// project_to_detector for a cylindrical detector).
  const projection_view* views = nullptr;
  const geometry* geom = nullptr;
  volume_geometry grid;
  float* out = nullptr;             ///< grid.voxel_count() floats, [z][y][x]; the result is ADDED
  bool distance_weighting = false;  ///< FDK weight 1/w^2 (cone beam) or none
  int threads = 0;                  ///< 0: all cores
  /// Reference strategy only: called after each of its (up to 16) slabs with the fraction
  /// done, (slab + 1) / slabs; may throw to cancel.
  std::function<void(double)> progress;

  /// A job for the fast strategies, flat detector: `mats` holds p.views matrices.
  static bp_job flat(const padded_projections& p, const kernels::proj_matrix* mats,
                     const volume_geometry& vg, float* out, bool distance_weighting, int threads) {
    bp_job j;
    j.padded = &p;
    j.mats = mats;
    j.grid = vg;
    j.out = out;
    j.distance_weighting = distance_weighting;
    j.threads = threads;
    return j;
  }
};

/// Back-projects every view of `job` into job.out with `strategy` (see the file comment).
/// Must not be called from inside an OpenMP parallel region.
void backproject(const bp_job& job, bp_strategy strategy = bp_strategy::automatic);

/// True when every flat-detector matrix of `mats` has p0 and p2 independent of z (the condition
/// of the shared_z strategy).
bool views_allow_shared_z(const kernels::proj_matrix* mats, std::int64_t views);

/// The transpose of the voxel-driven back-projection of the fast strategies (flat detector:
/// kernels::bp_point_of, cylindrical: kernels::bp_point_cyl, with weight 1/w^2 when
/// `distance_weighting`): each voxel of `vol` adds its value times its weight to the four pixels
/// of its bilinear read of every view (kernels::splat_bilinear_border), in double per view.
/// OpenMP over views, each view owned by one thread: the result does not depend on the thread
/// count. Used by ctforge::fbp_adjoint (src/recon/fbp_operator.cpp).
projection_stack splat_views(const volume_view& vol, const geometry& g, bool distance_weighting,
                             int threads = 0);

}  // namespace ctforge::detail
