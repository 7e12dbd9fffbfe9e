// Preprocessing steps on the GPU: zinger removal and phase retrieval (declared in cuda_api.hpp;
// driven by src/recon/preprocess_backend.cpp). The per-value arithmetic is that of the CPU
// steps (math/select.hpp, math/phase_filter.hpp); here only batches of views, transfers and
// launches.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "ctforge/preprocess.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "cuda/cuda_raii.cuh"
#include "math/phase_filter.hpp"
#include "math/select.hpp"

namespace ctforge::kernels::cuda {
namespace {

constexpr int k_threads = 256;
constexpr unsigned long long k_none = ~0ULL;
static_assert(k_gpu_zinger_window == 343, "the zinger kernel's window buffer");

/// Views [v0, v0 + n) of a scan of `views` views, and the views [first, first + count) the
/// zinger window reads for them (clipped to the scan; reflections stay inside).
struct view_batch {
  std::int64_t v0 = 0, n = 0, first = 0, count = 0;
};

__global__ void zinger_kernel(const float* __restrict__ in, float* __restrict__ out, view_batch b,
                              std::int64_t views, std::int64_t rows, std::int64_t cols, int size,
                              int view_window, double threshold, unsigned long long* replaced) {
  const std::int64_t plane = rows * cols;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= b.n * plane) return;
  const std::int64_t v = b.v0 + i / plane, r = i % plane / cols, c = i % cols;
  float buf[k_gpu_zinger_window];
  const int hs = size / 2, hv = view_window / 2;
  int k = 0;
  for (int dv = -hv; dv <= hv; ++dv) {
    const std::int64_t vv = reflect_index(v + dv, views) - b.first;
    for (int dr = -hs; dr <= hs; ++dr) {
      const std::int64_t rr = reflect_index(r + dr, rows);
      for (int dc = -hs; dc <= hs; ++dc)
        buf[k++] = in[(vv * rows + rr) * cols + reflect_index(c + dc, cols)];
    }
  }
  const float med = select_rank(buf, k, k / 2);
  const float x = in[((v - b.first) * rows + r) * cols + c];
  const bool flagged = is_zinger(x, med, threshold);
  out[i] = flagged ? med : x;
  if (flagged) atomicAdd(replaced, 1ULL);
}

/// real[b][i][j] = exp(-p) of the view's padded position (phase_pad_source).
__global__ void phase_pad_kernel(const float* __restrict__ in, float* __restrict__ real,
                                 std::int64_t n_views, std::int64_t rows, std::int64_t cols,
                                 std::int64_t nr, std::int64_t nc) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= n_views * nr * nc) return;
  const std::int64_t b = i / (nr * nc), y = i % (nr * nc) / nc, x = i % nc;
  const std::int64_t sy = phase_pad_source(y, rows, nr), sx = phase_pad_source(x, cols, nc);
  real[i] = expf(-in[(b * rows + sy) * cols + sx]);
}

__global__ void phase_filter_kernel(cufftComplex* __restrict__ spec,
                                    const float* __restrict__ filter, std::int64_t per_view,
                                    std::int64_t total) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= total) return;
  const float h = filter[i % per_view];
  spec[i].x *= h;
  spec[i].y *= h;
}

/// out = -ln of the filtered transmission over the unpadded views; the lowest flat index of
/// a transmission that is not positive and finite goes to *first_bad.
__global__ void phase_crop_kernel(const float* __restrict__ real, float* __restrict__ out,
                                  std::int64_t n_views, std::int64_t rows, std::int64_t cols,
                                  std::int64_t nr, std::int64_t nc, std::int64_t offset,
                                  unsigned long long* first_bad) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= n_views * rows * cols) return;
  const std::int64_t b = i / (rows * cols), r = i % (rows * cols) / cols, c = i % cols;
  const float t = real[(b * nr + r) * nc + c];
  if (!(isfinite(t) && t > 0.0f)) atomicMin(first_bad, static_cast<unsigned long long>(offset + i));
  out[i] = -logf(t);
}

void upload(float* dst, const float* src, std::int64_t n, cudaStream_t s) {
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float),
                                   cudaMemcpyHostToDevice, s),
                   "uploading projections");
}

void download(float* dst, const float* src, std::int64_t n, cudaStream_t s) {
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float),
                                   cudaMemcpyDeviceToHost, s),
                   "downloading projections");
}

/// Views per batch: what `bytes_per_view` (plus `fixed`) allows within the budget, at least
/// one, at most all `views`.
std::int64_t views_per_batch(std::int64_t views, std::int64_t bytes_per_view, std::int64_t fixed,
                             const execution_context& ctx) {
  const std::int64_t budget = device_memory_budget(ctx.gpu_memory_limit_bytes) - fixed;
  return std::clamp<std::int64_t>(budget / std::max<std::int64_t>(bytes_per_view, 1), 1,
                                  std::max<std::int64_t>(views, 1));
}

unsigned long long read_flag(const device_buffer<unsigned long long>& flag, cudaStream_t s) {
  unsigned long long h = 0;
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(&h, flag.data(), sizeof(h), cudaMemcpyDeviceToHost, s),
                   "reading a flag");
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(s), "preprocessing on the GPU");
  return h;
}

void set_flag(const device_buffer<unsigned long long>& flag, unsigned long long v, cudaStream_t s) {
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(flag.data(), &v, sizeof(v), cudaMemcpyHostToDevice, s),
                   "setting a flag");
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(s), "setting a flag");
}

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

namespace kc = kernels::cuda;

std::int64_t cuda_remove_outliers(std::span<float> data, std::int64_t views, std::int64_t rows,
                                  std::int64_t cols, int size, int view_window, double threshold,
                                  const execution_context& ctx) {
  CTFORGE_EXPECTS(size * size * view_window <= k_gpu_zinger_window,
                  "zinger removal on the GPU: the window is larger than k_gpu_zinger_window");
  if (data.empty()) return 0;
  const kc::device_guard dev(ctx.device);
  const kc::stream s = kc::stream::make();
  const std::int64_t plane = rows * cols, hv = view_window / 2;
  // The medians are of the input: batches read their halo views from an untouched copy.
  const std::vector<float> in(data.begin(), data.end());
  const std::int64_t batch = kc::views_per_batch(views, 2 * plane * 4, 2 * hv * plane * 4, ctx);
  kc::device_buffer<float> d_in(static_cast<std::size_t>(std::min(views, batch + 2 * hv) * plane),
                                "zinger input views");
  kc::device_buffer<float> d_out(static_cast<std::size_t>(batch * plane), "zinger output views");
  kc::device_buffer<unsigned long long> count(1, "zinger count");
  kc::set_flag(count, 0, s);
  for (std::int64_t v0 = 0; v0 < views; v0 += batch) {
    kc::view_batch b;
    b.v0 = v0;
    b.n = std::min(batch, views - v0);
    b.first = std::max<std::int64_t>(0, v0 - hv);
    b.count = std::min(views, v0 + b.n + hv) - b.first;
    kc::upload(d_in.data(), in.data() + b.first * plane, b.count * plane, s);
    kc::zinger_kernel<<<kc::blocks_for(b.n * plane, kc::k_threads), kc::k_threads, 0, s>>>(
        d_in.data(), d_out.data(), b, views, rows, cols, size, view_window, threshold,
        count.data());
    CTFORGE_CUDA_CHECK_LAUNCH("launching the zinger kernel");
    kc::download(data.data() + v0 * plane, d_out.data(), b.n * plane, s);
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s), "zinger removal on the GPU");
  }
  return static_cast<std::int64_t>(kc::read_flag(count, s));
}

std::int64_t cuda_retrieve_phase(std::span<float> data, std::int64_t views,
                                 const kernels::phase_grid& grid, const execution_context& ctx,
                                 float* bad_value) {
  if (data.empty()) return -1;
  const kc::device_guard dev(ctx.device);
  const kc::stream s = kc::stream::make();
  const std::int64_t rows = grid.rows, cols = grid.cols, nr = grid.nr, nc = grid.nc;
  const std::int64_t nh = nc / 2 + 1, view = rows * cols;
  // Per view: the input, the padded transmission and its spectrum (the work area about as much).
  const std::int64_t per_view = 4 * view + 4 * nr * nc + 2 * 8 * nr * nh;
  const std::int64_t batch =
      std::min<std::int64_t>(kc::views_per_batch(views, per_view, 4 * nr * nh, ctx), 256);
  const kc::cufft_plan fwd(static_cast<int>(nr), static_cast<int>(nc), static_cast<int>(batch),
                           CUFFT_R2C);
  const kc::cufft_plan inv(static_cast<int>(nr), static_cast<int>(nc), static_cast<int>(batch),
                           CUFFT_C2R);
  kc::device_buffer<char> work(std::max<std::size_t>({fwd.work_bytes(), inv.work_bytes(), 1}),
                               "cuFFT work area");
  for (const kc::cufft_plan* p : {&fwd, &inv}) {
    p->set_work_area(work.data());
    p->set_stream(s);
  }
  kc::device_buffer<float> d_in(static_cast<std::size_t>(batch * view), "phase views");
  kc::device_buffer<float> d_real(static_cast<std::size_t>(batch * nr * nc), "padded views");
  kc::device_buffer<cufftComplex> d_spec(static_cast<std::size_t>(batch * nr * nh), "spectra");
  kc::device_buffer<float> d_filter(grid.filter.size(), "phase filter");
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(d_filter.data(), grid.filter.data(),
                                   grid.filter.size() * sizeof(float), cudaMemcpyHostToDevice, s),
                   "uploading the phase filter");
  kc::device_buffer<unsigned long long> bad(1, "phase flag");
  kc::set_flag(bad, kc::k_none, s);
  for (std::int64_t v0 = 0; v0 < views; v0 += batch) {
    const std::int64_t m = std::min(batch, views - v0);
    if (m < batch)  // the plans transform `batch` views: clear the rest of the input
      CTFORGE_CUDA_TRY(cudaMemsetAsync(d_in.data(), 0, d_in.bytes(), s), "clearing views");
    kc::upload(d_in.data(), data.data() + v0 * view, m * view, s);
    kc::phase_pad_kernel<<<kc::blocks_for(batch * nr * nc, kc::k_threads), kc::k_threads, 0, s>>>(
        d_in.data(), d_real.data(), batch, rows, cols, nr, nc);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the phase padding kernel");
    CTFORGE_CUFFT_TRY(cufftExecR2C(fwd.get(), d_real.data(), d_spec.data()),
                      "phase retrieval (forward FFT)");
    kc::phase_filter_kernel<<<kc::blocks_for(batch * nr * nh, kc::k_threads), kc::k_threads, 0,
                              s>>>(d_spec.data(), d_filter.data(), nr * nh, batch * nr * nh);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the phase filter kernel");
    CTFORGE_CUFFT_TRY(cufftExecC2R(inv.get(), d_spec.data(), d_real.data()),
                      "phase retrieval (inverse FFT)");
    kc::phase_crop_kernel<<<kc::blocks_for(m * view, kc::k_threads), kc::k_threads, 0, s>>>(
        d_real.data(), d_in.data(), m, rows, cols, nr, nc, v0 * view, bad.data());
    CTFORGE_CUDA_CHECK_LAUNCH("launching the phase crop kernel");
    kc::download(data.data() + v0 * view, d_in.data(), m * view, s);
    const unsigned long long first_bad = kc::read_flag(bad, s);
    if (first_bad == kc::k_none) continue;
    const auto i = static_cast<std::int64_t>(first_bad) - v0 * view;
    const std::int64_t at = (i / view * nr + i % view / cols) * nc + i % cols;
    CTFORGE_CUDA_TRY(
        cudaMemcpy(bad_value, d_real.data() + at, sizeof(float), cudaMemcpyDeviceToHost),
        "reading the failed value");
    return static_cast<std::int64_t>(first_bad);
  }
  return -1;
}

}  // namespace ctforge::detail
