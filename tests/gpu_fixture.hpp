// Fixtures for GPU tests (tests/**/*_gpu_test.cpp, executable ctforge_gpu_tests, CTest label
// gpu). Every GPU test derives from gpu_test (or gpu_param_test<P>), whose SetUp skips the test
// with the reason where no usable CUDA device exists. Files guard their CUDA-dependent tests
// with `#if defined(CTFORGE_WITH_CUDA)` and otherwise hold one test that skips with
// "built without CUDA".
#pragma once

#include <gtest/gtest.h>

#include <string>

#if defined(CTFORGE_WITH_CUDA)
#include <cstdint>

#include "cuda/cuda_api.hpp"
#include "cuda/cuda_plan.cuh"
#include "recon/fdk_setup.hpp"
#include "recon/filter.hpp"
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

#if defined(CTFORGE_WITH_CUDA)
/// detail::cuda_reconstruct (whose cuda_options set the views per batch) on what
/// ctforge::reconstruct hands either backend: a displaced detector padded on its narrow side
/// (detail::pad_for_displaced_detector). Compare it with reconstruct(..., backend::cpu).
inline volume cuda_reconstruct_as_reconstruct(const projection_view& proj, const geometry& g,
                                              const volume_geometry& vg, const recon_options& opt,
                                              const detail::cuda_options& copt) {
  const detail::fdk_setup setup = detail::make_fdk_setup(proj, g, opt, false);
  if (auto padded = detail::pad_for_displaced_detector(proj, g, setup, opt))
    return detail::cuda_reconstruct(padded->proj, padded->geo, vg, opt, copt, &padded->setup);
  return detail::cuda_reconstruct(proj, g, vg, opt, copt, &setup);
}

/// A device memory budget for FDK of views x rows x cols projections into `vg` that holds the
/// pipeline's buffers for its first batch (the real cuFFT work area) plus `planes` volume
/// planes. A slab takes at least min(nz, 8) planes (kernels::cuda::make_plan), so 8 <= planes <
/// nz forces a slab split at that batch; fewer than 8 make the planner halve the batch instead.
inline std::int64_t slab_budget(std::int64_t views, std::int64_t rows, std::int64_t cols,
                                const volume_geometry& vg, std::int64_t planes,
                                int requested_batch = 0) {
  kernels::cuda::plan_input in =
      kernels::cuda::make_plan_input(views, rows, cols, vg, true, detail::padded_length(cols));
  in.requested_batch = requested_batch;
  const int batch = kernels::cuda::initial_batch(in);
  const std::int64_t work = detail::cuda_fft_work_bytes(in.padded_len, batch * in.rows);
  return kernels::cuda::batch_bytes(in, batch, work) + planes * vg.nx * vg.ny * 4;
}
#endif

}  // namespace ctforge::testing
