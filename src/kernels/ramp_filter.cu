// Ramp filter on the GPU: batched in-place R2C / C2R cuFFT transforms of zero-padded detector
// rows with a multiplication by the frequency response in between. The response comes from
// ctforge::detail::ramp_response (the CPU path's, 1 / N normalisation included), uploaded once.
#include <cuda_runtime.h>
#include <cufft.h>

#include <string>

#include "kernels/cuda_error.cuh"
#include "kernels/cuda_pipeline.cuh"

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

ramp_filter_gpu::ramp_filter_gpu(int padded_len, int rows_total, const std::vector<float>& response,
                                 cudaStream_t s)
    : n_(padded_len),
      rows_total_(rows_total),
      // In place: real rows of pitch 2 (N/2+1) floats, complex rows of N/2+1 bins.
      fwd_(padded_len, rows_total, 2 * (padded_len / 2 + 1), padded_len / 2 + 1, CUFFT_R2C),
      inv_(padded_len, rows_total, padded_len / 2 + 1, 2 * (padded_len / 2 + 1), CUFFT_C2R),
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
  return fwd_.work_bytes() > inv_.work_bytes() ? fwd_.work_bytes() : inv_.work_bytes();
}

void ramp_filter_gpu::set_work_area(void* area) const {
  // The two transforms run one after the other in one stream: they share the area.
  fwd_.set_work_area(area);
  inv_.set_work_area(area);
}

void ramp_filter_gpu::enqueue(cudaStream_t s, float* buffer) const {
  auto* spectrum = reinterpret_cast<cufftComplex*>(buffer);
  fwd_.set_stream(s);
  inv_.set_stream(s);
  CTFORGE_CUFFT_TRY(cufftExecR2C(fwd_.get(), buffer, spectrum), "ramp filter (forward FFT)");
  const int bins = n_ / 2 + 1;
  const std::int64_t total = static_cast<std::int64_t>(rows_total_) * bins;
  apply_response_kernel<<<blocks_for(total, k_threads), k_threads, 0, s>>>(spectrum, response_.data(),
                                                                          bins, total);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the ramp filter multiplication");
  CTFORGE_CUFFT_TRY(cufftExecC2R(inv_.get(), spectrum, buffer), "ramp filter (inverse FFT)");
}

}  // namespace ctforge::kernels::cuda
