// Ray-driven (Joseph) forward projection on the GPU: one thread per detector pixel, the
// per-ray body kernels::joseph_ray shared with the CPU path, the volume read through a 3D
// texture (border addressing: zero outside). The ray set-up (pixel centre, direction, anchor
// point nearest the volume centre, cone rays starting at the source) is computed in double
// precision as the CPU does (src/recon/projector.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "kernels/cuda_error.cuh"
#include "kernels/cuda_pipeline.cuh"
#include "kernels/cuda_raii.cuh"
#include "kernels/forward_project.cuh"
#include "recon/cuda_dispatch.hpp"

namespace ctforge::kernels::cuda {
namespace {

struct fp_view {
  double src[3];  ///< cone: source (mm); parallel: ray direction
  double det[3];  ///< detector centre (mm)
  double u[3], v[3];
};

struct fp_params {
  int nx, ny, nz;
  int cols, rows;
  int cone;
  double org[3];     ///< centre of voxel (0, 0, 0), mm
  double inv_sp[3];  ///< 1 / spacing
  double centre[3];  ///< volume centre, mm
};

constexpr int k_block_x = 32;
constexpr int k_block_y = 4;

// Trilinear sample with the CPU fast path's arithmetic (kernels::padded_volume_sampler: the
// coordinates clamped to [-1, n], taps outside the volume reading zero) from a point-sampled
// 3D texture in border mode. A tap whose weight is exactly zero is not fetched and enters as
// 0, which leaves every product and sum bit-identical (0 * v == 0 * 0 for finite v); Joseph
// samples lie on voxel planes, so this halves the fetches.
__device__ __forceinline__ float sample_exact_3d(cudaTextureObject_t tex, int nx, int ny, int nz,
                                                 float x, float y, float z) {
  x = clamp_f(x, -1.0f, static_cast<float>(nx));
  y = clamp_f(y, -1.0f, static_cast<float>(ny));
  z = clamp_f(z, -1.0f, static_cast<float>(nz));
  const float fx = floorf(x), fy = floorf(y), fz = floorf(z);
  const float ax = x - fx, ay = y - fy, az = z - fz;
  const float x0 = fx + 0.5f, x1 = fx + 1.5f, y0 = fy + 0.5f, y1 = fy + 1.5f;
  const bool ux = ax != 0.0f, uy = ay != 0.0f;
  const auto plane = [&](float zc) -> float {
    const float a0 = tex3D<float>(tex, x0, y0, zc);
    const float a1 = ux ? tex3D<float>(tex, x1, y0, zc) : 0.0f;
    const float b0 = uy ? tex3D<float>(tex, x0, y1, zc) : 0.0f;
    const float b1 = (ux && uy) ? tex3D<float>(tex, x1, y1, zc) : 0.0f;
    return (1.0f - ay) * ((1.0f - ax) * a0 + ax * a1) + ay * ((1.0f - ax) * b0 + ax * b1);
  };
  const float lo = plane(fz + 0.5f);
  const float hi = az != 0.0f ? plane(fz + 1.5f) : 0.0f;
  return (1.0f - az) * lo + az * hi;
}

template <interp Mode>
__global__ void __launch_bounds__(k_block_x* k_block_y)
    forward_project_kernel(cudaTextureObject_t tex, const fp_view* __restrict__ views, fp_params p,
                           int view0, float* __restrict__ out) {
  const int c = static_cast<int>(blockIdx.x) * k_block_x + static_cast<int>(threadIdx.x);
  const int r = static_cast<int>(blockIdx.y) * k_block_y + static_cast<int>(threadIdx.y);
  const int i = static_cast<int>(blockIdx.z);  // view within this launch
  if (c >= p.cols || r >= p.rows) return;
  const fp_view& w = views[view0 + i];
  const double sc = static_cast<double>(c) - 0.5 * static_cast<double>(p.cols - 1);
  const double sr = static_cast<double>(r) - 0.5 * static_cast<double>(p.rows - 1);
  double px[3], dir[3];
  for (int a = 0; a < 3; ++a) px[a] = w.det[a] + sc * w.u[a] + sr * w.v[a];
  for (int a = 0; a < 3; ++a) dir[a] = p.cone ? px[a] - w.src[a] : w.src[a];
  const double len2 = dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2];
  const double t = ((p.centre[0] - px[0]) * dir[0] + (p.centre[1] - px[1]) * dir[1] +
                    (p.centre[2] - px[2]) * dir[2]) /
                   len2;
  double anchor[3];
  for (int a = 0; a < 3; ++a) anchor[a] = px[a] + t * dir[a];
  // Cone beam: integrate from the source on (its parameter along anchor + t dir), as the CPU.
  const float t_min =
      p.cone
          ? static_cast<float>(((w.src[0] - anchor[0]) * dir[0] + (w.src[1] - anchor[1]) * dir[1] +
                                (w.src[2] - anchor[2]) * dir[2]) /
                               len2)
          : -3.0e38f;
  f3 q, d;
  q.x = static_cast<float>((anchor[0] - p.org[0]) * p.inv_sp[0]);
  q.y = static_cast<float>((anchor[1] - p.org[1]) * p.inv_sp[1]);
  q.z = static_cast<float>((anchor[2] - p.org[2]) * p.inv_sp[2]);
  d.x = static_cast<float>(dir[0] * p.inv_sp[0]);
  d.y = static_cast<float>(dir[1] * p.inv_sp[1]);
  d.z = static_cast<float>(dir[2] * p.inv_sp[2]);
  const auto sample = [&](float x, float y, float z) -> float {
    if constexpr (Mode == interp::hardware)
      return tex3D<float>(tex, x + 0.5f, y + 0.5f, z + 0.5f);
    else
      return sample_exact_3d(tex, p.nx, p.ny, p.nz, x, y, z);
  };
  const float value =
      joseph_ray(sample, q, d, p.nx, p.ny, p.nz, static_cast<float>(sqrt(len2)), t_min);
  out[(static_cast<std::int64_t>(i) * p.rows + r) * p.cols + c] = value;
}

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

projection_stack cuda_forward_project(const volume& vol, const geometry& g,
                                      const cuda_options& copt) {
  using namespace kernels::cuda;
  g.validate();
  const volume_geometry& vg = vol.geom;
  vg.validate();
  CTFORGE_EXPECTS(static_cast<std::int64_t>(vol.data.size()) == vg.voxel_count(),
                  "forward projection: volume holds " + std::to_string(vol.data.size()) +
                      " values for " + std::to_string(vg.voxel_count()) + " voxels");
  require_cuda_device(copt.device);
  const device_guard guard(copt.device);

  int max3[3] = {0, 0, 0};
  CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max3[0], cudaDevAttrMaxTexture3DWidth, copt.device));
  CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max3[1], cudaDevAttrMaxTexture3DHeight, copt.device));
  CTFORGE_CUDA_TRY(cudaDeviceGetAttribute(&max3[2], cudaDevAttrMaxTexture3DDepth, copt.device));
  CTFORGE_EXPECTS(vg.nx <= max3[0] && vg.ny <= max3[1] && vg.nz <= max3[2],
                  "CUDA forward projection: volume of " + std::to_string(vg.nx) + " x " +
                      std::to_string(vg.ny) + " x " + std::to_string(vg.nz) +
                      " voxels exceeds the 3D texture limit (" + std::to_string(max3[0]) + " x " +
                      std::to_string(max3[1]) + " x " + std::to_string(max3[2]) + ")");
  CTFORGE_EXPECTS(g.rows <= 65535 * k_block_y && g.cols < (std::int64_t{1} << 30),
                  "CUDA forward projection: detector too large");

  const std::int64_t V = g.view_count(), R = g.rows, C = g.cols;
  // Memory: the 3D array, plus output buffers for a chunk of views.
  std::size_t free_b = 0, total_b = 0;
  CTFORGE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "querying device memory");
  std::int64_t budget = static_cast<std::int64_t>(free_b) -
                        std::min<std::int64_t>(512 << 20, static_cast<std::int64_t>(free_b) / 10);
  if (copt.memory_limit_bytes > 0) budget = std::min(budget, copt.memory_limit_bytes);
  const std::int64_t vol_bytes = vg.voxel_count() * 4;
  const std::int64_t view_bytes = R * C * 4;
  const std::int64_t avail = budget - vol_bytes - vol_bytes / 16 - (8 << 20);
  CTFORGE_CHECK(avail >= view_bytes, "CUDA forward projection: the volume (" +
                                         format_bytes(vol_bytes) + ") and one projection (" +
                                         format_bytes(view_bytes) +
                                         ") do not fit in the device memory budget of " +
                                         format_bytes(budget) + memory_state() + k_memory_hint);
  const std::int64_t chunk =
      std::clamp<std::int64_t>(avail / view_bytes, 1, std::min<std::int64_t>(V, 1024));

  const stream s(0);
  cuda_array arr(cuda_array::kind::volume_3d, vg.nx, vg.ny, vg.nz, false, "the volume");
  const bool hw = copt.hardware_interpolation;
  const texture_object tex(arr, hw);
  device_buffer<float> out_dev(static_cast<std::size_t>(chunk * R * C), "forward projections");

  std::vector<fp_view> views(static_cast<std::size_t>(V));
  for (std::int64_t v = 0; v < V; ++v) {
    const view_vectors& w = g.views[static_cast<std::size_t>(v)];
    fp_view& f = views[static_cast<std::size_t>(v)];
    const vec3* src[4] = {&w.source, &w.detector_center, &w.u, &w.v};
    double* dst[4] = {f.src, f.det, f.u, f.v};
    for (int k = 0; k < 4; ++k) {
      dst[k][0] = src[k]->x;
      dst[k][1] = src[k]->y;
      dst[k][2] = src[k]->z;
    }
  }
  device_buffer<fp_view> views_dev(views.size(), "view geometry");
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(views_dev.data(), views.data(), views.size() * sizeof(fp_view),
                                   cudaMemcpyHostToDevice, s),
                   "uploading view geometry");
  {
    const cudaMemcpy3DParms cp =
        arr.copy_from(vol.data.data(), static_cast<std::size_t>(vg.nx) * sizeof(float), vg.nx,
                      vg.ny, vg.nz, 0, cudaMemcpyHostToDevice);
    CTFORGE_CUDA_TRY(cudaMemcpy3DAsync(&cp, s), "uploading the volume");
  }

  fp_params p{};
  p.nx = static_cast<int>(vg.nx);
  p.ny = static_cast<int>(vg.ny);
  p.nz = static_cast<int>(vg.nz);
  p.cols = static_cast<int>(C);
  p.rows = static_cast<int>(R);
  p.cone = g.beam == beam_kind::cone ? 1 : 0;
  const vec3 centre =
      vg.voxel_center(0.5 * static_cast<double>(vg.nx - 1), 0.5 * static_cast<double>(vg.ny - 1),
                      0.5 * static_cast<double>(vg.nz - 1));
  for (int a = 0; a < 3; ++a) {
    p.org[a] = vg.origin_mm[static_cast<std::size_t>(a)];
    p.inv_sp[a] = 1.0 / vg.spacing_mm[static_cast<std::size_t>(a)];
  }
  p.centre[0] = centre.x;
  p.centre[1] = centre.y;
  p.centre[2] = centre.z;

  projection_stack out(V, R, C);
  for (std::int64_t v0 = 0; v0 < V; v0 += chunk) {
    const std::int64_t n = std::min(chunk, V - v0);
    const dim3 block(k_block_x, k_block_y, 1);
    const dim3 grid(blocks_for(C, k_block_x), blocks_for(R, k_block_y), static_cast<unsigned>(n));
    if (hw)
      forward_project_kernel<interp::hardware><<<grid, block, 0, s>>>(
          tex.get(), views_dev.data(), p, static_cast<int>(v0), out_dev.data());
    else
      forward_project_kernel<interp::exact><<<grid, block, 0, s>>>(
          tex.get(), views_dev.data(), p, static_cast<int>(v0), out_dev.data());
    CTFORGE_CUDA_CHECK_LAUNCH("launching the forward projection kernel");
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(out.view(v0), out_dev.data(),
                                     static_cast<std::size_t>(n * R * C) * sizeof(float),
                                     cudaMemcpyDeviceToHost, s),
                     "downloading projections");
  }
  s.synchronize("forward projecting");
  return out;
}

}  // namespace ctforge::detail
