// Page-locked staging buffers reused across calls (CUDA translation units only).
//
// cudaHostAlloc pins every page it hands out, which costs tens of milliseconds per 100 MB: for
// the RabbitCT-sized problem the two staging buffers (2 x 153 MB) would cost about as much as
// the whole back-projection on a fast GPU. The FDK / back-projection pipeline and the forward
// projector lease them from one process-wide pool instead; a buffer returns to the pool when
// its lease ends (idle buffers are kept up to k_pinned_pool_bytes, least recently returned
// freed first). The pool is never destroyed (its buffers die with the process, not in a static
// destructor that could run after the CUDA runtime has shut down);
// detail::cuda_clear_pinned_pool() frees the idle buffers on demand.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/buffer_pool.hpp"
#include "cuda/cuda_raii.cuh"

namespace ctforge::kernels::cuda {

/// Most idle page-locked bytes the pool keeps between calls.
inline constexpr std::size_t k_pinned_pool_bytes = std::size_t{1} << 30;

using pinned_pool = detail::buffer_pool<pinned_buffer<float>>;

inline pinned_pool& pinned_staging_pool() {
  static pinned_pool* pool = new pinned_pool(k_pinned_pool_bytes);
  return *pool;
}

/// A page-locked buffer of at least `count` floats for the duration of a call; adds the bytes
/// allocated (0 when an idle buffer was reused) to *allocated_bytes.
inline pinned_pool::lease lease_pinned(std::size_t count, const char* what,
                                       std::int64_t* allocated_bytes) {
  bool created = false;
  pinned_pool::lease l = pinned_staging_pool().acquire(
      count * sizeof(float), [&] { return pinned_buffer<float>(count, what); }, &created);
  if (created && allocated_bytes)
    *allocated_bytes += static_cast<std::int64_t>(count * sizeof(float));
  return l;
}

}  // namespace ctforge::kernels::cuda
