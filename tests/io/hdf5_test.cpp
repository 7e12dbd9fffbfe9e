// Native HDF5 files (io::read/write_projections, read/write_volume, describe_file), the h5.hpp
// wrapper and PNG previews.
#include <gtest/gtest.h>
#include <png.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/io.hpp"
#include "io/h5.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
namespace h5 = ctforge::detail::h5;
using namespace ctforge;

namespace {

/// Fresh directory per test, removed afterwards.
class Hdf5Files : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    dir_ = fs::temp_directory_path() / ("ctforge_io_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  /// Names of all entries in the test directory (to check that no .part is left behind).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

geometry small_cone(std::int64_t views, std::int64_t rows, std::int64_t cols) {
  return make_cone_geometry(cols, rows, 1.25, 0.75, 400, 700,
                            angle_range(0.1, deg_to_rad(360.0 / static_cast<double>(views)), views),
                            {2.5}, {-1.0});
}

/// Expects `f` to throw ctforge::error whose message contains every string in `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts, bool usage = false) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const usage_error& e) {
    EXPECT_TRUE(usage) << "usage_error where a runtime error was expected: " << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\n  lacks: " << p;
  } catch (const error& e) {
    EXPECT_FALSE(usage) << "runtime error where usage_error was expected: " << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\n  lacks: " << p;
  }
}

}  // namespace

// ---- round trips --------------------------------------------------------------------------

class ProjectionRoundTrip : public Hdf5Files,
                            public ::testing::WithParamInterface<std::tuple<int, int, int>> {};

// float32 with shuffle + deflate is lossless: values and geometry must come back bit-identical.
TEST_P(ProjectionRoundTrip, ValuesAndGeometryIdentical) {
  const auto [views, rows, cols] = GetParam();
  projection_stack p(views, rows, cols);
  p.data = random_values(static_cast<std::size_t>(p.size()), 7);
  const geometry g = small_cone(views, rows, cols);
  const std::string file = path("proj.h5");
  io::write_projections(file, p, g);
  EXPECT_EQ(entries(), std::vector<std::string>{"proj.h5"}) << "no .part left behind";

  const io::projection_file back = io::read_projections(file);
  EXPECT_EQ(back.projections.views, views);
  EXPECT_EQ(back.projections.rows, rows);
  EXPECT_EQ(back.projections.cols, cols);
  EXPECT_EQ(back.projections.data, p.data);
  ASSERT_TRUE(back.geom.has_value());
  // The stored JSON text is what was written. (The parsed geometry is compared numerically:
  // degrees in the file -> radians can move an angle by one ulp, so re-serialising is not
  // guaranteed to give the same text.)
  EXPECT_EQ(back.geometry_json, geometry_to_json(g));
  EXPECT_EQ(back.geom->type_name(), "cone");
  // The projection matrices are what the reconstruction uses: they must match too.
  for (std::int64_t v = 0; v < views; ++v) {
    const auto a = compute_projection_matrix(g, v), b = compute_projection_matrix(*back.geom, v);
    for (int i = 0; i < 12; ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * (1 + std::abs(a[i])));
  }
}

// Odd sizes, a single row (fan beam), a single view, a single pixel.
INSTANTIATE_TEST_SUITE_P(Shapes, ProjectionRoundTrip,
                         ::testing::Values(std::make_tuple(7, 5, 9), std::make_tuple(3, 1, 11),
                                           std::make_tuple(1, 4, 6), std::make_tuple(1, 1, 1),
                                           std::make_tuple(40, 16, 33)));

TEST_F(Hdf5Files, VectorGeometryRoundTrip) {
  std::vector<view_vectors> vv;
  for (int i = 0; i < 3; ++i)
    vv.push_back({{0.1 * i, -500, 1}, {3, 500, -2}, {1, 0.01 * i, 0}, {0, 0, 1.5}});
  const geometry g = make_vec_geometry(beam_kind::cone, 6, 2, vv);
  projection_stack p(3, 2, 6);
  p.data = random_values(static_cast<std::size_t>(p.size()), 3);
  io::write_projections(path("v.h5"), p, g);
  const auto back = io::read_projections(path("v.h5"));
  ASSERT_TRUE(back.geom);
  EXPECT_EQ(back.geom->type_name(), "cone_vec");
  EXPECT_EQ(geometry_to_json(*back.geom), geometry_to_json(g));
  EXPECT_EQ(back.projections.data, p.data);
}

class VolumeRoundTrip : public Hdf5Files,
                        public ::testing::WithParamInterface<std::tuple<int, int, int>> {};

TEST_P(VolumeRoundTrip, ValuesSpacingOriginIdentical) {
  const auto [nx, ny, nz] = GetParam();
  const volume v = ctforge::testing::ramp_volume(nx, ny, nz);
  const volume_geometry& g = v.geom;
  io::write_volume(path("vol.h5"), v);
  EXPECT_EQ(entries(), std::vector<std::string>{"vol.h5"});
  const volume back = io::read_volume(path("vol.h5"));
  EXPECT_EQ(back.geom.nx, nx);
  EXPECT_EQ(back.geom.ny, ny);
  EXPECT_EQ(back.geom.nz, nz);
  EXPECT_EQ(back.geom.spacing_mm, g.spacing_mm);  // doubles stored as float64: exact
  EXPECT_EQ(back.geom.origin_mm, g.origin_mm);
  EXPECT_EQ(back.data, v.data);
}

// nz = 1 (a 2D slice), odd sizes, one voxel, more z slices than one chunk holds.
INSTANTIATE_TEST_SUITE_P(Shapes, VolumeRoundTrip,
                         ::testing::Values(std::make_tuple(9, 7, 5), std::make_tuple(16, 12, 1),
                                           std::make_tuple(1, 1, 1), std::make_tuple(3, 1, 2),
                                           std::make_tuple(33, 31, 21)));

/// The "Vm...:" line of /proc/self/status, in KiB (-1 when absent).
long proc_status_kib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

/// Runs `body` in a child process; its exit status (128 + signal when it was killed).
int in_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 3;
    try {
      rc = body();
    } catch (...) {
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// write_volume builds the file in memory next to the caller's volume, and writes it out from
// the HDF5 driver's buffer: the peak above the volume is one file image, the parallel chunk
// encoder's group (64 MiB of chunks, compressed) and the core driver's 16 MiB growth step, not a
// second copy of the file. 160 MiB of noisy values (their file: about 5/6 of the volume).
TEST_F(Hdf5Files, VolumeWriteHoldsOneFileImage) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "peak RSS under AddressSanitizer counts its shadow memory";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "peak RSS under AddressSanitizer counts its shadow memory";
#endif
#endif
  const std::string out = path("big.h5");
  volume v(volume_geometry::centered(256, 256, 640, {1, 1, 1}));
  std::uint32_t x = 12345;
  for (float& f : v.data) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) * 1e-9f;
  }
  // Reset the peak (VmHWM) to the current resident size: Linux clear_refs, value 5.
  if (!(std::ofstream("/proc/self/clear_refs") << "5").flush())
    GTEST_SKIP() << "/proc/self/clear_refs cannot be written here";
  const long before = proc_status_kib("VmRSS");
  ASSERT_GT(before, 0);
  io::write_volume(out, v);
  const long above = proc_status_kib("VmHWM") - before;
  const long file_kib = static_cast<long>(fs::file_size(out) / 1024);
  std::printf("[ metric   ] write_volume: peak %ld KiB above the volume (%ld KiB), file %ld KiB\n",
              above, static_cast<long>(v.data.size() * 4 / 1024), file_kib);
  // Slack: 64 MiB of encoder group, the 16 MiB growth step, and up to 32 MiB that realloc
  // copies while the image is below glibc's (dynamic) mmap threshold.
  EXPECT_LT(above, file_kib + (64 + 16 + 32) * 1024)
      << "more than one file image and the encoder's buffers (a second copy of the file?)";
}

// A volume larger than this machine's memory is refused before anything is read or allocated,
// naming the file and the sizes (the span covers one float: reading it would crash).
TEST_F(Hdf5Files, VolumeWriteChecksMemoryFirst) {
  const std::string out = path("huge.h5");
  const int rc = in_child([&] {
    const volume_geometry g = volume_geometry::centered(1 << 16, 1 << 16, 1 << 12, {1, 1, 1});
    float one = 0;
    const volume_view v{g, std::span<const float>(&one, static_cast<std::size_t>(g.voxel_count()))};
    try {
      io::write_volume(out, v);
    } catch (const usage_error& e) {
      const std::string w = e.what();
      std::printf("%s\n", e.what());
      return w.find(out) != std::string::npos && w.find("more than the") != std::string::npos &&
                     w.find("needs ") != std::string::npos
                 ? 0
                 : 1;
    }
    return 1;
  });
  EXPECT_EQ(rc, 0) << "no usage error naming the file and the sizes before the write";
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Hdf5Files, VolumeWithoutAttributesIsCentredWithUnitSpacing) {
  {
    h5::file f = h5::file::create(path("plain.h5"));
    std::vector<float> d(4 * 3 * 2, 1.5f);
    f.write_dataset<float>("volume", {2, 3, 4}, std::span<const float>(d));
  }
  const volume v = io::read_volume(path("plain.h5"));
  EXPECT_EQ(v.geom.spacing_mm, (std::array<double, 3>{1, 1, 1}));
  // Centred: origin = -(n-1)/2 * spacing.
  EXPECT_EQ(v.geom.origin_mm, (std::array<double, 3>{-1.5, -1.0, -0.5}));
}

TEST_F(Hdf5Files, OtherNumericTypesConvertToFloat) {
  {
    h5::file f = h5::file::create(path("u16.h5"));
    std::vector<std::uint16_t> d(2 * 2 * 3);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint16_t>(1000 * i + 7);
    f.write_dataset<std::uint16_t>("volume", {3, 2, 2}, std::span<const std::uint16_t>(d));
    std::vector<double> p(2 * 1 * 3);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.1 * static_cast<double>(i);
    f.write_dataset<double>("projections", {2, 1, 3}, std::span<const double>(p));
  }
  const volume v = io::read_volume(path("u16.h5"));
  for (std::size_t i = 0; i < v.data.size(); ++i)
    EXPECT_EQ(v.data[i], static_cast<float>(1000 * i + 7));
  const auto p = io::read_projections(path("u16.h5"));
  EXPECT_FALSE(p.geom.has_value());
  EXPECT_TRUE(p.geometry_json.empty());
  // float64 -> float32 rounds to nearest: identical to the C++ conversion.
  for (std::size_t i = 0; i < p.projections.data.size(); ++i)
    EXPECT_EQ(p.projections.data[i], static_cast<float>(0.1 * static_cast<double>(i)));
}

// The real HTC2022 file (written by another tool, variable-length string geometry) reads.
TEST_F(Hdf5Files, ReadsSharedHtc2022Projections) {
  const std::string file = std::string(CTFORGE_DATA_DIR) + "/htc2022/htc2022_ta.h5";
  const auto p = io::read_projections(file);
  EXPECT_EQ(p.projections.views, 720);
  EXPECT_EQ(p.projections.rows, 1);
  EXPECT_EQ(p.projections.cols, 560);
  ASSERT_TRUE(p.geom);
  EXPECT_EQ(p.geom->type_name(), "cone");
  EXPECT_NEAR(p.geom->orbit->source_to_isocenter_mm, 410.66, 1e-6);
  const std::string text = io::describe_file(file);
  EXPECT_NE(text.find("/projections: float32 [720][1][560]"), std::string::npos) << text;
  EXPECT_NE(text.find("cone, 720 views"), std::string::npos) << text;
}

// ---- bad input ----------------------------------------------------------------------------

TEST_F(Hdf5Files, MissingFile) {
  const std::string file = path("absent.h5");
  expect_error([&] { io::read_projections(file); }, {file + ": no such file"});
  expect_error([&] { io::read_volume(file); }, {file + ": no such file"});
  expect_error([&] { io::describe_file(file); }, {file + ": no such file"});
}

TEST_F(Hdf5Files, NotHdf5) {
  const std::string file = path("text.h5");
  std::ofstream(file) << "{\"this\": \"is JSON, not HDF5\"}\n";
  expect_error([&] { io::read_projections(file); }, {file + ": not an HDF5 file"});
  expect_error([&] { io::read_volume(file); }, {file + ": not an HDF5 file"});
}

TEST_F(Hdf5Files, MissingDatasetListsWhatIsPresent) {
  volume v(volume_geometry::centered(2, 2, 2, {1, 1, 1}));
  io::write_volume(path("vol.h5"), v);
  expect_error([&] { io::read_projections(path("vol.h5")); },
               {path("vol.h5") + ": dataset /projections not found (datasets present: /volume)"});
  { h5::file f = h5::file::create(path("empty.h5")); }
  expect_error([&] { io::read_volume(path("empty.h5")); },
               {"dataset /volume not found (datasets present: none)"});
}

TEST_F(Hdf5Files, WrongRank) {
  {
    h5::file f = h5::file::create(path("r2.h5"));
    std::vector<float> d(12, 0.0f);
    f.write_dataset<float>("projections", {3, 4}, std::span<const float>(d));
    f.write_dataset<float>("volume", {1, 1, 3, 4}, std::span<const float>(d));
  }
  expect_error([&] { io::read_projections(path("r2.h5")); },
               {path("r2.h5"), "/projections", "rank 2", "[3][4]"});
  expect_error([&] { io::read_volume(path("r2.h5")); }, {path("r2.h5"), "/volume", "rank 4"});
}

TEST_F(Hdf5Files, NonNumericDataset) {
  {
    h5::file f = h5::file::create(path("s.h5"));
    f.write_string_dataset("volume", "not voxels");
  }
  expect_error([&] { io::read_volume(path("s.h5")); }, {path("s.h5"), "/volume"});
}

TEST_F(Hdf5Files, GeometryShapeMismatchNamesBoth) {
  const geometry g = small_cone(4, 3, 6);
  {
    h5::file f = h5::file::create(path("mm.h5"));
    std::vector<float> d(4 * 3 * 5, 0.0f);
    f.write_dataset<float>("projections", {4, 3, 5}, std::span<const float>(d));
    f.write_string_dataset("geometry", geometry_to_json(g));
  }
  expect_error([&] { io::read_projections(path("mm.h5")); },
               {path("mm.h5") + ":/geometry", "6 cols", "[4][3][5]"});
  // The writer refuses the same mismatch (a caller error) and leaves no file.
  projection_stack p(4, 3, 5);
  expect_error([&] { io::write_projections(path("w.h5"), p, g); }, {"6 cols", "[4][3][5]"}, true);
  EXPECT_FALSE(fs::exists(path("w.h5")));
}

TEST_F(Hdf5Files, InvalidGeometryJsonInFile) {
  {
    h5::file f = h5::file::create(path("badgeom.h5"));
    std::vector<float> d(2, 0.0f);
    f.write_dataset<float>("projections", {1, 1, 2}, std::span<const float>(d));
    f.write_string_dataset("geometry", R"({"type": "cone", "detector": {"cols": 2}})");
  }
  // A defect of the file, so a runtime error (exit 1), naming <file>:/geometry and the field.
  expect_error([&] { io::read_projections(path("badgeom.h5")); },
               {path("badgeom.h5") + ":/geometry", "detector.rows"});
}

TEST_F(Hdf5Files, NonFiniteValuesNamedWithIndex) {
  projection_stack p(3, 2, 5);
  p.at(2, 1, 3) = std::numeric_limits<float>::quiet_NaN();
  p.at(2, 1, 4) = std::numeric_limits<float>::infinity();
  {
    // Written through the wrapper: write_projections itself does not check values.
    h5::file f = h5::file::create(path("nan.h5"));
    f.write_dataset<float>("projections", {3, 2, 5}, std::span<const float>(p.data));
  }
  expect_error([&] { io::read_projections(path("nan.h5")); },
               {path("nan.h5"), "/projections", "nan", "[2][1][3]"});

  volume v(volume_geometry::centered(4, 3, 2, {1, 1, 1}));
  v.at(1, 0, 2) = -std::numeric_limits<float>::infinity();
  io::write_volume(path("inf.h5"), v);
  expect_error([&] { io::read_volume(path("inf.h5")); },
               {path("inf.h5"), "/volume", "-inf", "[1][0][2]"});
}

TEST_F(Hdf5Files, FailedWritesLeaveNothing) {
  volume v(volume_geometry::centered(3, 3, 3, {1, 1, 1}));
  // Directory does not exist: the temporary file cannot be created; the message names the
  // output and the cause.
  const std::string nowhere = path("no/such/dir/vol.h5");
  expect_error([&] { io::write_volume(nowhere, v); },
               {nowhere, "cannot create", "No such file or directory"});
  // Invalid volume (size/data mismatch): refused before anything is written.
  volume bad = v;
  bad.data.pop_back();
  expect_error([&] { io::write_volume(path("bad.h5"), bad); }, {path("bad.h5")}, true);
  // A writer that fails after creating the temporary file: tmp removed, old file untouched.
  io::write_volume(path("keep.h5"), v);
  EXPECT_THROW(io::write_atomically(path("keep.h5"),
                                    [](const std::string& tmp) {
                                      std::ofstream(tmp) << "partial";
                                      throw error("simulated failure");
                                    }),
               error);
  EXPECT_EQ(entries(), std::vector<std::string>{"keep.h5"});
  EXPECT_EQ(io::read_volume(path("keep.h5")).data, v.data);
}

// ---- h5.hpp helpers that the native schema does not use (kept general for other readers) ----

TEST_F(Hdf5Files, WrapperStringsAttributesSlabs) {
  {
    h5::file f = h5::file::create(path("w.h5"));
    std::vector<std::int32_t> d(4 * 5);
    for (int i = 0; i < 20; ++i) d[static_cast<std::size_t>(i)] = i;
    auto ds =
        f.write_dataset<std::int32_t>("/exchange/data", {4, 5}, std::span<const std::int32_t>(d));
    const double theta[] = {0.0, 45.5, 90.0};
    ds.write_double_attribute("theta", theta);
    ds.write_string_attribute("units", "counts");
    ds.write_string_attribute("units", "counts (replaced)");
    // A fixed-length, space-padded string attribute, as some writers produce.
    h5::datatype_id t(H5Tcopy(H5T_C_S1));
    H5Tset_size(t.get(), 8);
    H5Tset_strpad(t.get(), H5T_STR_SPACEPAD);
    h5::dataspace_id s(H5Screate(H5S_SCALAR));
    h5::attribute_id a(H5Acreate2(ds.id(), "axes", t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(H5Awrite(a.get(), t.get(), "x:y     "), 0);
  }
  const h5::file f = h5::file::open(path("w.h5"));
  EXPECT_TRUE(f.has("exchange/data"));
  EXPECT_FALSE(f.has("/exchange/missing/deeper"));
  EXPECT_EQ(f.dataset_names(), std::vector<std::string>{"/exchange/data"});
  const h5::dataset ds = f.open_dataset("exchange/data");
  EXPECT_EQ(ds.shape(), (h5::dims_t{4, 5}));
  EXPECT_EQ(ds.type_name(), "int32");
  EXPECT_EQ(ds.read_double_attribute("theta"), (std::vector<double>{0.0, 45.5, 90.0}));
  EXPECT_EQ(ds.read_string_attribute("units"), "counts (replaced)");
  EXPECT_EQ(ds.read_string_attribute("axes"), "x:y");
  // Rows 1..2, columns 2..4 as float.
  std::vector<float> slab(2 * 3);
  ds.read_slab<float>({1, 2}, {2, 3}, std::span<float>(slab));
  EXPECT_EQ(slab, (std::vector<float>{7, 8, 9, 12, 13, 14}));
  std::vector<float> too_small(5);
  expect_error(
      [&] {
        ds.read_slab<float>({1, 2}, {2, 3}, std::span<float>(too_small));
      },
      {path("w.h5"), "/exchange/data"});
  expect_error(
      [&] {
        ds.read_slab<float>({3, 0}, {2, 5}, std::span<float>(slab));
      },
      {"exceeds dimension 0"});
  expect_error([&] { ds.read_string_attribute("nope"); }, {"attribute nope: not found"});
  expect_error([&] { ds.read_string(); }, {"expected a string, found int32"});
}

TEST_F(Hdf5Files, DescribeFile) {
  volume v(volume_geometry::centered(6, 5, 4, {0.5, 0.5, 2}));
  for (std::size_t i = 0; i < v.data.size(); ++i) v.data[i] = static_cast<float>(i);
  io::write_volume(path("vol.h5"), v);
  const std::string text = io::describe_file(path("vol.h5"));
  EXPECT_NE(text.find("/volume: float32 [4][5][6] (z, y, x)"), std::string::npos) << text;
  EXPECT_NE(text.find("min 0, max 119"), std::string::npos) << text;
  EXPECT_NE(text.find("@spacing_mm = [0.5, 0.5, 2]"), std::string::npos) << text;
  EXPECT_NE(text.find("extent: 3 x 2.5 x 8 mm"), std::string::npos) << text;

  projection_stack p(5, 2, 3);
  io::write_projections(path("p.h5"), p, small_cone(5, 2, 3));
  const std::string pt = io::describe_file(path("p.h5"));
  EXPECT_NE(pt.find("/projections: float32 [5][2][3] (views, rows, cols)"), std::string::npos)
      << pt;
  EXPECT_NE(pt.find("geometry: cone, 5 views, detector 3 cols x 2 rows"), std::string::npos) << pt;
  EXPECT_NE(pt.find("SID 400 mm, SDD 700 mm"), std::string::npos) << pt;
}

// ---- PNG preview --------------------------------------------------------------------------

namespace {
struct grey_image {
  std::uint32_t width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
  int at(std::uint32_t col, std::uint32_t row) const { return pixels[row * width + col]; }
};
grey_image read_png(const std::string& file) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  EXPECT_NE(png_image_begin_read_from_file(&img, file.c_str()), 0) << img.message;
  img.format = PNG_FORMAT_GRAY;
  grey_image out;
  out.width = img.width;
  out.height = img.height;
  out.pixels.resize(static_cast<std::size_t>(img.width) * img.height);
  EXPECT_NE(png_image_finish_read(&img, nullptr, out.pixels.data(), 0, nullptr), 0) << img.message;
  return out;
}
}  // namespace

TEST_F(Hdf5Files, PreviewLayoutOrientationAndWindow) {
  const std::int64_t nx = 7, ny = 5, nz = 3;  // odd, all different
  volume v(volume_geometry::centered(nx, ny, nz, {1, 1, 1}));
  // Marker voxels (value 1, background 0) in the central slices:
  v.at(nz / 2, ny - 1, 0) = 1.0f;       // axial: largest y, smallest x -> top-left of panel 1
  v.at(nz - 1, ny / 2, nx - 1) = 1.0f;  // coronal: largest z, largest x -> top-right of panel 2
  v.at(0, ny - 1, nx / 2) = 1.0f;  // sagittal: smallest z, largest y -> bottom-right of panel 3
  v.at(nz / 2, 0, 1) = 0.5f;       // axial: smallest y -> bottom row, column 1
  io::write_preview_png(path("p.png"), v, 0.0f, 1.0f);
  EXPECT_EQ(entries(), std::vector<std::string>{"p.png"});
  const grey_image im = read_png(path("p.png"));
  const std::uint32_t gap = 3;
  ASSERT_EQ(im.width, nx + gap + nx + gap + ny);
  ASSERT_EQ(im.height, std::max(ny, nz));
  EXPECT_EQ(im.at(0, 0), 255);
  EXPECT_EQ(im.at(1, ny - 1), 128);  // 0.5 in [0, 1] -> round(127.5) = 128
  EXPECT_EQ(im.at(nx + gap + nx - 1, 0), 255);
  EXPECT_EQ(im.at(2 * (nx + gap) + ny - 1, nz - 1), 255);
  int lit = 0;
  for (auto p : im.pixels) lit += p > 0;
  EXPECT_EQ(lit, 4) << "only the markers are non-zero (gaps and padding black)";
}

// One slice (fan beam): the axial panel alone, still with +y up.
TEST_F(Hdf5Files, PreviewSingleSliceIsAxialOnly) {
  volume v(volume_geometry::centered(6, 4, 1, {1, 1, 1}));
  v.at(0, 3, 5) = 1.0f;  // largest y, largest x -> top right
  io::write_preview_png(path("s.png"), v, 0.0f, 1.0f);
  const grey_image im = read_png(path("s.png"));
  ASSERT_EQ(im.width, 6u);
  ASSERT_EQ(im.height, 4u);
  EXPECT_EQ(im.at(5, 0), 255);
  int lit = 0;
  for (auto p : im.pixels) lit += p > 0;
  EXPECT_EQ(lit, 1);
}

TEST_F(Hdf5Files, PreviewAutoWindowFromPercentiles) {
  // Values 0..999 in the central axial slice, 500 in the 2000 other voxels. Sorted, the 3000
  // values put the 0.5 percentile (index round(0.005 * 2999) = 15) at 15 and the 99.5 percentile
  // (index 2984) at 984; so 0 clips to black, 999 to white and 480 maps to
  // (480 - 15) / 969 * 255 = 122.4 -> 122.
  volume v(volume_geometry::centered(40, 25, 3, {1, 1, 1}));
  std::fill(v.data.begin(), v.data.end(), 500.0f);
  for (std::int64_t j = 0; j < 25; ++j)
    for (std::int64_t i = 0; i < 40; ++i) v.at(1, j, i) = static_cast<float>(j * 40 + i);
  io::write_preview_png(path("a.png"), v);
  const grey_image im = read_png(path("a.png"));
  EXPECT_EQ(im.width, 40u + 3 + 40 + 3 + 25);
  EXPECT_EQ(im.height, 25u);
  EXPECT_EQ(im.at(0, 24), 0);    // value 0 (y = 0 is the bottom row)
  EXPECT_EQ(im.at(39, 0), 255);  // value 999
  EXPECT_EQ(im.at(0, 12), 122);  // value 480 (row 12 from the top is y = 12)
  // A constant volume is mid grey rather than a division by zero.
  std::fill(v.data.begin(), v.data.end(), 3.0f);
  io::write_preview_png(path("c.png"), v);
  EXPECT_EQ(read_png(path("c.png")).at(0, 0), 128);
  // lo > hi is a caller error.
  expect_error([&] { io::write_preview_png(path("x.png"), v, 2.0f, 1.0f); }, {path("x.png")}, true);
  EXPECT_FALSE(fs::exists(path("x.png")));
}

namespace ctforge {
namespace {

// A /geometry written as a fixed-length string that its JSON fills exactly, NUL-padded (what
// h5py writes for numpy bytes, np.bytes_), reads back whole: the memory type used to reserve
// the last byte for a terminator and cut the closing brace, so the file was refused.
TEST(Hdf5Strings, FixedLengthGeometryReadsWhole) {
  const auto dir = ctforge::testing::scratch_dir("hdf5_strings", "fixed");
  const std::string path = (dir / "fixed.h5").string();
  const geometry g = make_parallel_geometry(3, 2, 1, 1, {0.0, 0.5});
  const std::string json = geometry_to_json(g);
  for (H5T_str_t pad : {H5T_STR_NULLPAD, H5T_STR_NULLTERM, H5T_STR_SPACEPAD}) {
    {
      h5::file f = h5::file::create(path);
      std::vector<float> d(2 * 2 * 3, 0.5f);
      f.write_dataset<float>("/projections", {2, 2, 3}, std::span<const float>(d)).close();
      // NULLTERM needs room for the terminator; the others fill the size exactly.
      const std::size_t size = json.size() + (pad == H5T_STR_NULLTERM ? 1 : 0);
      h5::datatype_id t(H5Tcopy(H5T_C_S1));
      H5Tset_size(t.get(), size);
      H5Tset_strpad(t.get(), pad);
      h5::dataspace_id s(H5Screate(H5S_SCALAR));
      h5::dataset_id ds(
          H5Dcreate2(f.id(), "/geometry", t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      std::string buf = json;
      buf.resize(size, '\0');
      ASSERT_GE(H5Dwrite(ds.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), 0);
      ds.close("geometry");
      f.close();
    }
    const io::projection_file pf = io::read_projections(path);
    ASSERT_TRUE(pf.geom.has_value()) << "pad " << pad;
    EXPECT_EQ(pf.geometry_json, json) << "pad " << pad;
    EXPECT_EQ(pf.geom->view_count(), 2);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ctforge

// ---- volume_file_writer: a volume written slab by slab -------------------------------------------

namespace {

volume_geometry odd_grid() {
  volume_geometry g = volume_geometry::centered(5, 3, 7, {0.5, 0.75, 1.25});
  g.origin_mm = {-1.0, 2.0, 3.5};
  return g;
}

}  // namespace

// Planes written in any order, in slabs of any size, read back as the volume written whole.
TEST_F(Hdf5Files, VolumeFileWriterAssemblesSlabsInAnyOrder) {
  const volume_geometry g = odd_grid();
  volume v(g);
  v.data = random_values(v.data.size(), 7);
  const std::int64_t plane = g.nx * g.ny;
  {
    io::volume_file_writer w(path("slabs.h5"), g);
    const std::span<const float> all(v.data);
    w.write_planes(4, all.subspan(4 * plane, 3 * plane));
    w.write_planes(0, all.subspan(0, plane));
    w.write_planes(1, all.subspan(plane, 3 * plane));
    EXPECT_FALSE(fs::exists(path("slabs.h5")));  // nothing under the name before commit()
    w.commit();
  }
  const volume back = io::read_volume(path("slabs.h5"));
  EXPECT_EQ(back.data, v.data);
  EXPECT_EQ(back.geom.nx, 5);
  EXPECT_EQ(back.geom.nz, 7);
  EXPECT_EQ(back.geom.spacing_mm, g.spacing_mm);
  EXPECT_EQ(back.geom.origin_mm, g.origin_mm);
  EXPECT_EQ(entries(), std::vector<std::string>{"slabs.h5"});
}

// A writer abandoned (an error, an interruption) or committed with a plane missing leaves the
// earlier file of that name untouched and no temporary; non-finite planes and planes out of
// the grid are refused naming the file.
TEST_F(Hdf5Files, VolumeFileWriterNeverLeavesAnIncompleteFile) {
  const volume_geometry g = odd_grid();
  volume earlier(g);
  earlier.data = random_values(earlier.data.size(), 3);
  io::write_volume(path("v.h5"), earlier);
  const std::int64_t plane = g.nx * g.ny;
  std::vector<float> slab(static_cast<std::size_t>(2 * plane), 1.0f);
  {
    io::volume_file_writer w(path("v.h5"), g);
    w.write_planes(0, slab);
    ctforge::testing::expect_runtime_error_naming([&] { w.commit(); }, "plane 2 of 7");
  }
  {
    io::volume_file_writer w(path("v.h5"), g);
    w.write_planes(2, slab);
    slab[5] = std::numeric_limits<float>::quiet_NaN();
    ctforge::testing::expect_runtime_error_naming([&] { w.write_planes(4, slab); }, path("v.h5"));
    ctforge::testing::expect_error_naming([&] { w.write_planes(6, slab); }, path("v.h5"));
    ctforge::testing::expect_error_naming(
        [&] { w.write_planes(0, std::span<const float>(slab).first(plane + 1)); }, "planes");
  }  // abandoned
  EXPECT_EQ(io::read_volume(path("v.h5")).data, earlier.data);
  EXPECT_EQ(entries(), std::vector<std::string>{"v.h5"});
}

// Planes written by other processes (the workers of a distributed run) straight into the
// writer's temporary file: the committed file equals one written whole, and a plane neither
// written nor marked still stops the commit. A duplicate write of the same planes (a worker cut
// off and back) changes nothing; a file that is not the volume being written is refused.
TEST_F(Hdf5Files, VolumePartsWrittenByOtherProcessesAssembleTheVolume) {
  const volume_geometry g = odd_grid();
  volume v(g);
  v.data = random_values(v.data.size(), 11);
  const std::int64_t plane = g.nx * g.ny;
  const std::span<const float> all(v.data);
  {
    io::volume_file_writer w(path("parts.h5"), g);
    const std::string tmp = w.temporary_path();
    const std::uint64_t offset = w.data_offset();
    // Each slab from a child process of its own.
    for (const auto [k0, n] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {3, 3}, {6, 1}}) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        try {
          io::write_volume_part(tmp, offset, g, k0, all.subspan(k0 * plane, n * plane));
        } catch (...) {
          ::_exit(1);
        }
        ::_exit(0);
      }
      int status = -1;
      ::waitpid(pid, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (k0 < 6) w.mark_written(k0, n);
    }
    io::write_volume_part(tmp, offset, g, 3, all.subspan(3 * plane, 3 * plane));  // duplicate
    // Plane 6 was written but not marked: the writer cannot know it, and refuses to commit.
    ctforge::testing::expect_runtime_error_naming([&] { w.commit(); }, "plane 6 of 7");
    w.mark_written(6, 1);
    w.commit();
  }
  EXPECT_EQ(io::read_volume(path("parts.h5")).data, v.data);
  EXPECT_EQ(entries(), std::vector<std::string>{"parts.h5"});
  // Not the volume being written: a file shorter than the volume's data.
  std::ofstream(path("short.bin")) << "0123456789";
  ctforge::testing::expect_runtime_error_naming(
      [&] { io::write_volume_part(path("short.bin"), 0, g, 0, all.subspan(0, plane)); },
      "short.bin");
  ctforge::testing::expect_runtime_error_naming(
      [&] { io::write_volume_part(path("gone.h5"), 0, g, 0, all.subspan(0, plane)); }, "gone.h5");
}
