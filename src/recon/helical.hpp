// Helical weighted FBP (algorithm::helical_fbp): set-up shared by the CPU path and the CUDA
// backend, and the CPU path. The per-ray and per-voxel arithmetic is math/helical.hpp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "math/helical.hpp"

namespace ctforge::detail {

struct helical_setup {
  kernels::helical_params params{};
  std::vector<kernels::helical_view> views;  ///< one per parallel view (= per scanned view)
  std::int64_t cols_t = 0;                   ///< rebinned columns
  std::vector<kernels::rebin_tap> taps;      ///< [view][cols_t]
  /// Index range [view_lo, view_hi) of the parallel views a grid's voxels can read.
  std::int64_t view_lo = 0, view_hi = 0;
};

/// Checks the input (usage_error naming what is wrong: not a helical geometry, one row, a pitch
/// the rows cannot cover, shapes, options) and builds the set-up for grid `vg`.
helical_setup make_helical_setup(const projection_view& proj, const geometry& g,
                                 const volume_geometry& vg, const recon_options& opt);

/// The views [first, last) of helical geometry g whose rays can reach grid vg's voxels (the
/// source within the rows' reach of its heights), two views wider on each side for the
/// interpolation between views: a slab unit's views. Every view of a short scan.
std::pair<std::int64_t, std::int64_t> helical_unit_views(const geometry& g,
                                                         const volume_geometry& vg);

/// Steps 1-2 of math/helical.hpp: the cone-angle cosine and the fan-to-parallel rebinning of
/// views [v0, v1) of the parallel data into `out` ([v1 - v0][rows][cols_t]).
void rebin_views(const projection_view& proj, const helical_setup& s, std::int64_t v0,
                 std::int64_t v1, float* out, int threads);

/// The whole reconstruction on the CPU.
volume helical_reconstruct_cpu(const projection_view& proj, const geometry& g,
                               const volume_geometry& vg, const recon_options& opt,
                               const helical_setup& s);

/// The reconstruction on the backend `opt` selects (CPU, or CUDA when built with it).
volume helical_reconstruct(const projection_view& proj, const geometry& g,
                           const volume_geometry& vg, const recon_options& opt);

}  // namespace ctforge::detail
