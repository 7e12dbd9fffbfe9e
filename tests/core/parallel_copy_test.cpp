// Threaded host copies and sums used around the CUDA backend's pinned staging buffers: every
// byte moved once, whatever the size (chunk remainders, sizes below one chunk, zero) and the
// thread count.
#include "core/parallel_copy.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace ctforge::detail {
namespace {

// 4 MiB chunks: sizes around one and several chunks, with remainders, and tiny ones.
constexpr std::int64_t k_sizes[] = {0, 1, 7, (1 << 20) - 3, (1 << 20) + 5, 3 * (1 << 20) + 11};

TEST(ParallelCopy, CopiesEveryByteForAnyThreadCount) {
  for (std::int64_t n : k_sizes) {
    std::vector<float> src(static_cast<std::size_t>(n));
    std::iota(src.begin(), src.end(), 0.5f);
    for (int threads : {0, 1, 2, 3}) {
      std::vector<float> dst(static_cast<std::size_t>(n) + 1, -1.0f);
      parallel_copy(dst.data(), src.data(), static_cast<std::size_t>(n) * sizeof(float), threads);
      EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << n << " " << threads;
      EXPECT_EQ(dst.back(), -1.0f) << "wrote past the end: " << n << " " << threads;
    }
  }
}

TEST(ParallelAdd, AddsEveryElementOnceForAnyThreadCount) {
  for (std::int64_t n : k_sizes) {
    std::vector<float> src(static_cast<std::size_t>(n)), base(static_cast<std::size_t>(n) + 1);
    for (std::int64_t i = 0; i < n; ++i) {
      src[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i % 1000);
      base[static_cast<std::size_t>(i)] = 1.0f + static_cast<float>(i % 7);
    }
    base.back() = -1.0f;
    for (int threads : {0, 1, 2, 3}) {
      std::vector<float> dst = base;
      parallel_add(dst.data(), src.data(), n, threads);
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(dst[static_cast<std::size_t>(i)],
                  base[static_cast<std::size_t>(i)] + src[static_cast<std::size_t>(i)])
            << i << " of " << n << ", " << threads << " threads";
      EXPECT_EQ(dst.back(), -1.0f) << n << " " << threads;
    }
  }
}

}  // namespace
}  // namespace ctforge::detail
