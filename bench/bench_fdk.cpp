// End-to-end FDK timing on the CPU and the GPU for one problem, with the GPU/CPU agreement.
//
//   bench_fdk [--size 128] [--views 180] [--det 192] [--backend both|cpu|cuda] [--threads 0]
//             [--repeat 1] [--memory-limit-mib 0] [--views-per-batch 0] [--json FILE]
//
// A Shepp-Logan phantom (exact line integrals) scanned over 360 deg (circular cone, SID 750 mm,
// SDD 1200 mm), reconstructed on a size^3 grid covering the detector's field of view.
// Reports seconds (best of --repeat), GUPS = size^3 * views / s / 1e9, the GPU pipeline's
// breakdown, and the mean |GPU - CPU| relative to the CPU result's peak for each GPU
// interpolation mode. Without a device the GPU columns read "skipped: no device".
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

#include "bench_common.hpp"
#include "ctforge/error.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#if defined(CTFORGE_WITH_CUDA)
#include "cuda/cuda_api.hpp"
#include "recon/fdk_setup.hpp"
#endif

using namespace ctforge;
using namespace ctforge::bench;
using json = nlohmann::json;

int main(int argc, char** argv) {
  CLI::App app{"ctforge FDK benchmark: CPU and GPU end to end, with their agreement"};
  std::int64_t size = 128, views = 180, det = 192;
  std::string which = "both";
  int threads = 0, repeat = 1, views_per_batch = 0;
  double memory_limit_mib = 0;
  std::string json_path;
  app.add_option("--size", size, "volume edge in voxels")->check(CLI::Range(1, 4096));
  app.add_option("--views", views, "projections over 360 deg")->check(CLI::Range(1, 100000));
  app.add_option("--det", det, "detector edge in pixels")->check(CLI::Range(1, 16384));
  app.add_option("--backend", which, "cpu, cuda or both")
      ->check(CLI::IsMember({"cpu", "cuda", "both"}));
  app.add_option("--threads", threads, "CPU threads (0 = all)")->check(CLI::Range(0, 4096));
  app.add_option("--repeat", repeat, "runs per backend (best reported)")->check(CLI::Range(1, 100));
  app.add_option("--memory-limit-mib", memory_limit_mib, "GPU memory budget (0 = free memory)");
  app.add_option("--views-per-batch", views_per_batch, "GPU views per batch (0 = automatic)");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  try {
    cone_problem p{.name = "fdk",
                   .views = views,
                   .cols = det,
                   .rows = det,
                   .pixel_mm = 0.4 * 1024.0 / static_cast<double>(det),
                   .arc_deg = 360,
                   .n = size,
                   .voxel_mm = 256.0 / static_cast<double>(size)};
    const geometry g = p.make_geometry();
    const volume_geometry vg = p.make_volume();
    const auto t_data = clock_type::now();
    const projection_stack proj = project_analytic(shepp_logan_phantom(200), g);
    fmt::print("problem: {}^3 from {} views of {}x{} (Shepp-Logan projections in {:.2f} s)\n", size,
               views, det, det, seconds_since(t_data));
    json report;
    report["problem"] = {{"size", size}, {"views", views}, {"det", det}};
    std::optional<volume> cpu;
    if (which != "cuda") {
      recon_options opt;
      opt.where = backend::cpu;
      opt.threads = threads;
      double best = 1e300;
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = clock_type::now();
        cpu = reconstruct(proj, g, vg, opt);
        best = std::min(best, seconds_since(t0));
      }
      report["cpu"] = {{"threads", threads > 0 ? threads : omp_get_max_threads()},
                       {"seconds", best},
                       {"gups", p.updates() / best / 1e9}};
      fmt::print("cpu ({} threads): {:.3f} s, {:.3f} GUPS\n", report["cpu"]["threads"].get<int>(),
                 best, p.updates() / best / 1e9);
    }
    if (which != "cpu") {
#if defined(CTFORGE_WITH_CUDA)
      std::string why;
      if (!detail::cuda_device_available(&why)) {
        report["gpu"] = {{"skipped", "no device: " + why}};
        fmt::print("gpu: skipped: no device ({})\n", why);
      } else {
        report["device"] = detail::cuda_device_description(0);
        (void)detail::cuda_reconstruct(proj, g, vg, recon_options{}, {});  // warm-up
        for (bool hw : {false, true}) {
          detail::cuda_options copt;
          copt.gpu_hardware_interpolation = hw;
          copt.views_per_batch = views_per_batch;
          copt.gpu_memory_limit_bytes = static_cast<std::int64_t>(memory_limit_mib * 1024 * 1024);
          double best = 1e300;
          std::optional<volume> gpu;
          detail::cuda_pipeline_stats st;
          for (int r = 0; r < repeat; ++r) {
            const auto t0 = clock_type::now();
            gpu = detail::cuda_reconstruct(proj, g, vg, recon_options{}, copt);
            const double t = seconds_since(t0);
            if (t < best) {
              best = t;
              st = detail::cuda_last_pipeline_stats();
            }
          }
          json j{{"seconds", best},
                 {"gups", p.updates() / best / 1e9},
                 {"setup_ms", st.setup_ms},
                 {"stream_ms", st.stream_ms},
                 {"download_ms", st.download_ms},
                 {"filter_device_ms", st.filter_ms},
                 {"backproject_device_ms", st.backproject_ms},
                 {"views_per_batch", st.views_per_batch},
                 {"slabs", st.slabs},
                 {"device_store", st.device_store}};
          std::string agree = "-";
          if (cpu) {
            double peak = 0;
            for (float v : cpu->data) peak = std::max(peak, static_cast<double>(std::abs(v)));
            const double rel = mean_abs_error(gpu->data, cpu->data) / peak;
            j["mae_over_peak_vs_cpu"] = rel;
            agree = fmt::format("{:.2e}", rel);
          }
          const char* mode = hw ? "hardware" : "exact";
          report["gpu"][mode] = j;
          fmt::print(
              "gpu {:<8}: {:.3f} s, {:.2f} GUPS (setup {:.0f} ms, stream {:.0f} ms, download "
              "{:.0f} ms; "
              "device: filter {:.0f} ms, back-projection {:.0f} ms; {} slab(s), batches of {}); "
              "mean |gpu - cpu| / peak = {}\n",
              mode, best, p.updates() / best / 1e9, st.setup_ms, st.stream_ms, st.download_ms,
              st.filter_ms, st.backproject_ms, st.slabs, st.views_per_batch, agree);
        }
      }
#else
      report["gpu"] = {{"skipped", "no device: built without CUDA"}};
      fmt::print("gpu: skipped: no device (built without CUDA)\n");
#endif
    }
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      CTFORGE_CHECK(f.good(), "--json: cannot write " + json_path);
      f << report.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_fdk: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
