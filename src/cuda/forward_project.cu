// Ray-driven (Joseph) forward projection on the GPU: one thread per detector pixel, the
// per-ray body kernels::joseph_ray_window shared with the CPU path, the volume read through a
// 3D texture (border addressing: zero outside). The ray set-up (pixel centre, direction, anchor
// point nearest the volume centre, cone rays starting at the source) is computed in double
// precision as the CPU does (src/recon/projector.cpp).
//
// Views are projected in batches into two device output buffers on a compute stream; a copy
// stream downloads each batch into pinned staging while the next batch's rays are traced, and
// the host moves it into the result (OpenMP). A volume that does not fit next to the output
// buffers (make_forward_plan) is split into slabs: each slab is uploaded into the texture in
// turn, every ray is traced through that slab's planes only (joseph_ray_window with a
// z_slab_sampler) and the host adds the slabs' projections, in slab order.
//
// The kernels are also enqueued on device-resident data (joseph_device.cuh): the forward
// projector, and its exact transpose (matched back-projection: one thread per ray with the same
// ray set-up, kernels::joseph_scatter_with adding with atomicAdd), which the CUDA iterative
// space (iterative_space.cu) runs between device buffers.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "cuda/cuda_raii.cuh"
#include "cuda/joseph_device.cuh"
#include "cuda/pinned_pool.cuh"
#include "math/cylinder.hpp"
#include "math/forward_project.hpp"

namespace ctforge::kernels::cuda {
namespace {

thread_local detail::cuda_forward_stats g_last_forward_stats;

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

// The ray through pixel (c, r) of view w in index coordinates, re-anchored at its point
// nearest the volume centre: the CPU's ray_setup (src/recon/projector.cpp) in double.
struct device_ray {
  f3 q, d;
  float dir_mm, t_min;
};
__device__ __forceinline__ device_ray ray_of(const fp_view& w, const fp_params& p, int c, int r) {
  const double sc = static_cast<double>(c) - 0.5 * static_cast<double>(p.cols - 1);
  const double sr = static_cast<double>(r) - 0.5 * static_cast<double>(p.rows - 1);
  double px[3], dir[3];
  if (p.curved)
    cylinder_pixel_center(w.src, w.det, w.u, w.v, sc, sr, px);
  else
    for (int a = 0; a < 3; ++a) px[a] = w.det[a] + sc * w.u[a] + sr * w.v[a];
  for (int a = 0; a < 3; ++a) dir[a] = p.cone ? px[a] - w.src[a] : w.src[a];
  const double len2 = dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2];
  const double t = ((p.centre[0] - px[0]) * dir[0] + (p.centre[1] - px[1]) * dir[1] +
                    (p.centre[2] - px[2]) * dir[2]) /
                   len2;
  double anchor[3];
  for (int a = 0; a < 3; ++a) anchor[a] = px[a] + t * dir[a];
  device_ray ray;
  // Cone beam: integrate from the source on (its parameter along anchor + t dir), as the CPU.
  ray.t_min =
      p.cone
          ? static_cast<float>(((w.src[0] - anchor[0]) * dir[0] + (w.src[1] - anchor[1]) * dir[1] +
                                (w.src[2] - anchor[2]) * dir[2]) /
                               len2)
          : -3.0e38f;
  ray.q.x = static_cast<float>((anchor[0] - p.org[0]) * p.inv_sp[0]);
  ray.q.y = static_cast<float>((anchor[1] - p.org[1]) * p.inv_sp[1]);
  ray.q.z = static_cast<float>((anchor[2] - p.org[2]) * p.inv_sp[2]);
  ray.d.x = static_cast<float>(dir[0] * p.inv_sp[0]);
  ray.d.y = static_cast<float>(dir[1] * p.inv_sp[1]);
  ray.d.z = static_cast<float>(dir[2] * p.inv_sp[2]);
  ray.dir_mm = static_cast<float>(sqrt(len2));
  return ray;
}

template <interp Mode>
__global__ void __launch_bounds__(k_block_x* k_block_y)
    forward_project_kernel(cudaTextureObject_t tex, const fp_view* __restrict__ views, fp_params p,
                           int view0, float* __restrict__ out) {
  const int c = static_cast<int>(blockIdx.x) * k_block_x + static_cast<int>(threadIdx.x);
  const int r = static_cast<int>(blockIdx.y) * k_block_y + static_cast<int>(threadIdx.y);
  const int i = static_cast<int>(blockIdx.z);  // view within this launch
  if (c >= p.cols || r >= p.rows) return;
  const device_ray ray = ray_of(views[view0 + i], p, c, r);
  // The texture holds planes [z0, z0 + tex_nz) (the whole volume: z0 = 0, tex_nz = nz).
  const auto slab = [&](float x, float y, float z) -> float {
    if constexpr (Mode == interp::hardware)
      return tex3D<float>(tex, x + 0.5f, y + 0.5f, z + 0.5f);
    else
      return sample_exact_3d(tex, p.nx, p.ny, p.tex_nz, x, y, z);
  };
  const z_slab_sampler<decltype(slab)> sample{slab, static_cast<float>(p.z0)};
  const float value = joseph_ray_window(sample, ray.q, ray.d, p.nx, p.ny, p.nz, ray.dir_mm,
                                        ray.t_min, p.z_lo, p.z_hi);
  out[(static_cast<std::int64_t>(i) * p.rows + r) * p.cols + c] = value;
}

// The transpose: one thread per ray of views [view0, view0 + gridDim.z), its value scattered
// with the CPU's kernels::joseph_scatter_with arithmetic, added atomically.
__global__ void __launch_bounds__(k_block_x* k_block_y)
    matched_backproject_kernel(const fp_view* __restrict__ views, fp_params p, int view0,
                               const float* __restrict__ proj, float* __restrict__ volume) {
  const int c = static_cast<int>(blockIdx.x) * k_block_x + static_cast<int>(threadIdx.x);
  const int r = static_cast<int>(blockIdx.y) * k_block_y + static_cast<int>(threadIdx.y);
  const int v = view0 + static_cast<int>(blockIdx.z);
  if (c >= p.cols || r >= p.rows) return;
  const float value = proj[(static_cast<std::int64_t>(v) * p.rows + r) * p.cols + c];
  if (value == 0.0f) return;
  const device_ray ray = ray_of(views[v], p, c, r);
  joseph_scatter_with([volume](std::int64_t at, float a) { atomicAdd(volume + at, a); }, p.nx, p.ny,
                      p.nz, ray.q, ray.d, ray.dir_mm, ray.t_min, value);
}

// Views per launch: the grid's z extent.
constexpr std::int64_t k_views_per_launch = 65535;

}  // namespace

std::vector<fp_view> make_fp_views(const geometry& g, std::span<const std::int64_t> views) {
  const std::int64_t n = views.empty() ? g.view_count() : static_cast<std::int64_t>(views.size());
  std::vector<fp_view> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t v = views.empty() ? i : views[static_cast<std::size_t>(i)];
    CTFORGE_EXPECTS(v >= 0 && v < g.view_count(), "view index " + std::to_string(v) +
                                                      " outside the geometry's " +
                                                      std::to_string(g.view_count()) + " views");
    const view_vectors& w = g.views[static_cast<std::size_t>(v)];
    fp_view& f = out[static_cast<std::size_t>(i)];
    const vec3* src[4] = {&w.source, &w.detector_center, &w.u, &w.v};
    double* dst[4] = {f.src, f.det, f.u, f.v};
    for (int k = 0; k < 4; ++k) {
      dst[k][0] = src[k]->x;
      dst[k][1] = src[k]->y;
      dst[k][2] = src[k]->z;
    }
  }
  return out;
}

fp_params make_fp_params(const geometry& g, const volume_geometry& vg) {
  fp_params p{};
  p.nx = static_cast<int>(vg.nx);
  p.ny = static_cast<int>(vg.ny);
  p.nz = static_cast<int>(vg.nz);
  p.cols = static_cast<int>(g.cols);
  p.rows = static_cast<int>(g.rows);
  p.cone = g.beam == beam_kind::cone ? 1 : 0;
  p.curved = g.curved() ? 1 : 0;
  p.z0 = 0;
  p.tex_nz = static_cast<int>(vg.nz);
  p.z_lo = -1.0f;
  p.z_hi = static_cast<float>(vg.nz);
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
  return p;
}

void check_joseph_launch_limits(const geometry& g, const volume_geometry& vg) {
  CTFORGE_EXPECTS(vg.nz < (std::int64_t{1} << 24),
                  "CUDA forward projection: more than 2^24 volume planes");
  CTFORGE_EXPECTS(vg.nx < (std::int64_t{1} << 30) && vg.ny < (std::int64_t{1} << 30),
                  "CUDA forward projection: volume of " + std::to_string(vg.nx) + " x " +
                      std::to_string(vg.ny) + " voxels per plane too large");
  CTFORGE_EXPECTS(g.rows <= 65535 * k_block_y && g.cols < (std::int64_t{1} << 30) &&
                      g.view_count() < (std::int64_t{1} << 31),
                  "CUDA forward projection: detector of " + std::to_string(g.cols) + " x " +
                      std::to_string(g.rows) + " pixels too large");
}

void enqueue_forward_projection(cudaStream_t s, interp mode, cudaTextureObject_t tex,
                                const fp_view* views, const fp_params& p, std::int64_t view0,
                                std::int64_t n_views, float* out) {
  const dim3 block(k_block_x, k_block_y, 1);
  const std::int64_t view_floats = static_cast<std::int64_t>(p.rows) * p.cols;
  for (std::int64_t i0 = 0; i0 < n_views; i0 += k_views_per_launch) {
    const std::int64_t n = std::min(k_views_per_launch, n_views - i0);
    const dim3 grid(blocks_for(p.cols, k_block_x), blocks_for(p.rows, k_block_y),
                    static_cast<unsigned>(n));
    float* dst = out + i0 * view_floats;
    const int first = static_cast<int>(view0 + i0);
    if (mode == interp::hardware)
      forward_project_kernel<interp::hardware><<<grid, block, 0, s>>>(tex, views, p, first, dst);
    else
      forward_project_kernel<interp::exact><<<grid, block, 0, s>>>(tex, views, p, first, dst);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the forward projection kernel");
  }
}

void enqueue_matched_backprojection(cudaStream_t s, const fp_view* views, const fp_params& p,
                                    std::int64_t n_views, const float* proj, float* volume) {
  CTFORGE_EXPECTS(p.z0 == 0 && p.tex_nz == p.nz,
                  "matched back-projection: the whole volume is written at once");
  const dim3 block(k_block_x, k_block_y, 1);
  for (std::int64_t i0 = 0; i0 < n_views; i0 += k_views_per_launch) {
    const std::int64_t n = std::min(k_views_per_launch, n_views - i0);
    const dim3 grid(blocks_for(p.cols, k_block_x), blocks_for(p.rows, k_block_y),
                    static_cast<unsigned>(n));
    matched_backproject_kernel<<<grid, block, 0, s>>>(views, p, static_cast<int>(i0), proj, volume);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the matched back-projection kernel");
  }
}

}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

projection_stack cuda_forward_project(const volume_view& vol, const geometry& g,
                                      const cuda_options& copt) {
  using namespace kernels::cuda;
  using clock_type = std::chrono::steady_clock;
  const auto t_start = clock_type::now();
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
  CTFORGE_EXPECTS(vg.nx <= max3[0] && vg.ny <= max3[1],
                  "CUDA forward projection: volume planes of " + std::to_string(vg.nx) + " x " +
                      std::to_string(vg.ny) + " voxels exceed the 3D texture limit (" +
                      std::to_string(max3[0]) + " x " + std::to_string(max3[1]) + ")");
  check_joseph_launch_limits(g, vg);

  const std::int64_t V = g.view_count(), R = g.rows, C = g.cols;
  const std::int64_t view_floats = R * C;
  // Batches of views into two output buffers; slabs when the volume does not fit beside them.
  const forward_plan pl =
      make_forward_plan(vg, V, R, C, device_memory_budget(copt.gpu_memory_limit_bytes), max3[2]);
  const std::int64_t batch = pl.views_per_batch;
  const std::int64_t tex_nz = pl.slab_nz;
  const std::int64_t plane = vg.nx * vg.ny;

  const stream s_k(0), s_c(0);  // rays, downloads
  cuda_array arr(cuda_array::kind::volume_3d, vg.nx, vg.ny, tex_nz, false, "the volume");
  const bool hw = copt.gpu_hardware_interpolation;
  const texture_object tex(arr, hw);
  device_buffer<float> out0(static_cast<std::size_t>(batch * view_floats), "forward projections");
  device_buffer<float> out1(static_cast<std::size_t>(batch * view_floats), "forward projections");
  const device_buffer<float>* out_dev[2] = {&out0, &out1};
  std::int64_t pinned_allocated = 0;  // page-locked staging from the pool (pinned_pool.cuh)
  pinned_pool::lease stage0 = lease_pinned(static_cast<std::size_t>(batch * view_floats),
                                           "forward projection staging", &pinned_allocated);
  pinned_pool::lease stage1 = lease_pinned(static_cast<std::size_t>(batch * view_floats),
                                           "forward projection staging", &pinned_allocated);
  const pinned_buffer<float>* stage[2] = {&stage0.get(), &stage1.get()};
  const event ev_k[2] = {event(false), event(false)};  // rays of the batch in out_dev[p] done
  const event ev_c[2] = {event(false), event(false)};  // its download into stage[p] done

  const std::vector<fp_view> views = make_fp_views(g);
  device_buffer<fp_view> views_dev(views.size(), "view geometry");
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(views_dev.data(), views.data(), views.size() * sizeof(fp_view),
                                   cudaMemcpyHostToDevice, s_k),
                   "uploading view geometry");

  fp_params p = make_fp_params(g, vg);
  p.tex_nz = static_cast<int>(tex_nz);

  // The last slab may be shallower than the texture: its remaining planes are filled with
  // zeros (the volume's border) from this host buffer, so no plane of an earlier slab shows.
  const std::int64_t n_slabs = pl.slabs;
  const std::int64_t last_nz = vg.nz - (n_slabs - 1) * tex_nz;
  const std::vector<float> zeros(static_cast<std::size_t>((tex_nz - last_nz) * plane), 0.0f);

  // In-flight work must finish before the buffers above are destroyed on an exception.
  struct sync_on_unwind {
    const stream* streams[2];
    ~sync_on_unwind() {
      for (const stream* s : streams) cudaStreamSynchronize(s->get());
      cudaGetLastError();
    }
  } const unwind_guard{{&s_k, &s_c}};

  const int threads = 0;  // host copies and sums on all cores
  const std::int64_t batches_per_slab = (V + batch - 1) / batch;
  projection_stack out(V, R, C);
  // Moves job j's projections (slab j / batches_per_slab, views from v0) from stage[j % 2] into
  // `out`: copied for the first slab, added for the others.
  const auto consume = [&](std::int64_t j) {
    const std::int64_t slab = j / batches_per_slab;
    const std::int64_t v0 = (j % batches_per_slab) * batch, n = std::min(batch, V - v0);
    ev_c[j % 2].synchronize();
    const float* src = stage[j % 2]->data();
    if (slab == 0)
      ctforge::detail::parallel_copy(
          out.view(v0), src, static_cast<std::size_t>(n * view_floats) * sizeof(float), threads);
    else
      ctforge::detail::parallel_add(out.view(v0), src, n * view_floats, threads);
  };

  const auto t_loop = clock_type::now();
  std::int64_t j = 0;
  for (std::int64_t s = 0; s < n_slabs; ++s) {
    const std::int64_t z0 = s * tex_nz, nz_s = std::min(tex_nz, vg.nz - z0);
    // The kernels of the previous slab (earlier on s_k) finish reading the array first.
    {
      const cudaMemcpy3DParms cp = arr.copy_from(vol.data.data() + z0 * plane,
                                                 static_cast<std::size_t>(vg.nx) * sizeof(float),
                                                 vg.nx, vg.ny, nz_s, 0, cudaMemcpyHostToDevice);
      CTFORGE_CUDA_TRY(
          cudaMemcpy3DAsync(&cp, s_k),
          "uploading volume planes " + std::to_string(z0) + ".." + std::to_string(z0 + nz_s - 1));
    }
    if (nz_s < tex_nz) {
      const cudaMemcpy3DParms cp =
          arr.copy_from(zeros.data(), static_cast<std::size_t>(vg.nx) * sizeof(float), vg.nx, vg.ny,
                        tex_nz - nz_s, nz_s, cudaMemcpyHostToDevice);
      CTFORGE_CUDA_TRY(cudaMemcpy3DAsync(&cp, s_k), "zeroing the last slab's spare planes");
    }
    p.z0 = static_cast<int>(z0);
    p.z_lo = static_cast<float>(z0) - 1.0f;
    p.z_hi = static_cast<float>(z0 + tex_nz);
    for (std::int64_t v0 = 0; v0 < V; v0 += batch, ++j) {
      const int b = static_cast<int>(j % 2);
      const std::int64_t n = std::min(batch, V - v0);
      // out_dev[b] and stage[b] were last used by job j - 2: its download has finished (the
      // host consumed it at the end of iteration j - 1).
      if (j >= 2) s_k.wait(ev_c[b]);
      enqueue_forward_projection(s_k, hw ? interp::hardware : interp::exact, tex.get(),
                                 views_dev.data(), p, v0, n, out_dev[b]->data());
      ev_k[b].record(s_k);
      s_c.wait(ev_k[b]);
      CTFORGE_CUDA_TRY(cudaMemcpyAsync(stage[b]->data(), out_dev[b]->data(),
                                       static_cast<std::size_t>(n * view_floats) * sizeof(float),
                                       cudaMemcpyDeviceToHost, s_c),
                       "downloading projections");
      ev_c[b].record(s_c);
      // While the GPU traces job j, the host takes job j - 1.
      if (j >= 1) consume(j - 1);
    }
  }
  consume(j - 1);

  detail::cuda_forward_stats st;
  st.total_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t_start).count();
  st.stream_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t_loop).count();
  st.views_per_batch = static_cast<int>(batch);
  st.slabs = static_cast<int>(n_slabs);
  st.slab_nz = tex_nz;
  st.budget_bytes = pl.budget;
  st.planned_bytes = pl.planned;
  st.hardware_interpolation = hw;
  st.pinned_bytes_allocated = pinned_allocated;
  g_last_forward_stats = st;
  return out;
}

cuda_forward_stats cuda_last_forward_stats() {
  return kernels::cuda::g_last_forward_stats;
}

}  // namespace ctforge::detail
