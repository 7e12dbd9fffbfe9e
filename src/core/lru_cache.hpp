// A small thread-safe least-recently-used cache of shared objects, for resources that are
// expensive to create and reusable across calls (the CUDA backend keeps its cuFFT plans in one,
// keyed by device and transform shape). Plain C++, so the CPU tests check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "ctforge/error.hpp"

namespace ctforge::detail {

/// Counters of an lru_cache since construction (or the last clear()).
struct lru_cache_stats {
  std::int64_t hits = 0;       ///< get_or_create calls answered from the cache
  std::int64_t misses = 0;     ///< get_or_create calls that created a value
  std::int64_t evictions = 0;  ///< values dropped to stay within the capacity
  std::size_t size = 0;        ///< values held now
};

/// Holds at most `capacity` values keyed by Key (ordered with <). A value handed out stays
/// alive while its shared_ptr is held, even after eviction or clear(), so eviction never pulls
/// a resource from under a user. Thread-safe; `make` runs under the cache's lock, so
/// concurrent requests for one key create it once.
template <class Key, class Value>
class lru_cache {
 public:
  explicit lru_cache(std::size_t capacity) : capacity_(capacity) {
    CTFORGE_EXPECTS(capacity >= 1, "lru_cache: capacity must be at least 1");
  }
  lru_cache(const lru_cache&) = delete;
  lru_cache& operator=(const lru_cache&) = delete;

  /// The value for `key`, created with make() (returning std::shared_ptr<Value>) on a miss and
  /// then made the most recently used. When make() throws, nothing is inserted and the
  /// exception propagates. *created (if given) tells whether make() ran.
  template <class Make>
  std::shared_ptr<Value> get_or_create(const Key& key, Make&& make, bool* created = nullptr) {
    const std::lock_guard<std::mutex> lock(m_);
    if (const auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);  // most recently used first
      ++stats_.hits;
      if (created) *created = false;
      return it->second->second;
    }
    std::shared_ptr<Value> v = std::forward<Make>(make)();
    CTFORGE_CHECK(v != nullptr, "lru_cache: the factory returned no value");
    order_.emplace_front(key, v);
    index_.emplace(key, order_.begin());
    ++stats_.misses;
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++stats_.evictions;
    }
    if (created) *created = true;
    return v;
  }

  /// Drops every value (those still held elsewhere live on) and resets the counters.
  void clear() {
    const std::lock_guard<std::mutex> lock(m_);
    index_.clear();
    order_.clear();
    stats_ = {};
  }

  lru_cache_stats stats() const {
    const std::lock_guard<std::mutex> lock(m_);
    lru_cache_stats s = stats_;
    s.size = order_.size();
    return s;
  }

  std::size_t capacity() const { return capacity_; }

 private:
  using entry = std::pair<Key, std::shared_ptr<Value>>;
  mutable std::mutex m_;
  std::size_t capacity_;
  std::list<entry> order_;  // most recently used first
  std::map<Key, typename std::list<entry>::iterator> index_;
  lru_cache_stats stats_;
};

}  // namespace ctforge::detail
