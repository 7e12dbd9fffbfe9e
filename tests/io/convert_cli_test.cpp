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
const std::string data_dir = CTFORGE_DATA_DIR;

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
  EXPECT_NE(r.output.find("6 files"), std::string::npos) << r.output;
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
  fs::copy_file(data_dir + "/dicom/thorax/00-slice078.dcm", dir_ / "mixed" / "b.dcm");
  r = run("convert mixed out.mha");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("mixed DICOM series"), std::string::npos) << r.output;
}

// --flip-v / --flip-u / --transpose on projection input: data stored the other way round
// (written here by convert with the same flags, the geometry left as it was) reconstructs bit
// for bit as the original once the same flags undo it; without them it does not. A geometry
// for a transposed detector is the transposed one.
TEST_F(ConvertCli, FlipsAndTransposeRestoreTheOriginalBitForBit) {
  {
    std::ofstream(path("g.json"))
        << R"({"type":"cone","source_to_isocenter_mm":300,"source_to_detector_mm":600,
               "detector":{"cols":40,"rows":24,"pixel_mm":[2,2]},
               "angles_deg":{"start":0,"step":6,"count":60}})";
  }
  auto r =
      run("simulate --phantom shepp-logan --phantom-size 30 --geometry g.json -o p.h5 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string grid = " --size-xyz 20,20,12 --spacing 1.5 --backend cpu --quiet";
  r = run("recon p.h5 -o ref.h5" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  const volume ref = io::read_volume_any(path("ref.h5"));
  for (const std::string flags : {"--flip-v", "--flip-u", "--flip-u --flip-v"}) {
    r = run("convert p.h5 flipped.h5 " + flags + " --quiet");
    ASSERT_EQ(r.status, 0) << r.output;
    const io::loaded_projections a = io::read_projections_any(path("p.h5"));
    const io::loaded_projections b = io::read_projections_any(path("flipped.h5"));
    EXPECT_NE(a.projections.data, b.projections.data) << flags << ": nothing was flipped";
    r = run("recon flipped.h5 -o wrong.h5" + grid);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(io::read_volume_any(path("wrong.h5")).data, ref.data) << flags;
    r = run("recon flipped.h5 -o back.h5 " + flags + grid);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(io::read_volume_any(path("back.h5")).data, ref.data) << flags;
  }
  // Transposed storage: the stored geometry describes the untransposed detector, so the file
  // read with --transpose needs the geometry of the transposed one, which is the original.
  r = run("convert p.h5 t.h5 --transpose --geometry g.json --quiet");
  EXPECT_EQ(r.status, 1) << r.output;  // g.json is 40 x 24, the transposed data 24 x 40
  EXPECT_NE(r.output.find("g.json"), std::string::npos) << r.output;
  const io::loaded_projections a = io::read_projections_any(path("p.h5"));
  const projection_stack t = io::reorient_projections(a.projections, true, false, false);
  ASSERT_EQ(t.rows, 40);
  ASSERT_EQ(t.cols, 24);
  EXPECT_EQ(io::reorient_projections(t, true, false, false).data, a.projections.data);
  EXPECT_EQ(t.at(3, 5, 7), a.projections.at(3, 7, 5));
}

}  // namespace
}  // namespace ctforge
