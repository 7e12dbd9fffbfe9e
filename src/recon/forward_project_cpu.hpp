// The CPU forward projector's entry points for tests, benchmarks and the iterative methods: the
// vectorised loop and the scalar reference loop side by side, the projectors writing into the
// caller's memory, the slab decomposition the CUDA forward projector uses when the volume does
// not fit in device memory (src/cuda/forward_project.cu), and the number of plane samples a
// projection takes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// The loop the CPU forward projector runs. Both visit the same rays, planes and bilinear weights
/// (kernels::joseph_ray_plan, kernels::joseph_plane_sample); they differ by float rounding only.
enum class forward_path {
  automatic,  ///< `vectorised` where the CPU has AVX2 and FMA, else `scalar` (what
              ///< ctforge::forward_project runs)
  scalar,     ///< one ray at a time through kernels::joseph_ray_window (the CUDA kernel's body)
  vectorised  ///< 8 neighbouring rays of a detector row at once (AVX2 + FMA gathers); `scalar`
              ///< where the CPU lacks them
};

/// True when forward_path::automatic and ::vectorised run the AVX2 loop on this CPU and build.
bool forward_project_vectorised();

/// ctforge::forward_project on the CPU through the loop `path` selects.
projection_stack forward_project_cpu(const volume_view& vol, const geometry& g, int threads,
                                     forward_path path);

/// ctforge::back_project_matched (the forward projector's exact transpose) through the loop
/// `path` selects: scalar, one ray at a time through kernels::joseph_scatter (the CUDA kernel's
/// body), or vectorised, 8 rays of a detector row at once with the forward loop's lanes. They
/// differ by float rounding only.
volume back_project_matched_cpu(const projection_view& proj, const geometry& g,
                                const volume_geometry& vg, int threads, forward_path path);

/// ctforge::forward_project into the caller's memory: `out` holds g.view_count() * rows * cols
/// floats [view][row][col] and is overwritten. The same checks and loop, no allocation: for the
/// iterative space and projector_pair, which project once per iteration.
void forward_project_into(const volume_view& vol, const geometry& g, int threads,
                          std::span<float> out);

/// What back_project_matched_into keeps between calls: the volumes of the threads beyond the
/// first (the first scatters into the output). Reused without allocation while the grid and
/// thread count stay the same.
struct matched_scratch {
  std::vector<std::vector<float>> partial;
};

/// ctforge::back_project_matched into `out` (vg.voxel_count() floats, overwritten), its
/// per-thread volumes kept in `scratch`. Bit-identical to back_project_matched.
void back_project_matched_into(const projection_view& proj, const geometry& g,
                               const volume_geometry& vg, int threads, std::span<float> out,
                               matched_scratch& scratch);

/// ctforge::back_project (voxel-driven, unweighted) into `out` (vg.voxel_count() floats,
/// overwritten). Bit-identical to back_project.
void back_project_into(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                       int threads, std::span<float> out);

/// ctforge::forward_project computed slab by slab: planes [z0, z0 + slab_nz) are projected on
/// their own with kernels::joseph_ray_window (window [z0 - 1, z0 + slab_nz]) and the slabs'
/// projections summed in float, in slab order. Equal to forward_project up to float rounding of
/// that sum (bit-identical with slab_nz >= nz and the same path). For tests of the GPU's slab
/// arithmetic.
projection_stack forward_project_slabs(const volume_view& vol, const geometry& g,
                                       std::int64_t slab_nz, int threads = 0,
                                       forward_path path = forward_path::automatic);

/// Number of plane samples forward_project takes for volume grid `vg` and geometry `g`: the
/// planes each ray's walk covers (kernels::joseph_ray_plan: k1 - k0 + 1), summed over the rays.
/// The unit of the benchmarks' samples/s.
std::int64_t forward_project_samples(const volume_geometry& vg, const geometry& g, int threads = 0);

}  // namespace ctforge::detail
