#include "core/parallel_copy.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <thread>

#include "ctforge/error.hpp"

namespace ctforge::detail {
namespace {

constexpr std::int64_t k_chunk_bytes = std::int64_t{4} << 20;

int thread_count(int threads, std::int64_t chunks) {
  return static_cast<int>(std::clamp<std::int64_t>(chunks, 1, resolve_threads(threads)));
}

}  // namespace

int resolve_threads(int threads) {
  return threads > 0 ? threads : omp_get_max_threads();
}

void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& body) {
  threads = static_cast<int>(
      std::min<std::int64_t>(resolve_threads(threads), static_cast<std::int64_t>(n)));
  // No thread team: one thread, one item, or inside another team (nested teams would multiply
  // the threads, each with its own buffers).
  if (threads <= 1 || omp_in_parallel()) {
    for (std::size_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::exception_ptr first;
  bool failed = false;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) {
    bool skip = false;
#pragma omp atomic read
    skip = failed;
    if (skip) continue;
    try {
      body(static_cast<std::size_t>(i));
    } catch (...) {
#pragma omp critical(ctforge_parallel_for)
      if (!failed) {
        first = std::current_exception();
#pragma omp atomic write
        failed = true;
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads) {
  const auto total = static_cast<std::int64_t>(bytes);
  const std::int64_t chunks = (total + k_chunk_bytes - 1) / k_chunk_bytes;
  const int nt = thread_count(threads, chunks);
  if (nt <= 1) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t off = c * k_chunk_bytes;
    std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                static_cast<std::size_t>(std::min(k_chunk_bytes, total - off)));
  }
}

void parallel_add(float* dst, const float* src, std::int64_t n, int threads) {
  constexpr std::int64_t chunk = k_chunk_bytes / 4;
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  const int nt = thread_count(threads, chunks);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t end = std::min(n, (c + 1) * chunk);
    for (std::int64_t i = c * chunk; i < end; ++i) dst[i] += src[i];
  }
}

void parallel_fill(float* dst, std::int64_t n, float value, int threads) {
  constexpr std::int64_t chunk = k_chunk_bytes / 4;
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  const int nt = thread_count(threads, chunks);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c)
    std::fill(dst + c * chunk, dst + std::min(n, (c + 1) * chunk), value);
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0
             ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
             : std::uint64_t{1} << 40;
}

namespace {
/// Empty when `count` elements of `element_bytes` fit in memory, else the message.
std::string memory_shortfall(std::uint64_t count, std::uint64_t element_bytes,
                             const std::string& what, const std::string& fix) {
  const std::uint64_t mem = physical_memory_bytes();
  const bool overflow = element_bytes != 0 && count > UINT64_MAX / element_bytes;
  const std::uint64_t bytes = overflow ? UINT64_MAX : count * element_bytes;
  if (!overflow && bytes <= mem) return {};
  return fmt::format("{} needs {} bytes ({:.1f} GiB), more than the {:.1f} GiB of memory here; {}",
                     what, overflow ? std::string("more than 2^64") : std::to_string(bytes),
                     static_cast<double>(bytes) / (1 << 30), static_cast<double>(mem) / (1 << 30),
                     fix);
}
}  // namespace

void require_memory(std::uint64_t count, std::uint64_t element_bytes, const std::string& what,
                    const std::string& fix) {
  const std::string m = memory_shortfall(count, element_bytes, what, fix);
  CTFORGE_EXPECTS(m.empty(), m);
}

void require_memory_to_read(std::uint64_t count, std::uint64_t element_bytes,
                            const std::string& what, const std::string& fix) {
  const std::string m = memory_shortfall(count, element_bytes, what, fix);
  CTFORGE_CHECK(m.empty(), m);
}

}  // namespace ctforge::detail

namespace ctforge::detail {

void require_thread_count(int threads, const char* field) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CTFORGE_EXPECTS(threads >= 0 && threads <= 4 * cores,
                  fmt::format("{}: must be 0 (all cores) .. {} (4 x the {} cores here); got {}",
                              field, 4 * cores, cores, threads));
}

}  // namespace ctforge::detail
