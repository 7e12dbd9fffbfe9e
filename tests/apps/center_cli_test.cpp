// `ctforge center`: the estimate with its confidence, the labelled montage of candidate centres,
// option errors (exit 2 naming --range) and atomic output; `recon --center-of-rotation auto`
// printing the confidence.
#include <gtest/gtest.h>
#include <png.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "ctforge/formats.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/io.hpp"
#include "ctforge/volume.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;

namespace {

const std::string tooth = std::string(CTFORGE_DATA_DIR) + "/dxchange/tooth.h5";

class CenterCli : public ctforge::testing::cli_dir_test {
 protected:
  CenterCli() : cli_dir_test("center_cli") {}
};

struct png_info {
  bool ok = false;
  std::uint32_t width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};

/// Reads a PNG as 8-bit grey with libpng (fails when it is not a complete, valid PNG).
png_info read_png(const fs::path& path) {
  png_info out;
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) return out;
  image.format = PNG_FORMAT_GRAY;
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  out.ok = png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr) != 0;
  out.width = image.width;
  out.height = image.height;
  png_image_free(&image);
  return out;
}

/// The column printed in "center of rotation: column X (... confidence C ...".
std::pair<double, double> parse_estimate(const std::string& text) {
  const std::regex line(R"(center of rotation: column ([-0-9.]+) \(.*confidence ([0-9.]+))");
  std::smatch m;
  if (!std::regex_search(text, m, line)) return {-1e9, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

TEST_F(CenterCli, EstimateWithConfidenceOnTheTooth) {
  const auto r = run("center '" + tooth + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto [col, conf] = parse_estimate(r.output);
  EXPECT_NEAR(col, 296.0, 0.5) << r.output;  // data/README.md: 296 +- 0.5
  EXPECT_GE(conf, ctforge::low_center_confidence) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
}

TEST_F(CenterCli, MontageHasOneLabelledTilePerCandidate) {
  // 290, 291, ..., 302: 13 candidates -> 4 x 4 grid of 64-pixel tiles.
  const auto r = run("center '" + tooth + "' --range 290:302:1 --size 64 --row 0 -o m.png");
  ASSERT_EQ(r.status, 0) << r.output;
  const png_info p = read_png(dir_ / "m.png");
  ASSERT_TRUE(p.ok);
  const auto [across, down] = ctforge::io::montage_grid(13);
  EXPECT_EQ(across, 4);
  EXPECT_EQ(down, 4);
  const std::int64_t g = ctforge::io::montage_gap, lab = ctforge::io::montage_label_height;
  EXPECT_EQ(p.width, g + across * (64 + g));
  EXPECT_EQ(p.height, g + down * (lab + 64 + g));
  // Every tile's label band holds white digit pixels; the empty grid cells (13 .. 15) none.
  for (std::int64_t k = 0; k < across * down; ++k) {
    const std::int64_t x0 = g + (k % across) * (64 + g), y0 = g + (k / across) * (lab + 64 + g);
    int white = 0;
    for (std::int64_t y = y0; y < y0 + lab; ++y)
      for (std::int64_t x = x0; x < x0 + 64; ++x)
        white += p.pixels[static_cast<std::size_t>(y * p.width + x)] == 255;
    if (k < 13)
      EXPECT_GT(white, 20) << "tile " << k;  // "290.00": six glyphs
    else
      EXPECT_EQ(white, 0) << "tile " << k;
  }
  EXPECT_TRUE(ctforge::testing::leftover_temporaries(dir_).empty());
}

TEST_F(CenterCli, WithoutRangeTheMontageSurroundsTheEstimate) {
  const auto r = run("center '" + tooth + "' --size 32 -o around.png");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NEAR(parse_estimate(r.output).first, 296.0, 0.5) << r.output;
  const png_info p = read_png(dir_ / "around.png");
  ASSERT_TRUE(p.ok);
  const auto [across, down] = ctforge::io::montage_grid(21);  // 21 candidates 0.5 px apart
  EXPECT_EQ(p.width, ctforge::io::montage_gap + across * (32 + ctforge::io::montage_gap));
}

TEST_F(CenterCli, BadRangesExit2NamingTheOption) {
  for (const std::string bad : {"290:300:0", "290:300:-1", "300:290:1", "0:639:1", "600:700:1",
                                "-20:5:1", "290:300", "a:b:c", "290:300:1:2"}) {
    const auto r = run("center '" + tooth + "' --range " + bad + " -o m.png");
    EXPECT_EQ(r.status, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("--range"), std::string::npos) << bad << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "m.png")) << bad;
  }
  const auto no_output = run("center '" + tooth + "' --range 290:300:1");
  EXPECT_EQ(no_output.status, 2) << no_output.output;
  EXPECT_NE(no_output.output.find("--range"), std::string::npos) << no_output.output;
  const auto bad_row = run("center '" + tooth + "' --row 5 --range 290:300:1 -o m.png");
  EXPECT_EQ(bad_row.status, 2) << bad_row.output;
  EXPECT_NE(bad_row.output.find("--row"), std::string::npos) << bad_row.output;
  const auto missing = run("center missing.h5");
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("missing.h5"), std::string::npos) << missing.output;
}

TEST_F(CenterCli, FailedWriteLeavesNoPartialFile) {
  // An earlier montage stays as it was when the new one cannot be written (8 KiB file limit:
  // the 15 x 128-pixel tiles need far more).
  std::ofstream(dir_ / "m.png") << "earlier";
  const auto r = run("center '" + tooth + "' --range 290:304:1 --size 128 --row 0 -o m.png", 8);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("m.png"), std::string::npos) << r.output;
  std::ifstream in(dir_ / "m.png");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "earlier");
  EXPECT_TRUE(ctforge::testing::leftover_temporaries(dir_).empty());
}

TEST_F(CenterCli, ReconAutoPrintsTheConfidence) {
  const auto r = run("recon '" + tooth + "' -o t.h5 --center-of-rotation auto --size 64 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto [col, conf] = parse_estimate(r.output);
  EXPECT_NEAR(col, 296.0, 0.5) << r.output;
  EXPECT_GE(conf, ctforge::low_center_confidence) << r.output;
  EXPECT_EQ(r.output.find("low confidence"), std::string::npos) << r.output;
  // The scan covers 180 degrees with the axis 23.6 columns off the middle: the ring beyond the
  // overlap is seen from one side only, which recon says with its radii.
  EXPECT_NE(r.output.find("warning: the detector is displaced by 23.6"), std::string::npos)
      << r.output;
}

TEST_F(CenterCli, LowConfidenceWarnsOnStderr) {
  // Negative control: pure noise has no rotation centre; both commands must say so.
  const ctforge::geometry g = ctforge::make_parallel_geometry(
      160, 1, 0.5, 0.5, ctforge::angle_range(0, ctforge::deg_to_rad(1), 180));
  ctforge::projection_stack noise(180, 1, 160);
  std::uint64_t state = 99;
  for (float& x : noise.data) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<float>(state >> 40) / static_cast<float>(1 << 24);
  }
  ctforge::io::write_projections((dir_ / "noise.h5").string(), noise, g);
  for (const std::string cmd :
       {"center noise.h5", "recon noise.h5 -o v.h5 --center-of-rotation auto --quiet"}) {
    const auto r = run(cmd);
    ASSERT_EQ(r.status, 0) << cmd << ": " << r.output;
    EXPECT_LT(parse_estimate(r.output).second, ctforge::low_center_confidence) << r.output;
    EXPECT_NE(r.output.find("warning"), std::string::npos) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("ctforge center"), std::string::npos) << cmd << ": " << r.output;
  }
}

}  // namespace
