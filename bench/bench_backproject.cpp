// Back-projection throughput of the CPU FDK path (kernels::bp_weighting::fdk through
// detail::backproject_filtered_cpu, compiled into the library: the loop ctforge::reconstruct runs),
// single-threaded and with all threads, in GUPS = voxels x views / s / 1e9.
//
//   bench_backproject [--size 256] [--views 360] [--det 512] [--repeat 1] [--threads N] [--json]
//
// Prints wall-clock GUPS and, from the process CPU time, GUPS per CPU-second (the per-core
// throughput, which stays meaningful when other processes compete for the cores), for the loop
// FDK runs on this circular orbit (shared-z: a voxel column's detector column, 1/w and weight
// computed once for 16 z-planes) and, in the same run, the per-plane loop of other geometries.
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
#include "recon/fdk.hpp"

using namespace ctforge;

namespace {

struct run_result {
  std::string loop;  // "shared-z" (what FDK runs here) or "per-plane" (every other geometry)
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
                               detail::bp_loop loop) {
  volume out(vg);
  double best = 1e300, best_cpu = 0;
  for (int r = 0; r < repeat; ++r) {
    std::fill(out.data.begin(), out.data.end(), 0.0f);
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    detail::backproject_filtered_cpu(pad, mats.data(), vg, /*distance_weighting=*/true,
                                     out.data.data(), threads, loop);
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
  return {loop == detail::bp_loop::automatic ? "shared-z" : "per-plane",
          threads,
          best,
          work / best / 1e9,
          best_cpu,
          work / best_cpu / 1e9};
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
    std::vector<run_result> results;
    for (const auto loop : {detail::bp_loop::automatic, detail::bp_loop::per_plane}) {
      results.push_back(time_backprojection(pad, mats, vg, 1, repeat, loop));
      if (all > 1) results.push_back(time_backprojection(pad, mats, vg, all, repeat, loop));
    }

    if (json_out) {
      nlohmann::json j;
      j["benchmark"] = "cpu_fdk_backprojection";
      j["volume"] = {size, size, size};
      j["views"] = views;
      j["detector"] = {det, det};
      j["repeat"] = repeat;
      j["hardware_threads"] = omp_get_max_threads();
      nlohmann::json runs = nlohmann::json::array();
      for (const auto& r : results)
        runs.push_back({{"loop", r.loop},
                        {"threads", r.threads},
                        {"seconds", r.seconds},
                        {"gups", r.gups},
                        {"gups_per_thread", r.gups / r.threads},
                        {"cpu_seconds", r.cpu_seconds},
                        {"gups_per_cpu_second", r.gups_per_cpu_second}});
      j["runs"] = runs;
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("CPU FDK back-projection: {}^3 voxels, {} views of {}x{} pixels (best of {})\n",
                 size, views, det, det, repeat);
      fmt::print("{:>10} {:>8} {:>10} {:>8} {:>12} {:>12} {:>16}\n", "loop", "threads", "seconds",
                 "GUPS", "GUPS/thread", "CPU seconds", "GUPS/CPU-second");
      for (const auto& r : results)
        fmt::print("{:>10} {:>8} {:>10.3f} {:>8.3f} {:>12.3f} {:>12.3f} {:>16.3f}\n", r.loop,
                   r.threads, r.seconds, r.gups, r.gups / r.threads, r.cpu_seconds,
                   r.gups_per_cpu_second);
      const std::size_t half = results.size() / 2;
      for (std::size_t i = 0; i < half; ++i)
        fmt::print("shared-z / per-plane, {} thread(s): {:.2f}x the GUPS\n", results[i].threads,
                   results[i].gups / results[i + half].gups);
      fmt::print(
          "(GUPS/CPU-second = throughput per busy core; it differs from GUPS/thread when\n"
          " other processes share the cores)\n");
    }
  } catch (const ctforge::error& e) {
    fmt::print(stderr, "bench_backproject: {}\n", e.what());
    return 2;
  }
  return 0;
}
