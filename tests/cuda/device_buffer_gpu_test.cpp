// device_buffer: the allocator hook sees exactly one allocation and one release per buffer
// (none after release_ownership, none for a moved-from buffer), stream-ordered buffers hold
// usable memory, and the CUDA handle owners release their handles once across moves.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "cuda/cuda_raii.cuh"

namespace ctforge::kernels::cuda {
namespace {

struct counting {
  static inline int allocations = 0, releases = 0;
  static inline std::size_t last_bytes = 0;
  static inline bool last_ordered = false;
  static cudaError_t allocate(void** p, std::size_t bytes, cudaStream_t s, bool ordered) {
    ++allocations;
    last_bytes = bytes;
    last_ordered = ordered;
    return default_device_allocate(p, bytes, s, ordered);
  }
  static cudaError_t deallocate(void* p, cudaStream_t s, bool ordered) {
    ++releases;
    return default_device_deallocate(p, s, ordered);
  }
};
constexpr device_allocator k_counting{&counting::allocate, &counting::deallocate};

class DeviceBuffer : public ctforge::testing::gpu_test {
 protected:
  void SetUp() override {
    gpu_test::SetUp();
    counting::allocations = counting::releases = 0;
  }
};

TEST_F(DeviceBuffer, AllocatorHookSeesOneAllocationAndOneRelease) {
  {
    const device_buffer<float> b(1000, "a test buffer", k_counting);
    EXPECT_NE(b.data(), nullptr);
    EXPECT_EQ(b.bytes(), 4000u);
    EXPECT_EQ(counting::allocations, 1);
    EXPECT_EQ(counting::last_bytes, 4000u);
    EXPECT_FALSE(counting::last_ordered);
    EXPECT_EQ(counting::releases, 0);
  }
  EXPECT_EQ(counting::releases, 1);
}

TEST_F(DeviceBuffer, EmptyBuffersAllocateNothing) {
  {
    const device_buffer<int> b(0, "an empty buffer", k_counting);
    EXPECT_EQ(b.data(), nullptr);
  }
  EXPECT_EQ(counting::allocations, 0);
  EXPECT_EQ(counting::releases, 0);
}

TEST_F(DeviceBuffer, MovesTransferTheMemoryAndFreeItOnce) {
  {
    device_buffer<float> a(16, "a", k_counting);
    device_buffer<float> b(32, "b", k_counting);
    float* pa = a.data();
    b = std::move(a);  // b's own memory is freed now
    EXPECT_EQ(counting::releases, 1);
    EXPECT_EQ(b.data(), pa);
    EXPECT_EQ(b.size(), 16u);
    device_buffer<float> c(std::move(b));
    EXPECT_EQ(c.data(), pa);
    EXPECT_EQ(counting::releases, 1);
  }
  EXPECT_EQ(counting::allocations, 2);
  EXPECT_EQ(counting::releases, 2);
}

TEST_F(DeviceBuffer, ReleaseOwnershipSkipsTheDeallocation) {
  float* p = nullptr;
  {
    device_buffer<float> b(8, "released", k_counting);
    p = b.release_ownership();
    EXPECT_EQ(b.data(), nullptr);
  }
  EXPECT_EQ(counting::releases, 0);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(DeviceBuffer, StreamOrderedBufferHoldsUsableMemory) {
  const stream s(0);
  std::vector<int> host(257, 0);
  {
    const device_buffer<int> b(host.size(), s.get(), "an ordered buffer", k_counting);
    EXPECT_TRUE(b.stream_ordered());
    EXPECT_EQ(b.stream(), s.get());
    EXPECT_TRUE(counting::last_ordered);
    ASSERT_EQ(cudaMemsetAsync(b.data(), 0x01, b.bytes(), s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost, s),
              cudaSuccess);
    s.synchronize();
  }
  s.synchronize();  // the release was ordered in s
  EXPECT_EQ(counting::releases, 1);
  for (int v : host) EXPECT_EQ(v, 0x01010101);
}

TEST_F(DeviceBuffer, HandleOwnersSurviveMovesInContainers) {
  std::vector<event> events;
  for (int i = 0; i < 9; ++i) events.emplace_back(false);  // reallocations move the handles
  stream s(0);
  for (const event& e : events) {
    EXPECT_NE(e.get(), nullptr);
    e.record(s);
  }
  s.synchronize();
  stream moved(std::move(s));
  EXPECT_EQ(s.get(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_NE(moved.get(), nullptr);
  moved.synchronize();
}

}  // namespace
}  // namespace ctforge::kernels::cuda

#else

TEST(DeviceBuffer, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
