// The CUDA backend as host code sees it: the one header of the backend that code compiled by
// g++ includes. Plain C++ in terms of the public views and plain structs (no CUDA types, nothing
// from src/recon or src/io). Defined in src/cuda/*.cu and only present when the library is
// built with CUDA (CTFORGE_WITH_CUDA); callers guard every use with
// `#if defined(CTFORGE_WITH_CUDA)`.
//
// Besides the entry points (reconstruction, projectors, the iterative space, device memory):
// timings and decisions of the last pipeline run, device memory and description, and the
// FDK-weighted back-projection of already filtered projections (the RabbitCT benchmark
// operation), for tests, benchmarks and logs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/iterative_space.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/preprocess.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "math/fdk_weights.hpp"
#include "math/helical.hpp"
#include "math/phase_filter.hpp"

namespace ctforge::detail {

/// True when CUDA device `device` (ordinal, from 0) exists and can run this build's kernels;
/// otherwise false and *why (if given) says why (no driver, no device, no such ordinal, an
/// architecture this build has no code for). Probes each ordinal once per process; never throws.
bool cuda_device_available(std::string* why, int device = 0);

/// Throws usage_error (naming --device) when `device` is negative, or when devices exist and
/// `device` is not one of their ordinals. Without a driver or device it only checks the sign.
void check_cuda_device_ordinal(int device);

/// check_cuda_device_ordinal, then ctforge::error when the device cannot be used (the reason
/// from cuda_device_available).
void require_cuda_device(int device);

/// Page-locks [data, data + bytes) for all devices (cudaHostRegister, portable). Returns false,
/// pinning nothing, with the reason in *why (if given), when no device is usable, CUDA already
/// knows the range as page-locked, or the system refuses (locked-memory limits). Never throws.
/// cuda_unpin_host undoes it (never throws).
bool cuda_pin_host(void* data, std::size_t bytes, std::string* why = nullptr);
void cuda_unpin_host(void* data) noexcept;

/// The CUDA backend's options: the execution context (device, threads for host copies,
/// gpu_memory_limit_bytes: a small value forces the volume into slabs,
/// gpu_hardware_interpolation) and what has no meaning on the CPU.
struct cuda_options : execution_context {
  int views_per_batch = 0;  ///< 0 = automatic
};

/// What the GPU's FDK / FBP computes, prepared on the host (detail::make_fdk_job in
/// src/recon/fdk_setup.hpp, from make_fdk_setup and ramp_response): the projections are
/// multiplied by their pre-weights (kernels::preweight), each detector row, zero padded to
/// padded_len, is filtered with `response`, and the views are back-projected with the FDK
/// distance weight 1/w^2 when distance_weighting (cone beam), unweighted otherwise.
struct fdk_job {
  kernels::preweight_params params;            ///< geometry-wide pre-weight constants
  std::vector<kernels::preweight_view> views;  ///< one per view
  /// Real frequency response of the ramp filter, padded_len / 2 + 1 values (ramp_response).
  std::vector<float> response;
  int padded_len = 0;  ///< FFT length of a zero-padded row (padded_length(cols))
  bool distance_weighting = true;
};

/// FDK / FBP on the GPU of the prepared `job` (its sizes must match the projections):
/// ctforge::reconstruct's GPU path. Non-finite projection values are not scanned for on the
/// host: the pre-weighting kernel records the first one, and the call then throws the CPU
/// path's usage_error (naming view, row and column) after filtering, before any
/// back-projection output is returned. The output volume's host allocation overlaps the GPU
/// work. Synchronises before returning. `opt` gives the threads for host copies, the progress
/// callback and the cancellation token. detail::cuda_reconstruct of src/recon/fdk_setup.hpp
/// prepares the job from recon_options and calls this.
/// `device_out`: when given, the volume stays in GPU memory and is moved there (the returned
/// host volume is then empty); the whole volume must fit (usage_error when it needs slabs).
/// Projections in device memory (proj.space == cuda_device) must lie on copt.device; they are
/// copied batch by batch on the device, never through the host.
volume cuda_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const fdk_job& job, const recon_options& opt, const cuda_options& copt,
                        device_array* device_out = nullptr);

/// Helical weighted FBP prepared on the host (recon/helical.hpp's make_helical_setup; the
/// kernels run math/helical.hpp): the parallel views [view_lo, view_hi) are rebinned through
/// `taps` ([views][cols_t]), ramp filtered with `response` (ramp_response for padded_len) and
/// back-projected with `views`' constants.
struct helical_job {
  kernels::helical_params params;
  std::span<const kernels::helical_view> views;
  std::span<const kernels::rebin_tap> taps;
  std::int64_t cols_t = 0, view_lo = 0, view_hi = 0;
  std::vector<float> response;
  int padded_len = 0;
};

/// Helical FBP on the GPU (src/cuda/helical.cu) of host projections: batches of views, the
/// whole volume in device memory (usage_error naming the sizes when it does not fit), the
/// per-voxel sums in the CPU path's order. opt: device, GPU memory limit, progress,
/// cancellation.
volume cuda_helical_reconstruct(const projection_view& proj, const volume_geometry& vg,
                                const helical_job& job, const recon_options& opt);

/// device_array's CUDA calls (src/cuda/cuda_device.cu). Synchronous; throw ctforge::error
/// with the failing call.
float* cuda_allocate_copy(const float* host, std::size_t count, int device);
void cuda_copy_to_host(float* host, const float* device_data, std::size_t count, int device);
void cuda_free(float* device_data, int device) noexcept;
/// True when `p` is device (or managed) memory of `device`; usage_error naming `what` when it is
/// memory of another device, false for host memory.
bool cuda_pointer_on_device(const void* p, int device, const char* what);

/// Ray-driven (Joseph) forward projection on the GPU; matches ctforge::forward_project.
projection_stack cuda_forward_project(const volume_view& vol, const geometry& g,
                                      const cuda_options& copt);

/// Unweighted voxel-driven back-projection on the GPU; matches ctforge::back_project.
volume cuda_back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                         const cuda_options& copt);

/// The CUDA iterative space (src/cuda/iterative_space.cu) sized for `volume_buffers` volume
/// buffers and `projection_buffers` projection buffers of the largest subset besides its own
/// arrays: usage_error naming the sizes when they do not fit in the device memory budget
/// (cfg.gpu_memory_limit_bytes or the free memory). make_cuda_space plans for what the
/// iterative algorithms hold; the persistent projector pair for one of each.
std::unique_ptr<iterative_space> cuda_make_space(const geometry& g, const volume_geometry& vg,
                                                 const space_config& cfg, int volume_buffers,
                                                 int projection_buffers);

/// cuda_make_space planned for what the iterative algorithms hold (declared for the factories
/// in src/recon/iterative_space.hpp too).
std::unique_ptr<iterative_space> make_cuda_space(const geometry& g, const volume_geometry& vg,
                                                 const space_config& cfg);

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
  int views_per_batch = 0;
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
/// 1 GiB; see src/cuda/pinned_pool.cuh), and reports how many bytes are held.
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
/// counterpart of detail::backproject_filtered_cpu. Defined in src/cuda/fdk.cu.
volume cuda_backproject_filtered(const projection_view& proj, const geometry& g,
                                 const volume_geometry& vg, const cuda_options& copt,
                                 bool distance_weighting);

/// "NVIDIA H200, compute capability 9.0, 132 SMs, 139.8 GiB" (throws when the query fails).
std::string cuda_device_description(int device = 0);

/// Preprocessing steps on the GPU (src/cuda/preprocess.cu), on host projections of views x
/// rows x cols in place, in batches of views within the device memory budget; the caller has
/// checked the options and that every value is finite (src/recon/preprocess_backend.cpp).
/// Zinger removal: each value at least `threshold` above the median of its size x size x
/// view_window window (reflect borders) becomes that median (kernels::select_rank,
/// kernels::is_zinger), the medians taken on the input; size^2 view_window <=
/// k_gpu_zinger_window. Returns how many were replaced.
std::int64_t cuda_remove_outliers(std::span<float> data, std::int64_t views, std::int64_t rows,
                                  std::int64_t cols, int size, int view_window, double threshold,
                                  const execution_context& ctx);
/// Phase retrieval of `views` views of grid.rows x grid.cols (kernels::phase_grid: padding,
/// 2D FFT, filter, inverse, -ln). Returns -1, or the flat index of the first value whose
/// filtered transmission is not positive and finite, its value in *bad_value (views up to that
/// one's batch are then written).
std::int64_t cuda_retrieve_phase(std::span<float> data, std::int64_t views,
                                 const kernels::phase_grid& grid, const execution_context& ctx,
                                 float* bad_value);

/// The host's part of Vo's stripe methods on the GPU: the decisions taken from per-column
/// statistics of one sinogram, by the functions the CPU loop calls (src/preprocess/
/// stripe_methods.hpp), so that both backends decide alike.
struct stripe_decisions {
  /// large: the mask (1: a stripe column, replaced) from the columns' ratios
  /// (kernels::sorted_column_ratio).
  std::function<std::vector<std::uint8_t>(std::span<const double> ratios)> large_mask;
  /// dead: from the columns' roughness (kernels::column_roughness), each dead column's good
  /// neighbours to interpolate between (left[c], right[c]; -1 for a column kept, as the caller
  /// initialised them); whether any column is dead.
  std::function<bool(std::span<const double> roughness, std::int32_t* left, std::int32_t* right)>
      dead_plan;
  /// large: the ranks left out at each end of a sorted column (detail::large_stripe_drop).
  std::int64_t large_drop = 0;
};
/// Stripe removal (Vo's sorting, filtering, large, dead and all methods of remove_stripes,
/// src/cuda/stripes.cu) on host projections of views x rows x cols in place, in batches of
/// detector rows within the device memory budget; the caller has checked the options, that
/// size and la_size are at most k_gpu_stripe_window, and that every value is finite. The
/// per-value arithmetic is math/vo_stripes.hpp's; ties in a column's sort keep view order.
void cuda_remove_stripes(std::span<float> data, std::int64_t views, std::int64_t rows,
                         std::int64_t cols, const stripe_options& o, const stripe_decisions& decide,
                         const execution_context& ctx);

}  // namespace ctforge::detail
