// Small kernels of the reconstruction pipeline: the batch counter, copies of filtered
// projections into the projection store (slab mode) and the gather of the detector rows a
// slab needs from the store into the layered texture array.
#include <cuda_runtime.h>
#include <surface_indirect_functions.h>

#include "cuda/cuda_error.cuh"
#include "cuda/cuda_pipeline.cuh"

namespace ctforge::kernels::cuda {
namespace {

constexpr int k_threads = 256;

__global__ void bump_kernel(int* counter) {
  *counter += 1;
}

// grid: x covers cols, y = detector row, z = view of the batch.
__global__ void store_kernel(store_batch b) {
  const int col = static_cast<int>(blockIdx.x) * k_threads + static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int i = static_cast<int>(blockIdx.z);
  const int view = *b.counter * b.views_per_batch + i;
  if (col >= b.cols || view >= b.total_views) return;
  const std::int64_t src_line = static_cast<std::int64_t>(i) * b.rows + row;
  const std::int64_t dst_line = static_cast<std::int64_t>(view) * b.rows + row;
  b.store[dst_line * b.cols + col] = b.src[src_line * b.src_pitch + col];
}

// grid: x covers cols, y = array row, z = view of the batch.
__global__ void gather_kernel(gather_batch b) {
  const int col = static_cast<int>(blockIdx.x) * k_threads + static_cast<int>(threadIdx.x);
  const int row = static_cast<int>(blockIdx.y);
  const int i = static_cast<int>(blockIdx.z);
  const int view = *b.counter * b.views_per_batch + i;
  const int rows_valid = b.slab->rows_valid;
  if (col >= b.cols || view >= b.total_views || row > rows_valid) return;
  float value = 0.0f;  // row == rows_valid: the zero row below the slab's rows
  if (row < rows_valid) {
    const std::int64_t src_line =
        static_cast<std::int64_t>(view) * b.rows + b.slab->row_offset + row;
    value = b.store[src_line * b.cols + col];
  }
  surf2DLayeredwrite(value, b.surface, col * static_cast<int>(sizeof(float)), row, i);
}

}  // namespace

void preload_pipeline_kernels() {
  cudaFuncAttributes a{};
  CTFORGE_CUDA_TRY(cudaFuncGetAttributes(&a, bump_kernel), "loading the batch counter kernel");
  CTFORGE_CUDA_TRY(cudaFuncGetAttributes(&a, store_kernel), "loading the projection store kernel");
  CTFORGE_CUDA_TRY(cudaFuncGetAttributes(&a, gather_kernel), "loading the row gather kernel");
}

void enqueue_bump(cudaStream_t s, int* counter) {
  bump_kernel<<<1, 1, 0, s>>>(counter);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the batch counter kernel");
}

void enqueue_store(cudaStream_t s, const store_batch& b) {
  CTFORGE_EXPECTS(b.rows <= 65535 && b.views_per_batch <= 65535,
                  "projection store: detector rows and views per batch must be <= 65535");
  const dim3 grid(blocks_for(b.cols, k_threads), static_cast<unsigned>(b.rows),
                  static_cast<unsigned>(b.views_per_batch));
  store_kernel<<<grid, k_threads, 0, s>>>(b);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the projection store kernel");
}

void enqueue_gather(cudaStream_t s, const gather_batch& b) {
  CTFORGE_EXPECTS(b.array_rows <= 65535 && b.views_per_batch <= 65535,
                  "row gather: detector rows and views per batch must be <= 65535");
  const dim3 grid(blocks_for(b.cols, k_threads), static_cast<unsigned>(b.array_rows),
                  static_cast<unsigned>(b.views_per_batch));
  gather_kernel<<<grid, k_threads, 0, s>>>(b);
  CTFORGE_CUDA_CHECK_LAUNCH("launching the row gather kernel");
}

}  // namespace ctforge::kernels::cuda
