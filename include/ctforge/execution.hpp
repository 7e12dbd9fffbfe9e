// Where and how a call runs: one execution context, the base of every options type
// (projector_options, recon_options, and inside the library the iterative space's and the CUDA
// backend's options), so that backend, device, threads, memory limits, interpolation,
// cancellation and progress are declared once and passed on whole.
#pragma once

#include <cstdint>
#include <functional>

#include "ctforge/backend.hpp"
#include "ctforge/cancel.hpp"

namespace ctforge {

struct execution_context {
  backend where = backend::automatic;  ///< automatic: CUDA when a usable device exists
  int device = 0;                      ///< CUDA device ordinal
  int threads = 0;  ///< CPU threads (also the GPU path's host copies); 0 = all cores
  /// Host memory (bytes) the call may hold at its peak; 0 = this machine's physical memory.
  /// reconstruct (FDK / FBP) checks its estimate against it before allocating (usage_error
  /// naming the sizes); ctforge recon --memory-limit also sizes its units by it.
  std::int64_t memory_limit_bytes = 0;
  /// Upper bound on GPU memory (bytes); 0 = free memory less a safety margin. The CUDA
  /// back-projection and forward projection split the volume into slabs when it does not fit
  /// (forward projection first tries fewer views at a time).
  std::int64_t gpu_memory_limit_bytes = 0;
  /// CUDA backend: interpolate with the texture unit (one fetch per sample; faster, but its
  /// 8-bit fractional weights put results ~1e-4 of the peak from the CPU's) instead of the
  /// exact fp32 bilinear / trilinear arithmetic of the CPU path (~1e-6). With the voxel-driven
  /// back-projector only: a matched pair samples exactly, so that its adjoint stays the forward
  /// projection's transpose.
  bool gpu_hardware_interpolation = false;
  /// Called with the fraction done in [0, 1]; may be empty. Called from the calling thread,
  /// after every batch of views (CPU: at most 8 per pass), slab or iteration.
  std::function<void(double)> progress;
  /// Checked at the same points as progress (right after it is called): once requested, the
  /// call stops there, frees what it holds and throws ctforge::cancelled. A progress callback
  /// may request it itself (the Python module does so on KeyboardInterrupt).
  cancellation_token cancel;
};

}  // namespace ctforge
