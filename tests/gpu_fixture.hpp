// Fixtures for GPU tests (tests/**/*_gpu_test.cpp, executable ctforge_gpu_tests, CTest label
// gpu). Every GPU test derives from gpu_test (or gpu_param_test<P>), whose SetUp skips the test
// with the reason where no usable CUDA device exists. Files guard their CUDA-dependent tests
// with `#if defined(CTFORGE_WITH_CUDA)` and otherwise hold one test that skips with
// "built without CUDA".
#pragma once

#include <gtest/gtest.h>

#include <string>

#if defined(CTFORGE_WITH_CUDA)
#include "cuda/cuda_api.hpp"
#endif

namespace ctforge::testing {

/// Skips the current test unless a usable CUDA device exists (message names the reason).
inline void skip_without_gpu() {
#if defined(CTFORGE_WITH_CUDA)
  std::string why;
  if (!detail::cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

class gpu_test : public ::testing::Test {
 protected:
  void SetUp() override { skip_without_gpu(); }
};

template <class P>
class gpu_param_test : public ::testing::TestWithParam<P> {
 protected:
  void SetUp() override { skip_without_gpu(); }
};

}  // namespace ctforge::testing
