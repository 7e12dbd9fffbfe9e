// Preprocessing steps on the CPU and the GPU (ctforge::preprocess with where = cpu / cuda):
// zinger removal (3 x 3 x 1 and 5 x 5 x 3 windows), phase retrieval (Paganin) and stripe
// removal (Vo's sorting, filtering and all methods; the Fourier-wavelet method, CPU only, for
// comparison) on the same projections, with their throughput (million pixels per second,
// host transfers included) and the GPU's agreement with the CPU.
//
//   bench_preprocess [--views 128] [--rows 512] [--cols 512] [--threads 0] [--json FILE]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ctforge/backend.hpp"
#include "ctforge/preprocess.hpp"

using namespace ctforge;
using json = nlohmann::json;

namespace {

projection_stack make_scan(std::int64_t views, std::int64_t rows, std::int64_t cols) {
  projection_stack p(views, rows, cols);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> noise(-0.01f, 0.01f);
  for (std::int64_t v = 0; v < views; ++v)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const double x = (c - 0.5 * cols) / (0.3 * cols), y = (r - 0.5 * rows) / (0.3 * rows);
        p.at(v, r, c) = static_cast<float>(0.2 + std::exp(-(x * x + y * y))) + noise(rng);
      }
  for (std::int64_t i = 0; i < p.size(); i += 101) p.data[static_cast<std::size_t>(i)] += 2.0f;
  return p;
}

struct step {
  std::string name;
  std::function<void(preprocess_options&)> set;
};

double seconds(const projection_stack& raw, const preprocess_options& o, projection_stack* out) {
  *out = raw;
  const auto t0 = std::chrono::steady_clock::now();
  (void)preprocess(*out, o);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ctforge preprocessing benchmark: CPU and GPU, with their agreement"};
  std::int64_t views = 128, rows = 512, cols = 512;
  int threads = 0;
  std::string json_path;
  app.add_option("--views", views)->check(CLI::Range(1, 100000));
  app.add_option("--rows", rows)->check(CLI::Range(1, 16384));
  app.add_option("--cols", cols)->check(CLI::Range(1, 16384));
  app.add_option("--threads", threads, "CPU threads (0: all cores)");
  app.add_option("--json", json_path);
  CLI11_PARSE(app, argc, argv);

  const projection_stack raw = make_scan(views, rows, cols);
  const std::vector<step> steps = {
      {"zingers 3x3x1",
       [](preprocess_options& o) { o.zingers = outlier_options{.threshold = 0.5}; }},
      {"zingers 5x5x3",
       [](preprocess_options& o) {
         o.zingers = outlier_options{.threshold = 0.5, .size = 5, .views = 3};
       }},
      {"phase paganin",
       [](preprocess_options& o) {
         o.phase = phase_options{
             .energy_kev = 25, .distance_mm = 300, .pixel_size_mm = 0.00065, .delta_beta = 500};
         o.phase->pixel_u_mm = o.phase->pixel_v_mm = 0.00065;
       }},
      {"rings sorting",
       [](preprocess_options& o) { o.rings = stripe_options{.method = stripe_method::sorting}; }},
      {"rings filtering",
       [](preprocess_options& o) { o.rings = stripe_options{.method = stripe_method::filtering}; }},
      {"rings all",
       [](preprocess_options& o) { o.rings = stripe_options{.method = stripe_method::all}; }},
      {"rings fw",
       [](preprocess_options& o) {
         o.rings = stripe_options{.method = stripe_method::fourier_wavelet};
       }},
  };
  const bool gpu = resolve_backend(backend::automatic) == backend::cuda;
  const double mpix = static_cast<double>(raw.size()) / 1e6;
  json out = json::array();
  fmt::print("problem: {} views of {} x {} ({:.1f} Mpixel)\n", views, rows, cols, mpix);
  fmt::print("{:<16} {:>9} {:>11} {:>9} {:>11} {:>9} {:>12}\n", "step", "cpu s", "cpu Mpix/s",
             "gpu s", "gpu Mpix/s", "speedup", "max|d|/peak");
  for (const step& s : steps) {
    preprocess_options cpu, dev;
    s.set(cpu);
    s.set(dev);
    cpu.where = backend::cpu;
    cpu.threads = dev.threads = threads;
    dev.where = backend::cuda;
    projection_stack a, b;
    const double tc = seconds(raw, cpu, &a);
    json j{{"step", s.name}, {"cpu_seconds", tc}, {"cpu_mpix_per_s", mpix / tc}};
    std::string gpu_cols = fmt::format("{:>9} {:>11} {:>9} {:>12}", "-", "-", "-", "-");
    if (gpu) {
      (void)seconds(raw, dev, &b);  // warm-up: context, plans
      const double tg = seconds(raw, dev, &b);
      double peak = 0, diff = 0;
      for (std::size_t i = 0; i < a.data.size(); ++i) {
        peak = std::max(peak, std::abs(static_cast<double>(a.data[i])));
        diff = std::max(diff, std::abs(static_cast<double>(a.data[i]) - b.data[i]));
      }
      j["gpu_seconds"] = tg;
      j["gpu_mpix_per_s"] = mpix / tg;
      j["max_diff_over_peak"] = peak > 0 ? diff / peak : 0.0;
      gpu_cols = fmt::format("{:>9.3f} {:>11.1f} {:>8.1f}x {:>12.2e}", tg, mpix / tg, tc / tg,
                             peak > 0 ? diff / peak : 0.0);
    }
    fmt::print("{:<16} {:>9.3f} {:>11.1f} {}\n", s.name, tc, mpix / tc, gpu_cols);
    out.push_back(j);
  }
  if (!gpu) fmt::print("no usable CUDA device: CPU figures only\n");
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
