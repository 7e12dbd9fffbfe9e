// Helical scans on the command line: simulate, info (pitch, coverage), recon with the default
// algorithm and grid against the voxelized phantom, and the refusals (a pitch the rows cannot
// cover, FDK on a helix, options of other methods).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "ctforge/io.hpp"
#include "ctforge/metrics.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;

class HelicalCli : public ctforge::testing::cli_dir_test {
 protected:
  HelicalCli() : cli_dir_test("helical_cli") {}
  // A helix of 16 rows (8 mm at the axis) over five turns, the pitch factor given.
  void write_geometry(const std::string& name, double pitch_factor) const {
    std::ofstream(dir_ / name) << R"({"type": "helical", "detector": {"cols": 96, "rows": 16,
      "pixel_mm": [1.0, 1.0], "shape": "cylindrical"}, "source_to_isocenter_mm": 300,
      "source_to_detector_mm": 600, "angles_deg": {"start": 0, "step": 2, "count": 900},
      "pitch_factor": )" << pitch_factor
                               << R"(, "z_start_mm": -20})";
  }
};

TEST_F(HelicalCli, SimulateInfoAndReconstructWithTheDefaults) {
  write_geometry("helix.json", 1.2);
  auto r =
      run("simulate --phantom shepp-logan --phantom-size 44 --geometry helix.json -o p.h5 "
          "--truth truth.h5 --size-xyz 48,48,24 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("info p.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("helical, 900 views, cylindrical detector 96 cols x 16 rows"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("pitch factor 1.2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reconstructable z"), std::string::npos) << r.output;
  // The default algorithm and, along z, the covered heights in 24 slices (--size-xyz).
  r = run("recon p.h5 -o v.h5 --size-xyz 48,48,24 --backend cpu --threads 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("helical-fbp"), std::string::npos) << r.output;
  r = run("compare v.h5 truth.h5 --peak 0.1");
  ASSERT_EQ(r.status, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(PSNR: ([0-9.]+) dB)"))) << r.output;
  // The truth's grid is the recon's (same defaults): the C++ accuracy tests' floor, 26 dB
  // (measured 28.0 here, over the whole grid, corners beyond the fan included).
  EXPECT_GT(std::stod(m[1]), 26) << r.output;
}

// --memory-limit below what the whole scan needs: units of a few planes, each with the views
// that reach it, write the volume slab by slab; it equals the one-shot volume to rounding.
TEST_F(HelicalCli, MemoryLimitBelowTheWholeScan) {
  write_geometry("helix.json", 1.2);
  auto r =
      run("simulate --phantom shepp-logan --phantom-size 44 --geometry helix.json -o p.h5 "
          "--quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string grid = " --size-xyz 48,48,40 --backend cpu --threads 2 --quiet";
  r = run("recon p.h5 -o whole.h5" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  // The projections alone are 900 x 16 x 96 floats (5.5 MB), twice that with their filtered
  // copy; 4 MB hold a unit of a few planes and the views that reach it.
  r = run("recon p.h5 -o units.h5 --memory-limit 4M" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  const ctforge::volume a = ctforge::io::read_volume((dir_ / "units.h5").string());
  const ctforge::volume b = ctforge::io::read_volume((dir_ / "whole.h5").string());
  ASSERT_EQ(a.data.size(), b.data.size());
  float peak = 0, worst = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    peak = std::max(peak, std::abs(b.data[i]));
    worst = std::max(worst, std::abs(a.data[i] - b.data[i]));
  }
  ASSERT_GT(peak, 0);
  EXPECT_LE(worst, 1e-5 * peak);
  // A limit that does not hold one plane and its views is refused naming the option.
  r = run("recon p.h5 -o tiny.h5 --memory-limit 200K" + grid);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--memory-limit"), std::string::npos) << r.output;
}

TEST_F(HelicalCli, RefusesWhatHelicalFbpCannotDo) {
  write_geometry("steep.json", 2.5);
  auto r =
      run("simulate --phantom shepp-logan --phantom-size 44 --geometry steep.json -o s.h5 "
          "--quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon s.h5 -o v.h5 --size-xyz 16,16,4 --origin 0,0,0 --spacing 1 --backend cpu");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("pitch factor 2.5"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "v.h5"));
  write_geometry("helix.json", 1.0);
  r =
      run("simulate --phantom shepp-logan --phantom-size 44 --geometry helix.json -o p.h5 "
          "--quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon p.h5 -o v.h5 --algorithm fdk --backend cpu");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("helical-fbp"), std::string::npos) << r.output;
  r = run("recon p.h5 -o v.h5 --helical-q 1.5 --backend cpu");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--helical-q"), std::string::npos) << r.output;
  r = run("recon p.h5 -o v.h5 --displaced-detector on --backend cpu");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--displaced-detector: does not apply to --algorithm helical-fbp"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "v.h5"));
}

}  // namespace
