// Sinogram / .npy / angle-list inputs through `ctforge recon` and `ctforge convert`: the
// reconstruction of a sinogram with an angle list equals that of the same data as a one-row
// scan with a geometry JSON, and bad inputs end with exit 1 or 2 and a message naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

/// A little-endian float32 .npy file of the given shape (format 1.0, C order).
void write_npy_f4(const fs::path& p, const std::string& shape, const std::vector<float>& v) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xff),
                       static_cast<char>(header.size() >> 8)};
  f.write(len, 2);
  f << header;
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
}

class InputsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = testing::scratch_dir("inputs_cli", info->name());
    // Sinogram of a disc of radius 6 mm, mu 0.02 /mm, centred 1 mm off the axis: 36 views
    // over 180 deg, 32 columns of 0.5 mm.
    for (int v = 0; v < V; ++v) {
      const double t = M_PI * v / V;
      angles_deg_.push_back(180.0 * v / V);
      for (int c = 0; c < C; ++c) {
        const double s = (c - 0.5 * (C - 1)) * 0.5 - 1.0 * std::cos(t);
        sino_.push_back(static_cast<float>(s * s < 36 ? 0.04 * std::sqrt(36 - s * s) : 0.0));
      }
    }
    std::ofstream a(dir_ / "angles.txt");
    a << "# rotation angle (deg)\n";
    for (double d : angles_deg_) a << d << "\n";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  testing::cli_result run(const std::string& args) const { return testing::run_cli(dir_, args); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static constexpr int V = 36, C = 32;
  std::vector<double> angles_deg_;
  std::vector<float> sino_;
  fs::path dir_;
};

TEST_F(InputsCli, SinogramWithAnglesReconstructsLikeTheOneRowScanWithAGeometry) {
  write_npy_f4(dir_ / "sino.npy", "(36, 32)", sino_);
  std::vector<double> rad;
  for (double d : angles_deg_) rad.push_back(deg_to_rad(d));
  projection_stack p(V, 1, C);
  p.data = sino_;
  io::write_projections(path("one_row.h5"), p, make_parallel_geometry(C, 1, 0.5, 0.5, rad));
  auto r = run("recon sino.npy --angles angles.txt --pixel-size 0.5 -o from_list.h5 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon one_row.h5 -o from_geometry.h5 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const volume a = io::read_volume(path("from_list.h5"));
  const volume b = io::read_volume(path("from_geometry.h5"));
  ASSERT_EQ(a.data.size(), b.data.size());
  ASSERT_EQ(a.geom.nz, 1);
  // The same projections and geometry reach the same code: equal to float rounding (1e-6 of
  // the largest value allows for a different summation order; in practice they are identical).
  float hi = 0;
  for (float x : b.data) hi = std::max(hi, std::abs(x));
  ASSERT_GT(hi, 0.01f);  // the disc is there (mu 0.02)
  for (std::size_t k = 0; k < a.data.size(); ++k) ASSERT_NEAR(a.data[k], b.data[k], 1e-6f * hi);
  // Negative control: the angle list in radians (stated) is another scan.
  r =
      run("recon sino.npy --angles angles.txt --angle-unit rad --pixel-size 0.5 -o rad.h5 "
          "--quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const volume c = io::read_volume(path("rad.h5"));
  double diff = 0;
  for (std::size_t k = 0; k < c.data.size(); ++k)
    diff = std::max(diff, static_cast<double>(std::abs(c.data[k] - b.data[k])));
  EXPECT_GT(diff, 0.1 * hi);
}

TEST_F(InputsCli, ConvertASinogramToTheNativeFormat) {
  write_npy_f4(dir_ / "sino.npy", "(36, 32)", sino_);
  const auto r = run("convert sino.npy out.h5 --angles angles.txt --pixel-size 0.5");
  ASSERT_EQ(r.status, 0) << r.output;
  const io::projection_file f = io::read_projections(path("out.h5"));
  ASSERT_EQ(f.projections.rows, 1);
  EXPECT_EQ(f.projections.data, sino_);
  EXPECT_EQ(f.geom->type_name(), "parallel");
}

TEST_F(InputsCli, BadInputsExitWithAStatusAndNameTheFile) {
  write_npy_f4(dir_ / "sino.npy", "(36, 32)", sino_);
  write_npy_f4(dir_ / "four.npy", "(1, 1, 2, 2)", {1, 2, 3, 4});
  std::ofstream(dir_ / "word.txt") << "0\n5\nfive\n";
  std::ofstream(dir_ / "key7.txt") << "0 0\n5 7\n";
  std::ofstream(dir_ / "short.txt") << "0\n5\n";
  struct bad {
    std::string args;
    int status;
    std::string needle;
  };
  for (const bad& b : std::vector<bad>{
           {"recon sino.npy --angles word.txt -o x.h5", 1, "word.txt: line 3"},
           {"recon sino.npy --angles key7.txt -o x.h5", 1, "key7.txt: line 2"},
           {"recon sino.npy --angles short.txt -o x.h5", 1, "short.txt: 2 angles"},
           {"recon four.npy --angles angles.txt -o x.h5", 1, "four.npy"},
           {"recon sino.npy -o x.h5", 2, "sino.npy"},
           {"recon sino.npy --angles angles.txt --open-beam-cols 5:2 -o x.h5", 2,
            "--open-beam-cols"},
           {"recon sino.npy --angles angles.txt --angle-unit grad -o x.h5", 2, "grad"},
           {"convert sino.npy x.h5 --angles angles.txt --geometry g.json", 2, "--geometry"},
       }) {
    const auto r = run(b.args);
    EXPECT_EQ(r.status, b.status) << b.args << "\n" << r.output;
    EXPECT_NE(r.output.find(b.needle), std::string::npos) << b.args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "x.h5")) << b.args;
  }
}

}  // namespace
}  // namespace ctforge
