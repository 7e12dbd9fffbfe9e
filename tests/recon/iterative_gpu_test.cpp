// The iterative methods on the CUDA space against the CPU space: the same algorithm code on both
// (src/recon/iterative/), so after a few iterations the volumes agree to within 1e-5 of the
// phantom's peak (the projectors agree to ~1e-6 of it per call, src/kernels tests), and the
// space's element-wise steps, reductions and TV prox agree with the CPU's.
#include <gtest/gtest.h>

#include "gpu_fixture.hpp"

#if defined(CTFORGE_WITH_CUDA)

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "recon/iterative_space.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;

class IterativeGpu : public testing::gpu_param_test<algorithm> {};

// 4 iterations (passes) of each method on both backends: max |cpu - cuda| <= 1e-5 of the peak.
TEST_P(IterativeGpu, MatchesCpu) {
  const algorithm a = GetParam();
  const volume_geometry vg = volume_geometry::centered(32, 32, 24, {1, 1, 1});
  const volume truth = voxelize(shepp_logan_phantom(30), vg, 2);
  const geometry g =
      make_cone_geometry(48, 36, 1.0, 1.0, 120, 200, angle_range(0, 2 * pi / 40, 40));
  const projection_stack p = forward_project(truth, g, 2);
  recon_options o;
  o.algo = a;
  o.iterations = 4;
  o.subsets = 5;
  o.tv_weight = 5e-5;
  o.where = backend::cpu;
  const volume cpu = reconstruct(p, g, vg, o);
  o.where = backend::cuda;
  const volume gpu = reconstruct(p, g, vg, o);
  const float peak = *std::max_element(truth.data.begin(), truth.data.end());
  double worst = 0;
  for (std::size_t i = 0; i < cpu.data.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(cpu.data[i] - gpu.data[i])));
  std::cout << "[ metric   ] " << to_string(a) << ": max |cpu - cuda| / peak = " << worst / peak
            << "\n";
  EXPECT_LE(worst, 1e-5 * peak) << to_string(a);
}

INSTANTIATE_TEST_SUITE_P(Methods, IterativeGpu,
                         ::testing::Values(algorithm::sirt, algorithm::os_sart, algorithm::cgls,
                                           algorithm::fista_tv, algorithm::osem),
                         [](const auto& info) {
                           std::string n = to_string(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

class CpuAndCudaSpaces : public testing::gpu_test {};

// The TV prox and the reductions on both spaces: 1e-6 of the values' range apart.
TEST_F(CpuAndCudaSpaces, TvProxAndReductionsMatch) {
  const geometry g = make_cone_geometry(24, 16, 1.2, 1.2, 120, 200, angle_range(0, 0.5, 4));
  for (const std::int64_t nz : {1, 9}) {
    const volume_geometry vg = volume_geometry::centered(17, 13, nz, {1, 1, 1});
    std::vector<float> b(static_cast<std::size_t>(vg.voxel_count()));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (float& v : b) v = u(rng);
    std::vector<float> out[2];
    double dots[2], tvs[2];
    for (int k = 0; k < 2; ++k) {
      detail::space_config cfg;
      cfg.where = k == 0 ? backend::cpu : backend::cuda;
      auto sp = detail::make_space(g, vg, cfg);
      detail::space_buffer x = sp->volume();
      sp->upload(b, x);
      dots[k] = sp->dot(x, x);
      tvs[k] = sp->total_variation(x);
      sp->tv_prox(x, 0.05f, 20, true);
      out[k].resize(b.size());
      sp->download(x, out[k]);
    }
    EXPECT_NEAR(dots[0], dots[1], 1e-9 * dots[0]);
    EXPECT_NEAR(tvs[0], tvs[1], 1e-9 * tvs[0]);
    for (std::size_t i = 0; i < b.size(); ++i) ASSERT_NEAR(out[0][i], out[1][i], 1e-6) << i;
  }
}

}  // namespace
}  // namespace ctforge

#else

TEST(IterativeGpu, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
