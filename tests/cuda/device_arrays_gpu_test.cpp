// Projections and volumes in GPU memory (device_array, memory_space::cuda_device): the
// reconstruction reads device projections without a host copy and can leave the volume on the
// device; both give the host path's volume bit for bit (same pipeline, only the copies differ).
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <limits>
#include <string>
#include <vector>

#include "ctforge/backend.hpp"
#include "ctforge/device.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "test_support.hpp"

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

TEST_F(DeviceArrays, NonFiniteDeviceProjectionIsAUsageErrorNamingIt) {
  projection_stack bad = proj_;
  bad.at(7, 3, 11) = std::numeric_limits<float>::quiet_NaN();
  const device_array p = device_array::upload(bad.data, {bad.views, bad.rows, bad.cols});
  projection_view on_gpu(bad.views, bad.rows, bad.cols, std::span<const float>(p.data(), p.size()));
  on_gpu.space = memory_space::cuda_device;
  ctforge::testing::expect_usage_error_naming([&] { (void)reconstruct(on_gpu, g_, vg_, opt_); },
                                              "view 7, row 3, col 11");
}

TEST_F(DeviceArrays, VolumeThatNeedsSlabsIsRefusedOnTheDevice) {
  // 96^3 voxels (3.4 MiB) beside the batch buffers: a limit with room for 16 planes needs slabs.
  const volume_geometry big = volume_geometry::centered(96, 96, 96, {0.2, 0.2, 0.2});
  recon_options small = opt_;
  small.gpu_memory_limit_bytes =
      ctforge::testing::slab_budget(proj_.views, proj_.rows, proj_.cols, big, 16);
  (void)reconstruct(proj_, g_, big, small);  // the host path: slabs
  ASSERT_NE(describe_last_gpu_call(gpu_call::reconstruction).find("slab"), std::string::npos)
      << describe_last_gpu_call(gpu_call::reconstruction);
  ctforge::testing::expect_usage_error_naming(
      [&] { (void)reconstruct_to_device(proj_, g_, big, small); }, "must fit there whole");
}

TEST_F(DeviceArrays, HostSideCallsRefuseDeviceProjections) {
  const device_array p = device_array::upload(proj_.data, {proj_.views, proj_.rows, proj_.cols});
  projection_view on_gpu(proj_.views, proj_.rows, proj_.cols,
                         std::span<const float>(p.data(), p.size()));
  on_gpu.space = memory_space::cuda_device;
  EXPECT_THROW((void)back_project(on_gpu, g_, vg_, 1), usage_error);
  EXPECT_THROW((void)estimate_center_of_rotation(on_gpu, g_), usage_error);
  EXPECT_THROW((void)to_stack(on_gpu), usage_error);
  recon_options sirt = opt_;
  sirt.algo = algorithm::sirt;
  EXPECT_THROW((void)reconstruct(on_gpu, g_, vg_, sirt), usage_error);
}

}  // namespace

#else

TEST(DeviceArrays, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
