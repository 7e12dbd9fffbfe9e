// Projections from DataExchange (the real tooth scan and synthetic files), NeXus NXtomo and TIFF
// stacks (written here byte by byte, independently of libtiff): normalisation, partial reads,
// binning with the matching geometry, and errors that name the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
namespace h5 = detail::h5;

const std::string data_dir = CTFORGE_DATA_DIR;
using testing::expect_error_naming;

fs::path temp_dir(const std::string& name) {
  return testing::scratch_dir("projections", name);
}
const std::string tooth = data_dir + "/dxchange/tooth.h5";

void expect_same_pixel_centers(const geometry& sub, const geometry& full, std::int64_t v0,
                               double r0, double c0, double bin_r = 1, double bin_c = 1) {
  // Pixel (r, c) of the selection is the mean of full pixels r0 + bin_r r ... (their centre).
  for (std::int64_t v = 0; v < sub.view_count(); ++v)
    for (std::int64_t r : {std::int64_t{0}, sub.rows - 1})
      for (std::int64_t c : {std::int64_t{0}, sub.cols / 2, sub.cols - 1}) {
        const vec3 a = pixel_center(sub, v, static_cast<double>(c), static_cast<double>(r));
        const vec3 b =
            pixel_center(full, v0 + v, c0 + bin_c * static_cast<double>(c) + 0.5 * (bin_c - 1),
                         r0 + bin_r * static_cast<double>(r) + 0.5 * (bin_r - 1));
        EXPECT_NEAR(a.x, b.x, 1e-9);
        EXPECT_NEAR(a.y, b.y, 1e-9);
        EXPECT_NEAR(a.z, b.z, 1e-9);
      }
}

// ---- DataExchange: the real tooth --------------------------------------------------------------

TEST(DataExchange, ToothNormalisedToPlausibleLineIntegrals) {
  const io::loaded_projections f = io::read_projections_any(tooth);
  EXPECT_EQ(f.format, "dxchange");
  const auto& p = f.projections;
  ASSERT_EQ(p.views, 181);
  ASSERT_EQ(p.rows, 2);
  ASSERT_EQ(p.cols, 640);
  ASSERT_TRUE(f.geom.has_value());
  EXPECT_EQ(f.geom->type_name(), "parallel");
  EXPECT_NEAR(rad_to_deg(f.geom->orbit->angles_rad.front()), 0.0, 1e-9);
  EXPECT_NEAR(rad_to_deg(f.geom->orbit->angles_rad.back()), 180.0 * 180.0 / 181.0,
              1e-3);  // theta 0..179.006
  EXPECT_NE(f.warnings.find("pixel size not recorded"), std::string::npos) << f.warnings;
  // Line integrals of a tooth: no NaN/inf; background near 0 (noise makes it slightly negative
  // where I > flat); enamel/dentine at most a few units of mu * length.
  const auto [lo, hi] = std::minmax_element(p.data.begin(), p.data.end());
  for (float x : p.data) ASSERT_TRUE(std::isfinite(x));
  EXPECT_GT(*lo, -0.5f);
  EXPECT_LT(*hi, 6.0f);
  EXPECT_GT(*hi, 0.5f);  // there is an object
  // Independent normalisation of a few pixels from the raw frames: mean flat and dark, then
  // -log((I - dark) / (flat - dark)) in double. Float output: 1e-5 relative/absolute.
  const io::raw_scan raw = io::read_dxchange(tooth);
  ASSERT_EQ(raw.flats.views, 10);
  ASSERT_EQ(raw.darks.views, 10);
  for (const auto [v, r, c] :
       {std::array<std::int64_t, 3>{0, 0, 0}, {90, 1, 300}, {180, 0, 639}, {45, 1, 150}}) {
    double fl = 0, dk = 0;
    for (std::int64_t k = 0; k < 10; ++k) {
      fl += raw.flats.at(k, r, c) / 10.0;
      dk += raw.darks.at(k, r, c) / 10.0;
    }
    const double expect = -std::log((raw.frames.at(v, r, c) - dk) / (fl - dk));
    EXPECT_NEAR(p.at(v, r, c), expect, 1e-5 * (1 + std::abs(expect))) << v << " " << r << " " << c;
  }
}

TEST(DataExchange, PartialReadEqualsTheFullReadAndKeepsTheGeometry) {
  const io::loaded_projections full = io::read_projections_any(tooth);
  io::projection_read_options o;
  o.select.views = {10, 41};
  o.select.rows = {1, 1};
  o.select.cols = {100, 201};
  const io::loaded_projections part = io::read_projections_any(tooth, o);
  ASSERT_EQ(part.projections.views, 41);
  ASSERT_EQ(part.projections.rows, 1);
  ASSERT_EQ(part.projections.cols, 201);
  // Same per-pixel arithmetic on the same inputs: identical values.
  for (std::int64_t v = 0; v < 41; ++v)
    for (std::int64_t c = 0; c < 201; ++c)
      ASSERT_EQ(part.projections.at(v, 0, c), full.projections.at(v + 10, 1, c + 100));
  expect_same_pixel_centers(*part.geom, *full.geom, 10, 1, 100);

  // Binned by 3 columns (201 -> 67) and the two rows together: -log of the mean transmission.
  o.select.rows = {0, 2};
  o.bin_cols = 3;
  o.bin_rows = 2;
  const io::loaded_projections bin = io::read_projections_any(tooth, o);
  ASSERT_EQ(bin.projections.cols, 67);
  ASSERT_EQ(bin.projections.rows, 1);
  for (std::int64_t v = 0; v < 41; v += 8)
    for (std::int64_t c = 0; c < 67; ++c) {
      double t = 0;
      for (std::int64_t r = 0; r < 2; ++r)
        for (std::int64_t k = 0; k < 3; ++k)
          t += std::exp(-double(full.projections.at(v + 10, r, 100 + 3 * c + k))) / 6;
      // float line integrals in the reference: exp/log round trip within 1e-5
      EXPECT_NEAR(bin.projections.at(v, 0, c), -std::log(t), 1e-5);
    }
  expect_same_pixel_centers(*bin.geom, *full.geom, 10, 0, 100, 2, 3);
  EXPECT_DOUBLE_EQ(bin.geom->pixel_u_mm, 3 * full.geom->pixel_u_mm);
  // Pixel size option.
  o.pixel_size_mm = 0.0065;
  EXPECT_DOUBLE_EQ(io::read_projections_any(tooth, o).geom->pixel_u_mm, 3 * 0.0065);
}

TEST(DataExchange, SelectionErrorsNameTheOptionAndFile) {
  io::projection_read_options o;
  o.select.views = {170, 20};
  expect_error_naming([&] { io::read_projections_any(tooth, o); }, tooth, "views");
  o = {};
  o.select.cols = {-1, 5};
  EXPECT_THROW(io::read_projections_any(tooth, o), usage_error);
  o = {};
  o.bin_cols = 700;
  EXPECT_THROW(io::read_projections_any(tooth, o), usage_error);
}

// ---- synthetic HDF5 files ----------------------------------------------------------------------

/// Line integral used by the synthetic scans.
double synthetic_p(std::int64_t v, std::int64_t r, std::int64_t c) {
  return 0.8 + 0.7 * std::sin(0.31 * static_cast<double>(c) + 0.2 * static_cast<double>(v)) +
         0.05 * static_cast<double>(r);
}
double synthetic_flat(std::int64_t r, std::int64_t c) {
  return 4000.0 + 10.0 * static_cast<double>(c) + 3.0 * static_cast<double>(r);
}
double synthetic_dark(std::int64_t r, std::int64_t) {
  return 100.0 + static_cast<double>(r);
}
std::uint16_t synthetic_count(std::int64_t v, std::int64_t r, std::int64_t c) {
  const double d = synthetic_dark(r, c);
  return static_cast<std::uint16_t>(
      std::lround(d + (synthetic_flat(r, c) - d) * std::exp(-synthetic_p(v, r, c))));
}
/// Rounding the counts to integers changes p by at most 0.5 / (I - dark).
double count_tolerance(std::int64_t v, std::int64_t r, std::int64_t c) {
  return 0.5 / (double(synthetic_count(v, r, c)) - synthetic_dark(r, c)) + 1e-5;
}

TEST(DataExchange, SyntheticCountsWithClampedPixels) {
  const std::int64_t nv = 6, nr = 3, nc = 11;
  const std::string path = (temp_dir("dx") / "scan.h5").string();
  {
    auto f = h5::file::create(path);
    std::vector<std::uint16_t> data, white, dark;
    for (std::int64_t v = 0; v < nv; ++v)
      for (std::int64_t r = 0; r < nr; ++r)
        for (std::int64_t c = 0; c < nc; ++c) data.push_back(synthetic_count(v, r, c));
    data[5] = 0;                                                 // below the dark field: clamped
    data[7] = static_cast<std::uint16_t>(synthetic_dark(0, 7));  // equal to the dark: clamped
    for (int k = 0; k < 2; ++k)
      for (std::int64_t r = 0; r < nr; ++r)
        for (std::int64_t c = 0; c < nc; ++c) {
          white.push_back(
              static_cast<std::uint16_t>(synthetic_flat(r, c) + (k ? 5 : -5)));  // mean = flat
          dark.push_back(static_cast<std::uint16_t>(synthetic_dark(r, c)));
        }
    f.write_dataset<std::uint16_t>("/exchange/data", {hsize_t(nv), hsize_t(nr), hsize_t(nc)}, data);
    f.write_dataset<std::uint16_t>("/exchange/data_white", {2, hsize_t(nr), hsize_t(nc)}, white);
    f.write_dataset<std::uint16_t>("/exchange/data_dark", {2, hsize_t(nr), hsize_t(nc)}, dark);
    std::vector<double> theta;
    for (std::int64_t v = 0; v < nv; ++v) theta.push_back(30.0 * static_cast<double>(v));
    f.write_dataset<double>("/exchange/theta", {hsize_t(nv)}, theta);
  }
  io::projection_read_options o;
  o.pixel_size_mm = 0.25;
  const io::loaded_projections got = io::read_projections_any(path, o);
  EXPECT_EQ(got.clamped, 2);
  EXPECT_NE(got.warnings.find("2 of 198 pixels"), std::string::npos) << got.warnings;
  const float floor_p = static_cast<float>(-std::log(1e-4));
  for (std::int64_t v = 0; v < nv; ++v)
    for (std::int64_t r = 0; r < nr; ++r)
      for (std::int64_t c = 0; c < nc; ++c) {
        const float x = got.projections.at(v, r, c);
        ASSERT_TRUE(std::isfinite(x));
        if (v == 0 && r == 0 && (c == 5 || c == 7)) {
          EXPECT_FLOAT_EQ(x, floor_p);
        } else {
          EXPECT_NEAR(x, synthetic_p(v, r, c), count_tolerance(v, r, c))
              << v << " " << r << " " << c;
        }
      }
  EXPECT_NEAR(rad_to_deg(got.geom->orbit->angles_rad[3]), 90.0, 1e-12);
  EXPECT_DOUBLE_EQ(got.geom->pixel_u_mm, 0.25);
  // Line-integral mode keeps the stored values.
  o.mode = io::intensity_mode::line_integrals;
  EXPECT_EQ(io::read_projections_any(path, o).projections.at(1, 2, 3),
            static_cast<float>(synthetic_count(1, 2, 3)));
}

TEST(DataExchange, BrokenFilesNameTheFile) {
  const fs::path dir = temp_dir("dx_broken");
  // Truncated copy of the tooth.
  {
    std::ifstream in(tooth, std::ios::binary);
    std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string cut = (dir / "cut.h5").string();
    std::ofstream(cut, std::ios::binary)
        .write(b.data(), static_cast<std::streamsize>(b.size() / 2));
    expect_error_naming([&] { io::read_projections_any(cut); }, cut);
  }
  // Wrong rank, wrong theta count, not a projection file, not HDF5.
  const std::string rank2 = (dir / "rank2.h5").string(), theta = (dir / "theta.h5").string(),
                    other = (dir / "other.h5").string(), text = (dir / "text.h5").string();
  {
    auto f = h5::file::create(rank2);
    std::vector<float> d(12, 1.0f);
    f.write_dataset<float>("/exchange/data", {3, 4}, d);
  }
  {
    auto f = h5::file::create(theta);
    std::vector<float> d(24, 1.0f);
    f.write_dataset<float>("/exchange/data", {2, 3, 4}, d);
    std::vector<double> t{0, 1, 2};
    f.write_dataset<double>("/exchange/theta", {3}, t);
  }
  {
    auto f = h5::file::create(other);
    std::vector<float> d(4, 1.0f);
    f.write_dataset<float>("/something", {4}, d);
  }
  std::ofstream(text) << "not hdf5";
  expect_error_naming([&] { io::read_projections_any(rank2); }, rank2, "/exchange/data");
  expect_error_naming([&] { io::read_projections_any(theta); }, theta, "theta");
  expect_error_naming([&] { io::read_projections_any(other); }, other, "not a projection file");
  expect_error_naming([&] { io::read_projections_any(text); }, text);
  expect_error_naming([&] { io::read_projections_any((dir / "missing.h5").string()); },
                      "missing.h5");
}

TEST(NativeProjections, SelectionOfACtforgeFile) {
  const geometry g = make_cone_geometry(9, 5, 0.5, 0.5, 100, 150, angle_range(0, 0.3, 7));
  projection_stack p(7, 5, 9);
  for (std::size_t i = 0; i < p.data.size(); ++i) p.data[i] = 0.01f * static_cast<float>(i);
  const std::string path = (temp_dir("native") / "p.h5").string();
  io::write_projections(path, p, g);
  io::projection_read_options o;
  o.select = {{2, 3}, {1, 3}, {4, 5}};
  const io::loaded_projections f = io::read_projections_any(path, o);
  EXPECT_EQ(f.format, "ctforge");
  ASSERT_EQ(f.projections.views, 3);
  for (std::int64_t v = 0; v < 3; ++v)
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 5; ++c)
        EXPECT_EQ(f.projections.at(v, r, c), p.at(v + 2, r + 1, c + 4));
  expect_same_pixel_centers(*f.geom, g, 2, 1, 4);
  EXPECT_EQ(f.geom->type_name(), "cone");
}

// ---- NeXus NXtomo ------------------------------------------------------------------------------

TEST(NxTomo, ImageKeysAnglesAndPixelSize) {
  // Frames: 2 darks, 3 flats, 10 projections, 2 flats (a typical interleaved acquisition).
  const std::int64_t nr = 5, nc = 9, np = 10;
  std::vector<int> keys = {2, 2, 1, 1, 1};
  for (int i = 0; i < np; ++i) keys.push_back(0);
  keys.push_back(1);
  keys.push_back(1);
  std::vector<std::uint16_t> frames;
  std::vector<double> angles;
  int proj = 0;
  for (int k : keys) {
    for (std::int64_t r = 0; r < nr; ++r)
      for (std::int64_t c = 0; c < nc; ++c)
        frames.push_back(k == 2   ? static_cast<std::uint16_t>(synthetic_dark(r, c))
                         : k == 1 ? static_cast<std::uint16_t>(synthetic_flat(r, c))
                                  : synthetic_count(proj, r, c));
    angles.push_back(k == 0 ? 18.0 * proj : 0.0);
    if (k == 0) ++proj;
  }
  const std::string path = (temp_dir("nx") / "scan.nx").string();
  {
    auto f = h5::file::create(path);
    const hsize_t n = keys.size();
    f.write_dataset<std::uint16_t>("/entry1/instrument/detector/data",
                                   {n, hsize_t(nr), hsize_t(nc)}, frames);
    f.write_dataset<int>("/entry1/instrument/detector/image_key", {n}, keys);
    auto a = f.write_dataset<double>("/entry1/sample/rotation_angle", {n}, angles);
    a.write_string_attribute("units", "degree");
    std::vector<double> px{6.5};
    auto x = f.write_dataset<double>("/entry1/instrument/detector/x_pixel_size", {1}, px);
    x.write_string_attribute("units", "um");
  }
  EXPECT_EQ(io::projection_format(path), "nxtomo");
  io::projection_read_options o;
  o.select.views = {4, 3};  // projections 4..6 = frames 9..11
  o.select.cols = {1, 7};
  const io::loaded_projections f = io::read_projections_any(path, o);
  EXPECT_EQ(f.format, "nxtomo");
  ASSERT_EQ(f.projections.views, 3);
  ASSERT_EQ(f.projections.cols, 7);
  for (std::int64_t v = 0; v < 3; ++v)
    for (std::int64_t r = 0; r < nr; ++r)
      for (std::int64_t c = 0; c < 7; ++c)
        EXPECT_NEAR(f.projections.at(v, r, c), synthetic_p(v + 4, r, c + 1),
                    count_tolerance(v + 4, r, c + 1));
  EXPECT_NEAR(rad_to_deg(f.geom->orbit->angles_rad[0]), 72.0, 1e-12);
  EXPECT_NEAR(f.geom->pixel_u_mm, 0.0065, 1e-15);
  const io::raw_scan raw = io::read_nxtomo(path);
  EXPECT_EQ(raw.flats.views, 5);
  EXPECT_EQ(raw.darks.views, 2);
  EXPECT_EQ(raw.full_views, np);
}

TEST(NxTomo, RadiansAndNoKeys) {
  const std::string path = (temp_dir("nx2") / "scan.h5").string();
  {
    auto f = h5::file::create(path);
    std::vector<float> frames(4 * 2 * 3, 0.25f);
    f.write_dataset<float>("/entry/data/data", {4, 2, 3}, frames);
    std::vector<double> a{0, 0.5, 1.0, 1.5};
    auto d = f.write_dataset<double>("/entry/data/rotation_angle", {4}, a);
    d.write_string_attribute("units", "rad");
  }
  const io::loaded_projections f = io::read_projections_any(path);
  EXPECT_EQ(f.projections.views, 4);
  EXPECT_DOUBLE_EQ(f.geom->orbit->angles_rad[3], 1.5);
  EXPECT_EQ(f.projections.at(3, 1, 2), 0.25f);  // float frames, no flats: line integrals
  EXPECT_NE(f.warnings.find("line integrals"), std::string::npos) << f.warnings;
}

// ---- TIFF stacks
// ---------------------------------------------------------------------------------

/// Minimal little-endian TIFF writer (baseline tags only, no compression), independent of
/// libtiff: grey uint16 or float32 pages, strips or 16x16 tiles.
struct tiff_page {
  std::uint32_t width = 0, height = 0;
  bool is_float = false;
  bool tiled = false;
  std::vector<double> values;  // row-major
};

void write_tiff(const std::string& path, const std::vector<tiff_page>& pages) {
  std::vector<unsigned char> out = {'I', 'I', 42, 0, 0, 0, 0, 0};
  auto put16 = [&](std::uint16_t x) {
    out.push_back(x & 0xFF);
    out.push_back(x >> 8);
  };
  auto put32 = [&](std::uint32_t x) {
    for (int i = 0; i < 4; ++i) out.push_back((x >> (8 * i)) & 0xFF);
  };
  auto patch32 = [&](std::size_t at, std::uint32_t x) {
    for (int i = 0; i < 4; ++i) out[at + i] = (x >> (8 * i)) & 0xFF;
  };
  std::size_t next_ifd_slot = 4;
  for (const auto& p : pages) {
    const std::uint32_t bytes = p.is_float ? 4 : 2;
    auto put_sample = [&](double v) {
      if (p.is_float) {
        float f = static_cast<float>(v);
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        put32(u);
      } else {
        put16(static_cast<std::uint16_t>(v));
      }
    };
    std::vector<std::uint32_t> offsets, counts;
    const std::uint32_t tile = 16;
    if (!p.tiled) {
      offsets.push_back(static_cast<std::uint32_t>(out.size()));
      for (double v : p.values) put_sample(v);
      counts.push_back(p.width * p.height * bytes);
    } else {
      for (std::uint32_t ty = 0; ty < p.height; ty += tile)
        for (std::uint32_t tx = 0; tx < p.width; tx += tile) {
          offsets.push_back(static_cast<std::uint32_t>(out.size()));
          for (std::uint32_t y = ty; y < ty + tile; ++y)
            for (std::uint32_t x = tx; x < tx + tile; ++x)
              put_sample(x < p.width && y < p.height ? p.values[y * p.width + x] : 0.0);
          counts.push_back(tile * tile * bytes);
        }
    }
    // Arrays of offsets / counts (when more than one) live before the IFD.
    if (out.size() % 2) out.push_back(0);
    std::uint32_t off_array = 0, cnt_array = 0;
    if (offsets.size() > 1) {
      off_array = static_cast<std::uint32_t>(out.size());
      for (auto o : offsets) put32(o);
      cnt_array = static_cast<std::uint32_t>(out.size());
      for (auto c : counts) put32(c);
    }
    struct entry {
      std::uint16_t tag, type;
      std::uint32_t count, value;
    };
    std::vector<entry> e = {{256, 4, 1, p.width},
                            {257, 4, 1, p.height},
                            {258, 3, 1, bytes * 8},
                            {259, 3, 1, 1},
                            {262, 3, 1, 1}};
    const std::uint32_t n = static_cast<std::uint32_t>(offsets.size());
    if (!p.tiled) {
      e.push_back({273, 4, 1, offsets[0]});
      e.push_back({277, 3, 1, 1});
      e.push_back({278, 4, 1, p.height});
      e.push_back({279, 4, 1, counts[0]});
    } else {
      e.push_back({277, 3, 1, 1});
      e.push_back({322, 4, 1, tile});
      e.push_back({323, 4, 1, tile});
      e.push_back({324, 4, n, n > 1 ? off_array : offsets[0]});
      e.push_back({325, 4, n, n > 1 ? cnt_array : counts[0]});
    }
    e.push_back({339, 3, 1, p.is_float ? 3u : 1u});
    patch32(next_ifd_slot, static_cast<std::uint32_t>(out.size()));
    put16(static_cast<std::uint16_t>(e.size()));
    for (const auto& x : e) {
      put16(x.tag);
      put16(x.type);
      put32(x.count);
      if (x.type == 3 && x.count == 1) {
        put16(static_cast<std::uint16_t>(x.value));
        put16(0);
      } else {
        put32(x.value);
      }
    }
    next_ifd_slot = out.size();
    put32(0);
  }
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
}

constexpr std::int64_t tv = 12, tr = 13, tc = 37;  // odd detector

tiff_page count_page(std::int64_t v, bool tiled = false) {
  tiff_page p{static_cast<std::uint32_t>(tc), static_cast<std::uint32_t>(tr), false, tiled, {}};
  for (std::int64_t r = 0; r < tr; ++r)
    for (std::int64_t c = 0; c < tc; ++c) p.values.push_back(synthetic_count(v, r, c));
  return p;
}
tiff_page field_page(double (*f)(std::int64_t, std::int64_t), double add) {
  tiff_page p{static_cast<std::uint32_t>(tc), static_cast<std::uint32_t>(tr), false, false, {}};
  for (std::int64_t r = 0; r < tr; ++r)
    for (std::int64_t c = 0; c < tc; ++c) p.values.push_back(f(r, c) + add);
  return p;
}

struct tiff_scan {
  fs::path dir, flats, dark, geometry_json;
  geometry geom;
};

tiff_scan make_tiff_scan(const std::string& name) {
  tiff_scan s;
  s.dir = temp_dir(name);
  fs::create_directories(s.dir / "proj");
  // p1 ... p12: natural order must put p2 before p10.
  for (std::int64_t v = 0; v < tv; ++v)
    write_tiff((s.dir / "proj" / ("p" + std::to_string(v + 1) + ".tif")).string(), {count_page(v)});
  fs::create_directories(s.dir / "flats");
  write_tiff((s.dir / "flats" / "f_a.tiff").string(), {field_page(synthetic_flat, -4)});
  write_tiff((s.dir / "flats" / "f_b.tiff").string(), {field_page(synthetic_flat, +4)});
  s.dark = s.dir / "dark.tif";
  write_tiff(s.dark.string(), {field_page(synthetic_dark, 0)});
  s.flats = s.dir / "flats";
  s.geom = make_parallel_geometry(tc, tr, 0.2, 0.3, angle_range(0, deg_to_rad(15), tv), {0.4}, {});
  s.geometry_json = s.dir / "geometry.json";
  std::ofstream(s.geometry_json) << geometry_to_json(s.geom);
  return s;
}

io::projection_read_options tiff_options(const tiff_scan& s) {
  io::projection_read_options o;
  o.flat_path = s.flats.string();
  o.dark_path = s.dark.string();
  o.geometry_path = s.geometry_json.string();
  return o;
}

void expect_synthetic(const projection_stack& p, std::int64_t v0 = 0, std::int64_t r0 = 0,
                      std::int64_t c0 = 0) {
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = 0; r < p.rows; ++r)
      for (std::int64_t c = 0; c < p.cols; ++c)
        ASSERT_NEAR(p.at(v, r, c), synthetic_p(v + v0, r + r0, c + c0),
                    count_tolerance(v + v0, r + r0, c + c0))
            << "view " << v << " row " << r << " col " << c;
}

TEST(TiffStack, DirectoryGlobAndMultiPageGiveTheSameScan) {
  const tiff_scan s = make_tiff_scan("tiff_dir");
  const auto files = io::list_tiff_files((s.dir / "proj").string());
  ASSERT_EQ(files.size(), static_cast<std::size_t>(tv));
  EXPECT_EQ(fs::path(files[1]).filename(), "p2.tif");
  EXPECT_EQ(fs::path(files[11]).filename(), "p12.tif");
  const io::loaded_projections d =
      io::read_projections_any((s.dir / "proj").string(), tiff_options(s));
  EXPECT_EQ(d.format, "tiff");
  expect_synthetic(d.projections);
  EXPECT_EQ(d.geometry_json, geometry_to_json(s.geom));
  const io::loaded_projections g =
      io::read_projections_any((s.dir / "proj" / "p*.tif").string(), tiff_options(s));
  EXPECT_EQ(g.projections.data, d.projections.data);
  // Multi-page file, strips and tiles mixed.
  std::vector<tiff_page> pages;
  for (std::int64_t v = 0; v < tv; ++v) pages.push_back(count_page(v, v % 2 == 1));
  const std::string multi = (s.dir / "all.tif").string();
  write_tiff(multi, pages);
  const io::loaded_projections m = io::read_projections_any(multi, tiff_options(s));
  EXPECT_EQ(m.projections.data, d.projections.data);
}

TEST(TiffStack, PartialReadAndBinningWithTiles) {
  const tiff_scan s = make_tiff_scan("tiff_partial");
  std::vector<tiff_page> pages;
  for (std::int64_t v = 0; v < tv; ++v) pages.push_back(count_page(v, true));
  const std::string multi = (s.dir / "tiled.tif").string();
  write_tiff(multi, pages);
  io::projection_read_options o = tiff_options(s);
  o.select = {{3, 5}, {2, 9}, {17, 18}};  // crosses tile borders (16, 32)
  const io::loaded_projections part = io::read_projections_any(multi, o);
  ASSERT_EQ(part.projections.views, 5);
  ASSERT_EQ(part.projections.rows, 9);
  ASSERT_EQ(part.projections.cols, 18);
  expect_synthetic(part.projections, 3, 2, 17);
  expect_same_pixel_centers(*part.geom, s.geom, 3, 2, 17);
  o.bin_rows = 3;
  o.bin_cols = 4;  // 9 x 18 -> 3 x 4 (two columns dropped)
  const io::loaded_projections bin = io::read_projections_any(multi, o);
  ASSERT_EQ(bin.projections.rows, 3);
  ASSERT_EQ(bin.projections.cols, 4);
  for (std::int64_t v = 0; v < 5; ++v)
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 4; ++c) {
        double t = 0;
        for (std::int64_t a = 0; a < 3; ++a)
          for (std::int64_t b = 0; b < 4; ++b)
            t += std::exp(-double(part.projections.at(v, 3 * r + a, 4 * c + b))) / 12;
        EXPECT_NEAR(bin.projections.at(v, r, c), -std::log(t), 1e-5);
      }
  expect_same_pixel_centers(*bin.geom, s.geom, 3, 2, 17, 3, 4);
}

TEST(TiffStack, FloatLineIntegralsWrittenByTheLibrary) {
  projection_stack p(3, 4, 5);
  for (std::size_t i = 0; i < p.data.size(); ++i) p.data[i] = 0.125f * static_cast<float>(i) - 1.0f;
  const fs::path dir = temp_dir("tiff_float");
  io::write_tiff_stack((dir / "li").string(), p);
  const geometry g = make_cone_geometry(5, 4, 1, 1, 100, 200, angle_range(0, 1, 3));
  std::ofstream(dir / "g.json") << geometry_to_json(g);
  io::projection_read_options o;
  o.geometry_path = (dir / "g.json").string();
  const io::loaded_projections f = io::read_projections_any((dir / "li").string(), o);
  EXPECT_EQ(f.projections.data, p.data);  // float32 stored, read as float32
  EXPECT_NE(f.warnings.find("line integrals"), std::string::npos);
  EXPECT_EQ(f.geom->type_name(), "cone");
}

TEST(TiffStack, ErrorsNameTheFile) {
  const tiff_scan s = make_tiff_scan("tiff_errors");
  const std::string proj = (s.dir / "proj").string();
  // No geometry.
  io::projection_read_options o = tiff_options(s);
  o.geometry_path.clear();
  EXPECT_THROW(io::read_projections_any(proj, o), usage_error);
  // Geometry of another detector size.
  const geometry other = make_parallel_geometry(tc + 1, tr, 0.2, 0.3, angle_range(0, 0.1, tv));
  std::ofstream(s.dir / "other.json") << geometry_to_json(other);
  o = tiff_options(s);
  o.geometry_path = (s.dir / "other.json").string();
  expect_error_naming([&] { io::read_projections_any(proj, o); }, "other.json");
  // Integer counts without a flat field.
  o = tiff_options(s);
  o.flat_path.clear();
  expect_error_naming([&] { io::read_projections_any(proj, o); }, proj, "flat");
  // An unreadable TIFF in the stack.
  const std::string bad = (s.dir / "proj" / "p5.tif").string();
  std::ofstream(bad, std::ios::trunc) << "garbage, not a TIFF";
  expect_error_naming([&] { io::read_projections_any(proj, tiff_options(s)); }, "p5.tif");
  // A truncated one (pixel data cut).
  write_tiff(bad, {count_page(4)});
  std::ifstream in(bad, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  // Keep the header and IFD (at the end) but cut the strip: rewrite with the strip offset
  // pointing past the end of a shortened file.
  b.erase(b.begin() + 8 + 400, b.begin() + 8 + tc * tr * 2);
  std::ofstream(bad, std::ios::binary | std::ios::trunc)
      .write(b.data(), static_cast<std::streamsize>(b.size()));
  expect_error_naming([&] { io::read_projections_any(proj, tiff_options(s)); }, "p5.tif");
  // An image of another size.
  tiff_page small = count_page(4);
  small.width = 10;
  small.values.resize(10 * tr);
  write_tiff(bad, {small});
  expect_error_naming([&] { io::read_projections_any(proj, tiff_options(s)); }, "p5.tif", "10x13");
  // Nothing matches.
  expect_error_naming(
      [&] { io::read_projections_any((s.dir / "nothing*.tif").string(), tiff_options(s)); },
      "nothing*.tif");
}

TEST(DescribeAny, ProjectionFiles) {
  const std::string d = io::describe_any(tooth);
  EXPECT_NE(d.find("dxchange"), std::string::npos) << d;
  EXPECT_NE(d.find("views 181, rows 2, cols 640"), std::string::npos) << d;
  EXPECT_NE(d.find("flat fields 10, dark fields 10"), std::string::npos) << d;
  const tiff_scan s = make_tiff_scan("tiff_describe");
  const std::string t = io::describe_any((s.dir / "proj").string());
  EXPECT_NE(t.find("files 12 (p1.tif ... p12.tif)"), std::string::npos) << t;
}

}  // namespace
}  // namespace ctforge

// ---- row bands (slab-wise and distributed reconstruction) ----------------------------------------

namespace ctforge {
namespace {

/// Rows [r0, r1) of every view of `p`.
projection_stack rows_of(const projection_stack& p, std::int64_t r0, std::int64_t r1) {
  projection_stack out(p.views, r1 - r0, p.cols);
  for (std::int64_t v = 0; v < p.views; ++v)
    std::copy_n(p.view(v) + r0 * p.cols, (r1 - r0) * p.cols, out.view(v));
  return out;
}

struct band_case {
  const char* name;
  bool transpose, flip_u, flip_v;
  std::int64_t bin;
};

class RowBands : public ::testing::TestWithParam<band_case> {};

// A band read with row_band_options holds exactly the rows of the whole read, whatever the
// binning and orientation: the real tooth's raw counts with its flats and darks, normalised
// per pixel (a band off by one stored row, or flipped the wrong way, differs by far more than
// 0: neighbouring rows of the tooth differ).
TEST_P(RowBands, BandReadEqualsRowsOfTheWholeRead) {
  const band_case c = GetParam();
  // The real tooth (raw counts, flats, darks; few rows) and a native file of 23 x 17 pixels
  // holding a different value in every pixel.
  const fs::path dir = temp_dir(std::string("bands_") + c.name);
  const std::string native = (dir / "p.h5").string();
  {
    projection_stack p(5, 23, 17);
    for (std::size_t i = 0; i < p.data.size(); ++i) p.data[i] = static_cast<float>(i) * 0.25f;
    io::write_projections(native, p,
                          make_cone_geometry(17, 23, 1, 1, 300, 600, angle_range(0, 0.3, 5)));
  }
  for (const std::string& file : {tooth, native}) {
    io::projection_read_options o;
    if (file == tooth) {
      o.select.views = {0, 7};
      o.select.cols = {40, 301};  // odd: binning drops a remainder
    } else {
      o.select.rows = {1, 21};
      if (c.transpose) {  // the geometry describes the transposed detector
        o.geometry_path = (dir / "transposed.json").string();
        std::ofstream(o.geometry_path) << geometry_to_json(
            make_cone_geometry(23, 17, 1, 1, 300, 600, angle_range(0, 0.3, 5)));
      }
    }
    o.transpose = c.transpose;
    o.flip_u = c.flip_u;
    o.flip_v = c.flip_v;
    o.bin_rows = o.bin_cols = c.bin;
    const io::loaded_projections whole = io::read_projections_any(file, o);
    const geometry g = io::read_projection_geometry(file, o);
    EXPECT_EQ(geometry_to_json(g), whole.geometry_json);
    const std::int64_t rows = whole.projections.rows;
    ASSERT_EQ(g.rows, rows);
    for (const auto& [r0, r1] :
         {std::pair<std::int64_t, std::int64_t>{0, 1}, {0, rows},
          {rows / 3, std::min(rows, rows / 3 + 5)}, {rows - 1, rows}}) {
      const io::loaded_projections band =
          io::read_projections_any(file, io::row_band_options(o, rows, r0, r1));
      ASSERT_EQ(band.projections.rows, r1 - r0);
      EXPECT_EQ(band.projections.data, rows_of(whole.projections, r0, r1).data)
          << file << " " << c.name << " rows " << r0 << ".." << r1;
      // The band's geometry is the whole one cropped to those rows.
      io::detector_selection sel;
      sel.rows = {r0, r1 - r0};
      const geometry expected = io::select_geometry(g, sel, 1, 1);
      const vec3 a = pixel_center(*band.geom, 3, 2, 0), b = pixel_center(expected, 3, 2, 0);
      EXPECT_NEAR(a.x, b.x, 1e-9);
      EXPECT_NEAR(a.z, b.z, 1e-9);
    }
    // Negative control: the neighbouring band is not the same data.
    if (rows >= 3) {
      const auto band = io::read_projections_any(file, io::row_band_options(o, rows, 1, 3));
      EXPECT_NE(band.projections.data, rows_of(whole.projections, 0, 2).data);
    }
    expect_error_naming([&] { (void)io::row_band_options(o, rows, 2, rows + 1); }, "rows");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RowBands,
                         ::testing::Values(band_case{"plain", false, false, false, 1},
                                           band_case{"flip_v", false, false, true, 1},
                                           band_case{"binned_flipped", false, true, true, 2},
                                           band_case{"transposed", true, false, false, 1},
                                           band_case{"transposed_binned_flip_v", true, true, true, 2}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ctforge
