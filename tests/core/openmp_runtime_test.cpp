// src/core/openmp_runtime.cpp: an empty OpenMP runtime registration found under a ctforge
// process's own pid (left by a killed process that had the pid before) is removed before main(),
// so that the process runs its parallel regions instead of dying of SIGBUS in LLVM's runtime
// (the clang builds); the same name under another user is not touched.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

fs::path registration(pid_t pid, long uid) {
  return fs::path("/dev/shm") /
         ("__KMP_REGISTERED_LIB_" + std::to_string(pid) + "_" + std::to_string(uid));
}

TEST(OpenmpRuntime, EmptyRegistrationUnderOwnPidIsRemovedBeforeMain) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm on this machine";
  const fs::path dir = testing::scratch_dir("openmp_runtime", "own_pid");
  std::ofstream(dir / "g.json")
      << R"({"type":"cone","source_to_isocenter_mm":300,"source_to_detector_mm":600,
             "detector":{"cols":16,"rows":12,"pixel_mm":[1,1]},
             "angles_deg":{"start":0,"step":30,"count":12}})";
  const long uid = static_cast<long>(::getuid());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // What a process killed while registering leaves behind, under the pid the CLI will run
    // with (exec keeps it), and the same name for another user (the negative control).
    std::ofstream(registration(::getpid(), uid));
    std::ofstream(registration(::getpid(), uid + 1));
    if (::chdir(dir.c_str()) != 0) ::_exit(90);
    // simulate runs parallel regions (phantom, projection): with libomp, its first one would
    // read the empty file.
    ::execl(CTFORGE_CLI_PATH, "ctforge", "simulate", "--phantom", "shepp-logan", "--phantom-size",
            "16", "--geometry", "g.json", "-o", "p.h5", "--quiet", static_cast<char*>(nullptr));
    ::_exit(91);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const bool own_left = fs::exists(registration(child, uid));
  const bool other_left = fs::exists(registration(child, uid + 1));
  std::error_code ec;
  fs::remove(registration(child, uid), ec);
  fs::remove(registration(child, uid + 1), ec);
  ASSERT_TRUE(WIFEXITED(status)) << "the CLI died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(own_left) << "the empty registration under the CLI's pid was kept";
  EXPECT_TRUE(other_left) << "another user's registration was removed";
  EXPECT_TRUE(fs::exists(dir / "p.h5"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctforge
