// Throughput of the CPU Joseph forward projector (ctforge::forward_project), its vectorised loop
// against the scalar reference loop in the same run (detail::forward_path), single-threaded and
// with all threads.
//
//   bench_forward [--size 256] [--views 180] [--det 256] [--reference-stride 10] [--repeat 1]
//                 [--threads N] [--transpose] [--json]
//
// Work is counted in plane samples: one per voxel plane along each ray's dominant axis, summed
// over the rays (detail::forward_project_samples). Reported per loop and thread count: wall
// seconds, samples/s, samples/s per thread, samples per CPU-second (the per-core throughput,
// which stays meaningful when other processes compete for the cores) and GUPS = voxels x views /
// wall seconds / 1e9 (the unit of bench_backproject and the peers comparison).
//
// --transpose also times back_project_matched, the forward projector's exact transpose that the
// iterative methods pair with it, on all views: the same plane samples, scattered into the volume
// instead of gathered, through its vectorised loop ("transpose" in the table) and its scalar one
// ("T-scalar"), against each other and against the forward projector.
//
// The scalar loop runs on every --reference-stride-th view only (the views spread over the whole
// arc, so every ray direction is represented) to keep the run short; the vectorised loop runs on
// those views too (the like-for-like speedup) and on all views (the headline figures). The two
// loops' results on the shared views are compared (max |vectorised - scalar| / peak).
//
// Default: a 256^3 volume of 1 mm voxels from 180 views of 256 x 256 pixels of 2 mm over 360 deg
// (circular cone, SID 500 mm, SDD 1000 mm: 1 mm pixels at the isocentre, the detector covers the
// volume), the problem of the forward projection 256^3 line of the peers comparison. The voxel
// values are a smooth synthetic pattern (the timing does not depend on them).
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

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/volume.hpp"
#include "recon/forward_project_cpu.hpp"

using namespace ctforge;

namespace {

struct run_result {
  std::string loop;   // "scalar" or "vectorised"
  std::string views;  // "all" or "subset"
  int threads = 0;
  double seconds = 0;      // wall time, best of the repeats
  double cpu_seconds = 0;  // process CPU time of that run (all threads)
  double samples = 0;      // plane samples of the problem
  double updates = 0;      // voxels x views
  double samples_per_s() const { return samples / seconds; }
  double samples_per_thread() const { return samples_per_s() / threads; }
  double samples_per_cpu_second() const { return samples / cpu_seconds; }
  double gups() const { return updates / seconds / 1e9; }
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// Runs `once` (returning its result's floats) `repeat` times into r: the best wall time and the
/// CPU time of that run. A strided checksum keeps each result observable, so that the work
/// cannot be optimised away, and catches a non-finite one.
template <class Once>
void time_best(run_result& r, int repeat, Once&& once) {
  r.seconds = 1e300;
  for (int i = 0; i < repeat; ++i) {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<float>& out = once();
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu = process_cpu_seconds() - c0;
    const double wall = std::chrono::duration<double>(t1 - t0).count();
    double checksum = 0;
    for (std::size_t k = 0; k < out.size(); k += 4099) checksum += out[k];
    if (!std::isfinite(checksum)) CTFORGE_FAIL("bench_forward: non-finite " + r.loop + " result");
    if (wall < r.seconds) {
      r.seconds = wall;
      r.cpu_seconds = cpu;
    }
  }
}

run_result time_forward(const volume& vol, const geometry& g, detail::forward_path path,
                        int threads, int repeat, double samples, projection_stack* keep) {
  run_result r;
  r.loop = path == detail::forward_path::scalar ? "scalar" : "vectorised";
  r.threads = threads;
  r.samples = samples;
  r.updates = static_cast<double>(vol.geom.voxel_count()) * static_cast<double>(g.view_count());
  projection_stack p;
  time_best(r, repeat, [&]() -> const std::vector<float>& {
    p = detail::forward_project_cpu(vol, g, threads, path);
    return p.data;
  });
  if (keep) *keep = std::move(p);
  return r;
}

/// The matched back-projector (back_project_matched, the exact transpose the iterative methods
/// pair with the forward projector) on the same rays: the same plane samples, scattered.
run_result time_transpose(const projection_stack& p, const geometry& g, const volume_geometry& vg,
                          int threads, int repeat, double samples, detail::forward_path path) {
  run_result r;
  r.loop = path == detail::forward_path::scalar ? "T-scalar" : "transpose";
  r.views = "all";
  r.threads = threads;
  r.samples = samples;
  r.updates = static_cast<double>(vg.voxel_count()) * static_cast<double>(g.view_count());
  volume v;
  time_best(r, repeat, [&]() -> const std::vector<float>& {
    v = detail::back_project_matched_cpu(p, g, vg, threads, path);
    return v.data;
  });
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU Joseph forward-projection throughput: vectorised against scalar loop"};
  std::int64_t size = 256, views = 180, det = 256, stride = 10;
  int repeat = 1, threads = 0;
  bool json_out = false, transpose = false;
  app.add_option("--size", size, "volume edge in voxels (256 mm across)")
      ->check(CLI::Range(1, 2048));
  app.add_option("--views", views, "number of views over 360 deg")->check(CLI::Range(1, 100000));
  app.add_option("--det", det, "detector edge in pixels (square detector, 512 mm across)")
      ->check(CLI::Range(1, 16384));
  app.add_option("--reference-stride", stride,
                 "the scalar loop projects every N-th view (1: all views)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--repeat", repeat, "runs per configuration (best time is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--threads", threads, "threads of the multi-threaded runs (0: all)")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--transpose", transpose,
               "also time the matched back-projector (the forward projector's exact transpose) "
               "on all views");
  app.add_flag("--json", json_out, "print JSON instead of a table");
  CLI11_PARSE(app, argc, argv);

  try {
    // Detector pixel 512 / det mm, magnification 2: the detector covers 256 mm at the isocentre
    // whatever --det, and the volume is scaled to the same 256 mm.
    const double du = 512.0 / static_cast<double>(det);
    const double step = 2 * 3.14159265358979323846 / static_cast<double>(views);
    const geometry g = make_cone_geometry(det, det, du, du, 500, 1000, angle_range(0, step, views));
    std::vector<double> sub_angles;
    for (std::int64_t v = 0; v < views; v += stride) sub_angles.push_back(step * v);
    const geometry sub = make_cone_geometry(det, det, du, du, 500, 1000, sub_angles);
    const double dv = 256.0 / static_cast<double>(size);
    volume vol(volume_geometry::centered(size, size, size, {dv, dv, dv}));
    const double c = 0.5 * static_cast<double>(size - 1);
#pragma omp parallel for schedule(static)
    for (std::int64_t k = 0; k < size; ++k)
      for (std::int64_t j = 0; j < size; ++j)
        for (std::int64_t i = 0; i < size; ++i) {
          const double x = (i - c) / c, y = (j - c) / c, z = (k - c) / c;
          const double r2 = x * x + y * y + z * z;
          vol.data[static_cast<std::size_t>((k * size + j) * size + i)] =
              r2 < 0.8 ? static_cast<float>(0.02 * (1.2 + std::sin(9 * x) * std::cos(7 * y + z)))
                       : 0.0f;
        }

    const double samples = static_cast<double>(detail::forward_project_samples(vol.geom, g));
    const double sub_samples = static_cast<double>(detail::forward_project_samples(vol.geom, sub));
    const int all = threads > 0 ? threads : omp_get_max_threads();
    std::vector<int> counts{1};
    if (all > 1) counts.push_back(all);

    std::vector<run_result> results;
    double max_diff = 0, peak = 0;
    for (int t : counts) {
      projection_stack ref, fast;
      run_result r =
          time_forward(vol, sub, detail::forward_path::scalar, t, repeat, sub_samples, &ref);
      r.views = "subset";
      results.push_back(r);
      r = time_forward(vol, sub, detail::forward_path::automatic, t, repeat, sub_samples, &fast);
      r.views = "subset";
      results.push_back(r);
      projection_stack whole;
      r = time_forward(vol, g, detail::forward_path::automatic, t, repeat, samples,
                       transpose ? &whole : nullptr);
      r.views = "all";
      results.push_back(r);
      if (transpose)
        for (const auto path : {detail::forward_path::automatic, detail::forward_path::scalar})
          results.push_back(time_transpose(whole, g, vol.geom, t, repeat, samples, path));
      for (std::size_t i = 0; i < ref.data.size(); ++i) {
        peak = std::max(peak, static_cast<double>(std::abs(ref.data[i])));
        max_diff = std::max(max_diff, static_cast<double>(std::abs(fast.data[i] - ref.data[i])));
      }
    }
    const auto find = [&](const std::string& loop, int t, const std::string& views = "subset") {
      for (const auto& r : results)
        if (r.loop == loop && r.threads == t && r.views == views) return r;
      return run_result{};
    };
    const bool vectorised = detail::forward_project_vectorised();

    if (json_out) {
      nlohmann::json j;
      j["benchmark"] = "cpu_forward_projection";
      j["volume"] = {size, size, size};
      j["views"] = views;
      j["reference_views"] = sub.view_count();
      j["detector"] = {det, det};
      j["repeat"] = repeat;
      j["hardware_threads"] = omp_get_max_threads();
      j["vectorised_loop_available"] = vectorised;
      j["samples"] = samples;
      j["max_abs_diff_over_peak"] = max_diff / peak;
      nlohmann::json runs = nlohmann::json::array();
      for (const auto& r : results)
        runs.push_back({{"loop", r.loop},
                        {"views", r.views},
                        {"threads", r.threads},
                        {"seconds", r.seconds},
                        {"cpu_seconds", r.cpu_seconds},
                        {"samples_per_s", r.samples_per_s()},
                        {"samples_per_s_per_thread", r.samples_per_thread()},
                        {"samples_per_cpu_second", r.samples_per_cpu_second()},
                        {"gups", r.gups()}});
      j["runs"] = runs;
      nlohmann::json speedups = nlohmann::json::array();
      for (int t : counts)
        speedups.push_back({{"threads", t},
                            {"per_thread", find("vectorised", t).samples_per_thread() /
                                               find("scalar", t).samples_per_thread()},
                            {"per_cpu_second", find("vectorised", t).samples_per_cpu_second() /
                                                   find("scalar", t).samples_per_cpu_second()}});
      j["speedup_vectorised_over_scalar"] = speedups;
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print(
          "CPU Joseph forward projection: {}^3 voxels, {} views of {}x{} pixels, {:.3g} plane "
          "samples (best of {}); scalar loop on {} of the views{}\n",
          size, views, det, det, samples, repeat, sub.view_count(),
          vectorised ? "" : " (no AVX2/FMA here: the vectorised loop runs the scalar one)");
      fmt::print("{:>10} {:>7} {:>7} {:>9} {:>9} {:>11} {:>13} {:>13} {:>7}\n", "loop", "views",
                 "threads", "seconds", "CPU s", "Gsamples/s", "Gsamples/s/th", "Gsamples/CPUs",
                 "GUPS");
      for (const auto& r : results)
        fmt::print("{:>10} {:>7} {:>7} {:>9.3f} {:>9.3f} {:>11.3f} {:>13.3f} {:>13.3f} {:>7.3f}\n",
                   r.loop, r.views, r.threads, r.seconds, r.cpu_seconds, r.samples_per_s() / 1e9,
                   r.samples_per_thread() / 1e9, r.samples_per_cpu_second() / 1e9, r.gups());
      for (int t : counts)
        fmt::print(
            "vectorised / scalar on the same views, {} thread(s): {:.2f}x per thread, {:.2f}x per "
            "CPU-second\n",
            t, find("vectorised", t).samples_per_thread() / find("scalar", t).samples_per_thread(),
            find("vectorised", t).samples_per_cpu_second() /
                find("scalar", t).samples_per_cpu_second());
      for (int t : transpose ? counts : std::vector<int>{}) {
        const double seconds = find("transpose", t, "all").seconds;
        fmt::print("transpose / forward on all views, {} thread(s): {:.2f}x the time\n", t,
                   seconds / find("vectorised", t, "all").seconds);
        fmt::print("transpose, vectorised / scalar loop, {} thread(s): {:.2f}x faster\n", t,
                   find("T-scalar", t, "all").seconds / seconds);
      }
      fmt::print("max |vectorised - scalar| / peak on those views: {:.2e}\n", max_diff / peak);
      fmt::print(
          "(Gsamples/CPUs = throughput per busy core; it differs from Gsamples/s/th when other\n"
          " processes share the cores)\n");
    }
  } catch (const ctforge::error& e) {
    fmt::print(stderr, "bench_forward: {}\n", e.what());
    return 2;
  }
  return 0;
}
