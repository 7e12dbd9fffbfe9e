// Host-callable extras of the CUDA backend beyond src/recon/cuda_dispatch.hpp, for tests,
// benchmarks and logs: timings and decisions of the last pipeline run, device memory and
// description, and the FDK-weighted back-projection of already filtered projections (the
// RabbitCT benchmark operation). Plain C++ (no CUDA types): host code compiled by g++ may
// include it. Defined in src/kernels/*.cu (CUDA builds only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"
#include "recon/cuda_dispatch.hpp"

namespace ctforge::detail {

struct cuda_pipeline_stats {
  // Wall-clock times (ms) measured on the host.
  double total_ms = 0;     ///< whole call, set-up and volume download included
  double setup_ms = 0;     ///< allocations, plans, graph capture, constant uploads
  double stream_ms = 0;    ///< batch loop(s): staging, uploads, filtering, back-projection
  double download_ms = 0;  ///< device -> host copy of the volume
  // Device time (ms) summed over batches, from events around each stage's graph launch.
  // The stages overlap, so the sum can exceed stream_ms.
  double filter_ms = 0;       ///< pre-weighting + FFT filter (+ copy into the arrays or the store)
  double backproject_ms = 0;  ///< back-projection kernels
  double gather_ms = 0;  ///< slab mode: copying each slab's rows from the store into the arrays
  // Decisions.
  int views_per_batch = 0;
  int batches = 0;
  int slabs = 0;              ///< 1 = the whole volume stayed on the device
  bool device_store = false;  ///< slab mode: filtered projections kept on the device
  bool filtered = false;      ///< FDK / FBP (true) or plain back-projection (false)
  bool hardware_interpolation = false;
  std::int64_t budget_bytes = 0;   ///< device memory budget the plan had to fit
  std::int64_t planned_bytes = 0;  ///< device memory the plan allocated (estimate)
  int fft_plans_created = 0;       ///< cuFFT plan pairs made by this call (0: all from the cache)
  /// Page-locked staging this call allocated (0: reused from the pool of earlier calls).
  std::int64_t pinned_bytes_allocated = 0;
  /// The projections were page-locked (ctforge::pinned_host_range) and uploaded straight from
  /// the caller's memory, without the host copy into staging.
  bool input_page_locked = false;
};

/// Timings and decisions of the last cuda_forward_project call on this thread.
struct cuda_forward_stats {
  double total_ms = 0;   ///< whole call (host wall clock)
  double stream_ms = 0;  ///< slab uploads, ray tracing, downloads and host copies / sums
  int views_per_chunk = 0;
  int slabs = 0;             ///< 1 = the whole volume in one 3D texture
  std::int64_t slab_nz = 0;  ///< planes per slab (the texture's depth)
  bool hardware_interpolation = false;
  std::int64_t budget_bytes = 0;   ///< device memory budget the plan had to fit
  std::int64_t planned_bytes = 0;  ///< device memory the plan allocated (estimate)
  /// Page-locked staging this call allocated (0: reused from the pool of earlier calls).
  std::int64_t pinned_bytes_allocated = 0;
};

/// Statistics of the last cuda_forward_project call on this thread (all zero before the
/// first).
cuda_forward_stats cuda_last_forward_stats();

/// Releases the cached cuFFT plans of the ramp filter (they are kept across calls, per device
/// and shape; see kernels::cuda::ramp_filter_gpu), and reports how many shapes are cached.
void cuda_clear_fft_plan_cache();
std::size_t cuda_fft_plan_cache_size();

/// Frees the idle page-locked staging buffers that GPU calls keep for the next call (at most
/// 1 GiB; see kernels/pinned_pool.cuh), and reports how many bytes are held.
void cuda_clear_pinned_pool();
std::int64_t cuda_pinned_pool_held_bytes();

/// Bytes of the cuFFT work area the ramp filter needs for `rows_total` rows of FFT length
/// `padded_len` on the current device (the plans are made, or taken from the cache). Tests and
/// benchmarks use it to give the pipeline an exact memory budget.
std::int64_t cuda_fft_work_bytes(std::int64_t padded_len, std::int64_t rows_total);

/// Statistics of the last cuda_reconstruct / cuda_back_project call on this thread
/// (all zero before the first).
cuda_pipeline_stats cuda_last_pipeline_stats();

/// Free and total memory of a CUDA device (bytes), from cudaMemGetInfo. Throws ctforge::error
/// when the query fails. For tests (memory growth) and benchmarks.
struct cuda_memory_info {
  std::int64_t free_bytes = 0, total_bytes = 0;
};
cuda_memory_info cuda_device_memory(int device = 0);

/// Back-projection of already filtered projections on the GPU, with the FDK distance weight
/// 1/w^2 when distance_weighting (the operation RabbitCT times), uploads included; the GPU
/// counterpart of detail::backproject_filtered_cpu. Defined in src/kernels/fdk.cu.
volume cuda_backproject_filtered(const projection_view& proj, const geometry& g,
                                 const volume_geometry& vg, const cuda_options& copt,
                                 bool distance_weighting);

/// "NVIDIA H200, compute capability 9.0, 132 SMs, 139.8 GiB" (throws when the query fails).
std::string cuda_device_description(int device = 0);

}  // namespace ctforge::detail
