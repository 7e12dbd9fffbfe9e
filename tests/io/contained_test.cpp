// Third-party parsers run in a child process first (src/io/contained.cpp): a probe that crashes
// or aborts makes the file an error naming it, and the calling process lives on; a probe that
// throws and files found sound once are no errors; one that never returns is refused.
#include "io/contained.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "ctforge/error.hpp"
#include "ctforge/io.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

fs::path file_with(const std::string& name, const std::string& content) {
  const fs::path dir = testing::scratch_dir("contained", name);
  const fs::path p = dir / (name + ".bin");
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

TEST(Contained, CrashingParserIsAnErrorNamingTheFile) {
  const fs::path p = file_with("segv", "a file that makes a parser crash");
  testing::expect_runtime_error_naming(
      [&] { detail::probe_in_child(p.string(), "libexample", [] { std::raise(SIGSEGV); }); },
      p.string(), "libexample crashed");
  const fs::path q = file_with("abort", "a file that makes a parser assert");
  testing::expect_runtime_error_naming(
      [&] { detail::probe_in_child(q.string(), "GDCM", [] { std::abort(); }); }, q.string(),
      "GDCM crashed");
  // This process is alive and unaffected; the refusal is remembered (a sound probe now would
  // not clear it: the content has not changed).
  testing::expect_runtime_error_naming(
      [&] { detail::probe_in_child(q.string(), "GDCM", [] {}); }, q.string(), "GDCM crashed");
}

TEST(Contained, ParserErrorsAndSoundFilesAreNotRefusedLoopsAre) {
  const fs::path p = file_with("sound", "a sound file");
  EXPECT_NO_THROW(detail::probe_in_child(p.string(), "lib", [] {
    throw std::runtime_error("the parser's own error: reported by the caller's parse");
  }));
  // A parser that never returns (libhdf5 loops on some corrupt files) is a refusal too.
  const fs::path slow = file_with("slow", "a file that a parser loops on");
  testing::expect_runtime_error_naming(
      [&] {
        detail::probe_in_child(
            slow.string(), "lib", [] { std::this_thread::sleep_for(std::chrono::seconds(30)); },
            /*timeout_s=*/0.2);
      },
      slow.string(), "did not finish");
  // Found sound once, the same content is not probed again (the probe would crash now).
  const fs::path once = file_with("once", "probed once");
  EXPECT_NO_THROW(detail::probe_in_child(once.string(), "lib", [] {}));
  EXPECT_NO_THROW(detail::probe_in_child(once.string(), "lib", [] { std::abort(); }));
  // ... but changed content is (negative control for the cache).
  std::ofstream(once, std::ios::binary) << "probed once, then changed";
  EXPECT_THROW(detail::probe_in_child(once.string(), "lib", [] { std::abort(); }), error);
}

// The HDF5 walk reads every object of a real file and finds nothing wrong; a file that is
// not HDF5 is left to the caller's open, which names it.
TEST(Contained, Hdf5WalkOfValidAndInvalidFiles) {
  const fs::path dir = testing::scratch_dir("contained", "hdf5");
  const std::string v = (dir / "v.h5").string();
  volume vol(volume_geometry::centered(3, 4, 5, {1, 1, 1}));
  io::write_volume(v, vol);
  EXPECT_NO_THROW(detail::probe_in_child(v, "libhdf5", [&] { detail::probe_hdf5_file(v); }));
  EXPECT_EQ(io::read_volume(v).data, vol.data);
  const fs::path junk = file_with("junk", "not an HDF5 file at all");
  testing::expect_runtime_error_naming([&] { (void)io::read_volume(junk.string()); },
                                       junk.string(), "not an HDF5 file");
}

}  // namespace
}  // namespace ctforge
