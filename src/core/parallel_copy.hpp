// Host memory copies split over OpenMP threads: moving projections and volumes into and out of
// the CUDA backend's pinned staging buffers, where one thread's memcpy (about 10 GB/s) would
// be slower than the PCIe transfer it feeds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ctforge::detail {

/// memcpy of `bytes` bytes in chunks of 4 MiB over `threads` threads (0: all cores). The
/// ranges must not overlap.
void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads = 0);

/// dst[i] += src[i] for i in [0, n), over `threads` threads (0: all cores). Float addition in
/// index order per element: the result does not depend on the thread count.
void parallel_add(float* dst, const float* src, std::int64_t n, int threads = 0);

/// Usage error unless 0 <= threads <= 4 x the cores of this machine (0: all cores), naming
/// `field` ("--threads"): an OpenMP runtime asked for 100000 threads crashes.
void require_thread_count(int threads, const char* field = "--threads");

}  // namespace ctforge::detail
