// Host memory copies split over OpenMP threads: moving projections and volumes into and out of
// the CUDA backend's pinned staging buffers, where one thread's memcpy (about 10 GB/s) would
// be slower than the PCIe transfer it feeds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace ctforge::detail {

/// The threads a call given `threads` runs on: `threads` when > 0, else all cores (OpenMP's
/// default team size).
int resolve_threads(int threads);

/// Runs body(i) for i in [0, n) on `threads` threads (0: all cores), dynamically scheduled; in
/// this thread without a team when threads or n is 1 (also safe in a forked child) or when
/// called inside another OpenMP team. The first exception stops the loop (iterations not
/// started are skipped) and is rethrown as it was thrown.
void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& body);

/// memcpy of `bytes` bytes in chunks of 4 MiB over `threads` threads (0: all cores). The
/// ranges must not overlap.
void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads = 0);

/// dst[i] += src[i] for i in [0, n), over `threads` threads (0: all cores). Float addition in
/// index order per element: the result does not depend on the thread count.
void parallel_add(float* dst, const float* src, std::int64_t n, int threads = 0);

/// dst[i] = value for i in [0, n), over `threads` threads (0: all cores).
void parallel_fill(float* dst, std::int64_t n, float value, int threads = 0);

/// Usage error unless 0 <= threads <= 4 x the cores of this machine (0: all cores), naming
/// `field` ("--threads"): an OpenMP runtime asked for 100000 threads crashes.
void require_thread_count(int threads, const char* field = "--threads");

/// Physical memory of this machine (bytes).
std::uint64_t physical_memory_bytes();
/// Usage error unless `count` elements of `element_bytes` each fit in this machine's memory:
/// "<what> needs N bytes (X GiB), more than the Y GiB of memory here; <fix>". Called before
/// allocating buffers whose size comes from the user (a grid size, a declared view count).
void require_memory(std::uint64_t count, std::uint64_t element_bytes, const std::string& what,
                    const std::string& fix);
/// As require_memory, for data whose size a file declares (a dataset's shape): a runtime error
/// (exit 1; the file is at fault, not the request), raised before anything is allocated.
/// `what` names the file and the dataset.
void require_memory_to_read(std::uint64_t count, std::uint64_t element_bytes,
                            const std::string& what, const std::string& fix);

}  // namespace ctforge::detail
