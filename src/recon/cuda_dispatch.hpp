// Entry points of the CUDA backend, callable from host code compiled by g++.
// Defined in src/kernels/*.cu and only present when the library is built with CUDA
// (CTFORGE_WITH_CUDA). Callers guard every use with `#if defined(CTFORGE_WITH_CUDA)`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

struct fdk_setup;
class iterative_space;
struct space_config;

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
/// gpu_memory_limit_bytes: a small value forces the volume into z-slabs,
/// gpu_hardware_interpolation) and what has no meaning on the CPU.
struct cuda_options : execution_context {
  int views_per_batch = 0;  ///< 0 = automatic
};

/// FDK / FBP on the GPU. Same inputs, outputs and validation as ctforge::reconstruct on the
/// CPU. Non-finite projection values are not scanned for on the host: the pre-weighting kernel
/// records the first one, and the call then throws the CPU path's usage_error (naming view, row
/// and column) after filtering, before any back-projection output is returned. The output
/// volume's host allocation overlaps the GPU work. Synchronises before returning.
/// `setup`: the pre-weights to use (reconstruct passes those of a displaced detector before it
/// was padded); nullptr: make_fdk_setup(proj, g, opt).
/// `device_out`: when given, the volume stays in GPU memory and is moved there (the returned
/// host volume is then empty); the whole volume must fit (usage_error when it needs z-slabs).
/// Projections in device memory (proj.space == cuda_device) must lie on copt.device; they are
/// copied batch by batch on the device, never through the host.
volume cuda_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, const cuda_options& copt,
                        const fdk_setup* setup = nullptr, device_array* device_out = nullptr);

/// device_array's CUDA calls (src/kernels/cuda_device.cu). Synchronous; throw ctforge::error
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

/// The CUDA iterative space (src/kernels/iterative_space.cu) sized for `volume_buffers` volume
/// buffers and `projection_buffers` projection buffers of the largest subset besides its own
/// arrays: usage_error naming the sizes when they do not fit in the device memory budget
/// (cfg.gpu_memory_limit_bytes or the free memory). make_cuda_space plans for what the
/// iterative algorithms hold; the persistent projector pair for one of each.
std::unique_ptr<iterative_space> cuda_make_space(const geometry& g, const volume_geometry& vg,
                                                 const space_config& cfg, int volume_buffers,
                                                 int projection_buffers);

}  // namespace ctforge::detail
