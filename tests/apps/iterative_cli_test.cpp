// `ctforge recon` with the iterative methods' options, run as a user would: every method
// reconstructs the simulated scan better than its first iterate, --log-iterations writes one CSV
// row per iteration (atomically), --tolerance stops early, --initial warm-starts from a volume
// file (its grid checked), and options that do not apply to the chosen method exit 2 naming
// them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ctforge/io.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;

namespace {

using result = ctforge::testing::cli_result;

// 40 views over 360 deg, 40 x 32 pixels of 3.2 mm, magnification 2 (the field of view at the
// isocentre holds the 64 mm phantom).
const std::string k_cone = ctforge::testing::cone_json(40, 32, 3.2, 9, 40);

class IterativeCli : public ctforge::testing::cli_dir_test {
 protected:
  IterativeCli() : cli_dir_test("iterative_cli") {}
  void SetUp() override {
    cli_dir_test::SetUp();
    write("cone.json", k_cone);
    const result r =
        run("simulate --phantom shepp-logan --phantom-size 64 --geometry cone.json -o proj.h5 "
            "--truth truth.h5 --size 24 --spacing 2.5 --quiet");
    ASSERT_EQ(r.status, 0) << r.output;
  }
  std::string text(const std::string& name) const {
    std::ifstream in(dir_ / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  double mae(const std::string& volume) const {
    const result r = run("compare " + volume + " truth.h5");
    EXPECT_EQ(r.status, 0) << r.output;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(r.output, m, std::regex(R"(MAE: ([-+0-9.eE]+))"))) << r.output;
    return m.empty() ? 1e300 : std::stod(m[1]);
  }
};

constexpr const char* k_recon = "recon proj.h5 --size 24 --spacing 2.5 --backend cpu --threads 2 ";

std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    std::string c;
    while (std::getline(ls, c, ',')) cells.push_back(c);
    rows.push_back(cells);
  }
  return rows;
}

// Every method from the command line: exit 0, its name and options in the summary, the per-
// iteration log with the documented header, one row per iteration numbered from 1, the
// residual falling from the first to the last, and a result closer to the truth than after
// one iteration.
TEST_F(IterativeCli, EveryMethodWithItsLog) {
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"sirt", "--relaxation 1.5 --nonnegative"},
      {"os-sart", "--subsets 5 --nonnegative"},
      {"cgls", ""},
      {"fista-tv", "--tv-weight 5e-5 --tv-iterations 10 --nonnegative"},
      {"osem", "--subsets 4"}};
  for (const auto& [name, extra] : methods) {
    const std::string base = std::string(k_recon) + "--algorithm " + name + " " + extra;
    result r = run(base + " --iterations 12 -o " + name + ".h5 --log-iterations " + name + ".csv");
    ASSERT_EQ(r.status, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find(name + " cpu 12 iterations"), std::string::npos) << r.output;
    // FISTA-TV says what its set-up does before the first iteration; the others have none.
    EXPECT_EQ(r.output.find("power iteration") != std::string::npos, name == "fista-tv")
        << r.output;
    const auto rows = csv_rows(text(name + ".csv"));
    ASSERT_EQ(rows.size(), 13u) << name;
    EXPECT_EQ(rows[0], (std::vector<std::string>{"iteration", "residual", "objective",
                                                 "relative_update", "seconds", "stop_criterion"}));
    for (std::size_t i = 1; i < rows.size(); ++i) {
      ASSERT_EQ(rows[i].size(), 6u);
      EXPECT_EQ(rows[i][0], std::to_string(i));
    }
    EXPECT_LT(std::stod(rows.back()[1]), std::stod(rows[1][1])) << name;
    r = run(base + " --iterations 1 -o " + name + "_1.h5");
    ASSERT_EQ(r.status, 0) << r.output;
    const double e12 = mae(name + ".h5"), e1 = mae(name + "_1.h5");
    std::cout << "[ metric   ] " << name << ": MAE 1 iteration " << e1 << ", 12 iterations " << e12
              << "\n";
    EXPECT_LT(e12, e1) << name;
  }
  EXPECT_TRUE(ctforge::testing::leftover_temporaries(dir_).empty());
}

// --tolerance stops early (the summary says so; the log is shorter); --initial from a converged
// CGLS result stops CGLS at once; an --initial on another grid exits 2 naming the file.
TEST_F(IterativeCli, ToleranceAndInitial) {
  result r =
      run(std::string(k_recon) +
          "--algorithm sirt --iterations 300 --tolerance 0.01 -o t.h5 --log-iterations t.csv");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rows = csv_rows(text("t.csv"));
  EXPECT_GT(rows.size(), 2u);
  EXPECT_LT(rows.size(), 301u);
  EXPECT_NE(r.output.find(fmt::format("{} of 300 iterations (tolerance reached)", rows.size() - 1)),
            std::string::npos)
      << r.output;
  r = run(std::string(k_recon) + "--algorithm cgls --iterations 40 -o c.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  // CGLS's criterion (the relative gradient) at 1e-2: 14 iterations from zero (measured), one
  // from the 40-iteration result.
  r = run(std::string(k_recon) +
          "--algorithm cgls --iterations 40 --tolerance 1e-2 --initial c.h5 -o c2.h5 "
          "--log-iterations c2.csv");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_LE(csv_rows(text("c2.csv")).size(), 2u);  // the header and at most one iteration
  r = run(std::string(k_recon) +
          "--algorithm cgls --iterations 40 --tolerance 1e-2 -o c0.h5 --log-iterations c0.csv");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_GT(csv_rows(text("c0.csv")).size(), 5u) << "negative control: from zero";
  r =
      run("recon proj.h5 --size 20 --spacing 2.5 --backend cpu --algorithm sirt --initial c.h5 "
          "-o bad.h5");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--initial: c.h5"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "bad.h5"));
}

// Options that do not apply to the chosen method, and invalid values, exit 2 naming the option;
// nothing is written.
TEST_F(IterativeCli, InapplicableAndInvalidOptionsAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--algorithm sirt --subsets 4", "--subsets"},
      {"--algorithm cgls --tv-weight 0.1", "--tv-weight"},
      {"--algorithm fdk --tolerance 0.1", "--tolerance"},
      {"--algorithm fdk --iterations 5", "--iterations"},
      {"--algorithm fdk --relaxation 1.5", "--relaxation"},
      {"--algorithm fdk --nonnegative", "--nonnegative"},
      {"--algorithm sirt --filter hann", "--filter"},
      {"--algorithm sirt --cutoff 0.5", "--cutoff"},
      {"--algorithm sirt --checkpoint-every 2", "--checkpoint-every: needs --checkpoint-dir"},
      {"--algorithm sirt --checkpoint-seconds 5", "--checkpoint-seconds: needs"},
      {"--algorithm fdk --unit-planes 4", "--unit-planes: needs --checkpoint-dir"},
      {"--algorithm fdk --checkpoint-every 2", "--checkpoint-every"},
      {"--algorithm os-sart --subsets 1000", "--subsets"},
      {"--algorithm fdk --log-iterations x.csv", "--log-iterations"},
      {"--algorithm cgls --relaxation 1.5", "--relaxation"},
      {"--algorithm sirt --tv-iterations 5", "--tv-iterations"},
      {"--algorithm fista-tv", "--tv-weight"},
      {"--algorithm fista-tv --tv-weight 1e-4 --backprojector voxel", "--backprojector voxel"},
      {"--algorithm cgls --backprojector voxel", "--backprojector voxel"},
      {"--algorithm sirt --backprojector ray", "--backprojector"},
      {"--algorithm os-sart --subsets 0", "--subsets"},
      {"--algorithm sirt --tolerance -1", "--tolerance"},
      {"--algorithm art", "--algorithm"},
  };
  for (const auto& [args, name] : cases) {
    const result r = run(std::string(k_recon) + args + " -o bad.h5");
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "bad.h5")) << args;
    EXPECT_FALSE(fs::exists(dir_ / "x.csv")) << args;
  }
  // A missing warm start is an input failure (exit 1) naming the file.
  const result missing =
      run(std::string(k_recon) + "--algorithm sirt --initial missing.h5 -o bad.h5");
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("--initial: missing.h5"), std::string::npos) << missing.output;
  // NaN in the warm start's file: a runtime error (exit 1) naming the option, the file and the
  // voxel (the HDF5 reader's check; read_initial's for the other formats).
  ASSERT_EQ(run(std::string(k_recon) + "--algorithm sirt --iterations 1 -o start.h5").status, 0);
  ctforge::volume v = ctforge::io::read_volume((dir_ / "start.h5").string());
  v.data[5] = std::numeric_limits<float>::quiet_NaN();
  ctforge::io::write_volume((dir_ / "nan.h5").string(), v);
  {  // an uncompressed MetaImage on the same grid (ctforge's writers refuse NaN)
    const ctforge::volume_geometry& vg = v.geom;
    std::ofstream f(dir_ / "nan.mha", std::ios::binary);
    f << fmt::format(
        "ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
        "CompressedData = False\nOffset = {} {} {}\nElementSpacing = {} {} {}\n"
        "DimSize = {} {} {}\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n",
        vg.origin_mm[0], vg.origin_mm[1], vg.origin_mm[2], vg.spacing_mm[0], vg.spacing_mm[1],
        vg.spacing_mm[2], vg.nx, vg.ny, vg.nz);
    f.write(reinterpret_cast<const char*>(v.data.data()),
            static_cast<std::streamsize>(v.data.size() * sizeof(float)));
  }
  for (const std::string f : {"nan.h5", "nan.mha"}) {
    const result nan = run(std::string(k_recon) + "--algorithm sirt --initial " + f + " -o bad.h5");
    EXPECT_EQ(nan.status, 1) << nan.output;
    EXPECT_NE(nan.output.find("--initial: " + f), std::string::npos) << nan.output;
    EXPECT_NE(nan.output.find("non-finite value (nan)"), std::string::npos) << nan.output;
    EXPECT_FALSE(fs::exists(dir_ / "bad.h5"));
  }
  const result mha = run(std::string(k_recon) + "--algorithm sirt --initial nan.mha -o bad.h5");
  EXPECT_NE(mha.output.find("at index [0][0][5] (z, y, x)"), std::string::npos) << mha.output;
  const result help = run("recon --help");
  for (const char* s :
       {"os-sart", "fista-tv", "osem", "--subsets", "--tv-weight", "--tv-iterations",
        "--backprojector", "--tolerance", "--initial", "--log-iterations", "sparse-view"})
    EXPECT_NE(help.output.find(s), std::string::npos) << s;
}

}  // namespace
