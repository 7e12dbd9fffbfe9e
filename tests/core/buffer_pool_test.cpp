// The pool behind the CUDA backend's reusable page-locked staging buffers, checked with a fake
// buffer that counts live allocations: reuse of a returned buffer, the size window, the held-
// bytes limit, clear(), exceptions from the allocator, and concurrent leases.
#include "core/buffer_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace ctforge::detail {
namespace {

std::atomic<int> g_live{0};

// Move-only like pinned_buffer; `id` tells which allocation a lease got.
class fake_buffer {
 public:
  fake_buffer(std::size_t bytes, int id) : bytes_(bytes), id_(id) { ++g_live; }
  fake_buffer(fake_buffer&& o) noexcept
      : bytes_(std::exchange(o.bytes_, 0)), id_(std::exchange(o.id_, -1)) {}
  fake_buffer& operator=(fake_buffer&&) = delete;
  fake_buffer(const fake_buffer&) = delete;
  ~fake_buffer() {
    if (id_ >= 0) --g_live;
  }
  std::size_t bytes() const { return bytes_; }
  int id() const { return id_; }

 private:
  std::size_t bytes_;
  int id_;
};

struct factory {
  int next = 0;
  auto operator()(std::size_t bytes) {
    return [this, bytes] { return fake_buffer(bytes, next++); };
  }
};

TEST(BufferPool, ReturnedBuffersAreReused) {
  g_live = 0;
  buffer_pool<fake_buffer> pool(1000);
  factory f;
  bool created = false;
  int first = -1;
  {
    auto a = pool.acquire(100, f(100), &created);
    EXPECT_TRUE(created);
    first = a.get().id();
    EXPECT_EQ(g_live, 1);
  }
  EXPECT_EQ(g_live, 1) << "a returned buffer stays allocated in the pool";
  EXPECT_EQ(pool.stats().held_bytes, 100u);
  {
    auto b = pool.acquire(80, f(80), &created);  // 100 bytes serve 80 (within 2x)
    EXPECT_FALSE(created);
    EXPECT_EQ(b.get().id(), first);
    EXPECT_EQ(pool.stats().held_bytes, 0u) << "a leased buffer is not idle";
    auto c = pool.acquire(80, f(80), &created);  // the only idle one is leased: allocate
    EXPECT_TRUE(created);
    EXPECT_NE(c.get().id(), first);
  }
  const buffer_pool_stats s = pool.stats();
  EXPECT_EQ(s.reused, 1);
  EXPECT_EQ(s.created, 2);
  EXPECT_EQ(s.held_buffers, 2u);
  EXPECT_EQ(g_live, 2);
  pool.clear();
  EXPECT_EQ(g_live, 0);
  EXPECT_EQ(pool.stats().held_buffers, 0u);
}

TEST(BufferPool, OnlyBuffersOfOneToTwiceTheRequestAreReused) {
  g_live = 0;
  buffer_pool<fake_buffer> pool(10000);
  factory f;
  { auto big = pool.acquire(1000, f(1000)); }
  bool created = false;
  { auto small = pool.acquire(400, f(400), &created); }
  EXPECT_TRUE(created) << "a 1000-byte buffer must not be pinned for 400 bytes";
  { auto larger = pool.acquire(1200, f(1200), &created); }
  EXPECT_TRUE(created) << "a 1000-byte buffer is too small for 1200";
  // The smallest fitting one is chosen: 1000 and 1200 both fit 600..1200 -> 1000.
  auto pick = pool.acquire(600, f(600), &created);
  EXPECT_FALSE(created);
  EXPECT_EQ(pick.get().bytes(), 1000u);
}

TEST(BufferPool, HeldBytesStayWithinTheLimitOldestFreedFirst) {
  g_live = 0;
  buffer_pool<fake_buffer> pool(250);
  factory f;
  {
    auto a = pool.acquire(100, f(100));  // id 0
    auto b = pool.acquire(100, f(100));  // id 1
    auto c = pool.acquire(100, f(100));  // id 2
    EXPECT_EQ(g_live, 3);
  }  // returned c, b, a (reverse order): 300 > 250, so c, the least recently returned, goes
  const buffer_pool_stats s = pool.stats();
  EXPECT_EQ(s.held_bytes, 200u);
  EXPECT_EQ(s.evicted, 1);
  EXPECT_EQ(g_live, 2);
  bool created = false;
  auto again = pool.acquire(100, f(100), &created);
  EXPECT_FALSE(created);
  EXPECT_EQ(again.get().id(), 0) << "a and b remain; both fit, a was returned last";
}

TEST(BufferPool, AllocatorExceptionsPropagateAndLeaveThePoolUsable) {
  g_live = 0;
  buffer_pool<fake_buffer> pool(1000);
  EXPECT_THROW((void)pool.acquire(10, []() -> fake_buffer { throw std::runtime_error("oom"); }),
               std::runtime_error);
  EXPECT_EQ(pool.stats().created, 0);
  factory f;
  { auto a = pool.acquire(10, f(10)); }
  EXPECT_EQ(pool.stats().held_buffers, 1u);
}

TEST(BufferPool, ConcurrentLeasesNeverShareABuffer) {
  g_live = 0;
  buffer_pool<fake_buffer> pool(1 << 20);
  std::atomic<int> next{0};
  std::vector<std::atomic<int>> in_use(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        auto l = pool.acquire(64, [&] { return fake_buffer(64, next++); });
        const int id = l.get().id();
        ASSERT_LT(id, 64);
        EXPECT_EQ(in_use[static_cast<std::size_t>(id)].fetch_add(1), 0) << "buffer " << id;
        in_use[static_cast<std::size_t>(id)].fetch_sub(1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(next.load(), 4) << "at most one buffer per thread is ever needed";
}

}  // namespace
}  // namespace ctforge::detail
