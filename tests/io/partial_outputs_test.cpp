// An output being written is removed when the process is stopped by a signal (Ctrl-C, SIGTERM
// of a reclaimed spot instance); outputs no longer being written are left alone.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>

#include "ctforge/io.hpp"

namespace fs = std::filesystem;

namespace {

fs::path scratch_dir() {
  const fs::path d = fs::temp_directory_path() / ("ctforge_partial_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void touch(const fs::path& p) {
  std::ofstream(p) << "half written";
}

// Runs `body` in a child process and returns its wait status.
template <class F>
int in_child(F&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST(PartialOutputs, SignalRemovesRegisteredFilesOnly) {
  const fs::path dir = scratch_dir();
  const fs::path writing = dir / "vol.h5.part", finished = dir / "done.h5.part";
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    touch(writing);
    touch(finished);
    const int status = in_child([&] {
      ctforge::io::install_interrupt_cleanup();
      const int a = ctforge::io::register_partial_output(writing.string());
      const int b = ctforge::io::register_partial_output(finished.string());
      if (a < 0 || b < 0) ::_exit(3);
      ctforge::io::unregister_partial_output(b);
      ::kill(::getpid(), sig);
      ::pause();
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": the process must still die of it";
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_FALSE(fs::exists(writing)) << "signal " << sig;
    EXPECT_TRUE(fs::exists(finished)) << "signal " << sig << ": an unregistered file was removed";
  }
  fs::remove_all(dir);
}

TEST(PartialOutputs, WriteAtomicallyUnregistersAfterRename) {
  const fs::path dir = scratch_dir();
  const fs::path out = dir / "out.txt";
  const int status = in_child([&] {
    ctforge::io::install_interrupt_cleanup();
    ctforge::io::write_atomically(out.string(), [](const std::string& tmp) { touch(tmp); });
    // A later file reusing the same temporary name must not be removed by the handler.
    touch(out.string() + ".part");
    ::kill(::getpid(), SIGTERM);
    ::pause();
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(out));
  EXPECT_TRUE(fs::exists(out.string() + ".part"));
  fs::remove_all(dir);
}

// Temporary names carry the machine's name as well as the process id: the pods of a Kubernetes
// Job are often each process 1 of its own container, and may write one output name on a shared
// volume at the same time.
TEST(PartialOutputs, TemporaryNameCarriesHostAndProcess) {
  const fs::path dir = scratch_dir();
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  std::string expected_host;
  for (const char* c = host; *c && expected_host.size() < 64; ++c)
    if (std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '_' || *c == '.')
      expected_host += *c;
  const ctforge::io::temporary_output a((dir / "vol.h5").string());
  const ctforge::io::temporary_output b((dir / "vol.h5").string());
  const std::string name = fs::path(a.path()).filename().string();
  EXPECT_TRUE(name.starts_with(".vol." + expected_host + "-" + std::to_string(::getpid()) + "-"))
      << name;
  EXPECT_TRUE(name.ends_with(".part.h5")) << name;
  EXPECT_NE(a.path(), b.path());
  fs::remove_all(dir);
}
