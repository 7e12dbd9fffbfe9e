// A sweep of bad input through the command line, as a user would type it: every case must end
// with exit 2 (usage) or 1 (runtime), a message "ctforge: error: ...", no crash, no output file
// and no temporary left behind, and the inputs unchanged.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

struct bad_case {
  std::string args;
  int status;          // 1 or 2; 0 = either
  std::string names{};  // when given, the message must contain it (the file, option or field)
};

/// An HDF5 file holding `dataset`, a chunked float32 [views][rows][cols] never written (a
/// huge one costs nothing on disk), and, when given, a /geometry string.
void write_declared_dataset(const fs::path& path, const char* dataset, hsize_t views, hsize_t rows,
                            hsize_t cols, const std::string& geometry = "") {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[3] = {views, rows, cols};
  const hsize_t max[3] = {H5S_UNLIMITED, H5S_UNLIMITED, H5S_UNLIMITED};
  const hsize_t chunk[3] = {1, 8, 8};
  const hid_t space = H5Screate_simple(3, dims, max);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, chunk);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Dclose(H5Dcreate2(f, dataset, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT));
  if (!geometry.empty()) {
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t g = H5Dcreate2(f, "/geometry", t, scalar, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = geometry.c_str();
    H5Dwrite(g, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text);
    H5Dclose(g);
    H5Sclose(scalar);
    H5Tclose(t);
  }
  H5Pclose(lcpl);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class BadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::scratch_dir("bad_input", "all"));
    auto w = [](const std::string& name, const std::string& text) {
      std::ofstream(*dir_ / name) << text;
    };
    w("g.json", R"({"type":"cone","source_to_isocenter_mm":300,"source_to_detector_mm":600,
                   "detector":{"cols":24,"rows":8,"pixel_mm":[2,2]},
                   "angles_deg":{"start":0,"step":12,"count":30}})");
    w("ph.json", R"({"ellipsoids":[{"center":[0,0,0],"semi_axes":[10,10,5],"density":0.02}]})");
    const auto r = testing::run_cli(*dir_,
                                    "simulate --phantom ph.json --geometry g.json -o p.h5 "
                                    "--truth v.h5 --size 12 --quiet");
    ASSERT_EQ(r.status, 0) << r.output;
    const std::string p = bytes_of(*dir_ / "p.h5");
    std::ofstream(*dir_ / "trunc.h5", std::ios::binary).write(p.data(), 1000);
    fs::create_directories(*dir_ / "empty_dir");
    auto g = [&](const std::string& name, const std::string& json) { w(name, json); };
    const std::string det = R"("detector":{"cols":24,"rows":8,"pixel_mm":[2,2]})";
    const std::string ang = R"("angles_deg":{"start":0,"step":12,"count":30})";
    const std::string sd = R"("source_to_isocenter_mm":300,"source_to_detector_mm":600)";
    g("g_notype.json", "{" + det + "," + ang + "," + sd + "}");
    g("g_badtype.json", R"({"type":"fan",)" + det + "," + ang + "," + sd + "}");
    g("g_cols0.json",
      R"({"type":"cone","detector":{"cols":0,"rows":8,"pixel_mm":[2,2]},)" + ang + "," + sd + "}");
    g("g_rowsneg.json",
      R"({"type":"cone","detector":{"cols":4,"rows":-1,"pixel_mm":[2,2]},)" + ang + "," + sd + "}");
    g("g_pix0.json",
      R"({"type":"cone","detector":{"cols":4,"rows":2,"pixel_mm":[0,2]},)" + ang + "," + sd + "}");
    g("g_sdd.json", R"({"type":"cone",)" + det + "," + ang +
                        R"(,"source_to_isocenter_mm":600,"source_to_detector_mm":300})");
    g("g_noangles.json", R"({"type":"cone",)" + det + R"(,"angles_deg":[],)" + sd + "}");
    g("g_count0.json",
      R"({"type":"cone",)" + det + R"(,"angles_deg":{"start":0,"step":1,"count":0},)" + sd + "}");
    g("g_offsets.json",
      R"({"type":"cone","detector":{"cols":4,"rows":2,"pixel_mm":[2,2],"offset_mm":[[1,0],[2,0]]},)" +
          ang + "," + sd + "}");
    g("g_noviews.json", R"({"type":"cone_vec","detector":{"cols":4,"rows":2},"views":[]})");
    g("g_nan.json", R"({"type":"cone",)" + det + "," + ang +
                        R"(,"source_to_isocenter_mm":1e999,"source_to_detector_mm":600})");
    g("g_syntax.json", R"({"type":"cone",)");
    g("ph_bad.json", R"({"ellipsoids":[{"center":[0,0],"semi_axes":[1,1,1],"density":1}]})");
    g("ph_neg.json", R"({"ellipsoids":[{"center":[0,0,0],"semi_axes":[1,-1,1],"density":1}]})");
    g("not.xml", "<geometry>");
    // Vector geometries: a zero / tiny pixel vector, in view 0 too, is named by its view.
    const std::string view = R"({"source":[0,-300,0],"detector_center":[0,300,0],)";
    g("g_vec_u0.json", R"({"type":"cone_vec","detector":{"cols":4,"rows":2},"views":[)" + view +
                           R"("u":[0,0,0],"v":[0,0,1]}]})");
    g("g_vec_v1.json", R"({"type":"parallel_vec","detector":{"cols":4,"rows":2},"views":[)"
                       R"({"ray":[0,1,0],"detector_center":[0,0,0],"u":[1,0,0],"v":[0,0,1]},)"
                       R"({"ray":[0,1,0],"detector_center":[0,0,0],"u":[1,0,0],)"
                       R"("v":[0,0,1e-200]}]})");
    // Phantoms whose projections cannot be represented in float, or that every ray misses.
    const auto ph = [&](const std::string& name, const std::string& axes, const std::string& rho) {
      w(name, R"({"ellipsoids":[{"center":[0,0,0],"semi_axes":)" + axes + R"(,"density":)" + rho +
                  "}]}");
    };
    ph("ph_huge.json", "[1e200,1e200,1e200]", "0.02");
    ph("ph_tiny.json", "[1e-30,1e-30,1e-30]", "0.02");
    ph("ph_dense.json", "[10,10,10]", "1e38");
    ph("ph_faint.json", "[10,10,10]", "1e-45");
    write_declared_dataset(*dir_ / "huge.h5", "/projections", 1000000, 1000000, 1000000);
    write_declared_dataset(*dir_ / "huge_dx.h5", "/exchange/data", 1000000, 1000000, 1000000);
    write_declared_dataset(*dir_ / "zero.h5", "/projections", 0, 8, 24,
                           R"({"type":"parallel","detector":{"cols":24,"rows":8,"pixel_mm":[1,1]},)"
                           R"("angles_deg":[0]})");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static fs::path* dir_;
};
fs::path* BadInput::dir_ = nullptr;

TEST_F(BadInput, EveryCaseFailsCleanly) {
  const std::string rec = "recon p.h5 -o out/v.h5 --backend cpu ";
  const std::string sim = "simulate --phantom ph.json --geometry g.json -o out/s.h5 ";
  const std::vector<bad_case> cases = {
      // recon: option values
      {rec + "--iterations 0 --algorithm sirt", 2},
      {rec + "--iterations -1 --algorithm sirt", 2},
      {rec + "--iterations abc", 2},
      {rec + "--relaxation 0 --algorithm sirt", 2},
      {rec + "--relaxation 2 --algorithm sirt", 2},
      {rec + "--relaxation nan --algorithm sirt", 2},
      {rec + "--size 0", 2},
      {rec + "--size -3", 2},
      {rec + "--size abc", 2},
      {rec + "--size 100000", 2},
      {rec + "--size-xyz 1,2", 2},
      {rec + "--size-xyz 0,1,1", 2},
      {rec + "--size-xyz a,b,c", 2},
      {rec + "--spacing 0", 2},
      {rec + "--spacing -1", 2},
      {rec + "--spacing nan", 2},
      {rec + "--spacing 1,2", 2},
      {rec + "--origin 1,2", 2},
      {rec + "--origin nan,0,0", 2},
      {rec + "--filter foo", 2},
      {rec + "--cutoff 0", 2},
      {rec + "--cutoff 1.5", 2},
      {rec + "--cutoff nan", 2},
      {rec + "--geometry missing.json", 1},
      {rec + "--geometry /dev/null", 1},
      {rec + "--geometry g_syntax.json", 2},
      {rec + "--pixel-size 0", 2},
      {rec + "--pixel-size -1", 2},
      {rec + "--bin 0", 2},
      {rec + "--bin 100000", 0},
      {rec + "--center-of-rotation abc", 2},
      {rec + "--center-of-rotation nan", 2},
      {rec + "--center-of-rotation 1e9", 2},
      {rec + "--mu-water 0", 2},
      {rec + "--backend gpu", 2},
      {rec + "--device -1", 2},
      {rec + "--gpu-memory-limit abc", 2},
      {rec + "--gpu-memory-limit -5", 2},
      {rec + "--gpu-interpolation fast", 2},
      {rec + "--threads 100000", 2},
      {rec + "--threads -2", 2},
      {rec + "--preview out/none/p.png", 2},
      {rec + "--algorithm fbp", 2},
      {rec + "--algorithm art", 2},
      {"recon p.h5 -o out/none/v.h5", 2},
      {"recon p.h5 -o out/v.xyz", 2},
      {"recon missing.h5 -o out/v.h5", 1},
      {"recon /dev/null -o out/v.h5", 1},
      {"recon empty_dir -o out/v.h5", 1},
      {"recon trunc.h5 -o out/v.h5", 1},
      {"recon v.h5 -o out/v.h5", 1},
      {"recon p.h5 -o p.h5", 2},
      {"recon p.h5", 2},
      {"recon -o out/v.h5", 2},
      {"recon p.h5 -o out/v.h5 --no-such-option", 2},
      // simulate: geometry and phantom files, option values
      {"simulate --phantom ph.json --geometry g_notype.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_badtype.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_cols0.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_rowsneg.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_pix0.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_sdd.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_noangles.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_count0.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_offsets.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_noviews.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_nan.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry g_syntax.json -o out/s.h5", 2},
      {"simulate --phantom ph.json --geometry missing.json -o out/s.h5", 1},
      {"simulate --phantom ph_bad.json --geometry g.json -o out/s.h5", 2},
      {"simulate --phantom ph_neg.json --geometry g.json -o out/s.h5", 2},
      {"simulate --phantom missing.json --geometry g.json -o out/s.h5", 1},
      {"simulate --phantom missing.mha --geometry g.json -o out/s.h5", 1},
      {"simulate --phantom trunc.h5 --geometry g.json -o out/s.h5", 1},
      {sim + "--noise-i0 0", 2},
      {sim + "--noise-i0 -1", 2},
      {sim + "--noise-i0 nan", 2},
      {sim + "--noise-i0 1e5 --noise-sigma -1", 2},
      {sim + "--seed abc", 2},
      {sim + "--supersample 0 --truth out/t.h5", 2},
      {sim + "--supersample 100 --truth out/t.h5", 2},
      {"simulate --phantom shepp-logan --phantom-size 0 --geometry g.json -o out/s.h5", 2},
      {"simulate --phantom shepp-logan --phantom-size nan --geometry g.json -o out/s.h5", 2},
      {sim + "--truth out/s.h5", 2},
      {sim + "--backend cuda --threads 1", 2},
      {"simulate --phantom ph.json --geometry g.json", 2},
      // convert, info, compare
      {"convert missing.h5 out/x.h5", 1},
      {"convert v.h5 out/x.xyz", 2},
      {"convert v.h5 out/x.nii --mu-water 0", 2},
      {"convert not.xml out/g.json", 2},
      {"convert p.h5 out/p2.h5 --bin 0", 2},
      {"convert p.h5 out/p2.h5 --views 5:1000", 2},
      {"convert p.h5 out/p2.h5 --views abc", 2},
      {"convert p.h5 out/p2.h5 --rows -1:2", 2},
      {"convert p.h5 out/p2.h5 --cols 30:2", 2},
      {"convert trunc.h5 out/x.h5", 1},
      {"convert g.json out/g.unknown", 2},
      {"convert v.h5", 2},
      {"info missing.h5", 1},
      {"info trunc.h5", 1},
      {"info empty_dir", 1},
      {"compare v.h5 missing.h5", 1},
      {"compare v.h5 p.h5", 1},
      {"compare v.h5 v.h5 --peak 0", 2},
      {"compare v.h5 v.h5 --peak nan", 2},
      {"frobnicate", 2},
      {"", 2},
      // Messages that name the right thing (issue #27).
      {"simulate --phantom ph.json --geometry g_vec_u0.json -o out/s.h5", 2, "'views[0].u'"},
      {"simulate --phantom ph.json --geometry g_vec_v1.json -o out/s.h5", 2, "'views[1].v'"},
      {"simulate --phantom ph_huge.json --geometry g.json -o out/s.h5", 2,
       "ph_huge.json: field 'ellipsoids[0].semi_axes'"},
      {"simulate --phantom ph_tiny.json --geometry g.json -o out/s.h5", 2,
       "ph_tiny.json: field 'ellipsoids[0].semi_axes'"},
      {"simulate --phantom ph_dense.json --geometry g.json -o out/s.h5", 2,
       "ph_dense.json: field 'ellipsoids[0].density'"},
      {"simulate --phantom ph_faint.json --geometry g.json -o out/s.h5", 2,
       "ph_faint.json: field 'ellipsoids[0].density'"},
      {"simulate --phantom shepp-logan --phantom-size 1e300 --geometry g.json -o out/s.h5", 2,
       "--phantom-size"},
      {"convert huge.h5 out/x.h5", 1, "huge.h5: dataset /projections"},
      {"convert huge_dx.h5 out/x.h5", 1, "huge_dx.h5: dataset /exchange/data"},
      {"convert zero.h5 out/x.h5", 1, "zero.h5: dataset /projections"},
      {"recon zero.h5 -o out/v.h5", 1, "zero.h5: dataset /projections"},
      {rec + "--bin 1000", 2, "--bin 1000"},
      {"convert p.h5 out/p2.h5 --bin 9", 2, "--bin 9"},
      {"center p.h5 --bin 30", 2, "--bin 30"},
      {"recon p.h5 -o ''", 2, "--output"},
      {"recon p.h5 -o out/v.h5/", 2, "--output"},
      {"recon p.h5 -o out/v.mha/", 2, "--output"},
      {rec + "--preview ''", 2, "--preview"},
      {rec + "--preview out", 2, "--preview"},
      {rec + "--log-iterations '' --algorithm sirt", 2, "--log-iterations"},
      {rec + "--checkpoint-dir ''", 2, "--checkpoint-dir"},
      {"simulate --phantom ph.json --geometry g.json -o ''", 2, "--output"},
      {"simulate --phantom ph.json --geometry g.json -o out/s.h5/", 2, "--output"},
      {"simulate --phantom ph.json --geometry g.json -o out", 2, "--output"},
      {sim + "--truth ''", 2, "--truth"},
      {sim + "--truth out/t.h5/", 2, "--truth"},
      {"convert p.h5 ''", 2, "output"},
      {"convert v.h5 ''", 2, "output"},
      {"convert g.json ''", 2, "output"},
      {"convert p.h5 out/p.h5/", 2, "output"},
      {"convert v.h5 out/v.h5/", 2, "output"},
      {"convert g.json out/g.json/", 2, "output"},
      {"center p.h5 -o ''", 2, "--output"},
      {"center p.h5 -o out", 2, "--output"},
      {"center p.h5 -o out/m.png/", 2, "--output"},
  };
  const fs::path out = *dir_ / "out";
  const auto inputs_before = bytes_of(*dir_ / "p.h5") + bytes_of(*dir_ / "v.h5");
  int n = 0;
  for (const auto& c : cases) {
    std::error_code ec;
    fs::remove_all(out, ec);
    fs::create_directories(out);
    const auto r = testing::run_cli(*dir_, c.args);
    ++n;
    if (c.status == 0)
      EXPECT_TRUE(r.status == 1 || r.status == 2) << c.args << " -> " << r.status << "\n"
                                                  << r.output;
    else
      EXPECT_EQ(r.status, c.status) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("ctforge: error: "), std::string::npos) << c.args << ": no message\n"
                                                                    << r.output;
    if (!c.names.empty())
      EXPECT_NE(r.output.find(c.names), std::string::npos) << c.args << ": message does not name "
                                                           << c.names << "\n"
                                                           << r.output;
    EXPECT_EQ(r.output.find("Segmentation"), std::string::npos) << c.args;
    std::vector<std::string> left;
    for (const auto& e : fs::recursive_directory_iterator(out, ec))
      left.push_back(e.path().filename().string());
    EXPECT_TRUE(left.empty()) << c.args << ": left " << left.front();
  }
  EXPECT_EQ(bytes_of(*dir_ / "p.h5") + bytes_of(*dir_ / "v.h5"), inputs_before);
  std::cout << "[ metric   ] " << n << " bad-input cases\n";
}

}  // namespace
}  // namespace ctforge
