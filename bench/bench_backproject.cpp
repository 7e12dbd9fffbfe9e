// Back-projection throughput of the CPU FDK path (kernels::bp_weighting::fdk through
// detail::backproject, compiled into the library: the loops ctforge::reconstruct runs), per SIMD
// level this CPU has (scalar: the portable loop; avx2; avx512: the shared-z loop with 16 lanes,
// its per-plane loop is the AVX2 one), single-threaded and with all threads, in GUPS = voxels x
// views / s / 1e9.
//
//   bench_backproject [--size 256] [--views 360] [--det 512] [--repeat 1] [--threads N] [--json]
//                     [--levels scalar,avx2,avx512]
//
// Prints wall-clock GUPS and, from the process CPU time, GUPS per CPU-second (the per-core
// throughput, which stays meaningful when other processes compete for the cores), for the loop
// FDK runs on this circular orbit (shared-z: a voxel column's detector column, 1/w and weight
// computed once for 16 z-planes) and, in the same run, the per-plane loop of other geometries,
// then the ratios between the levels (AVX-512 / AVX2 measured where the CPU has AVX-512; the
// levels it lacks are listed as not run).
//
// Default: a 256^3 volume of 1 mm from 360 views of 512 x 512 pixels of 1 mm over 360 deg
// (circular cone, SID 500 mm, SDD 1000 mm: 0.5 mm pixels at the isocentre, so the detector
// covers the volume's inscribed cylinder). The projection values are a smooth synthetic pattern
// (the timing does not depend on them).
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/volume.hpp"
#include "math/geometry.hpp"
#include "recon/backproject.hpp"
#include "recon/backproject_cpu.hpp"
#include "recon/cpu_simd.hpp"

using namespace ctforge;

namespace {

struct run_result {
  std::string level;  // "scalar", "avx2", "avx512"
  std::string loop;   // "shared-z" (what FDK runs here) or "per-plane" (every other geometry)
  int threads;
  double seconds;              // wall time, best of the repeats
  double gups;                 // voxels x views / wall seconds / 1e9
  double cpu_seconds;          // process CPU time of that run (all threads)
  double gups_per_cpu_second;  // voxels x views / CPU seconds / 1e9: per-core throughput
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

run_result time_backprojection(const detail::padded_projections& pad,
                               const std::vector<kernels::proj_matrix>& mats,
                               const volume_geometry& vg, int threads, int repeat,
                               detail::simd_level level, detail::bp_strategy loop) {
  detail::set_cpu_simd_level(level);
  volume out(vg);
  double best = 1e300, best_cpu = 0;
  for (int r = 0; r < repeat; ++r) {
    std::fill(out.data.begin(), out.data.end(), 0.0f);
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    detail::backproject(detail::bp_job::flat(pad, mats.data(), vg, out.data.data(),
                                             /*distance_weighting=*/true, threads),
                        loop);
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu = process_cpu_seconds() - c0;
    const double wall = std::chrono::duration<double>(t1 - t0).count();
    if (wall < best) {
      best = wall;
      best_cpu = cpu;
    }
  }
  // Keep the result observable so the work cannot be optimised away.
  double checksum = 0;
  for (std::size_t i = 0; i < out.data.size(); i += 4099) checksum += out.data[i];
  if (!std::isfinite(checksum)) CTFORGE_FAIL("bench_backproject: non-finite result");
  const double work = static_cast<double>(vg.voxel_count()) * static_cast<double>(pad.views);
  detail::set_cpu_simd_level(std::nullopt);
  return {
      detail::to_string(level), detail::to_string(loop), threads, best, work / best / 1e9, best_cpu,
      work / best_cpu / 1e9};
}

// The GUPS of (level, loop, threads) among `results` (0 when not run).
double gups_of(const std::vector<run_result>& results, const std::string& level,
               const std::string& loop, int threads) {
  for (const auto& o : results)
    if (o.level == level && o.loop == loop && o.threads == threads) return o.gups;
  return 0;
}

void print_results(const std::vector<run_result>& results, const std::vector<std::string>& not_run,
                   std::int64_t size, std::int64_t views, std::int64_t det, int repeat,
                   bool json_out) {
  if (json_out) {
    nlohmann::json j;
    j["benchmark"] = "cpu_fdk_backprojection";
    j["volume"] = {size, size, size};
    j["views"] = views;
    j["detector"] = {det, det};
    j["repeat"] = repeat;
    j["hardware_threads"] = omp_get_max_threads();
    j["simd_supported"] = detail::to_string(detail::cpu_simd_supported());
    j["levels_not_run"] = not_run;
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& r : results)
      runs.push_back({{"level", r.level},
                      {"loop", r.loop},
                      {"threads", r.threads},
                      {"seconds", r.seconds},
                      {"gups", r.gups},
                      {"gups_per_thread", r.gups / r.threads},
                      {"cpu_seconds", r.cpu_seconds},
                      {"gups_per_cpu_second", r.gups_per_cpu_second}});
    j["runs"] = runs;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("CPU FDK back-projection: {}^3 voxels, {} views of {}x{} pixels (best of {})\n", size,
             views, det, det, repeat);
  fmt::print("{:>7} {:>10} {:>8} {:>10} {:>8} {:>12} {:>12} {:>16}\n", "level", "loop", "threads",
             "seconds", "GUPS", "GUPS/thread", "CPU seconds", "GUPS/CPU-second");
  for (const auto& r : results)
    fmt::print("{:>7} {:>10} {:>8} {:>10.3f} {:>8.3f} {:>12.3f} {:>12.3f} {:>16.3f}\n", r.level,
               r.loop, r.threads, r.seconds, r.gups, r.gups / r.threads, r.cpu_seconds,
               r.gups_per_cpu_second);
  for (const auto& r : results) {
    if (r.loop == "shared-z" && r.level != "avx512")
      fmt::print("shared-z / per-plane, {}, {} thread(s): {:.2f}x the GUPS\n", r.level, r.threads,
                 r.gups / gups_of(results, r.level, "per-plane", r.threads));
    const double scalar = gups_of(results, "scalar", r.loop, r.threads);
    const double avx2 = gups_of(results, "avx2", r.loop, r.threads);
    if (r.level == "avx2" && scalar > 0)
      fmt::print("avx2 / scalar, {}, {} thread(s): {:.2f}x the GUPS\n", r.loop, r.threads,
                 r.gups / scalar);
    if (r.level == "avx512" && r.loop == "shared-z" && avx2 > 0)
      fmt::print("avx512 / avx2, shared-z, {} thread(s): {:.2f}x the GUPS\n", r.threads,
                 r.gups / avx2);
  }
  for (const auto& name : not_run) fmt::print("{}: not run (this CPU does not have it)\n", name);
  fmt::print(
      "(GUPS/CPU-second = throughput per busy core; it differs from GUPS/thread when\n"
      " other processes share the cores)\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU FDK back-projection throughput (GUPS = voxels x views / s / 1e9)"};
  std::int64_t size = 256, views = 360, det = 512;
  int repeat = 1, threads = 0;
  bool json_out = false;
  app.add_option("--size", size, "volume edge in voxels (1 mm voxels)")->check(CLI::Range(1, 4096));
  app.add_option("--views", views, "number of views over 360 deg")->check(CLI::Range(1, 100000));
  app.add_option("--det", det, "detector edge in pixels (square detector)")
      ->check(CLI::Range(1, 16384));
  app.add_option("--repeat", repeat, "runs per configuration (best time is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--threads", threads, "threads of the multi-threaded run (0: all)")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--json", json_out, "print JSON instead of a table");
  std::vector<std::string> level_names{"scalar", "avx2", "avx512"};
  app.add_option("--levels", level_names, "SIMD levels to time (those this CPU lacks are skipped)")
      ->delimiter(',')
      ->check(CLI::IsMember({"scalar", "avx2", "avx512"}));
  CLI11_PARSE(app, argc, argv);

  try {
    // Detector pixel = 512 / det mm, magnification 2: the detector covers 256 mm at the
    // isocentre whatever --det, and the volume is scaled to the same 256 mm.
    const double du = 512.0 / static_cast<double>(det);
    const geometry g = make_cone_geometry(
        det, det, du, du, 500, 1000,
        angle_range(0, 2 * 3.14159265358979323846 / static_cast<double>(views), views));
    const double dv = 256.0 / static_cast<double>(size);
    const auto vg = volume_geometry::centered(size, size, size, {dv, dv, dv});
    std::vector<float> proj(static_cast<std::size_t>(views * det * det));
    for (std::int64_t v = 0; v < views; ++v)
      for (std::int64_t r = 0; r < det; ++r)
        for (std::int64_t c = 0; c < det; ++c)
          proj[static_cast<std::size_t>((v * det + r) * det + c)] =
              static_cast<float>(std::sin(0.05 * static_cast<double>(c + v)) *
                                 std::cos(0.03 * static_cast<double>(r)));
    const detail::padded_projections pad =
        detail::make_padded_projections(proj.data(), views, det, det);
    proj = {};
    const auto mats = kernels::float_matrices(g);

    const int all = threads > 0 ? threads : omp_get_max_threads();
    const detail::simd_level supported = detail::cpu_simd_supported();
    std::vector<run_result> results;
    std::vector<std::string> not_run;
    for (const auto level :
         {detail::simd_level::none, detail::simd_level::avx2, detail::simd_level::avx512}) {
      const std::string name = detail::to_string(level);
      if (std::find(level_names.begin(), level_names.end(), name) == level_names.end()) continue;
      if (level > supported) {
        not_run.push_back(name);
        continue;
      }
      for (const auto loop : {detail::bp_strategy::shared_z, detail::bp_strategy::per_plane}) {
        // AVX-512 has a shared-z loop only; its per-plane loop is the AVX2 one.
        if (level == detail::simd_level::avx512 && loop == detail::bp_strategy::per_plane) continue;
        results.push_back(time_backprojection(pad, mats, vg, 1, repeat, level, loop));
        if (all > 1)
          results.push_back(time_backprojection(pad, mats, vg, all, repeat, level, loop));
      }
    }
    print_results(results, not_run, size, views, det, repeat, json_out);
  } catch (const ctforge::error& e) {
    fmt::print(stderr, "bench_backproject: {}\n", e.what());
    return 2;
  }
  return 0;
}
