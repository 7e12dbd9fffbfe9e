// Iterative methods over projections partitioned by views (include/ctforge/partitioned.hpp):
// every method over 1, 2, 3 and 7 parts (7: parts holding fewer views than there are subsets)
// equals the one-process result within 1e-5 of the peak (the only difference is the rounding
// of the parts' summed back-projections and dot products), with the volumes in the calling
// process or on the parts; a partition is deterministic, and a run resumed from a saved state
// (or from the checkpoint directory) ends bit-identical to the uninterrupted partitioned run.
// Parts holding the volumes: no volume crosses to the caller during the iterations (only the
// result and the arrays of a saved state, one at a time). Negative control: a part holding one
// wrong view is seen.
#include "ctforge/partitioned.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
constexpr double pi = std::numbers::pi;

struct problem {
  // Odd sizes: 23 views of 26 x 19 pixels around a 17 x 15 x 13 grid; a second grid with a
  // single plane (nz = 1).
  volume_geometry vg = volume_geometry::centered(17, 15, 13, {1.5, 1.5, 1.5});
  geometry g = make_cone_geometry(26, 19, 1.4, 1.4, 100, 180, angle_range(0, 2 * pi / 23, 23));
  projection_stack p;
  problem() { p = forward_project(voxelize(shepp_logan_phantom(20), vg, 2), g, 2); }
};

const problem& the_problem() {
  static const problem pr;
  return pr;
}

recon_options options(algorithm a, int iterations) {
  recon_options o = testing::cpu_iterative(a, iterations);
  o.subsets = 4;
  if (a == algorithm::fista_tv) o.tv_weight = 1e-3;
  if (a == algorithm::sirt || a == algorithm::os_sart) o.nonnegative = true;
  return o;
}

double max_abs_diff(const volume& a, const volume& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a.data[i]) - b.data[i]));
  return m;
}

double peak(const volume& v) {
  double m = 0;
  for (const float x : v.data) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

bool same_bits(const volume& a, const volume& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

std::string name_of(algorithm a) {
  std::string n = to_string(a);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

/// A scratch checkpoint directory for method a, its state saved after every iteration.
checkpoint_options saved_every_iteration(const char* suite, algorithm a) {
  checkpoint_options co;
  co.dir = (testing::scratch_dir(suite, name_of(a)) / "ck").string();
  co.every_iterations = 1;
  co.every_seconds = 0;
  return co;
}
constexpr const char* record = R"({"input": "test", "parts": 3})";

/// (method, parts, whether the parts hold the volumes)
class Partitioned : public ::testing::TestWithParam<std::tuple<algorithm, int, bool>> {};

TEST_P(Partitioned, EqualsTheOneProcessResultWithin1e5OfThePeak) {
  const problem& pr = the_problem();
  const auto [a, count, hold] = GetParam();
  const recon_options o = options(a, 6);
  const volume one = reconstruct(pr.p, pr.g, pr.vg, o);
  local_view_parts parts = local_view_parts::split(pr.p, pr.g, pr.vg, o, count, hold);
  const volume split = reconstruct_partitioned(parts, pr.g, pr.vg, o);
  ASSERT_GT(peak(one), 0.01);
  EXPECT_LE(max_abs_diff(split, one), 1e-5 * peak(one)) << name_of(a) << " over " << count;
  // Deterministic for a given partition.
  local_view_parts again = local_view_parts::split(pr.p, pr.g, pr.vg, o, count, hold);
  EXPECT_TRUE(same_bits(reconstruct_partitioned(again, pr.g, pr.vg, o), split));
}

TEST_P(Partitioned, ASinglePlaneGridToo) {
  const problem& pr = the_problem();
  const auto [a, count, hold] = GetParam();
  const volume_geometry flat = volume_geometry::centered(17, 15, 1, {1.5, 1.5, 1.5});
  const recon_options o = options(a, 4);
  const volume one = reconstruct(pr.p, pr.g, flat, o);
  local_view_parts parts = local_view_parts::split(pr.p, pr.g, flat, o, count, hold);
  const volume split = reconstruct_partitioned(parts, pr.g, flat, o);
  ASSERT_GT(peak(one), 0.005);
  EXPECT_LE(max_abs_diff(split, one), 1e-5 * peak(one)) << name_of(a) << " over " << count;
}

INSTANTIATE_TEST_SUITE_P(Methods, Partitioned,
                         ::testing::Combine(::testing::Values(algorithm::sirt, algorithm::os_sart,
                                                              algorithm::cgls, algorithm::fista_tv,
                                                              algorithm::osem),
                                            ::testing::Values(1, 2, 3, 7),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return name_of(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "_parts" +
                                  (std::get<2>(info.param) ? "_holding_volumes" : "");
                         });

/// local_view_parts counting the values that cross to and from the caller.
class counting_parts final : public view_parts {
 public:
  explicit counting_parts(local_view_parts inner) : inner_(std::move(inner)) {}
  bool holds_volumes() const override { return inner_.holds_volumes(); }
  void create(std::int64_t id, int subset) override { inner_.create(id, subset); }
  void release(std::int64_t id) noexcept override { inner_.release(id); }
  void load_data(std::int64_t id, int subset, bool clamp) override {
    inner_.load_data(id, subset, clamp);
  }
  double data_norm2() override { return inner_.data_norm2(); }
  void forward(std::span<const float> x, std::int64_t y, int subset) override {
    to_parts += static_cast<std::int64_t>(x.size());
    inner_.forward(x, y, subset);
  }
  void back(std::int64_t y, std::span<float> x, int subset, bool matched) override {
    from_parts += static_cast<std::int64_t>(x.size());
    inner_.back(y, x, subset, matched);
  }
  double apply(const part_call& call) override { return inner_.apply(call); }
  void download(std::int64_t id, std::span<float> host) override {
    from_parts += static_cast<std::int64_t>(host.size());
    inner_.download(id, host);
  }
  void upload(std::span<const float> host, std::int64_t id) override {
    to_parts += static_cast<std::int64_t>(host.size());
    inner_.upload(host, id);
  }
  void forward_volume(std::int64_t x, std::int64_t y, int subset) override {
    inner_.forward_volume(x, y, subset);
  }
  void back_volume(std::int64_t y, std::int64_t x, int subset, bool matched) override {
    inner_.back_volume(y, x, subset, matched);
  }
  void tv_prox_volume(std::int64_t x, float w, int it, bool nonneg) override {
    inner_.tv_prox_volume(x, w, it, nonneg);
  }
  double total_variation_volume(std::int64_t x) override {
    return inner_.total_variation_volume(x);
  }
  /// With keep_voxels set, takes the result (as a front end writing it from the parts would).
  bool keep_result(std::int64_t x) override {
    if (keep_voxels == 0) return false;
    kept.resize(static_cast<std::size_t>(keep_voxels));
    inner_.download(x, kept);
    return true;
  }
  std::int64_t to_parts = 0, from_parts = 0, keep_voxels = 0;
  std::vector<float> kept;

 private:
  local_view_parts inner_;
};

class PartsHoldingVolumes : public ::testing::TestWithParam<algorithm> {};

TEST_P(PartsHoldingVolumes, OnlyTheResultComesToTheCaller) {
  const problem& pr = the_problem();
  const algorithm a = GetParam();
  const std::int64_t n = pr.vg.voxel_count();
  const recon_options o = options(a, 5);
  counting_parts held(local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true));
  const volume v = reconstruct_partitioned(held, pr.g, pr.vg, o);
  EXPECT_EQ(held.from_parts, n) << name_of(a) << ": the result only";
  // (FISTA-TV's power iteration starts from A^T 1, made on the parts: nothing is sent either.)
  EXPECT_EQ(held.to_parts, 0) << name_of(a);
  // Negative control: with the volumes here, one per forward and back-projection crosses.
  counting_parts here(local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, false));
  const volume w = reconstruct_partitioned(here, pr.g, pr.vg, o);
  EXPECT_GE(here.from_parts, 5 * n) << name_of(a);
  // The same method either way (the volumes' dot products are summed per part there).
  EXPECT_LE(max_abs_diff(v, w), 1e-5 * peak(w)) << name_of(a);
}

TEST_P(PartsHoldingVolumes, TheyMayKeepTheResult) {
  const problem& pr = the_problem();
  const algorithm a = GetParam();
  const recon_options o = options(a, 4);
  local_view_parts plain = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true);
  const volume v = reconstruct_partitioned(plain, pr.g, pr.vg, o);
  counting_parts keeping(local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true));
  keeping.keep_voxels = pr.vg.voxel_count();
  const volume none = reconstruct_partitioned(keeping, pr.g, pr.vg, o);
  EXPECT_TRUE(none.data.empty());
  EXPECT_EQ(none.geom.nz, pr.vg.nz);
  EXPECT_EQ(keeping.from_parts, 0) << name_of(a);
  ASSERT_EQ(keeping.kept.size(), v.data.size());
  EXPECT_EQ(std::memcmp(keeping.kept.data(), v.data.data(), v.data.size() * sizeof(float)), 0);
}

TEST_P(PartsHoldingVolumes, AStateIsSavedAndResumedOneArrayAtATime) {
  const problem& pr = the_problem();
  const algorithm a = GetParam();
  const checkpoint_options co = saved_every_iteration("partitioned_held", a);
  const recon_options o = options(a, 6);
  local_view_parts whole_parts = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true);
  const volume whole = reconstruct_partitioned(whole_parts, pr.g, pr.vg, o);

  recon_options stop = o;
  stop.cancel = cancellation_token{};
  stop.on_iteration = [&](const iteration_info& i) {
    if (i.iteration == 3) stop.cancel.request();
  };
  local_view_parts first = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true);
  EXPECT_THROW(reconstruct_partitioned_resumable(first, pr.g, pr.vg, stop, co, record),
               checkpoint_stopped);
  local_view_parts second = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true);
  const volume resumed = reconstruct_partitioned_resumable(second, pr.g, pr.vg, o, co, record);
  EXPECT_TRUE(same_bits(resumed, whole)) << name_of(a);
  fs::remove_all(fs::path(co.dir).parent_path());

  // The state reaches the saver as arrays read one at a time, never all of them downloaded.
  recon_options watch = o;
  std::vector<std::vector<float>> saved;
  std::vector<double> scalars;
  watch.checkpoint.every = 2;
  watch.checkpoint.save = [&](const iterative_state& st) {
    EXPECT_TRUE(st.arrays.empty() && st.read) << name_of(a);
    if (st.iterations != 2) return;
    for (std::size_t k = 0; k < st.array_count(); ++k) {
      saved.emplace_back(st.array_size(k));
      st.read_array(k, saved.back());
    }
    scalars = st.scalars;
  };
  local_view_parts third = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true);
  reconstruct_partitioned(third, pr.g, pr.vg, watch);
  ASSERT_FALSE(saved.empty());
  recon_options r = o;
  r.checkpoint.resume.iterations = 2;
  for (const auto& arr : saved) r.checkpoint.resume.arrays.emplace_back(arr);
  r.checkpoint.resume.scalars = scalars;
  local_view_parts fourth = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3, true);
  EXPECT_TRUE(same_bits(reconstruct_partitioned(fourth, pr.g, pr.vg, r), whole)) << name_of(a);
}

INSTANTIATE_TEST_SUITE_P(Methods, PartsHoldingVolumes,
                         ::testing::Values(algorithm::sirt, algorithm::os_sart, algorithm::cgls,
                                           algorithm::fista_tv, algorithm::osem),
                         [](const auto& info) { return name_of(info.param); });

TEST(PartitionedControl, APartHoldingOneWrongViewIsSeen) {
  const problem& pr = the_problem();
  const recon_options o = options(algorithm::cgls, 6);
  const volume one = reconstruct(pr.p, pr.g, pr.vg, o);
  // Part 1 of 3 with its first view zeroed.
  std::vector<view_part> parts;
  const std::int64_t px = pr.g.rows * pr.g.cols;
  for (int k = 0; k < 3; ++k) {
    const auto [v0, v1] = part_views(pr.g.view_count(), 3, k);
    std::vector<float> data(pr.p.data.begin() + v0 * px, pr.p.data.begin() + v1 * px);
    if (k == 1) std::fill(data.begin(), data.begin() + px, 0.0f);
    parts.emplace_back(pr.g, pr.vg, v0, v1, std::move(data), o, 1);
  }
  local_view_parts lp(std::move(parts));
  EXPECT_GT(max_abs_diff(reconstruct_partitioned(lp, pr.g, pr.vg, o), one), 1e-3 * peak(one));
}

class PartitionedResume : public ::testing::TestWithParam<algorithm> {};

TEST_P(PartitionedResume, FromASavedStateBitIdentical) {
  const problem& pr = the_problem();
  const algorithm a = GetParam();
  constexpr int total = 6, at = 2;
  std::vector<std::vector<std::vector<float>>> arrays;
  std::vector<std::vector<double>> scalars;
  recon_options o = options(a, total);
  o.checkpoint.every = 1;
  o.checkpoint.save = [&](const iterative_state& st) {
    std::vector<std::vector<float>> copy;
    for (std::size_t k = 0; k < st.array_count(); ++k) {
      copy.emplace_back(st.array_size(k));
      st.read_array(k, copy.back());
    }
    arrays.push_back(std::move(copy));
    scalars.push_back(st.scalars);
  };
  local_view_parts parts = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3);
  const volume whole = reconstruct_partitioned(parts, pr.g, pr.vg, o);
  ASSERT_EQ(arrays.size(), static_cast<std::size_t>(total - 1));
  // CGLS and FISTA-TV keep projection-sized arrays too (CGLS's residual): gathered from the
  // parts, the whole buffer.
  if (a == algorithm::cgls)
    ASSERT_EQ(static_cast<std::int64_t>(arrays[at - 1][1].size()), pr.p.size());

  recon_options r = options(a, total);
  r.checkpoint.resume.iterations = at;
  for (const auto& arr : arrays[at - 1]) r.checkpoint.resume.arrays.emplace_back(arr);
  r.checkpoint.resume.scalars = scalars[at - 1];
  local_view_parts fresh = local_view_parts::split(pr.p, pr.g, pr.vg, r, 3);
  EXPECT_TRUE(same_bits(reconstruct_partitioned(fresh, pr.g, pr.vg, r), whole)) << name_of(a);
}

TEST_P(PartitionedResume, FromTheCheckpointDirectoryBitIdentical) {
  const problem& pr = the_problem();
  const algorithm a = GetParam();
  const checkpoint_options co = saved_every_iteration("partitioned", a);
  recon_options o = options(a, 6);
  local_view_parts parts = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3);
  const volume whole = reconstruct_partitioned(parts, pr.g, pr.vg, o);

  // Stopped after iteration 3 (its state saved on the way out), then the same call again.
  recon_options stop = o;
  stop.cancel = cancellation_token{};  // (a copy shares the flag)
  stop.on_iteration = [&](const iteration_info& i) {
    if (i.iteration == 3) stop.cancel.request();
  };
  local_view_parts first = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3);
  EXPECT_THROW(reconstruct_partitioned_resumable(first, pr.g, pr.vg, stop, co, record),
               checkpoint_stopped);
  std::vector<std::string> notes;
  local_view_parts second = local_view_parts::split(pr.p, pr.g, pr.vg, o, 3);
  const volume resumed = reconstruct_partitioned_resumable(
      second, pr.g, pr.vg, o, co, record, [&](const std::string& n) { notes.push_back(n); });
  EXPECT_TRUE(same_bits(resumed, whole)) << name_of(a);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("after iteration 3"), std::string::npos) << notes[0];
  fs::remove_all(fs::path(co.dir).parent_path());
}

INSTANTIATE_TEST_SUITE_P(Methods, PartitionedResume,
                         ::testing::Values(algorithm::sirt, algorithm::os_sart, algorithm::cgls,
                                           algorithm::fista_tv, algorithm::osem),
                         [](const auto& info) { return name_of(info.param); });

TEST(PartitionedErrors, RefusedClearly) {
  const problem& pr = the_problem();
  recon_options fdk = options(algorithm::sirt, 2);
  local_view_parts parts = local_view_parts::split(pr.p, pr.g, pr.vg, fdk, 2);
  fdk.algo = algorithm::fdk;
  testing::expect_error_naming([&] { reconstruct_partitioned(parts, pr.g, pr.vg, fdk); },
                               "iterative");
  testing::expect_error_naming(
      [&] { local_view_parts::split(pr.p, pr.g, pr.vg, options(algorithm::sirt, 2), 24); },
      "parts");
  std::vector<float> short_data(10);
  testing::expect_error_naming(
      [&] {
        view_part(pr.g, pr.vg, 0, 3, short_data, options(algorithm::sirt, 2), 1);
      },
      "views 0..2");
  EXPECT_EQ(part_op_from_string("weighted_residual"), part_op::weighted_residual);
  testing::expect_error_naming([] { part_op_from_string("scale"); }, "scale");
}

}  // namespace
}  // namespace ctforge
