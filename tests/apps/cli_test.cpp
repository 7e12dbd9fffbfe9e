// The `ctforge` executable, run as a user would (through the shell) in a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "ctforge/geometry.hpp"

#if defined(CTFORGE_WITH_CUDA)
#include "cuda/cuda_api.hpp"
#endif

#include "test_support.hpp"

namespace fs = std::filesystem;

namespace {

using result = ctforge::testing::cli_result;

/// 60 views over 360 deg, 48 x 40 pixels of 3.2 mm, magnification 2: the field of view at the
/// isocentre is 76.8 x 64 mm, so the 64 mm Shepp-Logan (outer ellipsoid 44 x 59 x 58 mm) is
/// never truncated.
const std::string k_cone = ctforge::testing::cone_json(48, 40, 3.2, 6, 60);

class Cli : public ctforge::testing::cli_dir_test {
 protected:
  Cli() : cli_dir_test("cli") {}
  void SetUp() override {
    cli_dir_test::SetUp();
    write("cone.json", k_cone);
  }

  bool exists(const std::string& name) const { return fs::exists(dir_ / name); }
  /// True when the directory holds no temporary left over from an atomic write.
  bool no_part_files() const { return ctforge::testing::leftover_temporaries(dir_).empty(); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Simulates the tiny cone scan (with truth) once per test that needs it.
  void simulate(const std::string& extra = "") const {
    const result r =
        run("simulate --phantom shepp-logan --phantom-size 64 --geometry cone.json "
            "-o proj.h5 --truth truth.h5 --size 32 --spacing 2 " +
            extra);
    ASSERT_EQ(r.status, 0) << r.output;
  }
};

/// "NAME: value" lines of `ctforge compare`.
std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> m;
  const std::regex line(R"((MAE|RMSE|PSNR|correlation): ([-+0-9.eE]+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator();
       ++it)
    m[(*it)[1]] = std::stod((*it)[2]);
  return m;
}

/// Width and height from the IHDR chunk (bytes 16..23, big endian).
std::pair<std::uint32_t, std::uint32_t> png_size(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::array<unsigned char, 24> h{};
  in.read(reinterpret_cast<char*>(h.data()), h.size());
  EXPECT_TRUE(in.good()) << file;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h.data()) + 12, 4), "IHDR");
  auto be = [&](int o) {
    return (std::uint32_t(h[o]) << 24) | (std::uint32_t(h[o + 1]) << 16) |
           (std::uint32_t(h[o + 2]) << 8) | std::uint32_t(h[o + 3]);
  };
  return {be(16), be(20)};
}

}  // namespace

TEST_F(Cli, Version) {
  const result r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(^ctforge \d+\.\d+\.\d+)"))) << r.output;
}

TEST_F(Cli, HelpListsSubcommandsAndOptions) {
  result r = run("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"simulate", "recon", "info", "compare"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  r = run("recon --help");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"--size-xyz", "--spacing", "--origin", "--filter", "--cutoff", "--backend",
                        "--preview", "--reference", "hann"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  r = run("simulate --help");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"--phantom", "--noise-i0", "--truth", "--supersample"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  EXPECT_EQ(run("info --help").status, 0);
  EXPECT_EQ(run("compare --help").status, 0);
}

// simulate -> recon -> info -> compare on a 32^3 problem with 60 views.
TEST_F(Cli, EndToEnd) {
  simulate("--noise-i0 1e5 --seed 3");
  EXPECT_TRUE(exists("proj.h5"));
  EXPECT_TRUE(exists("truth.h5"));

  result r = run("recon proj.h5 -o vol.h5 --size 32 --spacing 2 --filter hann --preview vol.png");
  ASSERT_EQ(r.status, 0) << r.output;
  // stderr is not a terminal here: no progress bar, a one-line summary naming the output.
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recon: wrote vol.h5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fdk"), std::string::npos) << "cone beam defaults to FDK\n" << r.output;
  EXPECT_TRUE(no_part_files());
  // Preview: axial 32 + gap 3 + coronal 32 + gap 3 + sagittal 32 wide, 32 high.
  EXPECT_EQ(png_size(path("vol.png")), std::make_pair(102u, 32u));

  r = run("info vol.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("/volume: float32 [32][32][32] (z, y, x)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("@spacing_mm = [2, 2, 2]"), std::string::npos) << r.output;
  r = run("info proj.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("/projections: float32 [60][40][48]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cone, 60 views"), std::string::npos) << r.output;

  // Sanity of the metrics themselves: a volume against itself is exact.
  r = run("compare truth.h5 truth.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  auto self = parse_metrics(r.output);
  EXPECT_EQ(self["MAE"], 0.0);
  EXPECT_EQ(self["correlation"], 1.0);

  r = run("compare vol.h5 truth.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  auto m = parse_metrics(r.output);
  ASSERT_EQ(m.size(), 4u) << r.output;
  // Measured on this problem: MAE 0.0024, correlation 0.93 (hann, I0 1e5). The phantom's mean
  // density is ~0.012/mm, so an empty or mis-oriented reconstruction scores MAE >= ~0.01 and
  // correlation < 0.5 (a truncated detector gave 0.28). The thresholds leave 2x headroom for
  // the noise and 60-view streaks while failing any geometric or scaling error.
  EXPECT_LT(m["MAE"], 0.005) << r.output;
  EXPECT_GT(m["correlation"], 0.85) << r.output;
  EXPECT_GT(m["PSNR"], 18.0) << r.output;
  EXPECT_LE(m["MAE"], m["RMSE"]) << "MAE <= RMSE always";
}

// A cylindrical detector from the command line: the geometry JSON's "shape" travels through
// simulate, the projection file and recon, and info names it. FDK of the curved data scores as
// the flat scan of EndToEnd does without noise (measured: curved MAE 0.00260, correlation
// 0.955; the same scan on a flat detector 0.00259, 0.955). This small fan (+-4.4 deg, 2 mm
// voxels) cannot tell curved from flat; the recon tests (tests/recon/cylindrical_test.cpp)
// do. The RTK export round-trips the shape; ASTRA export refuses it.
TEST_F(Cli, CylindricalDetectorEndToEnd) {
  // 48 columns of 3.2 mm along an arc of radius 1000 mm about the source: as k_cone, curved.
  std::string cyl = k_cone;
  cyl.replace(cyl.find("\"cols\""), 0, "\"shape\": \"cylindrical\", ");
  write("cyl.json", cyl);
  result r =
      run("simulate --phantom shepp-logan --phantom-size 64 --geometry cyl.json -o proj.h5 "
          "--truth truth.h5 --size 32 --spacing 2");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("info proj.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cone, 60 views, cylindrical detector 48 cols x 40 rows"),
            std::string::npos)
      << r.output;
  r = run("recon proj.h5 -o vol.h5 --size 32 --spacing 2");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("compare vol.h5 truth.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto m = parse_metrics(r.output);
  EXPECT_LT(m.at("MAE"), 0.004) << r.output;
  EXPECT_GT(m.at("correlation"), 0.9) << r.output;
  // RTK XML keeps the shape (RadiusCylindricalDetector = SDD); ASTRA vectors cannot.
  r = run("convert cyl.json cyl.xml");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("convert cyl.xml back.json --detector 48,40 --pixel 3.2");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(path("back.json"));
  const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(back.find("\"shape\":\"cylindrical\""), std::string::npos) << back;
  r = run("convert cyl.json cyl.txt");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("detector.shape"), std::string::npos) << r.output;
}

// SIRT from the command line: --algorithm sirt with its options, named in the summary line;
// on this noise-free 60-view scan 30 non-negative iterations beat FDK (measured: SIRT MAE
// 0.0012, correlation 0.974; FDK ram-lak 0.0026, 0.955). A vector geometry (here the orbit
// turned into a helix) defaults to SIRT, which FDK cannot reconstruct. Bad SIRT options exit 2.
TEST_F(Cli, SirtIterativeReconstruction) {
  simulate("--quiet");
  result r =
      run("recon proj.h5 -o sirt.h5 --size 32 --spacing 2 --algorithm sirt --iterations 30 "
          "--nonnegative --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("sirt cpu 30 iterations, relaxation 1, non-negative"), std::string::npos)
      << r.output;
  r = run("compare sirt.h5 truth.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto m = parse_metrics(r.output);
  EXPECT_LT(m.at("MAE"), 0.0025) << r.output;
  EXPECT_GT(m.at("correlation"), 0.96) << r.output;

  std::vector<ctforge::view_vectors> views = ctforge::load_geometry(path("cone.json")).views;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const ctforge::vec3 dz{0, 0, 0.2 * static_cast<double>(i) - 6.0};
    views[i].source = views[i].source + dz;
    views[i].detector_center = views[i].detector_center + dz;
  }
  write("helix.json", ctforge::geometry_to_json(ctforge::make_vec_geometry(
                          ctforge::beam_kind::cone, 48, 40, std::move(views))));
  r =
      run("simulate --phantom shepp-logan --phantom-size 64 --geometry helix.json -o helix.h5 "
          "--quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon helix.h5 -o helix_vol.h5 --size 32 --spacing 2 --iterations 20 --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("sirt cpu 20 iterations"), std::string::npos) << r.output;
  r = run("compare helix_vol.h5 truth.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_GT(parse_metrics(r.output).at("correlation"), 0.9) << r.output;
  r = run("recon helix.h5 -o fdk.h5 --size 32 --algorithm fdk --backend cpu");
  EXPECT_EQ(r.status, 2) << r.output;

  for (const char* bad : {"--iterations 0", "--relaxation 2", "--relaxation -1"}) {
    r = run(std::string("recon proj.h5 -o bad.h5 --size 32 --algorithm sirt --backend cpu ") + bad);
    EXPECT_EQ(r.status, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(bad).substr(0, std::string(bad).find(' '))),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(exists("bad.h5"));
  }
  EXPECT_TRUE(no_part_files());
}

TEST_F(Cli, GridOptions) {
  simulate("--quiet");
  ASSERT_EQ(
      run("recon proj.h5 -o a.h5 --size-xyz 8,6,4 --spacing 1,2,3 --origin -1,2,5 --quiet").status,
      0);
  result r = run("info a.h5");
  EXPECT_NE(r.output.find("[4][6][8]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("@spacing_mm = [1, 2, 3]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("@origin_mm = [-1, 2, 5]"), std::string::npos) << r.output;
  // Default: detector cols x cols x rows voxels of pixel pitch * SID / SDD = 3.2 / 2 mm,
  // centred: origin = -(n - 1) / 2 * spacing = -37.6 (x, y), -31.2 (z).
  ASSERT_EQ(run("recon proj.h5 -o b.h5 --quiet").status, 0);
  r = run("info b.h5");
  EXPECT_NE(r.output.find("[40][48][48]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("@spacing_mm = [1.6, 1.6, 1.6]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("@origin_mm = [-37.6, -37.6, -31.2]"), std::string::npos) << r.output;
  // --size without --spacing keeps the field of view: 76.8 mm / 16 = 4.8 mm in x and y,
  // 64 mm / 16 = 4 mm in z.
  ASSERT_EQ(run("recon proj.h5 -o c.h5 --size 16 --quiet").status, 0);
  r = run("info c.h5");
  EXPECT_NE(r.output.find("@spacing_mm = [4.8, 4.8, 4]"), std::string::npos) << r.output;
  EXPECT_EQ(run("recon proj.h5 -o d.h5 --size 8 --size-xyz 8,8,8").status, 2)
      << "mutually exclusive";
}

TEST_F(Cli, QuietPrintsNothing) {
  simulate("--quiet");
  const result r = run("recon proj.h5 -o vol.h5 --size 16 --spacing 4 --quiet");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "");
  EXPECT_TRUE(exists("vol.h5"));
}

// Reference path and fast path agree closely (both FDK with the same weights); FBP is chosen for
// a parallel geometry; a fan beam (rows = 1) reconstructs into one slice by default; a single
// view simulates.
TEST_F(Cli, ReferenceParallelFanSingleView) {
  simulate();
  ASSERT_EQ(run("recon proj.h5 -o fast.h5 --size 16 --spacing 4 --threads 2").status, 0);
  ASSERT_EQ(run("recon proj.h5 -o ref.h5 --size 16 --spacing 4 --reference").status, 0);
  auto m = parse_metrics(run("compare fast.h5 ref.h5").output);
  // Single precision vs double accumulation over 60 views: relative error ~1e-6 of values ~0.1.
  EXPECT_LT(m["MAE"], 1e-5);
  EXPECT_GT(m["correlation"], 0.99999);

  write("par.json", R"({"type": "parallel", "detector": {"cols": 33, "rows": 3, "pixel_mm": [2, 2]},
                         "angles_deg": {"start": 0, "step": 4, "count": 45}})");
  result r = run("simulate --phantom shepp-logan --phantom-size 64 --geometry par.json -o par.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon par.h5 -o par_vol.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("fbp"), std::string::npos) << "parallel beam defaults to FBP\n"
                                                     << r.output;
  // Default grid: cols x cols x rows voxels of the pixel pitch (parallel: no magnification).
  r = run("info par_vol.h5");
  EXPECT_NE(r.output.find("[3][33][33]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("@spacing_mm = [2, 2, 2]"), std::string::npos) << r.output;

  write("fan.json", R"({"type": "cone", "detector": {"cols": 41, "rows": 1, "pixel_mm": [3, 3]},
                         "source_to_isocenter_mm": 400, "source_to_detector_mm": 600,
                         "angles_deg": {"start": 0, "step": 3, "count": 120}})");
  ASSERT_EQ(
      run("simulate --phantom shepp-logan --phantom-size 64 --geometry fan.json -o fan.h5").status,
      0);
  r = run("recon fan.h5 -o fan_vol.h5 --size 24");
  ASSERT_EQ(r.status, 0) << r.output;
  // --size N on a single-row detector: N x N x 1, spacing = field of view / N = 41*3/1.5/24 mm.
  r = run("info fan_vol.h5");
  EXPECT_NE(r.output.find("[1][24][24]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("@spacing_mm = [3.41667, 3.41667, 2]"), std::string::npos) << r.output;

  write("one.json", R"({"type": "cone", "detector": {"cols": 7, "rows": 5, "pixel_mm": [1, 1]},
                         "source_to_isocenter_mm": 100, "source_to_detector_mm": 150,
                         "angles_deg": [30]})");
  ASSERT_EQ(
      run("simulate --phantom shepp-logan --phantom-size 20 --geometry one.json -o one.h5").status,
      0);
  r = run("info one.h5");
  EXPECT_NE(r.output.find("[1][5][7]"), std::string::npos) << r.output;
}

// --displaced-detector auto|on|off and --offset-transition: accepted by fbp and fdk (off on a
// displaced detector warns that it truncates; not on a centred one), refused by the iterative
// methods (exit 2 naming the option), bad values exit 2 naming the option; nothing is written.
TEST_F(Cli, DisplacedDetectorOptions) {
  // 41 pixels of 2 mm displaced by 5.5 pixels (11 mm): displaced by the automatic rule.
  write("off.json", R"({"type": "parallel", "detector": {"cols": 41, "rows": 1, "pixel_mm": [2, 2],
                         "offset_mm": [11, 0]}, "angles_deg": {"start": 0, "step": 4, "count": 90}})");
  result r = run("simulate --phantom shepp-logan --phantom-size 50 --geometry off.json -o off.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  simulate();
  const std::string warning = "warning: --displaced-detector off";
  for (const std::string& args :
       {"off.h5 --displaced-detector off", "off.h5 --displaced-detector on --offset-transition 4",
        "off.h5 --displaced-detector auto --offset-transition 1000", "off.h5 --algorithm fbp",
        "proj.h5 --displaced-detector off",
        "proj.h5 --algorithm fdk --displaced-detector on "
        "--offset-transition 2.5"}) {
    r = run("recon " + args + " -o v.h5 --size 16 --threads 2");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    const bool warns = args.starts_with("off.h5 --displaced-detector off");
    EXPECT_EQ(r.output.find(warning) != std::string::npos, warns) << args << "\n" << r.output;
    EXPECT_TRUE(exists("v.h5")) << args;
    fs::remove(dir_ / "v.h5");
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--algorithm sirt --displaced-detector off", "--displaced-detector"},
      {"--algorithm sirt --offset-transition 8", "--offset-transition"},
      {"--algorithm cgls --displaced-detector auto", "--displaced-detector"},
      {"--displaced-detector maybe", "--displaced-detector"},
      {"--displaced-detector", "--displaced-detector"},
      {"--offset-transition 0.5", "--offset-transition"},
      {"--offset-transition -4", "--offset-transition"},
      {"--offset-transition nan", "--offset-transition"},
      {"--offset-transition abc", "--offset-transition"},
  };
  for (const auto& [args, name] : bad) {
    r = run("recon off.h5 -o bad.h5 --size 16 " + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(exists("bad.h5")) << args;
  }
  r = run("recon --help");
  EXPECT_NE(r.output.find("--displaced-detector"), std::string::npos);
  EXPECT_NE(r.output.find("--offset-transition"), std::string::npos);
}

// A displaced detector on a short scan: recon reconstructs (exit 0) and warns on stderr, even
// with --quiet, with the radius beyond which the data are incomplete and the fraction of those
// lines measured; a displaced full scan and a centred short scan do not warn. Fan beam, 64
// pixels of 2 mm, SID 500, SDD 1000, 30 mm offset: the overlap reaches 63 - 30 = 33 mm on the
// detector, 500 sin(atan(33 / 1000)) = 16.5 mm at the axis, the wide side 93 mm, 46.3 mm.
TEST_F(Cli, DisplacedShortScanWarns) {
  const auto scan = [&](const std::string& name, int offset, int views) {
    write(name + ".json", R"({"type": "cone", "detector": {"cols": 64, "rows": 1,
                             "pixel_mm": [2, 2], "offset_mm": [)" +
                              std::to_string(offset) + R"(, 0]},
                             "source_to_isocenter_mm": 500, "source_to_detector_mm": 1000,
                             "angles_deg": {"start": 0, "step": 2, "count": )" +
                              std::to_string(views) + "}}");
    const result r = run("simulate --phantom shepp-logan --phantom-size 30 --geometry " + name +
                         ".json -o " + name + ".h5");
    ASSERT_EQ(r.status, 0) << r.output;
  };
  scan("short", 30, 110);  // 220 deg: over 180 + fan (2 x atan(93 / 1000) = 10.6 deg)
  scan("full", 30, 180);
  scan("centred", 0, 110);
  const std::string warning =
      "warning: the detector is displaced by 30.00 mm and the scan "
      "covers 220.0 deg";
  for (const std::string& args : {"short.h5", "short.h5 --quiet", "full.h5", "centred.h5",
                                  "short.h5 --displaced-detector off"}) {
    const result r = run("recon " + args + " -o v.h5 --size 16 --threads 2");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    EXPECT_TRUE(exists("v.h5")) << args;
    fs::remove(dir_ / "v.h5");
    const bool warns = args == "short.h5" || args == "short.h5 --quiet";
    EXPECT_EQ(r.output.find(warning) != std::string::npos, warns) << args << "\n" << r.output;
    if (!warns) continue;
    for (const char* number :
         {"farther than 16.5 mm from the rotation axis", "field's edge at 46.3 mm",
          "measures 61% of those lines", "within 16.5 mm of the axis is complete"})
      EXPECT_NE(r.output.find(number), std::string::npos) << number << "\n" << r.output;
  }
}

TEST_F(Cli, PhantomFromJsonFile) {
  // A single ball of density 0.02/mm, radius 10 mm, on the central ray: the central pixel of
  // every view sees a chord of 20 mm, i.e. a line integral of 0.4 (the max of /projections).
  write("ball.json", R"({"ellipsoids": [{"center": [0, 0, 0], "semi_axes": [10, 10, 10],
                                          "density": 0.02}]})");
  write("g.json", R"({"type": "parallel", "detector": {"cols": 5, "rows": 3, "pixel_mm": [1, 1]},
                       "angles_deg": {"start": 0, "step": 90, "count": 2}})");
  const result r =
      run("simulate --phantom ball.json --geometry g.json -o b.h5 --quiet && "
          "'" +
          std::string(CTFORGE_CLI_PATH) + "' info b.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("max 0.4,"), std::string::npos) << r.output;
}

// ---- failures: exit status, message, and no output left behind ----------------------------

TEST_F(Cli, UnknownOptionIsUsageError) {
  simulate();
  const result r = run("recon proj.h5 -o vol.h5 --bogus 3");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
  EXPECT_FALSE(exists("vol.h5"));
  EXPECT_EQ(run("").status, 2) << "a subcommand is required";
  EXPECT_EQ(run("frobnicate").status, 2);
  EXPECT_EQ(run("recon proj.h5").status, 2) << "-o is required";
  EXPECT_EQ(run("recon proj.h5 -o vol.h5 --filter wiener").status, 2);
  EXPECT_FALSE(exists("vol.h5"));
}

TEST_F(Cli, MissingInputIsRuntimeError) {
  const result r = run("recon missing.h5 -o vol.h5");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("ctforge: error: missing.h5: no such file"), std::string::npos)
      << r.output;
  EXPECT_FALSE(exists("vol.h5"));
  EXPECT_TRUE(no_part_files());

  write("text.h5", "not hdf5");
  const result t = run("recon text.h5 -o vol.h5");
  EXPECT_EQ(t.status, 1) << t.output;
  EXPECT_NE(t.output.find("text.h5: not an HDF5 file"), std::string::npos) << t.output;
  EXPECT_EQ(run("info missing.h5").status, 1);
  EXPECT_FALSE(exists("vol.h5"));
}

TEST_F(Cli, InvalidGeometryJsonIsUsageError) {
  write("broken.json", R"({"type": "cone", "detector": {"cols": 48,)");
  result r = run("simulate --phantom shepp-logan --geometry broken.json -o p.h5");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("broken.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("invalid JSON"), std::string::npos) << r.output;
  write("bad_field.json",
        R"({"type": "cone", "detector": {"cols": 0, "rows": 4, "pixel_mm": [1, 1]},
    "source_to_isocenter_mm": 500, "source_to_detector_mm": 1000, "angles_deg": [0]})");
  r = run("simulate --phantom shepp-logan --geometry bad_field.json -o p.h5");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("detector.cols"), std::string::npos) << r.output;
  EXPECT_FALSE(exists("p.h5"));
  // A geometry file that does not exist is a runtime error.
  r = run("simulate --phantom shepp-logan --geometry nowhere.json -o p.h5");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("nowhere.json"), std::string::npos) << r.output;
  EXPECT_FALSE(exists("p.h5"));
  EXPECT_TRUE(no_part_files());
}

TEST_F(Cli, GeometryDataMismatch) {
  simulate();
  write("wide.json",
        R"({"type": "cone", "detector": {"cols": 50, "rows": 40, "pixel_mm": [3.2, 3.2]},
    "source_to_isocenter_mm": 500, "source_to_detector_mm": 1000,
    "angles_deg": {"start": 0, "step": 6, "count": 60}})");
  const result r = run("recon proj.h5 -o vol.h5 --geometry wide.json --size 8");
  EXPECT_EQ(r.status, 1) << r.output;
  // Names both sides: the geometry's 50 cols and the data's [60][40][48].
  EXPECT_NE(r.output.find("wide.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("50 cols"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[60][40][48]"), std::string::npos) << r.output;
  EXPECT_FALSE(exists("vol.h5"));
  // The same geometry as the file's: accepted.
  EXPECT_EQ(run("recon proj.h5 -o vol.h5 --geometry cone.json --size 8 --quiet").status, 0);
}

TEST_F(Cli, CompareShapeMismatch) {
  simulate();
  ASSERT_EQ(run("recon proj.h5 -o small.h5 --size 8 --quiet").status, 0);
  const result r = run("compare small.h5 truth.h5");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("8 x 8 x 8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("32 x 32 x 32"), std::string::npos) << r.output;
  EXPECT_EQ(run("compare small.h5 small.h5 --peak 0").status, 2);
}

TEST_F(Cli, OptionValuesValidatedWithOptionName) {
  simulate();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--size 0", "--size"},
      {"--size-xyz 32,32", "--size-xyz"},
      {"--size-xyz 32,x,32", "--size-xyz"},
      {"--spacing -1", "--spacing"},
      {"--spacing 1,2", "--spacing"},
      {"--origin 1,2", "--origin"},
      {"--threads -1", "--threads"},
      {"--cutoff 1.5", "--cutoff"},
      {"--cutoff 0", "--cutoff"},
      {"--device -2", "--device"},
      {"--gpu-memory-limit 0", "--gpu-memory-limit"},
      {"--gpu-memory-limit 12X", "--gpu-memory-limit"},
      {"--gpu-memory-limit lots", "--gpu-memory-limit"},
      {"-o nodir/vol.h5", "--output"},
  };
  for (const auto& [opt, name] : cases) {
    const std::string out = opt.starts_with("-o ") ? "" : "-o vol.h5 ";
    const result r = run("recon proj.h5 " + out + opt);
    EXPECT_EQ(r.status, 2) << opt << "\n" << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << opt << "\n" << r.output;
    EXPECT_FALSE(exists("vol.h5")) << opt;
  }
  result r = run("simulate --phantom shepp-logan --geometry cone.json -o p.h5 --noise-i0 -5");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--noise-i0"), std::string::npos) << r.output;
  r = run("simulate --phantom shepp-logan --geometry cone.json -o p.h5 --size 8");
  EXPECT_EQ(r.status, 2) << "--size without --truth\n" << r.output;
  r = run("simulate --phantom shepp-logan --geometry cone.json -o p.h5 --phantom-size 0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--phantom-size"), std::string::npos) << r.output;
  EXPECT_FALSE(exists("p.h5"));
  EXPECT_TRUE(no_part_files());
}

// --backend cuda where the GPU cannot be used: a CUDA-less build rejects it as a usage error
// (2); a CUDA build on a machine without a usable device fails at run time (1) with the reason.
// Either way nothing is written.
TEST_F(Cli, CudaBackendWithoutUsableDevice) {
#if defined(CTFORGE_WITH_CUDA)
  if (ctforge::detail::cuda_device_available(nullptr, 0))
    GTEST_SKIP() << "a usable CUDA device is present";
  constexpr int expected = 1;
#else
  constexpr int expected = 2;
#endif
  simulate();
  const result r = run("recon proj.h5 -o vol.h5 --size 8 --backend cuda");
  EXPECT_EQ(r.status, expected) << r.output;
  EXPECT_NE(r.output.find("ctforge: error: --backend cuda"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CUDA"), std::string::npos) << r.output;
  EXPECT_FALSE(exists("vol.h5"));
  // The volume-phantom projector too; auto falls back to the CPU with a note.
  ASSERT_EQ(run("recon proj.h5 -o vol.h5 --size 8 --quiet").status, 0);
  const result s = run("simulate --phantom vol.h5 --geometry cone.json -o p2.h5 --backend cuda");
  EXPECT_EQ(s.status, expected) << s.output;
  EXPECT_FALSE(exists("p2.h5"));
  const result t = run("simulate --phantom vol.h5 --geometry cone.json -o p2.h5");
  EXPECT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("using the CPU"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("(cpu)"), std::string::npos) << t.output;
}

// Analytic phantoms are projected exactly on the CPU: asking for the GPU there is a usage error
// that says so, and --device / --gpu-memory-limit are validated with their names.
TEST_F(Cli, SimulateBackendOptions) {
  const result r =
      run("simulate --phantom shepp-logan --geometry cone.json -o p.h5 --backend cuda");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("analytic phantoms"), std::string::npos) << r.output;
  const result d = run("simulate --phantom shepp-logan --geometry cone.json -o p.h5 --device -1");
  EXPECT_EQ(d.status, 2) << d.output;
  EXPECT_NE(d.output.find("--device"), std::string::npos) << d.output;
  const result m =
      run("simulate --phantom shepp-logan --geometry cone.json -o p.h5 --gpu-memory-limit 12X");
  EXPECT_EQ(m.status, 2) << m.output;
  EXPECT_NE(m.output.find("--gpu-memory-limit"), std::string::npos) << m.output;
  const result i =
      run("simulate --phantom shepp-logan --geometry cone.json -o p.h5 --gpu-interpolation fast");
  EXPECT_EQ(i.status, 2) << i.output;
  EXPECT_NE(i.output.find("--gpu-interpolation"), std::string::npos) << i.output;
  const result b = run("recon p.h5 -o v.h5 --backend opencl");
  EXPECT_EQ(b.status, 2) << b.output;
  EXPECT_NE(b.output.find("--backend"), std::string::npos) << b.output;
  EXPECT_FALSE(exists("p.h5"));
  EXPECT_FALSE(exists("v.h5"));
}

namespace {

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// An output that is an input, or another output, or a directory holding an input, is a usage
// error (exit 2) naming both options; the input is left byte for byte as it was. --threads is
// bounded instead of crashing the OpenMP runtime.
TEST_F(Cli, OutputsNeverOverwriteInputs) {
  simulate();
  const std::string proj = file_text(dir_ / "proj.h5"), geom = file_text(dir_ / "cone.json");
  struct bad {
    std::string args, needle;
  };
  fs::create_directories(dir_ / "stack");
  const std::vector<bad> cases = {
      {"recon proj.h5 -o proj.h5", "is also the input"},
      {"recon proj.h5 -o ./proj.h5", "is also the input"},
      {"recon proj.h5 -o vol.h5 --preview vol.h5", "--output and --preview"},
      {"recon proj.h5 -o cone.json --geometry cone.json", "is also the --geometry"},
      {"simulate --phantom shepp-logan --geometry cone.json -o cone.json", "--geometry"},
      {"simulate --phantom shepp-logan --geometry cone.json -o a.h5 --truth a.h5",
       "--output and --truth"},
      {"simulate --phantom proj.h5 --geometry cone.json -o proj.h5", "--phantom"},
      {"convert proj.h5 proj.h5", "is also the input"},
      {"convert cone.json cone.json", "is also the input"},
      {"recon 'stack/*.tif' -o stack --geometry cone.json", "lies inside this output directory"},
      {"recon proj.h5 -o vol.h5 --threads 100000", "--threads"},
      {"recon proj.h5 -o vol.h5 --threads -1", "--threads"},
  };
  for (const auto& c : cases) {
    const result r = run(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.args << "\n" << r.output;
  }
  EXPECT_EQ(file_text(dir_ / "proj.h5"), proj);
  EXPECT_EQ(file_text(dir_ / "cone.json"), geom);
  EXPECT_FALSE(exists("vol.h5"));
  // Distinct names still work.
  const result ok = run("recon proj.h5 -o vol.h5 --preview vol.png --threads 2 --quiet");
  EXPECT_EQ(ok.status, 0) << ok.output;
}

// Messages name what was wrong: an unknown or missing subcommand, an ITK header error (no ITK
// source location without the file).
TEST_F(Cli, MessagesNameTheWordAndTheFile) {
  result r = run("frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unknown subcommand 'frobnicate' (expected simulate, recon"),
            std::string::npos)
      << r.output;
  r = run("");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("a subcommand is required (simulate"), std::string::npos) << r.output;
  write("bad.mha",
        "ObjectType = Image\nNDims = 3\nDimSize = 4 4 4\nElementType = MET_BANANA\n"
        "ElementDataFile = LOCAL\n");
  r = run("info bad.mha");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("ctforge: error: bad.mha:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("itkImageIOBase.cxx"), std::string::npos) << r.output;
}
