// Helical weighted FBP on the GPU: the kernels run math/helical.hpp's per-sample and per-voxel
// arithmetic, the CPU path's (src/recon/helical.cpp), on batches of parallel views:
//   upload the fan views the batch's rebinned rays read -> rebin + cone-angle cosine into
//   zero-padded rows -> ramp filter (cuFFT, the CPU's response) -> back-project every voxel of
//   the device volume over the batch's views (accumulated in view order, as on the CPU).
// The host prepares everything (recon/helical.hpp: make_helical_setup); nothing here decides.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ctforge/error.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "cuda/cuda_raii.cuh"
#include "math/helical.hpp"

namespace ctforge::kernels::cuda {
namespace {

constexpr int k_threads = 256;

// One rebinned sample per thread: batch view jb, row r, padded column c (0 beyond cols_t).
__global__ void rebin_kernel(helical_params P, const rebin_tap* __restrict__ taps,
                             const float* __restrict__ fan, std::int64_t first, std::int64_t v0,
                             std::int64_t views, std::int64_t rows, std::int64_t cols,
                             std::int64_t cols_t, std::int64_t pitch, float* __restrict__ out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= views * rows * pitch) return;
  const std::int64_t c = i % pitch, r = (i / pitch) % rows, jb = i / (pitch * rows);
  if (c >= cols_t) {
    out[i] = 0.0f;
    return;
  }
  const float v = (static_cast<float>(r) - P.r0) * P.dv + P.offset_v;
  out[i] = rebinned_value(P, taps[(v0 + jb) * cols_t + c], fan, first, rows, cols, r, v);
}

// One voxel per thread: the sum over the batch's views [v0, v0 + n) of their contributions.
__global__ void backproject_kernel(helical_params P, const helical_view* __restrict__ views,
                                   std::int64_t v0, std::int64_t n, const float* __restrict__ data,
                                   int cols_t, int rows, int pitch, std::int64_t nx,
                                   std::int64_t ny, std::int64_t nz, float ox, float oy, float oz,
                                   float sx, float sy, float sz, float* __restrict__ out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= nx * ny * nz) return;
  const std::int64_t ix = i % nx, iy = (i / nx) % ny, iz = i / (nx * ny);
  const float x = ox + static_cast<float>(ix) * sx, y = oy + static_cast<float>(iy) * sy;
  const float z = oz + static_cast<float>(iz) * sz;
  float acc = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    const helical_view V = views[v0 + j];
    const helical_ray ray = helical_ray_of(P, V, x, y);
    if (!ray.valid) continue;
    acc += helical_contribution(P, V, ray, z, data + j * rows * pitch, cols_t, rows, pitch);
  }
  out[i] += acc;
}

// Batches of parallel views [v0, v1) and the fan views [first, last] their rays read.
struct batch {
  std::int64_t v0, v1, first, last;
};

std::vector<batch> plan_batches(const ::ctforge::detail::helical_job& job, std::int64_t per) {
  std::vector<batch> out;
  for (std::int64_t v0 = job.view_lo; v0 < job.view_hi; v0 += per) {
    batch b{v0, std::min(v0 + per, job.view_hi), INT64_MAX, -1};
    for (std::int64_t j = b.v0; j < b.v1; ++j)
      for (std::int64_t c = 0; c < job.cols_t; ++c) {
        const rebin_tap& t = job.taps[static_cast<std::size_t>(j * job.cols_t + c)];
        if (t.view < 0) continue;
        b.first = std::min<std::int64_t>(b.first, t.view);
        b.last = std::max<std::int64_t>(b.last, t.view + (t.a > 0.0f ? 1 : 0));
      }
    if (b.last < b.first) b.first = b.last = b.v0;  // nothing read: an empty fan range
    out.push_back(b);
  }
  return out;
}

// The device side of one reconstruction: the volume, the view constants and taps, the batch
// buffers and the filter.
class helical_pipeline {
 public:
  helical_pipeline(const ::ctforge::detail::helical_job& job, const volume_geometry& vg,
                   std::int64_t rows, std::int64_t cols, std::int64_t per, std::int64_t fan_views,
                   cudaStream_t s)
      : job_(job),
        vg_(vg),
        rows_(rows),
        cols_(cols),
        s_(s),
        filter_(job.padded_len, static_cast<int>(per * rows), job.response, s),
        volume_(static_cast<std::size_t>(vg.voxel_count()), s, "the helical volume"),
        views_(job.views.size(), s, "helical view constants"),
        taps_(job.taps.size(), s, "rebinning taps"),
        fan_(static_cast<std::size_t>(fan_views * rows * cols), s, "fan views"),
        rebinned_(static_cast<std::size_t>(per * rows * filter_.pitch()), s, "rebinned views"),
        work_(std::max<std::size_t>(filter_.work_bytes(), 1), s, "cuFFT work area") {
    filter_.set_work_area(work_.data());
    CTFORGE_CUDA_TRY(cudaMemsetAsync(volume_.data(), 0, volume_.bytes(), s_), "zeroing the volume");
    copy_in(views_.data(), job.views.data(), views_.bytes(), "uploading view constants");
    copy_in(taps_.data(), job.taps.data(), taps_.bytes(), "uploading rebinning taps");
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_), "helical set-up on the GPU");
  }

  void run(const projection_view& proj, const batch& b) {
    const std::int64_t fan_views = b.last - b.first + 1, n = b.v1 - b.v0;
    copy_in(fan_.data(), proj.data.data() + b.first * rows_ * cols_,
            static_cast<std::size_t>(fan_views * rows_ * cols_) * sizeof(float),
            "uploading fan views");
    const std::int64_t pitch = filter_.pitch(), total = n * rows_ * pitch;
    rebin_kernel<<<blocks_for(total, k_threads), k_threads, 0, s_>>>(
        job_.params, taps_.data(), fan_.data(), b.first, b.v0, n, rows_, cols_, job_.cols_t, pitch,
        rebinned_.data());
    CTFORGE_CUDA_CHECK_LAUNCH("launching the helical rebinning kernel");
    // A partial last batch filters whole zero rows beyond its views: harmless, and the plan
    // keeps its one shape.
    filter_.enqueue(s_, rebinned_.data());
    const std::int64_t voxels = vg_.voxel_count();
    const auto f = [](double a) { return static_cast<float>(a); };
    backproject_kernel<<<blocks_for(voxels, k_threads), k_threads, 0, s_>>>(
        job_.params, views_.data(), b.v0, n, rebinned_.data(), static_cast<int>(job_.cols_t),
        static_cast<int>(rows_), static_cast<int>(pitch), vg_.nx, vg_.ny, vg_.nz,
        f(vg_.origin_mm[0]), f(vg_.origin_mm[1]), f(vg_.origin_mm[2]), f(vg_.spacing_mm[0]),
        f(vg_.spacing_mm[1]), f(vg_.spacing_mm[2]), volume_.data());
    CTFORGE_CUDA_CHECK_LAUNCH("launching the helical back-projection kernel");
    // The fan buffer is refilled by the next batch's upload: finish this one first.
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_), "helical reconstruction on the GPU");
  }

  void download(volume& out) {
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(out.data.data(), volume_.data(), volume_.bytes(),
                                     cudaMemcpyDeviceToHost, s_),
                     "downloading the helical volume");
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_), "helical reconstruction on the GPU");
  }

 private:
  void copy_in(void* dst, const void* src, std::size_t bytes, const char* what) {
    CTFORGE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s_), what);
  }

  const ::ctforge::detail::helical_job& job_;
  const volume_geometry& vg_;
  std::int64_t rows_, cols_;
  cudaStream_t s_;
  ramp_filter_gpu filter_;
  device_buffer<float> volume_;
  device_buffer<helical_view> views_;
  device_buffer<rebin_tap> taps_;
  device_buffer<float> fan_, rebinned_;
  device_buffer<char> work_;
};

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

namespace kc = kernels::cuda;

volume cuda_helical_reconstruct(const projection_view& proj, const volume_geometry& vg,
                                const helical_job& job, const recon_options& opt) {
  const std::lock_guard<std::mutex> lock(kc::backprojection_constants_mutex());
  const kc::device_guard dev(opt.device);
  const kc::stream s = kc::stream::make();
  const std::int64_t rows = proj.rows, cols = proj.cols, f = sizeof(float);
  const std::int64_t pitch = 2 * (job.padded_len / 2 + 1);
  const std::int64_t budget = kc::device_memory_budget(opt.gpu_memory_limit_bytes);
  const std::int64_t fixed =
      vg.voxel_count() * f +
      static_cast<std::int64_t>(job.taps.size_bytes() + job.views.size_bytes());
  // Views per batch: halved until the batch's rebinned rows, the fan views they read and the
  // filter's work area fit beside the volume.
  std::int64_t per = 64;
  std::vector<kc::batch> batches;
  std::int64_t fan_views = 1;
  for (;; per /= 2) {
    batches = kc::plan_batches(job, per);
    fan_views = 1;
    for (const kc::batch& b : batches) fan_views = std::max(fan_views, b.last - b.first + 1);
    const std::int64_t need = fixed + per * rows * pitch * f * 2 + fan_views * rows * cols * f;
    if (need <= budget) break;
    if (per == 1)
      throw usage_error("helical-fbp on the GPU: the volume (" + std::to_string(vg.voxel_count()) +
                        " voxels) and one batch need " + std::to_string(need) +
                        " bytes, more than the " + std::to_string(budget) +
                        " the device has to spare; reconstruct slab by slab (--memory-limit, "
                        "--checkpoint-dir) or on the CPU");
  }
  kc::helical_pipeline p(job, vg, rows, cols, per, fan_views, s.get());
  for (std::size_t i = 0; i < batches.size(); ++i) {
    p.run(proj, batches[i]);
    if (opt.progress)
      opt.progress(static_cast<double>(i + 1) / static_cast<double>(batches.size()));
    opt.cancel.throw_if_requested();
  }
  volume out(vg);
  p.download(out);
  return out;
}

}  // namespace ctforge::detail
