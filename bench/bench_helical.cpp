// Helical FBP against SIRT on the same helical scan, and helical FBP on the GPU when one is
// there.
//
//   bench_helical [--nx 512] [--nz 256] [--rows 64] [--views-per-turn 1000] [--pitch 1.0]
//                 [--sirt-iterations 20] [--backend both|cpu|cuda] [--threads 2] [--json FILE]
//
// A long object (a 0.02 / mm body with random ellipsoids, reaching past the helix at both
// ends) scanned by a helix on a cylindrical detector (SID 595 mm, SDD 1086 mm, 1.0 x 1.0 mm
// pixels, as clinical scanners), the grid nx x nx x nz of 0.5 mm voxels in the middle of the
// scanned length, the helix long enough for every height of it. Reports the views and turns,
// seconds, turn-equivalent GUPS (voxels x views per turn / s: what a circular FDK of one turn
// does in that time; every voxel of a helix is seen for about one turn at pitch 1) and the
// PSNR (peak 0.05, the body's density plus the largest insert) of helical FBP and of SIRT
// against the voxelized object inside the scanned cylinder. SIRT reconstructs a grid that
// reaches every height the rays cross (else the object beyond the grid is pushed into it) and
// is scored on the same slices. --sirt-iterations 0 skips SIRT (at the default size it takes
// hours on 2 threads).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "bench_common.hpp"
#include "ctforge/backend.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"

using namespace ctforge;
using namespace ctforge::bench;

namespace {

constexpr double k_sid = 595, k_sdd = 1086, k_pixel = 1.0;

phantom long_object(double radius, double half_length) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1), a(3, 12), d(0.005, 0.02);
  phantom p;
  p.ellipsoids.push_back({{0, 0, 0}, {radius, 0.85 * radius, half_length}, 0, 0.02});
  for (int i = 0; i < 60; ++i)
    p.ellipsoids.push_back(
        {{0.5 * radius * u(rng), 0.4 * radius * u(rng), 0.9 * half_length * u(rng)},
         {a(rng), a(rng), a(rng)},
         180 * u(rng),
         (i % 3 == 0 ? -1.0 : 1.0) * d(rng)});
  return p;
}

// PSNR (peak 0.05) inside the cylinder of `radius` about the axis.
double psnr_inside(const volume& rec, const volume& truth, double radius) {
  const auto [a, b] = values_within_radius(rec, truth, radius);
  return psnr_db(a, b, 0.05);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ctforge helical benchmark: helical FBP against SIRT on the same scan"};
  std::int64_t nx = 512, nz = 256, rows = 64, per_turn = 1000;
  double pitch = 1.0;
  int sirt_iterations = 20, threads = 2;
  std::string which = "both", json_path;
  app.add_option("--nx", nx, "voxels across (x and y)")->check(CLI::Range(8, 4096));
  app.add_option("--nz", nz, "slices (0.5 mm)")->check(CLI::Range(1, 4096));
  app.add_option("--rows", rows, "detector rows (1 mm)")->check(CLI::Range(2, 512));
  app.add_option("--views-per-turn", per_turn, "views per turn")->check(CLI::Range(16, 100000));
  app.add_option("--pitch", pitch, "pitch factor")->check(CLI::Range(0.1, 1.9));
  app.add_option("--sirt-iterations", sirt_iterations, "SIRT iterations (0: skip)")
      ->check(CLI::Range(0, 10000));
  app.add_option("--backend", which, "cpu, cuda or both")
      ->check(CLI::IsMember({"cpu", "cuda", "both"}));
  app.add_option("--threads", threads, "CPU threads (0 = all)")->check(CLI::Range(0, 4096));
  app.add_option("--json", json_path, "also write the figures as JSON");
  CLI11_PARSE(app, argc, argv);

  const double voxel = 0.5, half_z = 0.5 * static_cast<double>(nz) * voxel;
  const double radius = 0.5 * static_cast<double>(nx) * voxel * 0.9;
  // Columns: the grid's width at the isocentre, magnified onto the detector, and a margin.
  const auto cols = static_cast<std::int64_t>(
                        std::ceil(static_cast<double>(nx) * voxel * k_sdd / k_sid / k_pixel)) +
                    8;
  const double collimation = static_cast<double>(rows) * k_pixel * k_sid / k_sdd;
  const double feed = pitch * collimation;
  const double z0 = -half_z - collimation - feed, z1 = half_z + collimation + feed;
  const double turns = (z1 - z0) / feed;
  const auto views = static_cast<std::int64_t>(std::ceil(turns * static_cast<double>(per_turn)));
  const geometry g = make_helical_geometry(
      cols, rows, k_pixel, k_pixel, k_sid, k_sdd,
      angle_range(0, 2 * std::numbers::pi / static_cast<double>(per_turn), views), feed, z0, 0, 0,
      detector_shape::cylindrical);
  const volume_geometry vg = volume_geometry::centered(nx, nx, nz, {voxel, voxel, voxel});
  const phantom ph = long_object(radius * 0.8, half_z + 2 * collimation + 2 * feed);
  fmt::print(
      "helix: {} views ({:.2f} turns, {} per turn), {} x {} cylindrical detector, pitch "
      "factor {:g} ({:.2f} mm per turn); grid {} x {} x {} of {} mm\n",
      views, turns, per_turn, cols, rows, pitch, feed, nx, nx, nz, voxel);
  auto t0 = clock_type::now();
  const projection_stack p = project_analytic(ph, g, threads);
  const volume truth = voxelize(ph, vg, 2, threads);
  fmt::print("simulated in {:.1f} s\n", seconds_since(t0));
  nlohmann::json out = {{"views", views},    {"turns", turns},        {"cols", cols},
                        {"rows", rows},      {"pitch_factor", pitch}, {"grid", {nx, nx, nz}},
                        {"threads", threads}};
  const double turn_updates = static_cast<double>(vg.voxel_count()) * static_cast<double>(per_turn);
  const auto run = [&](backend where, const char* name) {
    recon_options o;
    o.algo = algorithm::helical_fbp;
    o.where = where;
    o.threads = threads;
    const auto t = clock_type::now();
    const volume rec = reconstruct(p, g, vg, o);
    const double s = seconds_since(t);
    const double q = psnr_inside(rec, truth, radius * 0.8);
    fmt::print("helical FBP ({}): {:.2f} s, {:.3f} turn-equivalent GUPS, PSNR {:.2f} dB\n", name, s,
               turn_updates / s / 1e9, q);
    out[std::string("helical_") + name] = {
        {"seconds", s}, {"gups", turn_updates / s / 1e9}, {"psnr_db", q}};
  };
  if (which != "cuda") run(backend::cpu, "cpu");
  if (which != "cpu") {
    std::string why;
    if (resolve_backend(backend::automatic, &why) == backend::cuda)
      run(backend::cuda, "cuda");
    else
      fmt::print("helical FBP (cuda): skipped: no device ({})\n", why);
  }
  if (sirt_iterations > 0) {
    // SIRT must explain every ray: its grid reaches every height the rays cross (the object
    // outside a shorter grid would be pushed into it); compared on the same central slices.
    const double reach = 0.5 * static_cast<double>(rows) * k_pixel * (k_sid + radius) / k_sdd;
    const auto extra = static_cast<std::int64_t>(std::ceil((half_z - z0 + reach) / voxel)) - nz / 2;
    volume_geometry wide = vg;
    wide.nz = nz + 2 * extra;
    wide.origin_mm[2] = vg.origin_mm[2] - static_cast<double>(extra) * voxel;
    recon_options o;
    o.algo = algorithm::sirt;
    o.where = backend::cpu;
    o.threads = threads;
    o.iterations = sirt_iterations;
    const auto t = clock_type::now();
    const volume all = reconstruct(p, g, wide, o);
    const double s = seconds_since(t);
    volume rec(vg);
    const std::int64_t plane = vg.nx * vg.ny;
    std::copy(all.data.begin() + extra * plane, all.data.begin() + (extra + nz) * plane,
              rec.data.begin());
    const double q = psnr_inside(rec, truth, radius * 0.8);
    fmt::print(
        "SIRT, {} iterations (cpu, {} slices covering every ray): {:.2f} s, PSNR {:.2f} dB "
        "on the same slices\n",
        sirt_iterations, wide.nz, s, q);
    out["sirt_cpu"] = {
        {"iterations", sirt_iterations}, {"slices", wide.nz}, {"seconds", s}, {"psnr_db", q}};
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
