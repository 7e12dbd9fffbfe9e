// The Joseph projector pair on device-resident data (CUDA translation units only): the forward
// projector (one thread per ray, kernels::joseph_ray_window reading a 3D texture) and its exact
// transpose (one thread per ray, kernels::joseph_scatter_with adding with atomicAdd), both with
// the ray set-up of the CPU path (src/recon/projector.cpp) computed per thread in double from
// small per-view records. Both only enqueue work into the stream they are given: no
// allocation, no synchronisation, no host transfer. Defined in forward_project.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"
#include "cuda/cuda_pipeline.cuh"

namespace ctforge::kernels::cuda {

/// One view of the ray set-up (world frame, mm, double as on the CPU).
struct fp_view {
  double src[3];  ///< cone: source (mm); parallel: ray direction
  double det[3];  ///< detector centre (mm)
  double u[3], v[3];
};

/// Everything a ray needs besides its view (trivially copyable, passed by value).
struct fp_params {
  int nx, ny, nz;  ///< the whole volume
  int cols, rows;
  int cone;
  int curved;        ///< 1: cylindrical detector (kernels::cylinder_pixel_center)
  int z0, tex_nz;    ///< slab in the texture: planes [z0, z0 + tex_nz) of the volume
  float z_lo, z_hi;  ///< ray window of the slab: z0 - 1 <= z <= z0 + tex_nz
  double org[3];     ///< centre of voxel (0, 0, 0), mm
  double inv_sp[3];  ///< 1 / spacing
  double centre[3];  ///< volume centre, mm
};

/// The per-view records of `views` (indices into g.views, in that order; all views when empty).
std::vector<fp_view> make_fp_views(const geometry& g, std::span<const std::int64_t> views = {});

/// Parameters for the whole volume in one texture (z0 = 0, tex_nz = nz, window [-1, nz]).
fp_params make_fp_params(const geometry& g, const volume_geometry& vg);

/// Checks the sizes the kernels' launch geometry and 32-bit pixel indices allow (usage_error
/// naming them).
void check_joseph_launch_limits(const geometry& g, const volume_geometry& vg);

/// out[(i * rows + r) * cols + c] = the Joseph line integral of ray (view view0 + i, r, c) for
/// i in [0, n_views), reading planes [p.z0, p.z0 + p.tex_nz) of the volume from `tex` (a 3D
/// float texture in border mode: point sampled for interp::exact, linear for hardware).
void enqueue_forward_projection(cudaStream_t s, interp mode, cudaTextureObject_t tex,
                                const fp_view* views, const fp_params& p, std::int64_t view0,
                                std::int64_t n_views, float* out);

/// volume += A^T proj for the views [0, n_views) of `views` (the whole volume, p.z0 = 0 and
/// p.tex_nz = p.nz): every ray scatters its value over the samples and trilinear weights the
/// interp::exact forward projector reads (the exact transpose of enqueue_forward_projection in
/// that mode). Rays of value 0 are skipped. Accumulates with atomicAdd: the order of the float
/// additions, and so the last bits of the result, may differ from run to run.
void enqueue_matched_backprojection(cudaStream_t s, const fp_view* views, const fp_params& p,
                                    std::int64_t n_views, const float* proj, float* volume);

}  // namespace ctforge::kernels::cuda
