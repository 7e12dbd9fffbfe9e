// lru_cache: hits, misses, eviction order, values outliving eviction, failed factories, and
// one creation per key under concurrent requests. (The CUDA backend keeps its cuFFT plans in
// one; these are the properties it relies on.)
#include "core/lru_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "ctforge/error.hpp"

namespace ctforge::detail {
namespace {

struct shape {
  int device, n, rows;
  auto operator<=>(const shape&) const = default;
};

TEST(LruCache, CreatesOncePerKeyAndCountsHits) {
  lru_cache<shape, int> c(4);
  int made = 0;
  const auto make = [&] { return std::make_shared<int>(++made); };
  bool created = false;
  const auto a = c.get_or_create({0, 256, 10}, make, &created);
  EXPECT_TRUE(created);
  const auto b = c.get_or_create({0, 256, 10}, make, &created);
  EXPECT_FALSE(created);
  EXPECT_EQ(a.get(), b.get());
  const auto other_device = c.get_or_create({1, 256, 10}, make, &created);
  EXPECT_TRUE(created);
  EXPECT_NE(a.get(), other_device.get());
  EXPECT_EQ(made, 2);
  const lru_cache_stats s = c.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.evictions, 0);
  EXPECT_EQ(s.size, 2u);
}

TEST(LruCache, EvictsTheLeastRecentlyUsed) {
  lru_cache<int, int> c(2);
  const auto make = [](int v) { return [v] { return std::make_shared<int>(v); }; };
  c.get_or_create(1, make(1));
  c.get_or_create(2, make(2));
  c.get_or_create(1, make(-1));  // 1 is now the most recent: 2 goes next
  c.get_or_create(3, make(3));
  EXPECT_EQ(c.stats().evictions, 1);
  EXPECT_EQ(c.stats().size, 2u);
  bool created = true;
  EXPECT_EQ(*c.get_or_create(1, make(-1), &created), 1);
  EXPECT_FALSE(created) << "1 was used more recently than 2 and must have stayed";
  EXPECT_EQ(*c.get_or_create(2, make(22), &created), 22);
  EXPECT_TRUE(created) << "2 was the least recently used and must have been evicted";
}

TEST(LruCache, HeldValuesOutliveEvictionAndClear) {
  lru_cache<int, std::vector<int>> c(1);
  const auto held = c.get_or_create(1, [] { return std::make_shared<std::vector<int>>(1000, 7); });
  c.get_or_create(2, [] { return std::make_shared<std::vector<int>>(1, 0); });  // evicts 1
  EXPECT_EQ(held.use_count(), 1) << "the cache must have let go of the evicted value";
  EXPECT_EQ(held->at(999), 7);
  c.clear();
  EXPECT_EQ(c.stats().size, 0u);
  EXPECT_EQ(c.stats().misses, 0);
}

TEST(LruCache, FailedFactoryInsertsNothing) {
  lru_cache<int, int> c(2);
  EXPECT_THROW(c.get_or_create(5, []() -> std::shared_ptr<int> { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_THROW(c.get_or_create(5, [] { return std::shared_ptr<int>(); }), ctforge::error);
  EXPECT_EQ(c.stats().size, 0u);
  bool created = false;
  EXPECT_EQ(*c.get_or_create(
                5, [] { return std::make_shared<int>(5); }, &created),
            5);
  EXPECT_TRUE(created);
}

TEST(LruCache, ZeroCapacityIsAUsageError) {
  EXPECT_THROW((lru_cache<int, int>(0)), usage_error);
}

TEST(LruCache, ConcurrentRequestsCreateEachKeyOnce) {
  lru_cache<int, int> c(8);
  std::atomic<int> made{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        c.get_or_create(i % 4, [&] {
          ++made;
          return std::make_shared<int>(0);
        });
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(made.load(), 4);
  EXPECT_EQ(c.stats().hits + c.stats().misses, 8 * 200);
}

}  // namespace
}  // namespace ctforge::detail
