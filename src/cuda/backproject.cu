// Voxel-driven back-projection kernel: filtered projections read through a layered texture,
// per-view 3x4 matrices in __constant__ memory, k_z voxels per thread along z accumulated in
// registers over every view of the batch, then one read-modify-write of the volume.
// The per-view arithmetic is kernels::bp_contribution<W>, shared with the CPU path: with a
// projection matrix per view (flat detectors) or, in the Curved variant, a kernels::cyl_map
// held in the same 12 floats (cylindrical detectors).
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "math/backproject.hpp"

namespace ctforge::kernels::cuda {
namespace {

__constant__ bp_constants c_bp;

constexpr int k_block_x = 32;  // voxels along x per block (one warp: neighbouring detector columns)
constexpr int k_block_y = 4;   // voxels along y per block
constexpr int k_z = 8;         // voxels along z per thread

// Copies the current batch's matrices and the slab header into the staging block, from which
// a memcpy node fills c_bp. One block of threads.
__global__ void assemble_constants(bp_sources src) {
  const int b = *src.counter;
  const int first = b * src.views_per_batch;
  int n = src.total_views - first;
  n = n < 0 ? 0 : (n > src.views_per_batch ? src.views_per_batch : n);
  if (threadIdx.x == 0) {
    src.staging->slab = *src.slab;
    src.staging->n_views = n;
  }
  for (int i = threadIdx.x; i < n * 12; i += blockDim.x)
    src.staging->m[i / 12].m[i % 12] = src.matrices[first + i / 12].m[i % 12];
}

// Bilinear sample with the CPU sampler's arithmetic (kernels::sample_bilinear_border) from a
// point-sampled, border-addressed layered texture: each tap reads the texel or 0 outside.
__device__ __forceinline__ float sample_exact(cudaTextureObject_t tex, float col, float row,
                                              int layer, int cols, int rows) {
  if (!(col > -1.0f && col < static_cast<float>(cols) && row > -1.0f &&
        row < static_cast<float>(rows)))
    return 0.0f;
  const float fc = floorf(col), fr = floorf(row);
  const float ac = col - fc, ar = row - fr;
  const float x0 = fc + 0.5f, y0 = fr + 0.5f;
  const float p00 = tex2DLayered<float>(tex, x0, y0, layer);
  const float p10 = tex2DLayered<float>(tex, x0 + 1.0f, y0, layer);
  const float p01 = tex2DLayered<float>(tex, x0, y0 + 1.0f, layer);
  const float p11 = tex2DLayered<float>(tex, x0 + 1.0f, y0 + 1.0f, layer);
  return (1.0f - ar) * ((1.0f - ac) * p00 + ac * p10) + ar * ((1.0f - ac) * p01 + ac * p11);
}

template <bp_weighting W, interp Mode, bool Curved>
__global__ void __launch_bounds__(k_block_x* k_block_y)
    backproject_kernel(cudaTextureObject_t tex, float* __restrict__ volume) {
  const bp_slab_header& h = c_bp.slab;
  const int ix = static_cast<int>(blockIdx.x) * k_block_x + static_cast<int>(threadIdx.x);
  const int iy = static_cast<int>(blockIdx.y) * k_block_y + static_cast<int>(threadIdx.y);
  const int iz0 = static_cast<int>(blockIdx.z) * k_z;
  if (ix >= h.nx || iy >= h.ny || iz0 >= h.nz) return;
  const float x = h.ox + static_cast<float>(ix) * h.sx;
  const float y = h.oy + static_cast<float>(iy) * h.sy;
  float zs[k_z];
#pragma unroll
  for (int k = 0; k < k_z; ++k) zs[k] = h.oz + static_cast<float>(iz0 + k) * h.sz;

  float acc[k_z];
#pragma unroll
  for (int k = 0; k < k_z; ++k) acc[k] = 0.0f;

  const int n = c_bp.n_views;
  const int rows_valid = h.rows_valid;
  const float rows_limit = static_cast<float>(rows_valid);
  for (int v = 0; v < n; ++v) {
    const proj_matrix& P = c_bp.m[v];
    const auto sample = [&](float col, float row) -> float {
      if constexpr (Mode == interp::hardware) {
        // Border addressing gives zero beyond the array; rows at or beyond rows_valid hold no
        // data of this slab (or lie beyond the detector) and read zero as on the CPU.
        return row < rows_limit ? tex2DLayered<float>(tex, col + 0.5f, row + 0.5f, v) : 0.0f;
      } else {
        return sample_exact(tex, col, row, v, h.cols, rows_valid);
      }
    };
    if constexpr (Curved) {
      cyl_map M;
#pragma unroll
      for (int i = 0; i < 12; ++i) M.m[i] = P.m[i];
      const cyl_column q = cyl_column_of(M, x, y);  // shared by the thread's k_z voxels
#pragma unroll
      for (int k = 0; k < k_z; ++k) acc[k] += bp_contribution_cyl<W>(M, q, zs[k], sample);
    } else {
#pragma unroll
      for (int k = 0; k < k_z; ++k) acc[k] += bp_contribution<W>(P, x, y, zs[k], sample);
    }
  }

  const std::int64_t plane = static_cast<std::int64_t>(h.nx) * h.ny;
  float* dst =
      volume + static_cast<std::int64_t>(iz0) * plane + static_cast<std::int64_t>(iy) * h.nx + ix;
#pragma unroll
  for (int k = 0; k < k_z; ++k)
    if (iz0 + k < h.nz) dst[k * plane] += acc[k];
}

template <bp_weighting W, interp Mode>
void launch(cudaStream_t s, cudaTextureObject_t tex, float* volume, int nx, int ny, int max_nz,
            bool curved) {
  const dim3 block(k_block_x, k_block_y, 1);
  const dim3 grid(blocks_for(nx, k_block_x), blocks_for(ny, k_block_y), blocks_for(max_nz, k_z));
  if (curved)
    backproject_kernel<W, Mode, true><<<grid, block, 0, s>>>(tex, volume);
  else
    backproject_kernel<W, Mode, false><<<grid, block, 0, s>>>(tex, volume);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the back-projection kernel");
}

}  // namespace

std::mutex& backprojection_constants_mutex() {
  static std::mutex m;
  return m;
}

void preload_backprojection_kernels() {
  cudaFuncAttributes a{};
  CTFORGE_CUDA_TRY(cudaFuncGetAttributes(&a, assemble_constants));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::fdk, interp::hardware, false>));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::fdk, interp::exact, false>));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::none, interp::hardware, false>));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::none, interp::exact, false>));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::fdk, interp::hardware, true>));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::fdk, interp::exact, true>));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::none, interp::hardware, true>));
  CTFORGE_CUDA_TRY(
      cudaFuncGetAttributes(&a, backproject_kernel<bp_weighting::none, interp::exact, true>));
  void* sym = nullptr;
  CTFORGE_CUDA_TRY(cudaGetSymbolAddress(&sym, c_bp), "locating the back-projection constants");
}

void enqueue_backprojection(cudaStream_t s, bp_weighting w, interp mode, const bp_sources& src,
                            cudaTextureObject_t tex_linear, cudaTextureObject_t tex_point,
                            float* volume, int nx, int ny, int max_nz, bool curved) {
  CTFORGE_EXPECTS(
      src.views_per_batch >= 1 && src.views_per_batch <= k_max_batch_views,
      "back-projection: views per batch must be in [1, " + std::to_string(k_max_batch_views) + "]");
  assemble_constants<<<1, 256, 0, s>>>(src);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the back-projection set-up kernel");
  // Header and the batch's matrices only (the rest of c_bp is never read).
  const std::size_t bytes = offsetof(bp_constants, m) +
                            static_cast<std::size_t>(src.views_per_batch) * sizeof(proj_matrix);
  CTFORGE_CUDA_TRY(
      cudaMemcpyToSymbolAsync(c_bp, src.staging, bytes, 0, cudaMemcpyDeviceToDevice, s),
      "copying the batch's projection matrices to constant memory");
  const bool fdk = w == bp_weighting::fdk;
  if (mode == interp::hardware) {
    if (fdk)
      launch<bp_weighting::fdk, interp::hardware>(s, tex_linear, volume, nx, ny, max_nz, curved);
    else
      launch<bp_weighting::none, interp::hardware>(s, tex_linear, volume, nx, ny, max_nz, curved);
  } else {
    if (fdk)
      launch<bp_weighting::fdk, interp::exact>(s, tex_point, volume, nx, ny, max_nz, curved);
    else
      launch<bp_weighting::none, interp::exact>(s, tex_point, volume, nx, ny, max_nz, curved);
  }
}

}  // namespace ctforge::kernels::cuda
