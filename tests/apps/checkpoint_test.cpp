// ctforge recon --checkpoint-dir: a run killed at any point (SIGKILL after some units, SIGTERM
// mid-unit) resumes to the bit-identical volume of an uninterrupted run; foreign or corrupted
// units are detected; the slab-wise volume matches the one-shot reconstruction.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "ctforge/io.hpp"
#include "ctforge/metrics.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int count_units(const fs::path& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    n += name.starts_with("slab_") && name.ends_with(".json");
  }
  return n;
}

class Checkpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::scratch_dir("checkpoint", "all"));
    // The Shepp-Logan phantom scanned on a cone orbit (SID 300 mm, SDD 600 mm) into `out`.
    const auto scan = [](const std::string& out, int cols, int rows, double pixel_mm, int views) {
      std::ofstream(*dir_ / (out + ".json")) << fmt::format(
          R"({{"type":"cone","source_to_isocenter_mm":300,"source_to_detector_mm":600,
               "detector":{{"cols":{},"rows":{},"pixel_mm":[{},{}]}},
               "angles_deg":{{"start":0,"step":{},"count":{}}}}})",
          cols, rows, pixel_mm, pixel_mm, 360 / views, views);
      const auto r = testing::run_cli(*dir_,
                                      "simulate --phantom shepp-logan --phantom-size 40 "
                                      "--geometry " +
                                          out + ".json -o " + out + " --quiet");
      EXPECT_EQ(r.status, 0) << r.output;
    };
    scan("p.h5", 96, 80, 1, 180);
    // The iterative methods' states: a smaller scan (60 views of 32 x 28 pixels, the same field
    // of view), whose iterations cost a quarter of p.h5's, enough for a 24^3 volume.
    scan("it.h5", 32, 28, 3, 60);
    ASSERT_FALSE(HasFailure());
    // The uninterrupted checkpointed run every resumed run must reproduce bit for bit.
    const auto a =
        testing::run_cli(*dir_, std::string(k_recon) + " -o ref.h5 --checkpoint-dir ck0");
    ASSERT_EQ(a.status, 0) << a.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static constexpr const char* k_recon =
      "recon p.h5 --size 96 --backend cpu --threads 2 --unit-planes 4 --quiet";

  /// Starts the reconstruction in the background, sends `sig` once `units` units are recorded
  /// in `ck` (after `delay` seconds more), and returns the exit status.
  static int interrupt(const std::string& ck, const std::string& out, int units, const char* sig,
                       double delay = 0, const std::string& recon = k_recon,
                       const char* marker = "slab_") {
    const fs::path script = *dir_ / (ck + ".sh");
    // Job control for SIGINT: a non-interactive shell starts its background jobs ignoring it.
    std::ofstream(script) << (std::string(sig) == "INT" ? "set -m\n" : "") << "cd '"
                          << dir_->string() << "'\n'" << CTFORGE_CLI_PATH << "' " << recon << " -o "
                          << out << " --checkpoint-dir " << ck << " > " << ck
                          << ".log 2>&1 &\npid=$!\n"
                          << "while [ $(ls " << ck << "/" << marker
                          << "*.json 2>/dev/null | wc -l) -lt " << units
                          << " ] && kill -0 $pid 2>/dev/null; do sleep 0.01; done\n"
                          << "sleep " << delay << "\nkill -" << sig
                          << " $pid\nwait $pid\necho $?\n";
    FILE* p = ::popen(("bash '" + script.string() + "'").c_str(), "r");
    char buf[64] = {};
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, p);
    ::pclose(p);
    return std::stoi(std::string(buf, n));
  }

  static bool same_volume(const std::string& a, const std::string& b) {
    return testing::same_volume_files(*dir_ / a, *dir_ / b);
  }

  static fs::path* dir_;
};
fs::path* Checkpoint::dir_ = nullptr;

TEST_F(Checkpoint, UninterruptedRunMatchesOneShotReconstruction) {
  const auto r = testing::run_cli(
      *dir_, "recon p.h5 --size 96 --backend cpu --threads 2 --quiet -o oneshot.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  const volume a = io::read_volume((*dir_ / "ref.h5").string());
  const volume b = io::read_volume((*dir_ / "oneshot.h5").string());
  // Each slab filters only its band of detector rows and is placed at its own origin: equal to
  // the one-shot volume up to float rounding (a dropped row or a misplaced slab is >= 1e-3).
  float peak = 0;
  for (float v : b.data) peak = std::max(peak, std::abs(v));
  EXPECT_LT(mean_abs_error(a.data, b.data), 1e-6 * peak);
  EXPECT_LT(rms_error(a.data, b.data), 1e-5 * peak);
  // The units are gone once the output holds them.
  EXPECT_EQ(count_units(*dir_ / "ck0"), 0);
}

// A helical scan: its slab units (every row of every view, each unit its own heights) equal the
// one-shot volume up to float rounding, and a run killed after some units resumes to the
// uninterrupted checkpointed run's volume bit for bit.
TEST_F(Checkpoint, HelicalUnitsMatchOneShotAndResumeBitIdentical) {
  std::ofstream(*dir_ / "helix.json") << R"({"type": "helical", "detector": {"cols": 64,
    "rows": 8, "pixel_mm": [1.5, 1.5], "shape": "cylindrical"}, "source_to_isocenter_mm": 300,
    "source_to_detector_mm": 600, "angles_deg": {"start": 0, "step": 3, "count": 720},
    "pitch_factor": 1.0, "z_start_mm": -18})";
  auto r = testing::run_cli(*dir_,
                            "simulate --phantom shepp-logan --phantom-size 40 "
                            "--geometry helix.json -o h.h5 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string recon = "recon h.h5 --size-xyz 48,48,30 --backend cpu --threads 2 --quiet";
  r = testing::run_cli(*dir_, recon + " -o h_oneshot.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string units = recon + " --unit-planes 3";
  r = testing::run_cli(*dir_, units + " -o h_ref.h5 --checkpoint-dir hck0");
  ASSERT_EQ(r.status, 0) << r.output;
  const volume a = io::read_volume((*dir_ / "h_ref.h5").string());
  const volume b = io::read_volume((*dir_ / "h_oneshot.h5").string());
  float peak = 0;
  for (float v : b.data) peak = std::max(peak, std::abs(v));
  ASSERT_GT(peak, 0);
  // Units sum a voxel's views in other batches than the whole run: float rounding only (a unit
  // at the wrong heights or reading the wrong rows differs by > 1e-2 of the peak).
  float worst = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    worst = std::max(worst, std::abs(a.data[i] - b.data[i]));
  EXPECT_LE(worst, 1e-5 * peak);
  const int status = interrupt("hck_kill", "h_kill.h5", 3, "KILL", 0.02, units);
  EXPECT_EQ(status, 128 + 9);
  EXPECT_FALSE(fs::exists(*dir_ / "h_kill.h5"));
  r = testing::run_cli(*dir_, units + " -o h_kill.h5 --checkpoint-dir hck_kill");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_volume("h_kill.h5", "h_ref.h5"));
}

TEST_F(Checkpoint, SigkillAtSeveralPointsResumesBitIdentical) {
  for (int units : {1, 5, 13}) {
    const std::string ck = "ck_kill" + std::to_string(units);
    const int status = interrupt(ck, "kill.h5", units, "KILL", 0.01);
    EXPECT_EQ(status, 128 + 9) << "units " << units;
    EXPECT_FALSE(fs::exists(*dir_ / "kill.h5"));
    const int recorded = count_units(*dir_ / ck);
    EXPECT_GE(recorded, units);
    const auto r = testing::run_cli(
        *dir_, std::string(k_recon) + " -o kill.h5 --checkpoint-dir " + ck + " --quiet");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(same_volume("kill.h5", "ref.h5")) << "units " << units;
    fs::remove(*dir_ / "kill.h5");
  }
}

TEST_F(Checkpoint, SigtermStopsWithinAUnitAndResumes) {
  const int status = interrupt("ck_term", "term.h5", 3, "TERM", 0.03);
  EXPECT_EQ(status, 128 + 15);
  const std::string log = bytes_of(*dir_ / "ck_term.log");
  EXPECT_NE(log.find("stopped by SIGTERM"), std::string::npos) << log;
  EXPECT_NE(log.find("run the same command again"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(*dir_ / "term.h5"));
  EXPECT_TRUE(testing::leftover_temporaries(*dir_ / "ck_term").empty());
  const auto r =
      testing::run_cli(*dir_, std::string(k_recon) + " -o term.h5 --checkpoint-dir ck_term");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_volume("term.h5", "ref.h5"));
}

// SIGINT stops a run as SIGTERM does; SIGHUP ends it at once (the temporaries removed). Either
// way the recorded units are whole and the same command resumes to the bit-identical volume.
TEST_F(Checkpoint, SigintAndSighupResumeBitIdentical) {
  for (const std::string sig : {"INT", "HUP"}) {
    const std::string ck = "ck_sig" + sig;
    const int status = interrupt(ck, "sig.h5", 3, sig.c_str(), 0.03);
    EXPECT_EQ(status, 128 + (sig == "INT" ? SIGINT : SIGHUP)) << sig;
    EXPECT_FALSE(fs::exists(*dir_ / "sig.h5")) << sig;
    EXPECT_TRUE(testing::leftover_temporaries(*dir_ / ck).empty()) << sig;
    EXPECT_GE(count_units(*dir_ / ck), 3) << sig;
    const auto r =
        testing::run_cli(*dir_, std::string(k_recon) + " -o sig.h5 --checkpoint-dir " + ck);
    ASSERT_EQ(r.status, 0) << sig << ": " << r.output;
    EXPECT_TRUE(same_volume("sig.h5", "ref.h5")) << sig;
    fs::remove(*dir_ / "sig.h5");
  }
}

// A full disk under the checkpoint directory (a 1 MiB tmpfs; the 24 units of 96 x 96 x 4 floats
// need 3.4 MiB): exit 1 naming the directory, no temporary and no output left, and the units it
// did record are whole: a copy of them on a roomy disk resumes to the uninterrupted volume.
TEST_F(Checkpoint, FullDiskKeepsTheRecordedUnitsWhole) {
  testing::small_tmpfs disk(*dir_ / "ck_full", 1024);
  if (!disk.ok) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << disk.why;
  auto r = testing::run_cli(*dir_, std::string(k_recon) + " -o full.h5 --checkpoint-dir ck_full");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("ck_full"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "full.h5"));
  EXPECT_TRUE(testing::leftover_temporaries(*dir_ / "ck_full").empty());
  EXPECT_TRUE(testing::leftover_temporaries(*dir_).empty());
  const int recorded = count_units(*dir_ / "ck_full");
  EXPECT_GT(recorded, 0);
  EXPECT_LT(recorded, 24);
  fs::copy(*dir_ / "ck_full", *dir_ / "ck_roomy", fs::copy_options::recursive);
  r = testing::run_cli(*dir_, std::string(k_recon) + " -o full.h5 --checkpoint-dir ck_roomy");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_volume("full.h5", "ref.h5"));
}

TEST_F(Checkpoint, ForeignAndCorruptedUnitsAreDetected) {
  ASSERT_EQ(interrupt("ck_bad", "bad.h5", 4, "KILL"), 128 + 9);
  // Another filter: the directory belongs to another run, and the message says what differs.
  auto r = testing::run_cli(
      *dir_, std::string(k_recon) + " --filter hann -o bad.h5 --checkpoint-dir ck_bad");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("filter"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hann"), std::string::npos) << r.output;
  // A corrupted unit (one flipped byte) is recomputed, not trusted.
  fs::path victim;
  // A recorded unit's data, not the temporary of the unit the SIGKILL cut short (".slab_...").
  for (const auto& e : fs::directory_iterator(*dir_ / "ck_bad"))
    if (e.path().extension() == ".f32" && e.path().filename().string().starts_with("slab_"))
      victim = e.path();
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  r = testing::run_cli(*dir_,
                       std::string(k_recon).replace(std::string(k_recon).find(" --quiet"), 8, "") +
                           " -o bad.h5 --checkpoint-dir ck_bad");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("checksum mismatch"), std::string::npos) << r.output;
  EXPECT_TRUE(same_volume("bad.h5", "ref.h5"));
}

// SIRT: the iterate is saved into two alternating slots; a run killed or stopped at any
// iteration resumes to the bit-identical result, which is also plain SIRT's.
TEST_F(Checkpoint, SirtResumesBitIdenticalFromEitherSlot) {
  const std::string sirt =
      "recon it.h5 --size 24 --algorithm sirt --iterations 20 --backend cpu --threads 2 "
      "--checkpoint-every 1 --checkpoint-seconds 0 --quiet";
  auto r = testing::run_cli(*dir_, sirt + " -o sirt_plain.h5 --checkpoint-dir ck_sirt_ref");
  ASSERT_EQ(r.status, 0) << r.output;
  r = testing::run_cli(*dir_,
                       "recon it.h5 --size 24 --algorithm sirt --iterations 20 "
                       "--backend cpu --threads 2 --quiet -o sirt_nock.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_volume("sirt_plain.h5", "sirt_nock.h5"));

  // SIGKILL once a state is saved: resumed from it.
  EXPECT_EQ(interrupt("ck_sirt_kill", "sirt_k.h5", 2, "KILL", 0.05, sirt, "sirt_"), 128 + 9);
  r = testing::run_cli(*dir_, std::string(sirt).replace(sirt.find(" --quiet"), 8, "") +
                                  " -o sirt_k.h5 --checkpoint-dir ck_sirt_kill");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resuming SIRT after iteration"), std::string::npos) << r.output;
  EXPECT_TRUE(same_volume("sirt_k.h5", "sirt_plain.h5"));

  // SIGTERM: the iterate is saved at the stop, then one slot is corrupted: the other is used.
  EXPECT_EQ(interrupt("ck_sirt_term", "sirt_t.h5", 2, "TERM", 0.05, sirt, "sirt_"), 128 + 15);
  const std::string log = bytes_of(*dir_ / "ck_sirt_term.log");
  EXPECT_NE(log.find("iterations is kept in"), std::string::npos) << log;
  {
    std::fstream f(*dir_ / "ck_sirt_term" / "sirt_0.f32",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.put('\x55');
  }
  r = testing::run_cli(*dir_, std::string(sirt).replace(sirt.find(" --quiet"), 8, "") +
                                  " -o sirt_t.h5 --checkpoint-dir ck_sirt_term");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("sirt_0: checksum mismatch"), std::string::npos) << r.output;
  EXPECT_TRUE(same_volume("sirt_t.h5", "sirt_plain.h5"));
}

// The other iterative methods keep more state than SIRT (CGLS: residual, direction, norms;
// FISTA-TV: extrapolated point, projections, momentum, step; OS-SART, OSEM: the iterate): killed
// once a state is saved, the same command resumes from it to the bit-identical volume of a run
// without a checkpoint. The directory refuses the same method with another option.
TEST_F(Checkpoint, EveryIterativeMethodResumesBitIdentical) {
  struct method {
    const char* args;
    const char* key;   // file names
    const char* stem;  // state slots
    const char* name;  // in messages
  };
  for (const method m : {method{"cgls", "cgls", "cgls_", "CGLS"},
                         method{"fista-tv --tv-weight 1e-3", "fista", "fista_tv_", "FISTA-TV"},
                         method{"os-sart --subsets 4", "ossart", "os_sart_", "OS-SART"},
                         method{"osem --subsets 4", "osem", "osem_", "OSEM"}}) {
    const std::string key = m.key;
    const std::string cmd = std::string("recon it.h5 --size 24 --algorithm ") + m.args +
                            " --iterations 10 --backend cpu --threads 2 --checkpoint-every 1 "
                            "--checkpoint-seconds 0 --log-iterations " +
                            key + ".csv --quiet";
    auto r = testing::run_cli(*dir_, std::string("recon it.h5 --size 24 --algorithm ") + m.args +
                                         " --iterations 10 --backend cpu --threads 2 --quiet -o " +
                                         key + "_plain.h5");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(interrupt("ck_" + key, key + "_k.h5", 2, "KILL", 0.02, cmd, m.stem), 128 + 9)
        << m.args;
    EXPECT_FALSE(fs::exists(*dir_ / (key + "_k.h5")));
    r = testing::run_cli(*dir_, std::string(cmd).replace(cmd.find(" --quiet"), 8, "") + " -o " +
                                    key + "_k.h5 --checkpoint-dir ck_" + key);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("resuming ") + m.name + " after iteration"),
              std::string::npos)
        << r.output;
    EXPECT_TRUE(same_volume(key + "_k.h5", key + "_plain.h5")) << m.args;
    // The log is the whole run's: iterations 1 to 10, the resumed ones' seconds continuing.
    std::istringstream csv(bytes_of(*dir_ / (key + ".csv")));
    std::string line;
    std::getline(csv, line);  // header
    int expected = 1;
    double last_seconds = 0;
    while (std::getline(csv, line)) {
      EXPECT_EQ(std::stoi(line.substr(0, line.find(','))), expected) << m.args << ": " << line;
      std::istringstream cells(line);
      std::string cell;
      for (int k = 0; k < 5; ++k) std::getline(cells, cell, ',');  // the 5th: seconds
      const double seconds = std::stod(cell);
      EXPECT_GE(seconds, last_seconds) << m.args << ": " << line;
      last_seconds = seconds;
      ++expected;
    }
    EXPECT_EQ(expected, 11) << m.args;
  }
  // Another TV weight is another run: refused with the difference named, the state kept.
  const std::string fista =
      "recon it.h5 --size 24 --algorithm fista-tv --tv-weight 1e-3 --iterations 10 --backend cpu "
      "--threads 2 --checkpoint-every 1 --checkpoint-seconds 0 --quiet";
  EXPECT_EQ(interrupt("ck_fista2", "fista2.h5", 2, "KILL", 0.02, fista, "fista_tv_"), 128 + 9);
  const auto r = testing::run_cli(*dir_, std::string(fista).replace(fista.find("1e-3"), 4, "2e-3") +
                                             " -o fista2.h5 --checkpoint-dir ck_fista2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("tv_weight"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(*dir_ / "ck_fista2" / "fista_tv_0.json"));
  // Fewer iterations than the state holds: refused (exit 2) rather than started over, the state
  // kept.
  const auto fewer = testing::run_cli(
      *dir_, std::string(fista).replace(fista.find("--iterations 10"), 15, "--iterations 1") +
                 " -o fista3.h5 --checkpoint-dir ck_fista2");
  EXPECT_EQ(fewer.status, 2) << fewer.output;
  EXPECT_NE(fewer.output.find("--iterations: "), std::string::npos) << fewer.output;
  EXPECT_NE(fewer.output.find("ask for at least"), std::string::npos) << fewer.output;
  EXPECT_FALSE(fs::exists(*dir_ / "fista3.h5"));
  EXPECT_TRUE(fs::exists(*dir_ / "ck_fista2" / "fista_tv_0.json"));
}

// A run started with --initial resumes with the same command (the saved state continues it),
// bit-identical to an uninterrupted run from that start; another start is another run.
TEST_F(Checkpoint, RunFromInitialResumesWithTheSameCommand) {
  const std::string base =
      "recon it.h5 --size 24 --algorithm sirt --backend cpu --threads 2 --quiet";
  auto r = testing::run_cli(*dir_, base + " -o start.h5 --iterations 2");
  ASSERT_EQ(r.status, 0) << r.output;
  r = testing::run_cli(*dir_, base + " -o other_start.h5 --iterations 3");
  ASSERT_EQ(r.status, 0) << r.output;
  // Enough iterations (40, tens of milliseconds each, ten times that under AddressSanitizer)
  // that the run is still going when it is killed after its second saved state.
  const std::string from = base + " --iterations 40 --initial start.h5";
  r = testing::run_cli(*dir_, from + " -o init_plain.h5");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string cmd = from + " --checkpoint-every 1 --checkpoint-seconds 0";
  EXPECT_EQ(interrupt("ck_init", "init_k.h5", 2, "KILL", 0.02, cmd, "sirt_"), 128 + 9);
  r = testing::run_cli(*dir_, cmd + " -o init_k.h5 --checkpoint-dir ck_init");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_volume("init_k.h5", "init_plain.h5"));
  // Another --initial into a directory holding a state: refused, naming the difference.
  EXPECT_EQ(interrupt("ck_init2", "init2.h5", 2, "KILL", 0.02, cmd, "sirt_"), 128 + 9);
  std::string other = cmd;
  other.replace(other.find("start.h5"), 8, "other_start.h5");
  r = testing::run_cli(*dir_, other + " -o init2.h5 --checkpoint-dir ck_init2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("holds units of another run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("initial"), std::string::npos) << r.output;
}

// --memory-limit: the units' planes go straight into the .h5 output; with the same units the
// volume is the checkpointed run's, bit for bit. A stopped run leaves nothing.
TEST_F(Checkpoint, MemoryLimitStreamsUnitsIntoTheOutput) {
  auto r = testing::run_cli(*dir_, std::string(k_recon) + " -o lim.h5 --memory-limit 3M");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_volume("lim.h5", "ref.h5"));
  // (The directory is shared with the SIGKILL tests, whose killed runs may leave theirs.)
  for (const std::string& n : testing::leftover_temporaries(*dir_))
    EXPECT_FALSE(n.starts_with("lim.")) << n;
  // Too small for one plane: a usage error naming the option and the bytes needed.
  r = testing::run_cli(*dir_, std::string(k_recon) + " -o tiny.h5 --memory-limit 10K");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--memory-limit"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "tiny.h5"));
  // Streaming needs an HDF5 output.
  r = testing::run_cli(*dir_, std::string(k_recon) + " -o lim.mha --memory-limit 3M");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(".h5"), std::string::npos) << r.output;
}

/// Peak resident memory (KiB) of `ctforge <args>` run in `dir`.
long peak_rss_kib(const fs::path& dir, const std::string& args) {
  const std::string cmd =
      "cd '" + dir.string() + "' && exec '" + CTFORGE_CLI_PATH + "' " + args + " > /dev/null";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << args;
  return ru.ru_maxrss;
}

// A volume several times larger than --memory-limit: the peak memory above the program's
// own (the small run's) stays within the limit and its slack, far below the volume alone;
// without the limit the same run holds the whole volume and projections (negative control).
TEST_F(Checkpoint, MemoryLimitBoundsPeakMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "peak RSS under AddressSanitizer counts its shadow memory and the quarantine "
                  "of freed blocks; measured in the plain build";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "peak RSS under AddressSanitizer counts its shadow memory and the quarantine "
                  "of freed blocks; measured in the plain build";
#endif
#endif
  std::ofstream(*dir_ / "big.json")
      << R"({"type":"cone","source_to_isocenter_mm":400,"source_to_detector_mm":800,
             "detector":{"cols":256,"rows":160,"pixel_mm":[1,1]},
             "angles_deg":{"start":0,"step":3,"count":120}})";
  auto r = testing::run_cli(*dir_,
                            "simulate --phantom shepp-logan --phantom-size 100 "
                            "--geometry big.json -o big.h5 --quiet");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string recon = "recon big.h5 --size-xyz 256,256,192 --backend cpu --threads 2 --quiet";
  const long volume_kib = 256L * 256 * 192 * 4 / 1024;       // 48 MiB
  const long projections_kib = 120L * 160 * 256 * 4 / 1024;  // 19 MiB
  const long limit_kib = 12 * 1024;
  const long base = peak_rss_kib(*dir_,
                                 "recon p.h5 --size 8 --backend cpu --threads 2 --quiet "
                                 "-o small.h5 --memory-limit 3M");
  const long limited = peak_rss_kib(*dir_, recon + " -o big_lim.h5 --memory-limit 12M");
  const long whole = peak_rss_kib(*dir_, recon + " -o big_whole.h5");
  std::cout << "[ metric   ] peak RSS: program " << base << " KiB, 256x256x192 with "
            << "--memory-limit 12M " << limited << " KiB, without " << whole << " KiB\n";
  // The limit counts data only; allocator and library slack come on top: 1.5 x the limit.
  EXPECT_LT(limited - base, limit_kib * 3 / 2);
  EXPECT_LT(limited - base, volume_kib / 2);
  EXPECT_GT(whole - base, volume_kib + projections_kib / 2);
  const volume a = io::read_volume((*dir_ / "big_lim.h5").string());
  const volume b = io::read_volume((*dir_ / "big_whole.h5").string());
  float peak = 0;
  for (float v : b.data) peak = std::max(peak, std::abs(v));
  EXPECT_LT(mean_abs_error(a.data, b.data), 1e-6 * peak);
}

}  // namespace
}  // namespace ctforge
