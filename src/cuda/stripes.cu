// Vo's stripe (ring) removal methods on the GPU: sorting, filtering, large, dead and all
// (declared in cuda_api.hpp; driven by src/recon/preprocess_backend.cpp). The per-value
// arithmetic is the CPU's (math/vo_stripes.hpp, math/select.hpp); the decisions taken from
// per-column statistics (which columns are stripes, which dead columns to interpolate) are the
// host's, the same functions the CPU loop calls (stripe_decisions). Here only batches of
// detector rows, transfers, the segmented sort and launches.
//
// A batch holds the sinograms of n detector rows in two layouts: "views" [v][r][c] (as the
// projections store them, one 2D copy per batch) and "columns" [r][c][v] (each column's views
// contiguous: the sort's segments and the rank lines).
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>
#include <cub/device/device_segmented_sort.cuh>
#include <optional>
#include <span>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "cuda/cuda_raii.cuh"
#include "math/vo_stripes.hpp"

namespace ctforge::kernels::cuda {
namespace {

constexpr int k_threads = 256;
static_assert(k_gpu_stripe_window == 101, "the rank median kernel's window buffer");

/// The sinograms of one batch: `views` x `rows` (of the batch) x `cols`.
struct sino_dims {
  std::int64_t views = 0, rows = 0, cols = 0;
  __host__ __device__ std::int64_t plane() const { return rows * cols; }
  __host__ __device__ std::int64_t size() const { return views * rows * cols; }
};

// ---- kernels ------------------------------------------------------------------------------

/// keys[r][c][v] = s[v][r][c], vals = v: the columns as the sort's segments.
__global__ void to_columns_kernel(const float* __restrict__ s, float* __restrict__ keys,
                                  std::int32_t* __restrict__ vals, sino_dims d) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= d.size()) return;
  const std::int64_t j = i / d.views, v = i % d.views;  // j = r * cols + c
  keys[i] = s[v * d.plane() + j];
  vals[i] = static_cast<std::int32_t>(v);
}

/// offsets[j] = j * views: the segments' boundaries.
__global__ void offsets_kernel(std::int64_t* offsets, std::int64_t count, std::int64_t views) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (j <= count) offsets[j] = j * views;
}

/// smooth[r][c][k] = the median over the columns about c of rank k (column_window_median).
__global__ void rank_median_kernel(const float* __restrict__ sorted, float* __restrict__ smooth,
                                   sino_dims d, int size) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= d.size()) return;
  const std::int64_t r = i / (d.cols * d.views), c = i / d.views % d.cols, k = i % d.views;
  float buf[k_gpu_stripe_window];
  smooth[i] =
      column_window_median(sorted + r * d.cols * d.views + k, d.views, c, d.cols, size, buf);
}

/// out[order][r][c] = smooth[r][c][k]: the smoothed ranks back in their views.
__global__ void unsort_kernel(const float* __restrict__ smooth,
                              const std::int32_t* __restrict__ order, float* __restrict__ out,
                              sino_dims d) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= d.size()) return;
  out[static_cast<std::int64_t>(order[i]) * d.plane() + i / d.views] = smooth[i];
}

/// fact[r][c] = sorted_column_ratio of the column.
__global__ void ratio_kernel(const float* __restrict__ sorted, const float* __restrict__ smooth,
                             double* __restrict__ fact, sino_dims d, std::int64_t drop) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (j >= d.plane()) return;
  fact[j] = sorted_column_ratio(sorted + j * d.views, smooth + j * d.views, 1, d.views, drop);
}

/// Large stripes: a masked column takes the unsorted smooth values, the others are divided
/// by their ratio when `norm`.
__global__ void large_apply_kernel(float* __restrict__ s, const float* __restrict__ unsorted,
                                   const double* __restrict__ fact,
                                   const std::uint8_t* __restrict__ mask, sino_dims d, bool norm) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= d.size()) return;
  const std::int64_t j = i % d.plane();
  s[i] = mask[j] ? unsorted[i] : (norm ? divide_by_ratio(s[i], fact[j]) : s[i]);
}

/// diff[r][c] = column_roughness of the column.
__global__ void roughness_kernel(const float* __restrict__ s, double* __restrict__ diff,
                                 sino_dims d) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (j >= d.plane()) return;
  diff[j] = column_roughness(s + j, d.plane(), d.views);
}

/// Dead columns interpolated between their good neighbours (left < 0: kept). Reads only good
/// columns, writes only dead ones.
__global__ void interpolate_kernel(float* s, const std::int32_t* __restrict__ left,
                                   const std::int32_t* __restrict__ right, sino_dims d) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= d.size()) return;
  const std::int64_t j = i % d.plane(), c = j % d.cols;
  const std::int64_t l = left[j], r = right[j];
  if (l < 0) return;
  const std::int64_t row = i - c;
  s[i] = interpolate_between(s[row + l], s[row + r],
                             static_cast<double>(c - l) / static_cast<double>(r - l));
}

/// a[r][c][n] = the padded, modulated column (lowpass_source, alternating_sign).
__global__ void lowpass_pad_kernel(const float* __restrict__ s, cufftComplex* __restrict__ a,
                                   sino_dims d, std::int64_t pad, std::int64_t m) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= d.plane() * m) return;
  const std::int64_t j = i / m, n = i % m;
  a[i].x = s[lowpass_source(n, pad, d.views) * d.plane() + j] * alternating_sign(n);
  a[i].y = 0.0f;
}

__global__ void window_kernel(cufftComplex* __restrict__ a, const float* __restrict__ w,
                              std::int64_t m, std::int64_t total) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= total) return;
  a[i].x *= w[i % m];
  a[i].y *= w[i % m];
}

/// s = the low-pass part along the views, sharp = what it leaves of s.
__global__ void lowpass_split_kernel(float* __restrict__ s, float* __restrict__ sharp,
                                     const cufftComplex* __restrict__ a, sino_dims d,
                                     std::int64_t pad, std::int64_t m, float scale) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= d.size()) return;
  const std::int64_t v = i / d.plane(), j = i % d.plane();
  const float smooth = a[j * m + v + pad].x * scale * alternating_sign(v + pad);
  sharp[i] = s[i] - smooth;
  s[i] = smooth;
}

__global__ void add_kernel(float* __restrict__ s, const float* __restrict__ sharp, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i < n) s[i] += sharp[i];
}

// ---- host orchestration -------------------------------------------------------------------

/// Device memory of one row's sinogram in a batch: seven planes of 4-byte values (sinogram,
/// keys, view indices, sorted, order, smooth, sharp), the segmented sort's work area (taken as
/// five more), the low-pass spectra (complex, views plus padding) with cuFFT's work area for
/// them (as cuFFT estimates it for one row's columns) and the per-column statistics.
std::int64_t bytes_per_row(std::int64_t views, std::int64_t cols, std::int64_t fft_len) {
  std::int64_t fft = 0;
  if (fft_len > 0) {
    int n = static_cast<int>(fft_len);
    std::size_t work = 0;
    CTFORGE_CUFFT_TRY(
        cufftEstimateMany(1, &n, &n, 1, n, &n, 1, n, CUFFT_C2C, static_cast<int>(cols), &work),
        "estimating the low-pass transforms' work area");
    fft = cols * fft_len * 8 + static_cast<std::int64_t>(work);
  }
  return views * cols * 4 * 12 + fft + cols * 32;
}

/// The buffers of one batch of sinograms, sized for `max_rows` rows, and the steps on them.
class stripe_batch {
 public:
  stripe_batch(std::int64_t views, std::int64_t cols, std::int64_t max_rows,
               const stripe_options& o, const ::ctforge::detail::stripe_decisions& decide,
               cudaStream_t s)
      : o_(o),
        decide_(decide),
        s_(s),
        max_(sino_dims{views, max_rows, cols}),
        pad_(o.method == stripe_method::filtering ? lowpass_pad(views) : 0),
        m_(views + 2 * pad_),
        sino_(plane(), "stripe sinograms"),
        keys_(plane(), "stripe sort keys"),
        vals_(plane(), "stripe view indices"),
        sorted_(plane(), "sorted columns"),
        order_(plane(), "sort order"),
        smooth_(plane(), "smoothed ranks"),
        offsets_(static_cast<std::size_t>(max_rows * cols + 1), "sort segments"),
        fact_(static_cast<std::size_t>(max_rows * cols), "column statistics"),
        mask_(static_cast<std::size_t>(max_rows * cols), "stripe mask"),
        left_(static_cast<std::size_t>(max_rows * cols), "dead column plan"),
        right_(static_cast<std::size_t>(max_rows * cols), "dead column plan") {
    const std::int64_t segs = max_rows * cols;
    offsets_kernel<<<blocks_for(segs + 1, k_threads), k_threads, 0, s_>>>(offsets_.data(), segs,
                                                                          views);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the sort segments kernel");
    std::size_t temp = 0;
    CTFORGE_CUDA_TRY(cub::DeviceSegmentedSort::StableSortPairs(
                         nullptr, temp, keys_.data(), sorted_.data(), vals_.data(), order_.data(),
                         max_.size(), segs, offsets_.data(), offsets_.data() + 1, s_),
                     "sizing the segmented sort of the stripe removal");
    temp_ = device_buffer<char>(std::max<std::size_t>(temp, 1), "segmented sort work area");
    if (o.method == stripe_method::filtering) make_lowpass();
  }

  /// Rows [r0, r0 + n) of the host projections (views x total_rows x cols), in place.
  void run(float* host, std::int64_t total_rows, std::int64_t r0, std::int64_t n) {
    const sino_dims d{max_.views, n, max_.cols};
    copy(host, total_rows, r0, d, cudaMemcpyHostToDevice);
    switch (o_.method) {
      case stripe_method::sorting:
        sort_filter_unsort(d, o_.size);
        break;
      case stripe_method::filtering:
        filter_sort_unsort(d);
        break;
      case stripe_method::large:
        remove_large(d);
        break;
      case stripe_method::dead:
        remove_dead(d);
        remove_large(d);
        break;
      case stripe_method::all:
        remove_dead(d);
        remove_large(d);
        sort_filter_unsort(d, o_.size);
        break;
      default:
        throw error("stripe removal on the GPU: no GPU path for method " + to_string(o_.method));
    }
    copy(host, total_rows, r0, d, cudaMemcpyDeviceToHost);
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_), "stripe removal on the GPU");
  }

 private:
  std::size_t plane() const { return static_cast<std::size_t>(max_.size()); }

  /// One 2D copy between the host's rows [r0, r0 + d.rows) of every view and the batch.
  void copy(float* host, std::int64_t total_rows, std::int64_t r0, const sino_dims& d,
            cudaMemcpyKind kind) {
    const std::size_t width = static_cast<std::size_t>(d.plane()) * sizeof(float);
    const std::size_t host_pitch = static_cast<std::size_t>(total_rows * d.cols) * sizeof(float);
    float* h = host + r0 * d.cols;
    if (kind == cudaMemcpyHostToDevice)
      CTFORGE_CUDA_TRY(cudaMemcpy2DAsync(sino_.data(), width, h, host_pitch, width,
                                         static_cast<std::size_t>(d.views), kind, s_),
                       "uploading sinograms");
    else
      CTFORGE_CUDA_TRY(cudaMemcpy2DAsync(h, host_pitch, sino_.data(), width, width,
                                         static_cast<std::size_t>(d.views), kind, s_),
                       "downloading sinograms");
  }

  unsigned blocks(std::int64_t n) const { return blocks_for(n, k_threads); }

  /// sorted_, order_: each column sorted along the views, ties in view order.
  void sort_columns(const sino_dims& d) {
    to_columns_kernel<<<blocks(d.size()), k_threads, 0, s_>>>(sino_.data(), keys_.data(),
                                                              vals_.data(), d);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the column gather kernel");
    std::size_t temp = temp_.size();
    CTFORGE_CUDA_TRY(
        cub::DeviceSegmentedSort::StableSortPairs(temp_.data(), temp, keys_.data(), sorted_.data(),
                                                  vals_.data(), order_.data(), d.size(), d.plane(),
                                                  offsets_.data(), offsets_.data() + 1, s_),
        "sorting the sinogram columns");
  }

  /// smooth_: the sorted ranks median-filtered across the columns (window `size`).
  void median_ranks(const sino_dims& d, int size) {
    rank_median_kernel<<<blocks(d.size()), k_threads, 0, s_>>>(sorted_.data(), smooth_.data(), d,
                                                               size);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the rank median kernel");
  }

  void unsort(const sino_dims& d, float* out) {
    unsort_kernel<<<blocks(d.size()), k_threads, 0, s_>>>(smooth_.data(), order_.data(), out, d);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the unsort kernel");
  }

  /// Vo's algorithm 3.
  void sort_filter_unsort(const sino_dims& d, int size) {
    sort_columns(d);
    median_ranks(d, size);
    unsort(d, sino_.data());
  }

  /// Vo's algorithm 5: the column ratios go to the host, which returns the stripes' mask.
  void remove_large(const sino_dims& d) {
    sort_columns(d);
    median_ranks(d, o_.la_size);
    ratio_kernel<<<blocks(d.plane()), k_threads, 0, s_>>>(sorted_.data(), smooth_.data(),
                                                          fact_.data(), d, decide_.large_drop);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the column ratio kernel");
    const std::vector<double> fact = download(fact_, d.plane());
    std::vector<std::uint8_t> mask(fact.size());
    for (std::int64_t r = 0; r < d.rows; ++r) {
      const std::span<const double> row(fact.data() + r * d.cols, static_cast<std::size_t>(d.cols));
      const std::vector<std::uint8_t> m = decide_.large_mask(row);
      std::copy(m.begin(), m.end(), mask.begin() + r * d.cols);
    }
    upload(mask_, mask);
    unsort(d, keys_.data());  // the keys are free once sorted
    large_apply_kernel<<<blocks(d.size()), k_threads, 0, s_>>>(
        sino_.data(), keys_.data(), fact_.data(), mask_.data(), d, o_.norm);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the large stripe kernel");
  }

  /// Vo's algorithm 6 without the large-stripe step: the columns' roughness goes to the host,
  /// which returns the dead columns' neighbours.
  void remove_dead(const sino_dims& d) {
    roughness_kernel<<<blocks(d.plane()), k_threads, 0, s_>>>(sino_.data(), fact_.data(), d);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the column roughness kernel");
    const std::vector<double> diff = download(fact_, d.plane());
    std::vector<std::int32_t> left(diff.size(), -1), right(diff.size(), -1);
    bool any = false;
    for (std::int64_t r = 0; r < d.rows; ++r)
      any = decide_.dead_plan(
                std::span<const double>(diff.data() + r * d.cols, static_cast<std::size_t>(d.cols)),
                left.data() + r * d.cols, right.data() + r * d.cols) ||
            any;
    if (!any) return;
    upload(left_, left);
    upload(right_, right);
    interpolate_kernel<<<blocks(d.size()), k_threads, 0, s_>>>(sino_.data(), left_.data(),
                                                               right_.data(), d);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the dead column kernel");
  }

  void make_lowpass() {
    const std::int64_t segs = max_.plane();
    fwd_.emplace(static_cast<int>(m_), static_cast<int>(segs), static_cast<int>(m_),
                 static_cast<int>(m_), CUFFT_C2C);
    spectra_ = device_buffer<cufftComplex>(static_cast<std::size_t>(segs * m_), "low-pass columns");
    work_ = device_buffer<char>(std::max<std::size_t>(fwd_->work_bytes(), 1), "cuFFT work area");
    fwd_->set_work_area(work_.data());
    fwd_->set_stream(s_);
    std::vector<float> w(static_cast<std::size_t>(m_));
    for (std::int64_t n = 0; n < m_; ++n)
      w[static_cast<std::size_t>(n)] = lowpass_window(n, m_, o_.sigma);
    window_ = device_buffer<float>(w.size(), "low-pass window");
    upload(window_, w);
    sharp_ = device_buffer<float>(plane(), "high-pass part");
  }

  /// Vo's algorithm 2: the low-pass part along the views through algorithm 3, the rest added
  /// back. The batch's columns are transformed `max_rows` rows at a time (the plan's batch;
  /// rows past the batch's are transformed too and ignored).
  void filter_sort_unsort(const sino_dims& d) {
    const std::int64_t total = max_.plane() * m_;
    if (d.rows < max_.rows)
      CTFORGE_CUDA_TRY(cudaMemsetAsync(spectra_.data(), 0, spectra_.bytes(), s_),
                       "clearing the low-pass columns");
    lowpass_pad_kernel<<<blocks(d.plane() * m_), k_threads, 0, s_>>>(sino_.data(), spectra_.data(),
                                                                     d, pad_, m_);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the low-pass padding kernel");
    CTFORGE_CUFFT_TRY(cufftExecC2C(fwd_->get(), spectra_.data(), spectra_.data(), CUFFT_FORWARD),
                      "stripe removal (forward FFT along the views)");
    window_kernel<<<blocks(total), k_threads, 0, s_>>>(spectra_.data(), window_.data(), m_, total);
    CTFORGE_CUDA_CHECK_LAUNCH("launching the low-pass window kernel");
    CTFORGE_CUFFT_TRY(cufftExecC2C(fwd_->get(), spectra_.data(), spectra_.data(), CUFFT_INVERSE),
                      "stripe removal (inverse FFT along the views)");
    lowpass_split_kernel<<<blocks(d.size()), k_threads, 0, s_>>>(
        sino_.data(), sharp_.data(), spectra_.data(), d, pad_, m_, 1.0f / static_cast<float>(m_));
    CTFORGE_CUDA_CHECK_LAUNCH("launching the low-pass split kernel");
    sort_filter_unsort(d, o_.size);
    add_kernel<<<blocks(d.size()), k_threads, 0, s_>>>(sino_.data(), sharp_.data(), d.size());
    CTFORGE_CUDA_CHECK_LAUNCH("launching the high-pass add kernel");
  }

  template <class T>
  std::vector<T> download(const device_buffer<T>& b, std::int64_t n) {
    std::vector<T> h(static_cast<std::size_t>(n));
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(h.data(), b.data(), h.size() * sizeof(T), cudaMemcpyDeviceToHost, s_),
        "downloading column statistics");
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_), "stripe removal on the GPU");
    return h;
  }

  template <class T>
  void upload(device_buffer<T>& b, const std::vector<T>& h) {
    CTFORGE_CUDA_TRY(
        cudaMemcpyAsync(b.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, s_),
        "uploading stripe decisions");
    // h is a local of the caller: the copy must finish before it goes.
    CTFORGE_CUDA_TRY(cudaStreamSynchronize(s_), "stripe removal on the GPU");
  }

  const stripe_options& o_;
  const ::ctforge::detail::stripe_decisions& decide_;
  cudaStream_t s_;
  sino_dims max_;
  std::int64_t pad_, m_;
  device_buffer<float> sino_, keys_;
  device_buffer<std::int32_t> vals_;
  device_buffer<float> sorted_;
  device_buffer<std::int32_t> order_;
  device_buffer<float> smooth_;
  device_buffer<std::int64_t> offsets_;
  device_buffer<double> fact_;
  device_buffer<std::uint8_t> mask_;
  device_buffer<std::int32_t> left_, right_;
  device_buffer<char> temp_{1, "segmented sort work area"};
  std::optional<cufft_plan> fwd_;
  device_buffer<cufftComplex> spectra_{1, "low-pass columns"};
  device_buffer<char> work_{1, "cuFFT work area"};
  device_buffer<float> window_{1, "low-pass window"};
  device_buffer<float> sharp_{1, "high-pass part"};
};

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

namespace kc = kernels::cuda;

void cuda_remove_stripes(std::span<float> data, std::int64_t views, std::int64_t rows,
                         std::int64_t cols, const stripe_options& o, const stripe_decisions& decide,
                         const execution_context& ctx) {
  CTFORGE_EXPECTS(std::max(o.size, o.la_size) <= k_gpu_stripe_window,
                  "stripe removal on the GPU: a window larger than k_gpu_stripe_window");
  if (data.empty()) return;
  const kc::device_guard dev(ctx.device);
  const kc::stream s = kc::stream::make();
  const std::int64_t fft_len =
      o.method == stripe_method::filtering ? views + 2 * kernels::lowpass_pad(views) : 0;
  const std::int64_t per_row = kc::bytes_per_row(views, cols, fft_len);
  // At least one row; the sort counts its items and the FFT its columns in 32 bits.
  const std::int64_t by_count = std::max<std::int64_t>(
      1,
      std::min(INT32_MAX / std::max<std::int64_t>(views * cols, 1),
               INT32_MAX / std::max<std::int64_t>(cols * std::max<std::int64_t>(fft_len, 1), 1)));
  const std::int64_t batch = std::clamp<std::int64_t>(
      kc::device_memory_budget(ctx.gpu_memory_limit_bytes) / std::max<std::int64_t>(per_row, 1), 1,
      std::min(rows, by_count));
  kc::stripe_batch b(views, cols, batch, o, decide, s);
  for (std::int64_t r0 = 0; r0 < rows; r0 += batch)
    b.run(data.data(), rows, r0, std::min(batch, rows - r0));
}

}  // namespace ctforge::detail
