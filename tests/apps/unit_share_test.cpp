// ctforge recon --checkpoint-dir DIR --unit-share K/N: each process computes the slab units
// i % N == K that DIR does not hold, and whichever finds every unit recorded writes the output.
// Shares run one after the other, at the same time, assembling at the same time, or killed and
// run again give the volume of one checkpointed run bit for bit; misuse is refused (exit 2).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "ctforge/io.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

/// The markers of recorded units in `dir` and their inode numbers (a rewritten marker gets a new
/// one: every file is written under a temporary name and renamed).
std::map<std::string, ino_t> markers(const fs::path& dir) {
  std::map<std::string, ino_t> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    struct stat st {};
    if (name.starts_with("slab_") && name.ends_with(".json") && ::stat(e.path().c_str(), &st) == 0)
      found[name] = st.st_ino;
  }
  return found;
}

std::string text_of(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class UnitShare : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::scratch_dir("unit_share", "all"));
    // The Shepp-Logan phantom on a cone orbit: 24 units of 4 planes, 8 per share of three.
    std::ofstream(*dir_ / "g.json") << testing::cone_json(96, 80, 1, 2, 180);
    auto r = testing::run_cli(*dir_,
                              "simulate --phantom shepp-logan --phantom-size 40 --geometry g.json "
                              "-o p.h5 --quiet");
    ASSERT_EQ(r.status, 0) << r.output;
    // The one checkpointed run every combination of shares must reproduce bit for bit.
    r = testing::run_cli(*dir_, std::string(k_recon) + " -o ref.h5 --checkpoint-dir ck_ref");
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_->parent_path(), ec);  // <tmp>/ctforge_unit_share_<pid>
    delete dir_;
    dir_ = nullptr;
  }
  static constexpr const char* k_recon =
      "recon p.h5 --size 96 --backend cpu --threads 2 --unit-planes 4";

  /// `ctforge <k_recon> -o OUT --checkpoint-dir CK --unit-share SHARE`.
  static testing::cli_result share(const std::string& out, const std::string& ck,
                                   const std::string& s) {
    return testing::run_cli(
        *dir_, fmt::format("{} -o {} --checkpoint-dir {} --unit-share {}", k_recon, out, ck, s));
  }

  /// Runs the shares `shares` of one run at the same time (background processes of one shell)
  /// and returns their exit statuses, each one's output in `<ck>.<k>.log`.
  static std::vector<int> concurrently(const std::string& out, const std::string& ck,
                                       const std::vector<std::string>& shares) {
    const fs::path script = *dir_ / (ck + ".sh");
    std::ofstream s(script);
    s << "cd '" << dir_->string() << "'\n";
    for (std::size_t k = 0; k < shares.size(); ++k)
      s << "'" << CTFORGE_CLI_PATH << "' " << k_recon << " -o " << out << " --checkpoint-dir " << ck
        << " --unit-share " << shares[k] << " > " << ck << "." << k << ".log 2>&1 &\n"
        << "p" << k << "=$!\n";
    for (std::size_t k = 0; k < shares.size(); ++k) s << "wait $p" << k << "; echo $?\n";
    s.close();
    std::vector<int> status;
    FILE* p = ::popen(("bash '" + script.string() + "'").c_str(), "r");
    int v = 0;
    while (std::fscanf(p, "%d", &v) == 1) status.push_back(v);
    ::pclose(p);
    return status;
  }

  static bool same_volume(const std::string& a, const std::string& b) {
    return testing::same_volume_files(*dir_ / a, *dir_ / b);
  }

  /// No temporary of `out` is left in the directory, and `ck` holds no unit any more.
  static void expect_clean(const std::string& out, const std::string& ck) {
    for (const std::string& n : testing::leftover_temporaries(*dir_))
      EXPECT_FALSE(n.starts_with("." + out.substr(0, out.find('.')) + ".")) << n;
    EXPECT_TRUE(markers(*dir_ / ck).empty()) << ck;
    EXPECT_FALSE(fs::exists(*dir_ / ck / "run.json")) << ck;
    EXPECT_TRUE(testing::leftover_temporaries(*dir_ / ck).empty()) << ck;
  }

  static fs::path* dir_;
};
fs::path* UnitShare::dir_ = nullptr;

TEST_F(UnitShare, SharesOneAfterTheOtherMatchOneCheckpointedRun) {
  auto r = share("seq.h5", "ck_seq", "0/3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("share 0/3: 8 of the 24 units; 0 recorded already, computing 8"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("8 of the 24 units of the run are recorded in ck_seq"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "seq.h5"));
  EXPECT_EQ(markers(*dir_ / "ck_seq").size(), 8u);
  r = share("seq.h5", "ck_seq", "1/3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("16 of the 24 units of the run are recorded"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "seq.h5"));
  // The last share finds every unit recorded and writes the output; the units are removed.
  r = share("seq.h5", "ck_seq", "2/3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("every unit of the run is recorded; writing seq.h5"), std::string::npos)
      << r.output;
  EXPECT_TRUE(same_volume("seq.h5", "ref.h5"));
  expect_clean("seq.h5", "ck_seq");
  // A share started again once the output is written (a replacement pod) computes nothing: the
  // directory says which run the output was assembled from.
  r = share("seq.h5", "ck_seq", "1/3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("seq.h5 was written from the units of this run by another process"),
            std::string::npos)
      << r.output;
  expect_clean("seq.h5", "ck_seq");
  // ... unless the output is gone: then the share computes its units again.
  fs::remove(*dir_ / "seq.h5");
  r = share("seq.h5", "ck_seq", "1/3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("computing 8"), std::string::npos) << r.output;
  // More shares than units: the shares without a unit only count, and the run still completes.
  r = share("many.h5", "ck_many", "30/31");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("0 of the 24 units; 0 recorded already, computing 0"), std::string::npos)
      << r.output;
  // A run without --unit-share computes what is missing and assembles.
  r = testing::run_cli(*dir_, std::string(k_recon) + " -o many.h5 --checkpoint-dir ck_many");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(same_volume("many.h5", "ref.h5"));
}

TEST_F(UnitShare, SharesAtTheSameTimeMatchOneCheckpointedRun) {
  const std::vector<int> status = concurrently("conc.h5", "ck_conc", {"0/3", "1/3", "2/3"});
  ASSERT_EQ(status, (std::vector<int>{0, 0, 0}));
  int writers = 0;
  for (int k = 0; k < 3; ++k) {
    const std::string log = text_of(*dir_ / fmt::format("ck_conc.{}.log", k));
    EXPECT_NE(log.find("computing 8"), std::string::npos) << log;
    writers += log.find("writing conc.h5") != std::string::npos;
  }
  EXPECT_GE(writers, 1);
  std::cout << "[ metric   ] 3 concurrent shares: " << writers << " wrote the output\n";
  EXPECT_TRUE(same_volume("conc.h5", "ref.h5"));
  expect_clean("conc.h5", "ck_conc");
}

// Every unit recorded, nothing assembled yet: two shares started together both find every unit
// recorded and both write the output at once. Each writes under a temporary name of its own and
// renames it: one complete file either way, and whichever cleared the units first does not
// make the other fail (it computes again any unit gone before it read it).
TEST_F(UnitShare, TwoSharesAssemblingAtOnceLeaveOneCompleteFile) {
  auto r = share("both.h5", "ck_both", "0/2");
  ASSERT_EQ(r.status, 0) << r.output;
  r = share("both.h5", "ck_half", "1/2");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const auto& e : fs::directory_iterator(*dir_ / "ck_half"))
    if (e.path().filename().string().starts_with("slab_"))
      fs::copy_file(e.path(), *dir_ / "ck_both" / e.path().filename());
  ASSERT_EQ(markers(*dir_ / "ck_both").size(), 24u);
  ASSERT_FALSE(fs::exists(*dir_ / "both.h5"));
  const std::vector<int> status = concurrently("both.h5", "ck_both", {"0/2", "1/2"});
  ASSERT_EQ(status, (std::vector<int>{0, 0}));
  // Each writes the output, or (started late on a busy machine) finds it written from the
  // units of this run and does nothing.
  int writers = 0;
  for (int k = 0; k < 2; ++k) {
    const std::string log = text_of(*dir_ / fmt::format("ck_both.{}.log", k));
    const bool wrote = log.find("writing both.h5") != std::string::npos;
    writers += wrote;
    if (wrote) {
      EXPECT_NE(log.find("computing 0"), std::string::npos) << log;
    } else {
      EXPECT_NE(log.find("was written from the units of this run by another process"),
                std::string::npos)
          << log;
    }
  }
  EXPECT_GE(writers, 1);
  std::cout << "[ metric   ] 2 shares with every unit recorded: " << writers
            << " wrote the output\n";
  EXPECT_TRUE(same_volume("both.h5", "ref.h5"));
  expect_clean("both.h5", "ck_both");
}

// What the later of two writers meets when the first has already cleared the directory: units
// whose markers it counted are gone when it reads them. It computes them again (the same floats)
// instead of failing. Here share 1's data files are removed before share 0 runs: share 0 counts
// 24 markers, assembles, and computes share 1's units again.
TEST_F(UnitShare, UnitsGoneWhileAssemblingAreComputedAgain) {
  auto r = share("gone.h5", "ck_gone", "1/2");
  ASSERT_EQ(r.status, 0) << r.output;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(*dir_ / "ck_gone"))
    if (e.path().extension() == ".f32") removed += fs::remove(e.path());
  ASSERT_EQ(removed, 12);
  r = share("gone.h5", "ck_gone", "0/2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("writing gone.h5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("slab_000004_000008: data file missing or of the wrong size; computing "
                          "it again"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(same_volume("gone.h5", "ref.h5"));
  expect_clean("gone.h5", "ck_gone");
}

// A share SIGKILLed in the middle of a unit: run again, it computes only the units it had not
// recorded (those it had are not written again), and the other shares complete the run. Units
// of one plane (32 per share) leave a wide margin between the third recorded unit, when the kill
// is sent, and the share's last one, however fast the machine.
TEST_F(UnitShare, KilledShareRunAgainComputesOnlyWhatIsMissing) {
  const std::string recon = "recon p.h5 --size 96 --backend cpu --threads 2 --unit-planes 1";
  auto r = testing::run_cli(*dir_, recon + " -o ref1.h5 --checkpoint-dir ck_ref1");
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path script = *dir_ / "kill.sh";
  std::ofstream(script) << "cd '" << dir_->string() << "'\n'" << CTFORGE_CLI_PATH << "' " << recon
                        << " -o kill.h5 --checkpoint-dir ck_kill --unit-share 1/3 > kill.log "
                           "2>&1 &\npid=$!\n"
                        << "while [ $(ls ck_kill/slab_*.json 2>/dev/null | wc -l) -lt 3 ] && "
                           "kill -0 $pid 2>/dev/null; do sleep 0.002; done\n"
                        << "kill -KILL $pid\nwait $pid 2>/dev/null\necho $?\n";
  FILE* p = ::popen(("bash '" + script.string() + "'").c_str(), "r");
  int status = -1;
  EXPECT_EQ(std::fscanf(p, "%d", &status), 1);
  ::pclose(p);
  ASSERT_EQ(status, 128 + 9) << text_of(*dir_ / "kill.log");
  const std::map<std::string, ino_t> before = markers(*dir_ / "ck_kill");
  ASSERT_GE(before.size(), 3u);
  ASSERT_LT(before.size(), 32u) << "the share finished before it was killed";
  std::cout << "[ metric   ] killed after " << before.size() << " of its 32 units\n";
  r = testing::run_cli(*dir_, fmt::format("{} -o kill.h5 --checkpoint-dir ck_kill --unit-share 1/3",
                                          recon));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(fmt::format("{} recorded already, computing {}", before.size(),
                                      32 - before.size())),
            std::string::npos)
      << r.output;
  const std::map<std::string, ino_t> after = markers(*dir_ / "ck_kill");
  EXPECT_EQ(after.size(), 32u);
  for (const auto& [name, inode] : before) {
    ASSERT_TRUE(after.contains(name)) << name;
    EXPECT_EQ(after.at(name), inode) << name << " was written again";
  }
  for (const char* s : {"0/3", "2/3"}) {
    r = testing::run_cli(
        *dir_, fmt::format("{} -o kill.h5 --checkpoint-dir ck_kill --unit-share {}", recon, s));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  EXPECT_TRUE(same_volume("kill.h5", "ref1.h5"));
  expect_clean("kill.h5", "ck_kill");
}

TEST_F(UnitShare, MisuseIsRefusedNamingTheOption) {
  // Malformed shares, an unexpanded variable among them.
  for (const std::string s :
       {"3/3", "1/0", "x/3", "-1/3", "1", "1/3/4", "'$(JOB_INDEX)/4'", "/3"}) {
    const auto r = share("bad.h5", "ck_bad", s);
    EXPECT_EQ(r.status, 2) << s << ": " << r.output;
    EXPECT_NE(r.output.find("--unit-share: expected K/N"), std::string::npos) << r.output;
  }
  // Without a checkpoint directory, where the shares record their units.
  const std::string plain = "recon p.h5 --size 96 --backend cpu --threads 2";
  auto r = testing::run_cli(*dir_, plain + " -o bad.h5 --unit-share 0/2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--unit-share: needs --checkpoint-dir"), std::string::npos) << r.output;
  r = testing::run_cli(*dir_, plain + " -o bad.h5 --memory-limit 3M --unit-share 0/2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--unit-share: needs --checkpoint-dir"), std::string::npos) << r.output;
  // The iterative methods have no slab units to share.
  r = testing::run_cli(*dir_,
                       "recon p.h5 --size 16 --algorithm sirt --iterations 2 --backend cpu -o "
                       "bad.h5 --checkpoint-dir ck_bad --unit-share 0/2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--unit-share: does not apply to --algorithm sirt (only to fdk, fbp, "
                          "helical-fbp"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "bad.h5"));
  EXPECT_FALSE(fs::exists(*dir_ / "ck_bad"));
}

}  // namespace
}  // namespace ctforge
