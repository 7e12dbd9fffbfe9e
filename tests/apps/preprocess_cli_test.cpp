// The preprocessing options of `ctforge recon`, `ctforge convert` and `ctforge preprocess`
// (--zingers, --rings, ...):
// the help lists the library's table; a slab-wise run cleans each unit's band with the rows
// of margin it needs, so it reconstructs the whole cleaned scan bit for bit; convert writes the
// cleaned projections (the staged route); a checkpoint records the steps; bad options exit 2
// naming the option.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ctforge/io.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/preprocess.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

class PreprocessCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::scratch_dir("preprocess_cli", "all"));
    // The Shepp-Logan phantom on a cone orbit, 90 views of 64 x 40 pixels ...
    std::ofstream(*dir_ / "p.json") << R"({"type":"cone","source_to_isocenter_mm":300,
        "source_to_detector_mm":600,"detector":{"cols":64,"rows":40,"pixel_mm":[1,1]},
        "angles_deg":{"start":0,"step":4,"count":90}})";
    const auto r = testing::run_cli(*dir_,
                                    "simulate --phantom shepp-logan --phantom-size 30 "
                                    "--geometry p.json -o p.h5 --quiet");
    ASSERT_EQ(r.status, 0) << r.output;
    // ... with zingers (+3 at every 97th value: never two in one 3 x 3 window) and a stripe
    // (+0.3 on column 20 of every view: a ring).
    io::projection_file f = io::read_projections((*dir_ / "p.h5").string());
    projection_stack& p = f.projections;
    zingers_ = 0;
    for (std::int64_t i = 0; i < p.size(); i += 97, ++zingers_) p.data[i] += 3.0f;
    for (std::int64_t v = 0; v < p.views; ++v)
      for (std::int64_t r = 0; r < p.rows; ++r) p.at(v, r, 20) += 0.3f;
    io::write_projections((*dir_ / "dirty.h5").string(), p, *f.geom);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  static testing::cli_result run(const std::string& args) { return testing::run_cli(*dir_, args); }
  static volume read(const std::string& name) { return io::read_volume((*dir_ / name).string()); }

  static constexpr const char* k_steps =
      " --zingers 1 --zinger-size 5 --rings sorting --ring-size 5";
  static constexpr const char* k_recon = " --size 48 --backend cpu --threads 2 --quiet";
  static fs::path* dir_;
  static std::int64_t zingers_;
};
fs::path* PreprocessCli::dir_ = nullptr;
std::int64_t PreprocessCli::zingers_ = 0;

/// The long flags of the option group `heading` in a --help text.
std::set<std::string> group_flags(const std::string& help, const std::string& heading) {
  std::set<std::string> out;
  std::istringstream in(help);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("[Option Group: ")) {
      inside = line == "[Option Group: " + heading + "]";
    } else if (inside && !line.empty() && line[0] != ' ') {
      inside = false;
    } else if (inside && line.starts_with("    --")) {
      out.insert(line.substr(4, line.find(' ', 4) - 4));
    }
  }
  return out;
}

TEST_F(PreprocessCli, HelpListsTheTable) {
  std::set<std::string> table;
  for (const preprocess_option& e : preprocess_option_table()) table.insert(std::string(e.flag));
  std::set<std::string> with_stitch = table;
  with_stitch.insert("--stitch-360");
  for (const char* sub : {"recon", "convert", "preprocess"}) {
    const auto r = run(std::string(sub) + " --help");
    ASSERT_EQ(r.status, 0) << r.output;
    // convert and preprocess also stitch 360-degree offset-axis scans, after the steps.
    EXPECT_EQ(group_flags(r.output, "Preprocessing"),
              std::string(sub) == "recon" ? table : with_stitch)
        << sub << "\n"
        << r.output;
    for (const preprocess_option& e : preprocess_option_table())
      EXPECT_NE(r.output.find(std::string(e.help).substr(0, 40)), std::string::npos) << e.flag;
  }
}

// convert cleans: the injected zingers are replaced and counted, every other value of a view
// without the stripe step stays bit-identical.
TEST_F(PreprocessCli, ConvertRemovesTheZingersAndKeepsTheRest) {
  const auto r = run("convert dirty.h5 z.h5 --zingers 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(std::to_string(zingers_) + " zingers replaced"), std::string::npos)
      << r.output;
  const projection_stack dirty = io::read_projections((*dir_ / "dirty.h5").string()).projections;
  const projection_stack clean = io::read_projections((*dir_ / "z.h5").string()).projections;
  ASSERT_EQ(clean.size(), dirty.size());
  std::int64_t changed = 0, changed_elsewhere = 0;
  for (std::int64_t i = 0; i < dirty.size(); ++i)
    if (clean.data[i] != dirty.data[i]) {
      ++changed;
      changed_elsewhere += i % 97 != 0;
    }
  EXPECT_EQ(changed, zingers_);
  EXPECT_EQ(changed_elsewhere, 0);
}

// ctforge preprocess writes what convert with the same steps writes, bit for bit, as .h5 and
// as a TIFF stack that recon reads back; on the CPU backend and the automatic one (the steps
// that have a GPU path agree with the CPU's within 1e-5 of the peak, the gpu-labelled tests).
TEST_F(PreprocessCli, PreprocessWritesWhatConvertWrites) {
  auto r = run(std::string("convert dirty.h5 conv.h5 --quiet") + k_steps);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(std::string("preprocess dirty.h5 -o prep.h5 --backend cpu --threads 2") + k_steps);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("preprocess: cleaned: zingers 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(zingers_) + " zingers replaced"), std::string::npos)
      << r.output;
  const projection_stack conv = io::read_projections((*dir_ / "conv.h5").string()).projections;
  const projection_stack prep = io::read_projections((*dir_ / "prep.h5").string()).projections;
  EXPECT_EQ(prep.data, conv.data);
  // Negative control: the dirty scan differs from both.
  const projection_stack dirty = io::read_projections((*dir_ / "dirty.h5").string()).projections;
  EXPECT_NE(prep.data, dirty.data);
  r = run(std::string("preprocess dirty.h5 -o prep_tiff --quiet") + k_steps);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon prep_tiff -o from_tiff.h5 --geometry prep_tiff/geometry.json" +
          std::string(k_recon));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("recon prep.h5 -o from_h5.h5" + std::string(k_recon));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read("from_tiff.h5").data, read("from_h5.h5").data);
}

// preprocess refuses what it cannot do, before reading the data, exit 2 naming the cause; no
// output appears and an earlier one stays.
TEST_F(PreprocessCli, PreprocessRefusalsNameTheCause) {
  std::ofstream(*dir_ / "keep.h5") << "earlier output";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"preprocess dirty.h5 -o x.h5", "preprocess: no step given"},
      {"preprocess dirty.h5 --zingers 1", "--output is required"},
      {"preprocess p.json -o x.h5 --zingers 1", "p.json: preprocess cleans projections"},
      {"preprocess dirty.h5 -o dirty.h5 --zingers 1", "dirty.h5"},
      {"preprocess dirty.h5 -o x.h5 --zingers 1 --gpu-interpolation hardware",
       "--gpu-interpolation: applies to projectors"},
      {"preprocess dirty.h5 -o x.h5 --zingers 1 --threads -1", "--threads"},
      {"preprocess dirty.h5 -o x.h5 --stitch-360 left", "--stitch-360: expected a detector"},
      {"preprocess dirty.h5 -o keep.h5 --phase paganin", "--phase: needs"},
      {"preprocess dirty.h5 -o nodir/x.h5 --zingers 1", "nodir"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(*dir_ / "x.h5")) << args;
  }
  std::ifstream keep(*dir_ / "keep.h5");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(keep), {}), "earlier output");
  EXPECT_EQ(io::read_projections((*dir_ / "dirty.h5").string()).projections.views, 90);
}

// Each unit reads its rows plus the zinger window's margin: the slab-wise volume of the dirty
// scan is the slab-wise volume of the scan cleaned whole, bit for bit; so is a run in memory.
// Without the steps the dirty scan's volume is far from it (the negative control).
TEST_F(PreprocessCli, SlabWiseRunsCleanEachBandAsTheWholeScan) {
  auto r = run(std::string("convert dirty.h5 cleaned.h5 --quiet") + k_steps);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string slabs = " --unit-planes 3 --checkpoint-dir ";
  r = run(std::string("recon cleaned.h5 -o a.h5") + k_recon + slabs + "ck_a");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(std::string("recon dirty.h5 -o b.h5") + k_recon + k_steps + slabs + "ck_b");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read("a.h5").data, read("b.h5").data);
  r = run(std::string("recon cleaned.h5 -o c.h5") + k_recon);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(std::string("recon dirty.h5 -o d.h5") + k_recon + k_steps);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read("c.h5").data, read("d.h5").data);
  r = run(std::string("recon dirty.h5 -o e.h5") + k_recon);
  ASSERT_EQ(r.status, 0) << r.output;
  const volume b = read("b.h5"), e = read("e.h5");
  float peak = 0;
  for (float v : b.data) peak = std::max(peak, std::abs(v));
  EXPECT_GT(rms_error(b.data, e.data), 1e-2 * peak);
}

// The run record holds the steps: a checkpoint directory of a run with other steps is refused,
// naming the key. (The first run is stopped after its first unit, as a reclaimed node is.)
TEST_F(PreprocessCli, CheckpointRecordsTheSteps) {
  const fs::path script = *dir_ / "stop.sh";
  std::ofstream(script) << "cd '" << dir_->string() << "'\n'" << CTFORGE_CLI_PATH
                        << "' recon dirty.h5 -o s.h5" << k_recon << k_steps
                        << " --unit-planes 1 --checkpoint-dir ck_s > s.log 2>&1 &\npid=$!\n"
                        << "while [ $(ls ck_s/slab_*.json 2>/dev/null | wc -l) -lt 1 ] && "
                           "kill -0 $pid 2>/dev/null; do sleep 0.01; done\nkill -KILL $pid\n"
                           "wait $pid\n";
  ASSERT_EQ(std::system(("bash '" + script.string() + "'").c_str()) != -1, true);
  ASSERT_TRUE(fs::exists(*dir_ / "ck_s" / "run.json"));
  auto r = run(std::string("recon dirty.h5 -o s.h5") + k_recon +
               " --zingers 1 --zinger-size 3 --rings sorting --ring-size 5 --unit-planes 1 "
               "--checkpoint-dir ck_s");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("preprocess"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "s.h5"));
  // The same steps resume.
  r = run(std::string("recon dirty.h5 -o s.h5") + k_recon + k_steps +
          " --unit-planes 1 --checkpoint-dir ck_s");
  EXPECT_EQ(r.status, 0) << r.output;
}

// Phase retrieval and beam hardening reach the library with the scan's own numbers: convert's
// output equals the library's steps on the same projections, phase retrieval in the sample
// plane of this cone beam (magnification SDD / SID = 2: pitch 1 / 2 mm, distance R / 2), bit
// for bit (the same code on the same floats). Retrieval with the detector's pitch differs (the
// negative control that the magnification is applied).
TEST_F(PreprocessCli, ConvertAppliesPhaseAndBeamHardeningInTheSamplePlane) {
  const auto r =
      run("convert p.h5 ph.h5 --phase paganin --phase-energy 20 "
          "--phase-distance 300 --delta-beta 800 --beam-hardening 0,1,0.25");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cleaned: phase paganin (energy 20, distance 300, delta_beta 800); "
                          "beam_hardening 0,1,0.25"),
            std::string::npos)
      << r.output;
  const projection_stack got = io::read_projections((*dir_ / "ph.h5").string()).projections;
  const projection_stack raw = io::read_projections((*dir_ / "p.h5").string()).projections;
  const auto expected_with = [&](double pitch, double distance) {
    projection_stack e = raw;
    phase_options ph;
    ph.energy_kev = 20;
    ph.distance_mm = distance;
    ph.pixel_size_mm = pitch;
    ph.delta_beta = 800;
    retrieve_phase(e, ph);
    correct_beam_hardening(e, std::vector<double>{0, 1, 0.25});
    return e;
  };
  const projection_stack expected = expected_with(0.5, 150);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(got.data, expected.data);
  const projection_stack detector_plane = expected_with(1.0, 300);
  float peak = 0;
  for (float v : got.data) peak = std::max(peak, std::abs(v));
  EXPECT_GT(rms_error(detector_plane.data, got.data), 1e-4 * peak);
}

TEST_F(PreprocessCli, BadOptionsExitTwoNamingTheOption) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"recon dirty.h5 -o x.h5 --ring-size 21", "--ring-size: needs --rings"},
      {"recon dirty.h5 -o x.h5 --rings filtering --ring-la-size 51",
       "--ring-la-size: applies to --rings large/dead/all only"},
      {"recon dirty.h5 -o x.h5 --rings rings", "--rings: unknown method 'rings'"},
      {"recon dirty.h5 -o x.h5 --zingers 0", "--zingers: must be positive"},
      {"recon dirty.h5 -o x.h5 --zingers 1 --zinger-size 2", "--zinger-size: an odd window"},
      {"convert dirty.h5 x.h5 --zinger-views 3", "--zinger-views: needs --zingers"},
      {"convert p.json x.json --zingers 1",
       "--zingers: applies to projections; p.json is a geometry"},
      {"convert dirty.h5 x.h5 --phase paganin --phase-energy 20", "--phase: needs"},
      {"convert dirty.h5 x.h5 --delta-beta 100", "--delta-beta: needs --phase"},
      {"recon dirty.h5 -o x.h5 --beam-hardening 0,1,x", "--beam-hardening"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(*dir_ / "x.h5")) << args;
  }
}

// convert --stitch-360: a 360-degree half-acquisition scan (axis 25 mm off the middle of 80
// columns: column 14.5) becomes the 180-degree scan of the full-width detector centred on the
// axis (130 columns): the same line integrals to float rounding of the analytic projector
// (the mirrored views are projected from the opposite side), with the axis given or found.
TEST(StitchCli, ConvertStitchesAHalfAcquisitionScan) {
  const fs::path dir = testing::scratch_dir("preprocess_cli", "stitch");
  std::ofstream(dir / "p360.json") << R"({"type":"parallel","detector":{"cols":80,"rows":3,
      "pixel_mm":[1,1],"offset_mm":[25,0]},"angles_deg":{"start":0,"step":1,"count":360}})";
  std::ofstream(dir / "p180.json") << R"({"type":"parallel","detector":{"cols":130,"rows":3,
      "pixel_mm":[1,1]},"angles_deg":{"start":0,"step":1,"count":180}})";
  for (const char* g : {"p360", "p180"}) {
    const auto r = testing::run_cli(dir, fmt::format("simulate --phantom shepp-logan "
                                                     "--phantom-size 100 --geometry {}.json -o "
                                                     "{}.h5 --quiet",
                                                     g, g));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  const projection_stack direct = io::read_projections((dir / "p180.h5").string()).projections;
  float peak = 0;
  for (float v : direct.data) peak = std::max(peak, std::abs(v));
  for (const char* axis : {"14.5", "auto"}) {
    const auto r = testing::run_cli(dir, fmt::format("convert p360.h5 s.h5 --stitch-360 {}", axis));
    ASSERT_EQ(r.status, 0) << r.output;
    if (axis == std::string("auto")) {
      const std::size_t at = r.output.find("360-degree axis at column ");
      ASSERT_NE(at, std::string::npos) << r.output;
      EXPECT_NEAR(std::stod(r.output.substr(at + 26)), 14.5, 0.05) << r.output;
    }
    const io::projection_file f = io::read_projections((dir / "s.h5").string());
    ASSERT_EQ(f.projections.views, 180) << axis;
    ASSERT_EQ(f.projections.cols, 130) << axis;
    ASSERT_NEAR(f.geom->orbit->offset_u_mm[0], 0.0, 1e-9);
    double worst = 0;
    for (std::size_t i = 0; i < direct.data.size(); ++i)
      worst =
          std::max(worst, static_cast<double>(std::abs(f.projections.data[i] - direct.data[i])));
    // The estimate lies within 0.05 column of 14.5: its linear interpolation moves edges by
    // under 1 % of the peak; the given axis is a half-integer, stitched without interpolation.
    EXPECT_LE(worst, (axis == std::string("auto") ? 1e-2 : 1e-5) * peak) << axis;
  }
  // Negative control: an axis one column off is far from the direct scan.
  auto r = testing::run_cli(dir, "convert p360.h5 s.h5 --stitch-360 15.5 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const projection_stack off = io::read_projections((dir / "s.h5").string()).projections;
  double worst = 0;
  for (std::size_t i = 0; i < std::min(off.data.size(), direct.data.size()); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(off.data[i] - direct.data[i])));
  EXPECT_GT(worst, 1e-1 * peak);
  r = testing::run_cli(dir, "convert p360.h5 x.h5 --stitch-360 left");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--stitch-360: expected a detector column or 'auto'"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// recon --center-of-rotation auto on a 360-degree half acquisition whose file claims a centred
// axis (the usual state of a raw scan): the axis, 14.5 of 80 columns, lies outside the middle
// half the 180-degree search covers; the full-turn search over the whole width finds it, and
// the displaced-detector weights reconstruct the wide object as the true geometry does, whole
// and slab-wise. A 360-degree scan with its axis near the middle keeps Vo's method. Without
// the estimate (the file's centred axis) the volume is far off (the negative control).
TEST(StitchCli, ReconFindsTheAxisOfAHalfAcquisition) {
  const fs::path dir = testing::scratch_dir("preprocess_cli", "auto360");
  const char* scan = R"({{"type":"parallel","detector":{{"cols":80,"rows":3,"pixel_mm":[1,1],
      "offset_mm":[{},0]}},"angles_deg":{{"start":0,"step":1,"count":360}}}})";
  std::ofstream(dir / "true.json") << fmt::format(fmt::runtime(scan), 25);
  std::ofstream(dir / "centred.json") << fmt::format(fmt::runtime(scan), 0);
  std::ofstream(dir / "near.json") << fmt::format(fmt::runtime(scan), 2);
  for (const char* g : {"true", "near"}) {
    const auto r = testing::run_cli(
        dir, fmt::format("simulate --phantom shepp-logan --phantom-size 100 --geometry {}.json "
                         "-o {}.h5 --quiet",
                         g, g));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  const std::string grid = " --size-xyz 130,130,3 --spacing 1 --backend cpu --threads 2";
  auto r = testing::run_cli(dir, "recon true.h5 -o ref.h5 --quiet" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto column_of = [](const std::string& out) {
    const std::size_t at = out.find("center of rotation: column ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 27));
  };
  const volume ref = io::read_volume((dir / "ref.h5").string());
  float peak = 0;
  for (float v : ref.data) peak = std::max(peak, std::abs(v));
  for (const char* units : {"", " --unit-planes 1 --checkpoint-dir ck"}) {
    r = testing::run_cli(dir, std::string("recon true.h5 --geometry centred.json -o auto.h5 "
                                          "--center-of-rotation auto") +
                                  grid + units);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("half-acquisition method"), std::string::npos) << r.output;
    // 0.05 column: the simulated scan's parabola fit (measured 14.49).
    EXPECT_NEAR(column_of(r.output), 14.5, 0.05) << r.output;
    // 1 % of the peak: a 0.01-column axis error moves the phantom's edges by a hundredth of a
    // pixel (measured RMSE 9e-5 of 0.12, 0.07 %).
    EXPECT_LE(rms_error(io::read_volume((dir / "auto.h5").string()).data, ref.data), 1e-2 * peak)
        << units;
  }
  r = testing::run_cli(dir, "recon true.h5 --geometry centred.json -o off.h5 --quiet" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_GT(rms_error(io::read_volume((dir / "off.h5").string()).data, ref.data), 1e-1 * peak);
  r = testing::run_cli(
      dir,
      "recon near.h5 --geometry centred.json -o near_auto.h5 --center-of-rotation auto" + grid);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("fourier method"), std::string::npos) << r.output;
  EXPECT_NEAR(column_of(r.output), 37.5, 0.1) << r.output;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace ctforge
