// The format hooks of the `ctforge` command line (convert, and foreign inputs/outputs of recon,
// simulate and info), run as a user would, checked against the library.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "ctforge/formats.hpp"
#include "ctforge/projector.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
const std::string data_dir = CTFORGE_SHARED_DATA_DIR;

using result = testing::cli_result;

class ConvertCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = testing::scratch_dir("convert_cli", info->name());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  result run(const std::string& args) const { return testing::run_cli(dir_, args); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(ConvertCli, DicomToMetaImageAndBackKeepsHuAndGeometry) {
  const std::string thorax = data_dir + "/dicom/thorax";
  result r = run("convert '" + thorax + "' thorax.mha");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("convert thorax.mha series --hu --description 'round trip'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("Warning"), std::string::npos) << "GDCM warnings leaked: " << r.output;
  const volume a = io::read_volume_any(thorax), b = io::read_volume_any(path("series"));
  ASSERT_EQ(a.data.size(), b.data.size());
  EXPECT_EQ(a.data, b.data);  // integer HU, slope 1: exact
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(a.geom.origin_mm[k], b.geom.origin_mm[k], 1e-9);
    EXPECT_NEAR(a.geom.spacing_mm[k], b.geom.spacing_mm[k], 1e-9);
  }
  r = run("info series");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("series description round trip"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("24 files"), std::string::npos) << r.output;
  // HU -> mu with --mu-water: mu = 0.02 (1 + HU / 1000).
  r = run("convert '" + thorax + "' mu.nrrd --mu-water 0.02");
  ASSERT_EQ(r.status, 0) << r.output;
  const volume mu = io::read_volume_any(path("mu.nrrd"));
  for (std::size_t i = 0; i < mu.data.size(); i += 9973)
    EXPECT_NEAR(mu.data[i], 0.02 * (1 + a.data[i] / 1000.0), 1e-7);
}

TEST_F(ConvertCli, ReconOfTheToothWithAutomaticCentre) {
  const std::string tooth = data_dir + "/dxchange/tooth.h5";
  const result r =
      run("recon '" + tooth +
          "' -o tooth.mha --center-of-rotation auto --size-xyz 128,128,2 --spacing 4,4,1 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("center of rotation: column ([0-9.]+)")))
      << r.output;
  const io::loaded_projections p = io::read_projections_any(tooth);
  EXPECT_NEAR(std::stod(m[1]), estimate_center_of_rotation(p.projections, *p.geom),
              0.01);  // printed with 2 decimals
  const volume v = io::read_volume_any(path("tooth.mha"));
  EXPECT_EQ(v.geom.nx, 128);
  EXPECT_EQ(v.geom.nz, 2);
  // A numeric centre is accepted too; a non-number is a usage error (status 2).
  EXPECT_EQ(run("recon '" + tooth + "' -o t2.h5 --center-of-rotation 296 --size 64 --quiet").status,
            0);
  EXPECT_EQ(run("recon '" + tooth + "' -o t3.h5 --center-of-rotation middle --quiet").status, 2);
}

TEST_F(ConvertCli, SimulateFromAVolumePhantomMatchesForwardProject) {
  std::ofstream(path("par.json"))
      << R"({"type": "parallel", "detector": {"cols": 60, "rows": 40, "pixel_mm": [4, 4]},
    "angles_deg": {"start": 0, "step": 30, "count": 6}})";
  const std::string head = data_dir + "/metaimage/head.mha";
  const result r = run("simulate --phantom '" + head +
                       "' --phantom-scale 1e-5 --geometry par.json -o p.h5 --truth t.nii --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  volume ph = io::read_volume_any(head);
  for (float& x : ph.data) x = static_cast<float>(x * 1e-5);
  ph.geom = volume_geometry::centered(ph.geom.nx, ph.geom.ny, ph.geom.nz, ph.geom.spacing_mm);
  const io::loaded_projections got = io::read_projections_any(path("p.h5"));
  const projection_stack expect = forward_project(ph, *got.geom);
  ASSERT_EQ(got.projections.data.size(), expect.data.size());
  for (std::size_t i = 0; i < expect.data.size(); ++i)
    ASSERT_FLOAT_EQ(got.projections.data[i], expect.data[i]) << i;
  // --truth writes the (centred, scaled) phantom itself.
  const volume truth = io::read_volume_any(path("t.nii"));
  EXPECT_EQ(truth.data, ph.data);
  EXPECT_NEAR(truth.geom.origin_mm[0], ph.geom.origin_mm[0], 1e-4);
}

TEST_F(ConvertCli, ProjectionsAndGeometries) {
  // DataExchange -> ctforge HDF5 with a crop, then -> TIFF stack, read back.
  const std::string tooth = data_dir + "/dxchange/tooth.h5";
  result r = run("convert '" + tooth + "' crop.h5 --views 0:20 --cols 200:64 --pixel-size 0.5");
  ASSERT_EQ(r.status, 0) << r.output;
  io::projection_read_options o;
  o.select.views = {0, 20};
  o.select.cols = {200, 64};
  o.pixel_size_mm = 0.5;
  const io::loaded_projections lib = io::read_projections_any(tooth, o);
  const io::loaded_projections cli = io::read_projections_any(path("crop.h5"));
  EXPECT_EQ(cli.projections.data, lib.projections.data);
  EXPECT_EQ(cli.geometry_json, lib.geometry_json);
  r = run("convert crop.h5 stack");
  ASSERT_EQ(r.status, 0) << r.output;
  io::projection_read_options t;
  t.geometry_path = path("stack/geometry.json");
  EXPECT_EQ(io::read_projections_any(path("stack"), t).projections.data, lib.projections.data);
  r = run("info stack");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("files 20"), std::string::npos) << r.output;

  // Geometry: JSON -> RTK XML -> JSON keeps the vectors.
  std::ofstream(path("cone.json")) << geometry_to_json(
      make_cone_geometry(30, 20, 0.5, 0.5, 300, 500, angle_range(0, 0.4, 9), {1.0}, {-0.5}));
  ASSERT_EQ(run("convert cone.json cone.xml").status, 0);
  r = run("convert cone.xml back.json --detector 30,20 --pixel 0.5");
  ASSERT_EQ(r.status, 0) << r.output;
  const geometry a = load_geometry(path("cone.json")), b = load_geometry(path("back.json"));
  for (std::int64_t v = 0; v < a.view_count(); ++v) {
    const vec3 d = a.views[static_cast<std::size_t>(v)].detector_center -
                   b.views[static_cast<std::size_t>(v)].detector_center;
    EXPECT_LT(norm(d), 1e-9);
  }
  // Errors: RTK without a detector size (usage, 2); a mixed DICOM directory (runtime, 1).
  EXPECT_EQ(run("convert cone.xml x.json").status, 2);
  fs::create_directories(dir_ / "mixed");
  fs::copy_file(data_dir + "/dicom/ct_small/CT_small.dcm", dir_ / "mixed" / "a.dcm");
  fs::copy_file(data_dir + "/dicom/thorax/00-slice060.dcm", dir_ / "mixed" / "b.dcm");
  r = run("convert mixed out.mha");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("mixed DICOM series"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ctforge
