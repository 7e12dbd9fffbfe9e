// CTFORGE_HD marks arithmetic shared by the CUDA kernels and the CPU paths: it becomes
// `__host__ __device__` under nvcc and plain `inline` under a host compiler, so the CPU tests
// exercise exactly the per-voxel / per-ray code that the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define CTFORGE_HD __host__ __device__ __forceinline__
#else
#define CTFORGE_HD inline __attribute__((always_inline))
#endif

namespace ctforge::kernels {

/// Trivially copyable float 3-vector for kernels (no CUDA types in shared code).
struct f3 {
  float x, y, z;
};

CTFORGE_HD float floor_f(float a) {
#if defined(__CUDA_ARCH__)
  return floorf(a);
#else
  return std::floor(a);
#endif
}
CTFORGE_HD float min_f(float a, float b) {
  return a < b ? a : b;
}
CTFORGE_HD float max_f(float a, float b) {
  return a > b ? a : b;
}
CTFORGE_HD float clamp_f(float a, float lo, float hi) {
  return min_f(max_f(a, lo), hi);
}

}  // namespace ctforge::kernels
