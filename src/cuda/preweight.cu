// FDK / FBP projection pre-weighting fused with the zero padding of each detector row into the
// in-place cuFFT buffer. The weight is kernels::preweight, shared with the CPU path.
#include <cuda_runtime.h>

#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"
#include "math/fdk_weights.hpp"

namespace ctforge::kernels::cuda {
namespace {

constexpr int k_threads = 256;

// grid: x covers the padded row (padded_len floats), y = detector row, z = view of the batch.
template <bool Weighted>
__global__ void preweight_pad_kernel(preweight_batch b) {
  const int col = static_cast<int>(blockIdx.x) * k_threads + static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int i = static_cast<int>(blockIdx.z);
  if (col >= b.padded_len) return;
  const int view = *b.counter * b.views_per_batch + i;
  const std::int64_t line = static_cast<std::int64_t>(i) * b.rows + row;
  float value = 0.0f;
  if (col < b.cols && view < b.total_views) {
    value = b.raw[line * b.cols + col];
    if (b.first_non_finite != nullptr && !isfinite(value))
      atomicMin(b.first_non_finite,
                (static_cast<unsigned long long>(view) * static_cast<unsigned long long>(b.rows) +
                 static_cast<unsigned long long>(row)) *
                        static_cast<unsigned long long>(b.cols) +
                    static_cast<unsigned long long>(col));
    if constexpr (Weighted) value *= preweight(b.params, b.views[view], col, row);
  }
  b.out[line * b.pitch + col] = value;
}

}  // namespace

void enqueue_preweight(cudaStream_t s, const preweight_batch& b, bool apply_weights) {
  CTFORGE_EXPECTS(b.rows <= 65535 && b.views_per_batch <= 65535,
                  "pre-weighting: detector rows and views per batch must be <= 65535");
  const dim3 grid(blocks_for(b.padded_len, k_threads), static_cast<unsigned>(b.rows),
                  static_cast<unsigned>(b.views_per_batch));
  if (apply_weights)
    preweight_pad_kernel<true><<<grid, k_threads, 0, s>>>(b);
  else
    preweight_pad_kernel<false><<<grid, k_threads, 0, s>>>(b);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the pre-weighting kernel");
}

}  // namespace ctforge::kernels::cuda
