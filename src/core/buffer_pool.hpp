// A thread-safe pool of reusable buffers, for memory that is expensive to allocate and that
// calls need only while they run: the CUDA backend's page-locked staging buffers
// (cudaHostAlloc pins every page, tens of milliseconds per 100 MB). Plain C++, so the CPU tests
// check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "ctforge/error.hpp"

namespace ctforge::detail {

/// Counters of a buffer_pool since construction (or the last clear()).
struct buffer_pool_stats {
  std::int64_t reused = 0;       ///< acquire calls answered with a held buffer
  std::int64_t created = 0;      ///< acquire calls that allocated
  std::int64_t evicted = 0;      ///< buffers freed to stay within the limit
  std::size_t held_bytes = 0;    ///< bytes of idle buffers held now
  std::size_t held_buffers = 0;  ///< idle buffers held now
};

/// Hands out buffers (Buffer: movable, with `std::size_t bytes() const`) as leases. A lease's
/// buffer goes back to the pool when the lease is destroyed; idle buffers are kept up to
/// `max_held_bytes` in all, the least recently returned freed first. acquire(n) reuses the
/// smallest idle buffer of n .. 2n bytes (so a small request never pins a huge buffer), else
/// allocates with make(). The pool must outlive its leases.
template <class Buffer>
class buffer_pool {
 public:
  class lease {
   public:
    lease(lease&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), b_(std::move(o.b_)) {
      o.b_.reset();
    }
    lease& operator=(lease&&) = delete;
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() {
      if (pool_ && b_) pool_->give_back(std::move(*b_));
    }
    Buffer& get() { return *b_; }
    const Buffer& get() const { return *b_; }

   private:
    friend class buffer_pool;
    lease(buffer_pool* p, Buffer&& b) : pool_(p), b_(std::move(b)) {}
    buffer_pool* pool_;
    std::optional<Buffer> b_;
  };

  explicit buffer_pool(std::size_t max_held_bytes) : max_held_(max_held_bytes) {}
  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;

  /// A buffer of at least `bytes` bytes: an idle one of bytes .. 2 * bytes, or make() (which
  /// returns a Buffer; it runs without the pool's lock held, and its exceptions propagate).
  /// *created (if given) tells whether make() ran.
  template <class Make>
  lease acquire(std::size_t bytes, Make&& make, bool* created = nullptr) {
    {
      const std::lock_guard<std::mutex> lock(m_);
      auto best = idle_.end();
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        const std::size_t b = it->bytes();
        if (b >= bytes && b / 2 <= bytes && (best == idle_.end() || b < best->bytes())) best = it;
      }
      if (best != idle_.end()) {
        Buffer b = std::move(*best);
        held_ -= b.bytes();
        idle_.erase(best);
        ++stats_.reused;
        if (created) *created = false;
        return lease(this, std::move(b));
      }
    }
    Buffer b = std::forward<Make>(make)();
    {
      const std::lock_guard<std::mutex> lock(m_);
      ++stats_.created;
    }
    if (created) *created = true;
    return lease(this, std::move(b));
  }

  /// Frees every idle buffer (leased ones return later and are kept as usual).
  void clear() {
    std::list<Buffer> drop;
    {
      const std::lock_guard<std::mutex> lock(m_);
      drop.swap(idle_);
      held_ = 0;
      stats_ = {};
    }
  }

  buffer_pool_stats stats() const {
    const std::lock_guard<std::mutex> lock(m_);
    buffer_pool_stats s = stats_;
    s.held_bytes = held_;
    s.held_buffers = idle_.size();
    return s;
  }

 private:
  void give_back(Buffer&& b) {
    std::vector<Buffer> drop;  // freed after the lock is released
    {
      const std::lock_guard<std::mutex> lock(m_);
      held_ += b.bytes();
      idle_.push_front(std::move(b));
      while (held_ > max_held_ && !idle_.empty()) {
        held_ -= idle_.back().bytes();
        drop.push_back(std::move(idle_.back()));
        idle_.pop_back();
        ++stats_.evicted;
      }
    }
  }

  mutable std::mutex m_;
  std::list<Buffer> idle_;  ///< most recently returned first
  std::size_t held_ = 0;
  std::size_t max_held_;
  buffer_pool_stats stats_;
};

}  // namespace ctforge::detail
