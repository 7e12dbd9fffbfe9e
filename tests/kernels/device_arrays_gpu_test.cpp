// Projections and volumes in GPU memory (device_array, memory_space::cuda_device): the
// reconstruction reads device projections without a host copy and can leave the volume on the
// device; both give the host path's volume bit for bit (same pipeline, only the copies differ).
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <vector>

#include "ctforge/device.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"

using namespace ctforge;

namespace {

class DeviceArrays : public ctforge::testing::gpu_test {
 protected:
  void SetUp() override {
    gpu_test::SetUp();
    if (IsSkipped()) return;
    g_ = make_cone_geometry(41, 23, 1.0, 1.0, 200, 400, angle_range(0, deg_to_rad(4.5), 80));
    proj_ = project_analytic(shepp_logan_phantom(30), g_);
    vg_ = volume_geometry::centered(27, 25, 19, {0.6, 0.6, 0.6});
    opt_.where = backend::cuda;
  }
  geometry g_;
  projection_stack proj_;
  volume_geometry vg_;
  recon_options opt_;
};

TEST_F(DeviceArrays, UploadDownloadRoundTrip) {
  const std::vector<float> host = {1, 2, 3, 4, 5, 6};
  const device_array d = device_array::upload(host, {2, 3});
  EXPECT_EQ(d.size(), 6u);
  EXPECT_EQ(d.shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(d.download(), host);
  EXPECT_THROW((void)device_array::upload(host, {4, 2}), usage_error);
}

TEST_F(DeviceArrays, VolumeKeptOnTheDeviceEqualsTheHostResult) {
  const volume host = reconstruct(proj_, g_, vg_, opt_);
  const device_array dev = reconstruct_to_device(proj_, g_, vg_, opt_);
  EXPECT_EQ(dev.shape(), (std::vector<std::int64_t>{vg_.nz, vg_.ny, vg_.nx}));
  EXPECT_EQ(dev.download(), host.data);
}

TEST_F(DeviceArrays, ProjectionsInDeviceMemoryEqualTheHostResult) {
  const volume host = reconstruct(proj_, g_, vg_, opt_);
  const device_array p = device_array::upload(proj_.data, {proj_.views, proj_.rows, proj_.cols});
  projection_view on_gpu(proj_.views, proj_.rows, proj_.cols,
                         std::span<const float>(p.data(), p.size()));
  on_gpu.space = memory_space::cuda_device;
  EXPECT_EQ(reconstruct(on_gpu, g_, vg_, opt_).data, host.data);
  EXPECT_EQ(reconstruct_to_device(on_gpu, g_, vg_, opt_).download(), host.data);
  // Negative control: a host pointer marked as device memory is refused before any copy.
  projection_view lying(proj_.views, proj_.rows, proj_.cols, proj_.data);
  lying.space = memory_space::cuda_device;
  EXPECT_THROW((void)reconstruct(lying, g_, vg_, opt_), usage_error);
}

TEST_F(DeviceArrays, VolumeThatNeedsSlabsIsRefusedOnTheDevice) {
  recon_options small = opt_;
  small.gpu_memory_limit_bytes = 64 << 10;  // forces z-slabs (or fails to plan at all)
  EXPECT_THROW((void)reconstruct_to_device(proj_, g_, vg_, small), ctforge::error);
}

}  // namespace

#else

TEST(DeviceArrays, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
