// Ramp filter on the GPU: batched in-place R2C / C2R cuFFT transforms of zero-padded detector
// rows with a multiplication by the frequency response in between. The response comes from
// ctforge::detail::ramp_response (the CPU path's, 1 / N normalisation included), uploaded once
// per filter. Plans are cached per (device, length, rows) across calls.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <compare>
#include <memory>
#include <string>

#include "core/lru_cache.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"

namespace ctforge::kernels::cuda {
namespace {

constexpr int k_threads = 256;

// Multiplies bin k of every row by response[k]; n_bins = N / 2 + 1 complex values per row.
__global__ void apply_response_kernel(cufftComplex* __restrict__ data,
                                      const float* __restrict__ response, int n_bins,
                                      std::int64_t total) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * k_threads + threadIdx.x;
  if (i >= total) return;
  const float r = response[i % n_bins];
  cufftComplex c = data[i];
  c.x *= r;
  c.y *= r;
  data[i] = c;
}

}  // namespace

namespace {

struct plan_key {
  int device, n, rows_total;
  auto operator<=>(const plan_key&) const = default;
};

using plan_cache = detail::lru_cache<plan_key, const ramp_fft_plans>;

/// Never destroyed: cached plans are released with the CUDA context at process exit instead of
/// by a static destructor that might run after the CUDA runtime has shut down.
plan_cache& cache() {
  static plan_cache* c = new plan_cache(8);
  return *c;
}

std::shared_ptr<const ramp_fft_plans> plans_for(int padded_len, int rows_total, bool* created) {
  int device = 0;
  CTFORGE_CUDA_TRY(cudaGetDevice(&device), "querying the current device");
  return cache().get_or_create(
      plan_key{device, padded_len, rows_total},
      [&] {
        // In place: real rows of pitch 2 (N/2+1) floats, complex rows of N/2+1 bins.
        const int pitch = 2 * (padded_len / 2 + 1), bins = padded_len / 2 + 1;
        // Destroyed (on eviction, clear or the last user's release) with its own device
        // current, whichever device the releasing call runs on.
        return std::shared_ptr<const ramp_fft_plans>(
            new ramp_fft_plans{cufft_plan(padded_len, rows_total, pitch, bins, CUFFT_R2C),
                               cufft_plan(padded_len, rows_total, bins, pitch, CUFFT_C2R)},
            [device](const ramp_fft_plans* p) {
              int current = device;
              const bool switched = cudaGetDevice(&current) == cudaSuccess && current != device &&
                                    cudaSetDevice(device) == cudaSuccess;
              delete p;
              if (switched) cudaSetDevice(current);
              cudaGetLastError();
            });
      },
      created);
}

}  // namespace

void clear_ramp_plan_cache() {
  cache().clear();
}

std::int64_t ramp_work_bytes(int padded_len, int rows_total) {
  bool created = false;
  const auto plans = plans_for(padded_len, rows_total, &created);
  return static_cast<std::int64_t>(std::max(plans->fwd.work_bytes(), plans->inv.work_bytes()));
}

ramp_plan_cache_stats ramp_plan_cache_statistics() {
  const detail::lru_cache_stats s = cache().stats();
  return {s.hits, s.misses, s.size};
}

ramp_filter_gpu::ramp_filter_gpu(int padded_len, int rows_total, const std::vector<float>& response,
                                 cudaStream_t s)
    : n_(padded_len),
      rows_total_(rows_total),
      plans_(plans_for(padded_len, rows_total, &planned_)),
      response_(response.size(), "the ramp filter response") {
  CTFORGE_CHECK(static_cast<int>(response.size()) == padded_len / 2 + 1,
                "ramp filter: response has " + std::to_string(response.size()) +
                    " bins, expected " + std::to_string(padded_len / 2 + 1));
  CTFORGE_CUDA_TRY(cudaMemcpyAsync(response_.data(), response.data(),
                                   response.size() * sizeof(float), cudaMemcpyHostToDevice, s),
                   "uploading the ramp filter response");
  CTFORGE_CUDA_TRY(cudaStreamSynchronize(s), "uploading the ramp filter response");
}

std::size_t ramp_filter_gpu::work_bytes() const {
  return plans_->fwd.work_bytes() > plans_->inv.work_bytes() ? plans_->fwd.work_bytes()
                                                             : plans_->inv.work_bytes();
}

void ramp_filter_gpu::set_work_area(void* area) const {
  // The two transforms run one after the other in one stream: they share the area.
  plans_->fwd.set_work_area(area);
  plans_->inv.set_work_area(area);
  work_area_set_ = area != nullptr || work_bytes() == 0;
}

void ramp_filter_gpu::enqueue(cudaStream_t s, float* buffer) const {
  CTFORGE_CHECK(work_area_set_, "ramp filter: no cuFFT work area set for this call");
  auto* spectrum = reinterpret_cast<cufftComplex*>(buffer);
  plans_->fwd.set_stream(s);
  plans_->inv.set_stream(s);
  CTFORGE_CUFFT_TRY(cufftExecR2C(plans_->fwd.get(), buffer, spectrum), "ramp filter (forward FFT)");
  const int bins = n_ / 2 + 1;
  const std::int64_t total = static_cast<std::int64_t>(rows_total_) * bins;
  apply_response_kernel<<<blocks_for(total, k_threads), k_threads, 0, s>>>(
      spectrum, response_.data(), bins, total);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the ramp filter multiplication");
  CTFORGE_CUFFT_TRY(cufftExecC2R(plans_->inv.get(), spectrum, buffer), "ramp filter (inverse FFT)");
}

}  // namespace ctforge::kernels::cuda
