// An output being written is removed when the process is stopped by a signal (Ctrl-C, SIGTERM
// of a reclaimed spot instance); outputs no longer being written are left alone.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
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

TEST(PartialOutputs, SignalRemovesARegisteredDirectoryTree) {
  // A staging directory holding a Zarr array: files 5 directory levels down.
  const fs::path dir = scratch_dir() / "stage";
  const fs::path deep = dir / "out-0" / "vol.zarr" / "c" / "0" / "0";
  fs::create_directories(deep);
  fs::create_directories(dir / "in-1");
  touch(deep / "0");
  touch(dir / "out-0" / "vol.zarr" / "zarr.json");
  const int status = in_child([&] {
    ctforge::io::install_interrupt_cleanup();
    if (ctforge::io::register_partial_output(dir.string(), true) < 0) ::_exit(3);
    ::kill(::getpid(), SIGTERM);
    ::pause();
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(dir)) << "the directory tree was not removed";
  fs::remove_all(dir.parent_path());
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
  // The process id namespace, where known, follows the name (containers sharing the machine's
  // name number their processes apart).
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0) expected_host += fmt::format("_{:x}", st.st_ino);
  EXPECT_TRUE(name.starts_with(".vol." + expected_host + "-" + std::to_string(::getpid()) + "-"))
      << name;
  EXPECT_TRUE(name.ends_with(".part.h5")) << name;
  EXPECT_NE(a.path(), b.path());
  fs::remove_all(dir);
}

// Writers killed with SIGKILL (or on a lost machine) leave their temporaries: a later run removes
// those of this machine whose process is gone and (in a checkpoint directory) those of any
// machine older than the age given, and leaves a live writer's temporary, a recent one of
// another machine, other files' and files that merely look alike.
TEST(PartialOutputs, OrphanedTemporariesOfGoneWritersAreRemoved) {
  const fs::path dir = scratch_dir() / "orphans";
  fs::create_directories(dir);
  // This machine's tag, as the output layer writes it: ".probe.<tag>-<pid>-<n>.part.f32".
  std::string tag;
  {
    const ctforge::io::temporary_output probe((dir / "probe.f32").string());
    const std::string n = fs::path(probe.path()).filename().string();
    tag = n.substr(7, n.find("-" + std::to_string(::getpid()) + "-") - 7);
  }
  ASSERT_FALSE(tag.empty());
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const auto name = [&](const std::string& stem, const std::string& host, long pid) {
    return fmt::format(".{}.{}-{}-3.part.f32", stem, host, pid);
  };
  const std::string dead = name("slab_000000_000004", tag, gone);
  const std::string live = name("slab_000004_000008", tag, ::getpid());
  const std::string foreign_recent = name("slab_000008_000012", "pod-7", 1);
  const std::string foreign_old = name("slab_000012_000016", "pod-8", 1);
  const std::string other_file = name("notes", tag, gone);
  const std::string alike = ".slab_000016_000020.part.f32";
  for (const std::string& n : {dead, live, foreign_recent, foreign_old, other_file, alike})
    touch(dir / n);
  fs::create_directory(dir / name("slab_dir", "pod-9", 1));  // a directory temporary
  fs::last_write_time(dir / foreign_old,
                      fs::file_time_type::clock::now() - std::chrono::seconds(3600));
  fs::last_write_time(dir / name("slab_dir", "pod-9", 1),
                      fs::file_time_type::clock::now() - std::chrono::seconds(3600));
  const int removed = ctforge::io::remove_orphaned_temporaries(dir.string(), {"slab_"}, 600);
  EXPECT_EQ(removed, 3);
  EXPECT_FALSE(fs::exists(dir / dead));
  EXPECT_FALSE(fs::exists(dir / foreign_old));
  EXPECT_FALSE(fs::exists(dir / name("slab_dir", "pod-9", 1)));
  for (const std::string& n : {live, foreign_recent, other_file, alike})
    EXPECT_TRUE(fs::exists(dir / n)) << n << " was removed";
  // The first output this process writes into a directory removes the orphans of this
  // machine's gone writers there, of any name; another machine's are kept whatever their age
  // (an output's temporary may live for hours while its volume is written slab by slab).
  const fs::path next = dir / "next";
  fs::create_directories(next);
  touch(next / name("vol", tag, gone));
  touch(next / name("other", tag, gone));
  touch(next / foreign_old);
  fs::last_write_time(next / foreign_old,
                      fs::file_time_type::clock::now() - std::chrono::seconds(3600));
  {
    const ctforge::io::temporary_output out((next / "vol.f32").string());
    EXPECT_FALSE(fs::exists(next / name("vol", tag, gone)));
    EXPECT_FALSE(fs::exists(next / name("other", tag, gone)));
    EXPECT_TRUE(fs::exists(next / foreign_old));
  }
  fs::remove_all(dir);
}
