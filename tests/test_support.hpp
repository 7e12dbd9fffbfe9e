// Helpers shared by test areas: fresh scratch directories, errors that must name something,
// and running the `ctforge` executable the way a user does.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/io.hpp"
#include "ctforge/recon.hpp"

namespace ctforge::testing {

/// The geometry JSON of a circular cone-beam scan: `cols` x `rows` pixels of `pixel_mm`, source
/// 500 mm from the axis and 1000 mm from the detector (magnification 2), `count` views
/// `step_deg` apart from 0.
inline std::string cone_json(int cols, int rows, double pixel_mm, double step_deg, int count) {
  std::ostringstream s;
  s << R"({"type": "cone", "detector": {"cols": )" << cols << R"(, "rows": )" << rows
    << R"(, "pixel_mm": [)" << pixel_mm << ", " << pixel_mm
    << R"(]}, "source_to_isocenter_mm": 500, "source_to_detector_mm": 1000, )"
    << R"("angles_deg": {"start": 0, "step": )" << step_deg << R"(, "count": )" << count << "}}";
  return s.str();
}

/// The size of a scan, for tests parameterised over odd and size-1 shapes.
struct scan_shape {
  std::int64_t views, rows, cols;
};

/// Projections of views x rows x cols whose value at (view, row, col) is f(v, r, c), visited in
/// that order (so that a random generator inside f gives the same data every time).
template <class F>
projection_stack scan_from(std::int64_t views, std::int64_t rows, std::int64_t cols, F&& f) {
  projection_stack p(views, rows, cols);
  for (std::int64_t v = 0; v < views; ++v)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) p.at(v, r, c) = static_cast<float>(f(v, r, c));
  return p;
}

/// A scan with zingers and a stripe: smooth traces, +3 at scattered pixels, +0.5 on column 7.
inline projection_stack dirty_scan(std::int64_t views, std::int64_t rows, std::int64_t cols) {
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  return scan_from(views, rows, cols, [&](std::int64_t v, std::int64_t r, std::int64_t c) {
    const double x = static_cast<double>(c) / static_cast<double>(cols) - 0.5 -
                     0.2 * std::sin(0.05 * static_cast<double>(v) + 0.1 * r);
    return static_cast<float>(std::exp(-20 * x * x)) + noise(rng) + (c == 7 ? 0.5f : 0.0f) +
           ((v * 31 + r * 7 + c) % 53 == 0 ? 3.0f : 0.0f);
  });
}

/// A volume of nx x ny x nz voxels with non-trivial spacing and origin, and values that differ
/// voxel to voxel (a sine of the index plus a ramp): what the format round trips write.
inline volume ramp_volume(std::int64_t nx, std::int64_t ny, std::int64_t nz) {
  volume_geometry g;
  g.nx = nx;
  g.ny = ny;
  g.nz = nz;
  g.spacing_mm = {0.7, 1.3, 2.1};
  g.origin_mm = {-10.5, 3.25, 7.125};
  volume v(g);
  for (std::size_t i = 0; i < v.data.size(); ++i)
    v.data[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 100.0 +
                                   0.001 * static_cast<double>(i));
  return v;
}

/// An empty directory <tmp>/ctforge_<group>_<pid>/<name> (removed and re-created).
inline std::filesystem::path scratch_dir(const std::string& group, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ctforge_" + group + "_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// f() must throw ctforge::error whose message contains `name` (and `needle`, when given).
inline void expect_error_naming(const std::function<void()>& f, const std::string& name,
                                const std::string& needle = "") {
  try {
    f();
    ADD_FAILURE() << "no error for " << name;
  } catch (const error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find(name), std::string::npos) << w;
    if (!needle.empty()) EXPECT_NE(w.find(needle), std::string::npos) << w;
  }
}

/// recon_options for iterative method `a` on the CPU with 2 threads (the iterative tests'
/// starting point).
inline recon_options cpu_iterative(algorithm a, int iterations) {
  recon_options o;
  o.algo = a;
  o.where = backend::cpu;
  o.iterations = iterations;
  o.threads = 2;
  return o;
}

/// As expect_error_naming, and the error must be a usage_error (exit 2: the input is refused)
/// when `usage` is true, a runtime error but not a usage_error (exit 1: the input was valid,
/// the machine could not run it) when false.
inline void expect_error_of_kind_naming(bool usage, const std::function<void()>& f,
                                        const std::string& name, const std::string& needle) {
  expect_error_naming(
      [&] {
        try {
          f();
        } catch (const usage_error& e) {
          if (usage) throw;
          ADD_FAILURE() << "a usage error where a runtime error was expected: " << e.what();
        } catch (const error& e) {
          if (!usage) throw;
          ADD_FAILURE() << "not a usage error: " << e.what();
        }
      },
      name, needle);
}

inline void expect_runtime_error_naming(const std::function<void()>& f, const std::string& name,
                                        const std::string& needle = "") {
  expect_error_of_kind_naming(false, f, name, needle);
}

inline void expect_usage_error_naming(const std::function<void()>& f, const std::string& name,
                                      const std::string& needle = "") {
  expect_error_of_kind_naming(true, f, name, needle);
}

struct cli_result {
  int status = -1;     ///< exit status (-1: did not exit normally)
  std::string output;  ///< stdout and stderr together
};

/// Whether two volume files hold the same voxels on the same grid (files themselves differ:
/// HDF5 files carry write times).
inline bool same_volume_files(const std::filesystem::path& a, const std::filesystem::path& b) {
  const volume x = io::read_volume(a.string());
  const volume y = io::read_volume(b.string());
  return x.data == y.data && x.geom.nx == y.geom.nx && x.geom.ny == y.geom.ny &&
         x.geom.nz == y.geom.nz && x.geom.origin_mm == y.geom.origin_mm &&
         x.geom.spacing_mm == y.geom.spacing_mm;
}

/// Entries of `dir` (not recursive) left over from an interrupted or failed write: temporary
/// outputs are named ".<name>.<host>-<pid>-<n>.part<ext>" (files) or
/// ".<name>.<host>-<pid>-<n>.part" (directories), and directories moved aside while being
/// replaced ".<name>.<host>-<pid>-<n>.old".
inline std::vector<std::string> leftover_temporaries(const std::filesystem::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.find(".part") != std::string::npos || n.ends_with(".old")) found.push_back(n);
  }
  return found;
}

/// Runs `ctforge <args>` (CTFORGE_CLI_PATH) in `dir` through the shell, as a user would.
/// `file_limit_kib` > 0: the command runs with that file-size limit (ulimit -f, SIGXFSZ
/// ignored), so that a write past it fails with EFBIG as on a full disk.
inline cli_result run_cli(const std::filesystem::path& dir, const std::string& args,
                          int file_limit_kib = 0) {
  const std::string limit =
      file_limit_kib > 0 ? "trap '' XFSZ && ulimit -f " + std::to_string(file_limit_kib) + " && "
                         : "";
  const std::string cmd = "cd '" + dir.string() + "' && " + limit + "'" +
                          std::string(CTFORGE_CLI_PATH) + "' " + args + " 2>&1";
  cli_result r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "popen failed for " << cmd;
    return r;
  }
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int st = ::pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

/// A test with a scratch directory of its own (scratch_dir(group, the test's name), removed
/// afterwards) in which it runs the command line.
class cli_dir_test : public ::testing::Test {
 protected:
  explicit cli_dir_test(std::string group) : group_(std::move(group)) {}
  void SetUp() override {
    dir_ = scratch_dir(group_, ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  /// Runs `ctforge <args>` in the directory (args pass through the shell).
  cli_result run(const std::string& args, int file_limit_kib = 0) const {
    return run_cli(dir_, args, file_limit_kib);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
  }

  std::filesystem::path dir_;

 private:
  std::string group_;
};

/// A tmpfs of `kib` KiB mounted on `dir` for the life of the object (a real full disk);
/// ok is false, with the reason in why, where mounting needs a privilege the test lacks.
struct small_tmpfs {
  std::filesystem::path dir;
  bool ok = false;
  std::string why;
  small_tmpfs(std::filesystem::path d, int kib) : dir(std::move(d)) {
    std::filesystem::create_directories(dir);
    const std::string cmd =
        "mount -t tmpfs -o size=" + std::to_string(kib) + "k tmpfs '" + dir.string() + "' 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[256] = {};
    const std::size_t n = p ? std::fread(buf, 1, sizeof buf - 1, p) : 0;
    const int st = p ? ::pclose(p) : -1;
    ok = st == 0;
    why = std::string(buf, n);
  }
  ~small_tmpfs() {
    if (ok) (void)std::system(("umount '" + dir.string() + "'").c_str());
  }
};

}  // namespace ctforge::testing
