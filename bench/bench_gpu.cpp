// GPU throughput against the CPU path, end to end from host memory.
//
//   bench_gpu [--quick] [--repeat 2] [--interp both|exact|hardware] [--cpu-scale 0.25]
//             [--cpu-cap 4e8] [--no-cpu] [--max-seconds 0] [--input pinned|pageable]
//             [--json FILE]
//
// Problems (circular cone beam, SID 750 mm, SDD 1200 mm):
//  * rabbitct : back-projection with the FDK weight of 496 already filtered views of
//               1248 x 960 pixels of 0.31 mm over 200 deg into 512^3 voxels of 0.5 mm
//               (the RabbitCT problem). GUPS = 512^3 * 496 / s, uploads and download included.
//  * fdk512   : FDK of 512 views of 1024^2 pixels of 0.4 mm (360 deg) into 512^3 of 0.5 mm.
//  * fdk1024  : FDK of 1024 views of 1024^2 into 1024^3 of 0.25 mm with a device memory budget
//               that forces a split into 3 slabs (the filtered projections, as large as the
//               volume, kept in page-locked host memory).
// GPU: detail::cuda_reconstruct / cuda_backproject_filtered from host memory, page-locked once
// before timing unless --input pageable (best of --repeat runs after a warm-up), with exact (CPU
// arithmetic) and/or texture-unit interpolation; the share of device time in pre-weighting +
// filtering comes from the pipeline's per-batch events. CPU: ctforge::reconstruct (backend cpu) /
// the CPU FDK back-projection loop, single-threaded and with all threads, on the same scan scaled
// by s <= --cpu-scale in every dimension (voxels x views <= --cpu-cap); its GUPS is measured on
// that reduced problem and the full problem's time extrapolated as full updates / GUPS
// (clearly labelled). --quick shrinks every problem ~8x per edge so the whole run takes
// seconds on a CPU; GPU parts print "skipped: no device" where none exists.
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "ctforge/recon.hpp"
#include "math/geometry.hpp"
#include "recon/backproject.hpp"
#include "recon/backproject_cpu.hpp"
#include "recon/fdk.hpp"
#if defined(CTFORGE_WITH_CUDA)
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_plan.cuh"
#include "recon/fdk_setup.hpp"
#include "recon/filter.hpp"
#endif

using namespace ctforge;
using namespace ctforge::bench;
using json = nlohmann::json;

namespace {

enum class op { backproject, fdk };

struct problem_def {
  cone_problem p;
  op what = op::fdk;
  bool force_slabs = false;
};

struct options {
  bool quick = false;
  int repeat = 2;
  std::string interp = "both";
  double cpu_scale = 0.25;
  double cpu_cap = 4e8;
  bool no_cpu = false;
  double max_seconds = 0;
  std::string json_path;
  std::string input = "pinned";
};

std::vector<problem_def> problems(bool quick) {
  std::vector<problem_def> v;
  problem_def rabbit;
  rabbit.p = {.name = "rabbitct",
              .views = 496,
              .cols = 1248,
              .rows = 960,
              .pixel_mm = 0.31,
              .arc_deg = 200,
              .n = 512,
              .voxel_mm = 0.5};
  rabbit.what = op::backproject;
  problem_def f512;
  f512.p = {.name = "fdk512",
            .views = 512,
            .cols = 1024,
            .rows = 1024,
            .pixel_mm = 0.4,
            .arc_deg = 360,
            .n = 512,
            .voxel_mm = 0.5};
  problem_def f1024;
  f1024.p = {.name = "fdk1024_slabs",
             .views = 1024,
             .cols = 1024,
             .rows = 1024,
             .pixel_mm = 0.4,
             .arc_deg = 360,
             .n = 1024,
             .voxel_mm = 0.25};
  f1024.force_slabs = true;
  v = {rabbit, f512, f1024};
  if (quick)
    for (auto& d : v) {
      const std::string name = d.p.name;
      d.p = d.p.scaled(0.125);
      d.p.name = name + " (quick)";
    }
  return v;
}

// ---- CPU ------------------------------------------------------------------------------------

json run_cpu(const problem_def& d, const options& o) {
  json out;
  const double s = cpu_scale_for(d.p, o.cpu_scale, o.cpu_cap);
  if (o.no_cpu || s <= 0) {
    out["skipped"] = "CPU runs disabled";
    return out;
  }
  const cone_problem q = d.p.scaled(s);
  const geometry g = q.make_geometry();
  const volume_geometry vg = q.make_volume();
  const projection_stack proj = synthetic_projections(q.views, q.rows, q.cols);
  out["scale"] = s;
  out["problem"] = fmt::format("{}^3 from {} views of {}x{}", q.n, q.views, q.cols, q.rows);
  for (int threads : {1, 0}) {
    const int nt = threads > 0 ? threads : omp_get_max_threads();
    double seconds = 0;
    if (d.what == op::fdk) {
      recon_options opt;
      opt.where = backend::cpu;
      opt.threads = threads;
      const auto t0 = clock_type::now();
      const volume v = reconstruct(proj, g, vg, opt);
      seconds = seconds_since(t0);
      if (!std::isfinite(v.data[v.data.size() / 2]))
        CTFORGE_FAIL("bench_gpu: non-finite CPU result");
    } else {
      const auto mats = kernels::float_matrices(g);
      const auto t0 = clock_type::now();
      const auto padded = detail::make_padded_projections(proj);
      volume v(vg);
      detail::backproject(
          detail::bp_job::flat(padded, mats.data(), vg, v.data.data(), true, threads));
      seconds = seconds_since(t0);
      if (!std::isfinite(v.data[v.data.size() / 2]))
        CTFORGE_FAIL("bench_gpu: non-finite CPU result");
    }
    const double gups = q.updates() / seconds / 1e9;
    json r;
    r["threads"] = nt;
    r["seconds"] = seconds;
    r["gups"] = gups;
    r["extrapolated_full_seconds"] = d.p.updates() / (gups * 1e9);
    out[threads == 1 ? "single_thread" : "all_threads"] = r;
  }
  return out;
}

// ---- GPU ------------------------------------------------------------------------------------

#if defined(CTFORGE_WITH_CUDA)
json run_gpu(const problem_def& d, const options& o, bool hardware) {
  const geometry g = d.p.make_geometry();
  const volume_geometry vg = d.p.make_volume();
  const projection_stack proj = synthetic_projections(d.p.views, d.p.rows, d.p.cols);
  // Page-locked once, before timing (as a detector's frame buffers would be): the pipeline then
  // uploads straight from it. --input pageable times the host copy through staging as well.
  std::optional<pinned_host_range> pin;
  if (o.input == "pinned") pin.emplace(proj.data.data(), proj.data.size() * sizeof(float));
  detail::cuda_options copt;
  copt.gpu_hardware_interpolation = hardware;
  json out;
  out["input"] = pin && pin->active() ? "page-locked" : "pageable";
  if (pin && !pin->active()) out["input_not_pinned_because"] = pin->why_not();
  if (d.force_slabs) {
    // Budget: the batch buffers and a third of the volume. (With room for the filtered-
    // projection store as well, 4 GiB here like the volume, the whole volume would fit.)
    const kernels::cuda::plan_input in = kernels::cuda::make_plan_input(
        proj.views, proj.rows, proj.cols, vg, true, detail::padded_length(proj.cols));
    const std::int64_t b = std::min<std::int64_t>(32, proj.views);
    const std::int64_t planes = std::max<std::int64_t>(32, (vg.nz + 2) / 3);
    copt.gpu_memory_limit_bytes =
        kernels::cuda::batch_bytes(in, b, detail::cuda_fft_work_bytes(in.padded_len, b * in.rows)) +
        planes * vg.nx * vg.ny * 4;
    out["memory_limit_bytes"] = copt.gpu_memory_limit_bytes;
  }
  recon_options opt;
  double best = 1e300;
  detail::cuda_pipeline_stats best_stats;
  for (int r = 0; r < std::max(o.repeat, 1); ++r) {
    const auto t0 = clock_type::now();
    const volume v = d.what == op::fdk ? detail::cuda_reconstruct(proj, g, vg, opt, copt)
                                       : detail::cuda_backproject_filtered(proj, g, vg, copt, true);
    const double t = seconds_since(t0);
    if (!std::isfinite(v.data[v.data.size() / 2])) CTFORGE_FAIL("bench_gpu: non-finite GPU result");
    if (t < best) {
      best = t;
      best_stats = detail::cuda_last_pipeline_stats();
    }
  }
  const auto& st = best_stats;
  if (d.force_slabs && st.slabs < 2)
    CTFORGE_FAIL(
        fmt::format("bench_gpu: {}: the memory budget did not split the volume", d.p.name));
  out["seconds"] = best;
  out["gups"] = d.p.updates() / best / 1e9;
  out["setup_ms"] = st.setup_ms;
  out["stream_ms"] = st.stream_ms;
  out["download_ms"] = st.download_ms;
  out["filter_device_ms"] = st.filter_ms;
  out["backproject_device_ms"] = st.backproject_ms;
  out["gather_device_ms"] = st.gather_ms;
  const double device_ms = st.filter_ms + st.gather_ms + st.backproject_ms;
  out["filter_share"] = device_ms > 0 ? st.filter_ms / device_ms : 0.0;
  out["fft_plans_created"] = st.fft_plans_created;
  out["backproject_gups"] =
      st.backproject_ms > 0 ? d.p.updates() / (st.backproject_ms * 1e-3) / 1e9 : 0.0;
  out["views_per_batch"] = st.views_per_batch;
  out["slabs"] = st.slabs;
  out["device_store"] = st.device_store;
  return out;
}
#endif

std::string fmt_s(const json& j, const char* key) {
  return j.contains(key) ? fmt::format("{:.3f}", j[key].get<double>()) : "-";
}
std::string fmt_g(const json& j, const char* key) {
  return j.contains(key) ? fmt::format("{:.2f}", j[key].get<double>()) : "-";
}

}  // namespace

/// The results as a readable table with a legend, after the runs.
void print_table(const json& rows) {
  fmt::print("\n{:<22} {:<9} {:>9} {:>8} {:>8} {:>7} {:>6} | {:>6} {:>9} {:>9} {:>10} {:>9}\n",
             "problem", "gpu mode", "gpu s", "GUPS", "bp GUPS", "filt%", "slabs", "cpu scl",
             "cpu1 GUPS", "cpuN GUPS", "cpuN full*", "speedup");
  for (const json& r : rows) {
    if (r.contains("skipped")) {
      fmt::print("{:<22} skipped: {}\n", r["problem"].get<std::string>(),
                 r["skipped"].get<std::string>());
      continue;
    }
    const json& c = r["cpu"];
    const std::string cpu_scale =
        c.contains("scale") ? fmt::format("x{:.3g}", c["scale"].get<double>()) : "-";
    const json c1 = c.value("single_thread", json::object());
    const json cn = c.value("all_threads", json::object());
    for (const auto& [mode, gj] : r["gpu"].items()) {
      if (gj.contains("skipped")) {
        fmt::print("{:<22} {:<9} {:>9} | cpu {} {:>9} {:>9} {:>10}\n",
                   r["problem"].get<std::string>(), mode, "skipped: no device", cpu_scale,
                   fmt_g(c1, "gups"), fmt_g(cn, "gups"), fmt_s(cn, "extrapolated_full_seconds"));
        continue;
      }
      if (gj.contains("error")) {
        fmt::print("{:<22} {:<9} ERROR: {}\n", r["problem"].get<std::string>(), mode,
                   gj["error"].get<std::string>());
        continue;
      }
      const std::string speed =
          r.contains("speedup_vs_cpu_all_threads") && r["speedup_vs_cpu_all_threads"].contains(mode)
              ? fmt::format("{:.1f}x", r["speedup_vs_cpu_all_threads"][mode].get<double>())
              : "-";
      fmt::print(
          "{:<22} {:<9} {:>9} {:>8} {:>8} {:>6.1f}% {:>6} | {:>7} {:>9} {:>9} {:>10} {:>9}\n",
          r["problem"].get<std::string>(), mode, fmt_s(gj, "seconds"), fmt_g(gj, "gups"),
          fmt_g(gj, "backproject_gups"), 100 * gj.value("filter_share", 0.0), gj.value("slabs", 0),
          cpu_scale, fmt_g(c1, "gups"), fmt_g(cn, "gups"), fmt_s(cn, "extrapolated_full_seconds"),
          speed);
      // Where the GPU call's wall time went (host clock), for the first runs on a new machine.
      fmt::print(
          "{:<22}   set-up {:.0f} ms, batches {:.0f} ms, download {:.0f} ms; {} views/batch; "
          "{} input{}\n",
          "", gj.value("setup_ms", 0.0), gj.value("stream_ms", 0.0), gj.value("download_ms", 0.0),
          gj.value("views_per_batch", 0), gj.value("input", std::string("pageable")),
          gj.contains("input_not_pinned_because")
              ? " (not pinned: " + gj["input_not_pinned_because"].get<std::string>() + ")"
              : std::string());
    }
  }
  fmt::print(R"(GUPS = voxels x views / s / 1e9, uploads and download included (bp GUPS: device
time of the back-projection kernels only); filt% = device time in pre-weighting + filtering
over all device stages (filtering + slab row gathers + back-projection). CPU figures are
measured on the problem scaled by the 'cpu scl' factor; * cpuN full = full problem time
EXTRAPOLATED from that GUPS; speedup = GPU GUPS / CPU all-threads GUPS. set-up: allocations,
plans, graph capture; batches: the pipelined upload / filter / back-projection loop; download:
the volume back to the host.
)");
}

int main(int argc, char** argv) {
  CLI::App app{"ctforge GPU vs CPU benchmark (RabbitCT back-projection, FDK 512^3 and 1024^3)"};
  options o;
  app.add_flag("--quick", o.quick, "shrink every problem ~8x per edge (runs in seconds on a CPU)");
  app.add_option("--repeat", o.repeat, "GPU runs per problem (best is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--interp", o.interp, "GPU interpolation: exact, hardware or both")
      ->check(CLI::IsMember({"exact", "hardware", "both"}));
  auto* scale_opt =
      app.add_option("--cpu-scale", o.cpu_scale,
                     "scale of the CPU problems (<= 1; 0 = no CPU runs; default 0.25, "
                     "1 with --quick)")
          ->check(CLI::Range(0.0, 1.0));
  app.add_option("--cpu-cap", o.cpu_cap, "max voxels x views of a CPU problem (lowers the scale)");
  app.add_flag("--no-cpu", o.no_cpu, "skip the CPU runs");
  app.add_option("--max-seconds", o.max_seconds,
                 "skip the remaining problems after this long (0 = no limit)");
  app.add_option("--json", o.json_path, "write the results as JSON to this file");
  app.add_option("--input", o.input,
                 "GPU input memory: pinned (page-locked once before timing; uploads go straight "
                 "from it) or pageable (each call copies it through its own pinned staging)")
      ->check(CLI::IsMember({"pinned", "pageable"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.quick && scale_opt->count() == 0) o.cpu_scale = 1.0;

  try {
    const auto t_start = clock_type::now();
    json report;
    std::string device = "none";
    bool have_gpu = false;
#if defined(CTFORGE_WITH_CUDA)
    std::string why;
    have_gpu = detail::cuda_device_available(&why);
    device = have_gpu ? detail::cuda_device_description(0) : "skipped: no device (" + why + ")";
#else
    device = "skipped: no device (built without CUDA)";
#endif
    report["device"] = device;
    report["cpu_threads"] = omp_get_max_threads();
    report["quick"] = o.quick;
    report["gpu_input"] = o.input;
    fmt::print("device: {}\nCPU threads: {}\nGPU input: {}\n", device, omp_get_max_threads(),
               o.input == "pinned" ? "page-locked (pinned once before timing)"
                                   : "pageable (copied through pinned staging in every call)");
#if defined(CTFORGE_WITH_CUDA)
    if (have_gpu) {
      // Warm-up: context, modules, cuFFT initialisation.
      const problem_def w = problems(true)[1];
      const projection_stack proj = synthetic_projections(w.p.views, w.p.rows, w.p.cols);
      try {
        (void)detail::cuda_reconstruct(proj, w.p.make_geometry(), w.p.make_volume(),
                                       recon_options{}, {});
      } catch (const std::exception& e) {  // the problems below report their own errors
        fmt::print("warm-up failed: {}\n", e.what());
      }
    }
#endif
    std::vector<std::string> modes;
    if (o.interp == "both" || o.interp == "exact") modes.push_back("exact");
    if (o.interp == "both" || o.interp == "hardware") modes.push_back("hardware");

    bool gpu_errors = false;
    json rows = json::array();
    for (const problem_def& d : problems(o.quick)) {
      json r;
      r["problem"] = d.p.name;
      r["size"] = fmt::format("{}^3 from {} views of {}x{}", d.p.n, d.p.views, d.p.cols, d.p.rows);
      r["operation"] = d.what == op::fdk ? "fdk" : "backproject_fdk_weighted";
      r["updates"] = d.p.updates();
      if (o.max_seconds > 0 && seconds_since(t_start) > o.max_seconds) {
        r["skipped"] = "time budget (--max-seconds) exhausted";
        rows.push_back(r);
        continue;
      }
      fmt::print("running {} ({})...\n", d.p.name, r["size"].get<std::string>());
      std::fflush(stdout);
      json gpu;
      for (const std::string& m : modes) {
#if defined(CTFORGE_WITH_CUDA)
        if (have_gpu) {
          // One failing problem must not hide the others' figures (the device check has one
          // shot): the error is reported in its row and the exit status.
          try {
            gpu[m] = run_gpu(d, o, m == "hardware");
          } catch (const std::exception& e) {
            gpu[m] = json{{"error", e.what()}};
            gpu_errors = true;
          }
          continue;
        }
#endif
        gpu[m] = json{{"skipped", "no device"}};
      }
      r["gpu"] = gpu;
      r["cpu"] = run_cpu(d, o);
      // Speed-up from GUPS (the CPU figure measured on the scaled problem).
      if (r["cpu"].contains("all_threads"))
        for (const std::string& m : modes)
          if (gpu[m].contains("gups")) {
            r["speedup_vs_cpu_all_threads"][m] =
                gpu[m]["gups"].get<double>() / r["cpu"]["all_threads"]["gups"].get<double>();
            r["speedup_vs_cpu_single_thread"][m] =
                gpu[m]["gups"].get<double>() / r["cpu"]["single_thread"]["gups"].get<double>();
          }
      rows.push_back(r);
    }
    report["results"] = rows;

    print_table(rows);
    if (!o.json_path.empty()) {
      std::ofstream f(o.json_path);
      CTFORGE_CHECK(f.good(), "--json: cannot write " + o.json_path);
      f << report.dump(2) << "\n";
      fmt::print("wrote {}\n", o.json_path);
    }
    if (gpu_errors) {
      std::cerr << "bench_gpu: some GPU runs failed (see ERROR rows)\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_gpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
