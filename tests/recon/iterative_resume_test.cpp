// Saving and resuming the iterative methods (recon_options::checkpoint, iterative_state): a run
// resumed from the state saved after k iterations ends bit-identical to the uninterrupted run,
// for every method; the state is what the run continues from (a perturbed state changes the
// result: the negative control); nothing is saved after the last iteration; a state that does not
// fit the method is refused naming it.
#include <gtest/gtest.h>

#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

constexpr double pi = std::numbers::pi;

/// A saved iterative_state, owning its arrays.
struct owned_state {
  int iterations = 0;
  std::vector<std::vector<float>> arrays;
  std::vector<double> scalars;
  iterative_state view() const {
    iterative_state s;
    s.iterations = iterations;
    for (const auto& a : arrays) s.arrays.emplace_back(a);
    s.scalars = scalars;
    return s;
  }
};

struct problem {
  // Odd sizes; 21 views of 26 x 19 pixels around a 17 x 15 x 13 grid, noisy-free projections of
  // the phantom through the forward projector.
  volume_geometry vg = volume_geometry::centered(17, 15, 13, {1.5, 1.5, 1.5});
  geometry g = make_cone_geometry(26, 19, 1.4, 1.4, 100, 180, angle_range(0, 2 * pi / 21, 21));
  projection_stack p;
  problem() { p = forward_project(voxelize(shepp_logan_phantom(20), vg, 2), g, 2); }
};

recon_options options(algorithm a, int iterations) {
  recon_options o = testing::cpu_iterative(a, iterations);
  o.subsets = 4;
  if (a == algorithm::fista_tv) o.tv_weight = 1e-3;
  if (a == algorithm::sirt || a == algorithm::os_sart) o.nonnegative = true;
  return o;
}

bool same_bits(const volume& a, const volume& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

class IterativeResume : public ::testing::TestWithParam<algorithm> {};

TEST_P(IterativeResume, ResumedRunIsBitIdenticalToTheUninterruptedOne) {
  static const problem pr;
  const algorithm a = GetParam();
  constexpr int total = 7, at = 3;
  std::vector<owned_state> saved;
  recon_options o = options(a, total);
  o.checkpoint.every = 1;
  o.checkpoint.save = [&](const iterative_state& st) {
    owned_state c;
    c.iterations = st.iterations;
    for (const auto& arr : st.arrays) c.arrays.emplace_back(arr.begin(), arr.end());
    c.scalars = st.scalars;
    saved.push_back(std::move(c));
  };
  const volume whole = reconstruct(pr.p, pr.g, pr.vg, o);
  // Saved after iterations 1 .. total - 1, not after the last (the result is returned instead).
  ASSERT_EQ(saved.size(), static_cast<std::size_t>(total - 1));
  for (int k = 0; k < total - 1; ++k)
    EXPECT_EQ(saved[static_cast<std::size_t>(k)].iterations, k + 1);
  const owned_state& mid = saved[at - 1];
  ASSERT_FALSE(mid.arrays.empty());
  EXPECT_EQ(static_cast<std::int64_t>(mid.arrays[0].size()), pr.vg.voxel_count())
      << "the iterate comes first";

  // The same run without saving gives the same volume (saving does not change the iteration).
  EXPECT_TRUE(same_bits(whole, reconstruct(pr.p, pr.g, pr.vg, options(a, total))));

  recon_options r = options(a, total);
  r.checkpoint.resume = mid.view();
  const volume resumed = reconstruct(pr.p, pr.g, pr.vg, r);
  EXPECT_TRUE(same_bits(resumed, whole)) << to_string(a);

  // Negative control: the state is used. A different iterate (and, where the method keeps them,
  // a different first scalar) gives another result.
  owned_state changed = mid;
  changed.arrays[0][changed.arrays[0].size() / 2] += 0.05f;
  if (!changed.scalars.empty()) changed.scalars[0] *= 1.5;
  recon_options n = options(a, total);
  n.checkpoint.resume = changed.view();
  EXPECT_FALSE(same_bits(reconstruct(pr.p, pr.g, pr.vg, n), whole)) << to_string(a);

  // A state that does not fit: one array missing, or more iterations than asked for.
  owned_state short_state = mid;
  short_state.arrays.pop_back();
  if (short_state.arrays.empty()) short_state.arrays.emplace_back(5, 0.0f);
  recon_options bad = options(a, total);
  bad.checkpoint.resume = short_state.view();
  testing::expect_error_naming([&] { reconstruct(pr.p, pr.g, pr.vg, bad); }, "saved");
  recon_options over = options(a, 2);
  over.checkpoint.resume = mid.view();
  testing::expect_error_naming([&] { reconstruct(pr.p, pr.g, pr.vg, over); }, "saved state");
}

INSTANTIATE_TEST_SUITE_P(Methods, IterativeResume,
                         ::testing::Values(algorithm::sirt, algorithm::os_sart, algorithm::cgls,
                                           algorithm::fista_tv, algorithm::osem),
                         [](const auto& info) {
                           std::string n = to_string(info.param);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace ctforge
