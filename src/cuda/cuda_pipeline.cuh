// Internal interface between the CUDA translation units of the backend (CUDA code only).
//
// Every enqueue_* function issues asynchronous work into a stream and is safe to call during
// stream capture: it allocates nothing, synchronises nothing and checks each launch with
// cudaGetLastError. Per-batch parameters are read on the device from a batch counter that the
// captured sequence increments at its end (bump_counter), so one captured graph serves every
// batch of a reconstruction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_plan.cuh"
#include "cuda/cuda_raii.cuh"
#include "math/backproject.hpp"
#include "math/fdk_weights.hpp"
#include "math/geometry.hpp"

namespace ctforge::kernels::cuda {

/// How the back-projector (and forward projector) interpolates.
enum class interp {
  /// Texture unit bilinear / trilinear filtering: one fetch per sample; the weights have 8
  /// fractional bits (CUDA C++ Programming Guide, "Texture Fetching"), so results deviate
  /// from the CPU path by up to ~1/512 of the local pixel-to-pixel difference per sample.
  hardware,
  /// Point-sampled fetches of the 4 (8) neighbours with fp32 weights, the arithmetic of the
  /// CPU samplers (kernels::sample_bilinear_border / sample_trilinear_border).
  exact,
};

/// Volume part (slab) the back-projector writes, in __constant__ memory with the matrices.
struct bp_slab_header {
  int nx, ny, nz;    ///< voxels of the slab
  int cols;          ///< detector columns (texture width)
  int rows_valid;    ///< detector rows held by the texture; samples at row >= rows_valid read 0
  int row_offset;    ///< first detector row held by the texture (matrices already shifted)
  float ox, oy, oz;  ///< centre of slab voxel (0, 0, 0), mm
  float sx, sy, sz;  ///< voxel spacing, mm
};

/// Everything one back-projection launch reads from __constant__ memory.
struct bp_constants {
  bp_slab_header slab;
  int n_views;  ///< views in this batch (<= k_max_batch_views)
  int pad_[3];
  proj_matrix m[k_max_batch_views];  ///< matrices of the batch's views (slab-shifted rows)
};
// k_max_batch_views matrices of 48 B plus the header fit in the 64 KiB of constant memory.
static_assert(sizeof(bp_constants) <= k_bp_constants_bytes,
              "bp_constants must fit in constant memory");

/// Device-side sources of one back-projection launch.
struct bp_sources {
  const bp_slab_header* slab;   ///< device: current slab
  const proj_matrix* matrices;  ///< device: all views of the scan (rows shifted for the slab)
  int* counter;                 ///< device: batch index, incremented at the end of each launch
  bp_constants* staging;        ///< device: assembled constants, copied into __constant__ memory
  int views_per_batch;
  int total_views;
};

/// Back-projects one batch of views from the layered texture (layer i = view i of the batch)
/// into `volume` (the slab, [nz][ny][nx], accumulated: +=). The grid covers nx x ny x max_nz;
/// threads beyond the slab's nz return early. curved: the matrices are kernels::cyl_map of a
/// cylindrical detector (same 12 floats). Defined in backproject.cu.
void enqueue_backprojection(cudaStream_t s, bp_weighting w, interp mode, const bp_sources& src,
                            cudaTextureObject_t tex_linear, cudaTextureObject_t tex_point,
                            float* volume, int nx, int ny, int max_nz, bool curved = false);

/// The back-projection constants (c_bp) live in one __constant__ block per process: whoever
/// enqueues enqueue_backprojection holds this lock until that work has finished on the device
/// (the FDK / back-projection pipeline for a whole call, the iterative space for one back()).
/// Defined in backproject.cu.
std::mutex& backprojection_constants_mutex();

/// Loads the back-projection kernels (so that none loads lazily during stream capture).
void preload_backprojection_kernels();
/// Loads the batch counter, projection store and row gather kernels, which are first launched
/// inside stream capture. Defined in pipeline_kernels.cu.
void preload_pipeline_kernels();

/// Pre-weighting fused with zero padding: for view i of batch b (b from *counter) and detector
/// pixel (col, row), out[(i * rows + row) * pitch + col] = raw[(i * rows + row) * cols + col]
/// * preweight(params, views[b * views_per_batch + i], col, row) for col < cols, 0 for
/// cols <= col < padded_len; views beyond the scan (last batch) are all zero.
/// apply_weights = false copies without weighting. Defined in preweight.cu.
struct preweight_batch {
  const float* raw;             ///< [views_per_batch][rows][cols]
  float* out;                   ///< [views_per_batch * rows][pitch]
  const preweight_view* views;  ///< all views of the scan
  const int* counter;           ///< batch index
  /// When not null: atomicMin of the linear index (view * rows + row) * cols + col of every
  /// non-finite raw value read (initialise to ~0ull; unchanged means all values were finite).
  unsigned long long* first_non_finite;
  preweight_params params;
  int views_per_batch, total_views, cols, rows, padded_len, pitch;
};
void enqueue_preweight(cudaStream_t s, const preweight_batch& b, bool apply_weights);

/// The forward (R2C) and inverse (C2R) batched plans of one ramp-filter shape.
struct ramp_fft_plans {
  cufft_plan fwd, inv;
};

/// Ramp filter of `rows_total` padded rows in place: batched R2C, multiplication by the
/// frequency response (ctforge::detail::ramp_response, which holds the 1 / N normalisation),
/// batched C2R. The caller provides the work area (work_bytes) and the row buffer, pitch =
/// 2 (N / 2 + 1) floats. The plans come from a process-wide cache keyed by (current device,
/// padded length, rows_total) that keeps the 8 most recently used shapes (without work areas:
/// those belong to each call), so repeated reconstructions of one shape plan once. A cached
/// plan's stream and work area are set by enqueue / set_work_area: callers serialise their use
/// (the pipeline holds its backend lock). Defined in ramp_filter.cu.
class ramp_filter_gpu {
 public:
  /// Uploads the response in stream `s` (and waits for it). Must run with the target device
  /// current.
  ramp_filter_gpu(int padded_len, int rows_total, const std::vector<float>& response,
                  cudaStream_t s);
  /// Whether construction created the plans (false: reused from the cache).
  bool planned() const { return planned_; }
  int padded_len() const { return n_; }
  int rows_total() const { return rows_total_; }
  /// Floats per padded row of the in-place buffer.
  int pitch() const { return 2 * (n_ / 2 + 1); }
  std::size_t work_bytes() const;
  void set_work_area(void* area) const;
  /// Filters the rows of `buffer` (rows_total x pitch floats) in place, in stream `s`.
  void enqueue(cudaStream_t s, float* buffer) const;

 private:
  int n_, rows_total_;
  bool planned_ = false;
  // The cached plans keep the work area and stream of their last user: enqueue refuses to run
  // before this filter has set its own work area (never a freed one of an earlier call).
  mutable bool work_area_set_ = false;
  std::shared_ptr<const ramp_fft_plans> plans_;
  device_buffer<float> response_;
};

/// Drops every cached ramp-filter plan (plans in use live on until their filter is destroyed).
void clear_ramp_plan_cache();
/// Calls that reused a cached plan (hits) and that created one (misses), and the shapes held.
struct ramp_plan_cache_stats {
  std::int64_t hits = 0, misses = 0;
  std::size_t size = 0;
};
ramp_plan_cache_stats ramp_plan_cache_statistics();
/// Work area bytes of the (cached) plans for this shape on the current device.
std::int64_t ramp_work_bytes(int padded_len, int rows_total);

/// Increments *counter (one thread). Defined in pipeline_kernels.cu.
void enqueue_bump(cudaStream_t s, int* counter);

/// Copies the first `cols` floats of each of the views_per_batch * rows rows of `src` (row
/// pitch `src_pitch` floats) into the projection store at view b * views_per_batch + i
/// (b from *counter), skipping views beyond the scan. `store` is device memory or mapped
/// pinned host memory, [total_views][rows][cols]. Defined in pipeline_kernels.cu.
struct store_batch {
  const float* src;
  float* store;
  const int* counter;
  int views_per_batch, total_views, cols, rows, src_pitch;
};
void enqueue_store(cudaStream_t s, const store_batch& b);

/// Writes rows [row_offset, row_offset + rows_valid) of the views of batch b (b from *counter)
/// from the store into layers 0.. of a layered array through `surface`, at rows 0..rows_valid-1,
/// plus one zero row at rows_valid when the array is taller (row_offset / rows_valid from the
/// slab header). Defined in pipeline_kernels.cu.
struct gather_batch {
  const float* store;
  cudaSurfaceObject_t surface;
  const bp_slab_header* slab;
  const int* counter;
  int views_per_batch, total_views, cols, rows, array_rows;
};
void enqueue_gather(cudaStream_t s, const gather_batch& b);

/// Device memory a call may plan with: free memory (cudaMemGetInfo on the current device) less
/// min(512 MiB, 10 %), capped by `limit_bytes` when > 0 (cuda_options::gpu_memory_limit_bytes,
/// CLI --gpu-memory-limit); never negative.
inline std::int64_t device_memory_budget(std::int64_t limit_bytes) {
  std::size_t free_b = 0, total_b = 0;
  CTFORGE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "querying device memory");
  const std::int64_t free_i = static_cast<std::int64_t>(free_b);
  std::int64_t budget = free_i - std::min<std::int64_t>(std::int64_t{512} << 20, free_i / 10);
  if (limit_bytes > 0) budget = std::min(budget, limit_bytes);
  return std::max<std::int64_t>(budget, 0);
}

/// Launch geometry helper.
inline unsigned blocks_for(std::int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace ctforge::kernels::cuda
