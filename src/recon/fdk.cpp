// FDK (circular cone / fan beam) and FBP (circular parallel beam) on the CPU, backend selection
// and the option parsers of include/ctforge/recon.hpp.
//
// Algorithm (Feldkamp, Davis & Kress 1984; Kak & Slaney ch. 3): with the pre-weights of
// recon/fdk_setup.hpp (angular weight x redundancy x (SID/SDD)^2 x cosine x Parker),
//   f(x) = sum_views  1/w(x)^2 * [ (p * preweight) (*) h ](col(x), row(x))
// where (*) is the row-wise ramp filter built for the virtual-detector pitch du SID/SDD and
// w = depth fraction of x (projection matrix, 1 on the detector): (SID/SDD)^2 / w^2 = SID^2/L^2,
// L the distance from the source along the central ray. Parallel beam: no cosine or distance
// weight, pitch du. A uniform object therefore comes out at its density (tests check this).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "kernels/backproject.cuh"
#include "kernels/geometry.cuh"
#include "recon/backproject_cpu.hpp"
#include "recon/cuda_dispatch.hpp"
#include "recon/fdk.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/filter.hpp"

namespace ctforge {

void detail::backproject_filtered_cpu(const padded_projections& proj,
                                      const kernels::proj_matrix* mats, const volume_geometry& vg,
                                      bool distance_weighting, float* out, int threads) {
  if (distance_weighting)
    backproject_cpu<kernels::bp_weighting::fdk>(proj, mats, vg, out, 0, vg.nz, threads);
  else
    backproject_cpu<kernels::bp_weighting::none>(proj, mats, vg, out, 0, vg.nz, threads);
}

namespace {

void report(const recon_options& opt, double f) {
  if (opt.progress) opt.progress(std::clamp(f, 0.0, 1.0));
}

// Share of the run time taken by pre-weighting and filtering (for the progress callback).
constexpr double k_filter_share = 0.05;

// Plain reference back-projection: double matrices, double accumulation, the bounds-checked
// border-zero sampler. Adds the result to `out`. Progress per z-slab.
void backproject_reference(const projection_stack& proj, const geometry& g,
                           const volume_geometry& vg, bool distance_weighting, volume& out,
                           int threads, const recon_options& opt) {
  const std::vector<projection_matrix> mats = compute_projection_matrices(g);
  const std::int64_t nx = vg.nx, ny = vg.ny, nz = vg.nz;
  const int cols = static_cast<int>(proj.cols), rows = static_cast<int>(proj.rows);
  const std::int64_t slabs = std::min<std::int64_t>(nz, 16);
  for (std::int64_t s = 0; s < slabs; ++s) {
    const std::int64_t k0 = nz * s / slabs, k1 = nz * (s + 1) / slabs;
#pragma omp parallel num_threads(threads)
    {
      std::vector<double> acc(static_cast<std::size_t>(nx));
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t row = k0 * ny; row < k1 * ny; ++row) {
        const std::int64_t k = row / ny, j = row % ny;
        std::fill(acc.begin(), acc.end(), 0.0);
        const double y = vg.origin_mm[1] + static_cast<double>(j) * vg.spacing_mm[1];
        const double z = vg.origin_mm[2] + static_cast<double>(k) * vg.spacing_mm[2];
        for (std::int64_t v = 0; v < proj.views; ++v) {
          const projection_matrix& m = mats[static_cast<std::size_t>(v)];
          const float* img = proj.view(v);
          for (std::int64_t i = 0; i < nx; ++i) {
            const double x = vg.origin_mm[0] + static_cast<double>(i) * vg.spacing_mm[0];
            const double p0 = m[0] * x + m[1] * y + m[2] * z + m[3];
            const double p1 = m[4] * x + m[5] * y + m[6] * z + m[7];
            const double p2 = m[8] * x + m[9] * y + m[10] * z + m[11];
            if (!(p2 > 1e-6)) continue;  // at or behind the source plane
            const float sample = kernels::sample_bilinear_border(
                img, cols, rows, static_cast<float>(p0 / p2), static_cast<float>(p1 / p2));
            acc[static_cast<std::size_t>(i)] +=
                distance_weighting ? static_cast<double>(sample) / (p2 * p2) : sample;
          }
        }
        float* dst = out.data.data() + (k * ny + j) * nx;
        for (std::int64_t i = 0; i < nx; ++i) dst[i] += static_cast<float>(acc[static_cast<std::size_t>(i)]);
      }
    }
    report(opt, k_filter_share + (1 - k_filter_share) * static_cast<double>(s + 1) / static_cast<double>(slabs));
  }
}

// Fast path: views in batches (progress per batch), each batch copied into zero-bordered images
// and back-projected by the shared vectorised loop (recon/backproject_cpu.hpp).
void backproject_fast(const projection_stack& proj, const geometry& g, const volume_geometry& vg,
                      bool distance_weighting, volume& out, int threads, const recon_options& opt) {
  const std::vector<kernels::proj_matrix> mats = kernels::float_matrices(g);
  const std::int64_t batches = std::min<std::int64_t>(proj.views, 8);
  const std::int64_t pixels = proj.rows * proj.cols;
  for (std::int64_t b = 0; b < batches; ++b) {
    const std::int64_t v0 = proj.views * b / batches, v1 = proj.views * (b + 1) / batches;
    const detail::padded_projections padded =
        detail::make_padded_projections(proj.data.data() + v0 * pixels, v1 - v0, proj.rows, proj.cols);
    detail::backproject_filtered_cpu(padded, mats.data() + v0, vg, distance_weighting,
                                     out.data.data(), threads);
    report(opt, k_filter_share + (1 - k_filter_share) * static_cast<double>(b + 1) / static_cast<double>(batches));
  }
}

volume reconstruct_cpu(const projection_stack& proj, const geometry& g, const volume_geometry& vg,
                       const recon_options& opt, const detail::fdk_setup& setup) {
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  report(opt, 0.0);
  projection_stack work = proj;
  detail::apply_preweights(setup, work, threads);
  const detail::ramp_filter filter(work.cols, setup.filter_pixel_mm, opt.filter, opt.cutoff);
  filter.apply(work, threads);
  report(opt, k_filter_share);
  volume out(vg);
  if (opt.reference)
    backproject_reference(work, g, vg, setup.distance_weighting, out, threads, opt);
  else
    backproject_fast(work, g, vg, setup.distance_weighting, out, threads, opt);
  return out;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

algorithm parse_algorithm(std::string_view name) {
  const std::string n = lower(name);
  if (n == "fdk") return algorithm::fdk;
  if (n == "fbp") return algorithm::fbp;
  throw usage_error(fmt::format("--algorithm: unknown algorithm '{}' (expected fdk or fbp)", name));
}

backend parse_backend(std::string_view name) {
  const std::string n = lower(name);
  if (n == "auto" || n == "automatic") return backend::automatic;
  if (n == "cpu") return backend::cpu;
  if (n == "cuda" || n == "gpu") return backend::cuda;
  throw usage_error(fmt::format("--backend: unknown backend '{}' (expected auto, cpu or cuda)", name));
}

filter_window parse_filter(std::string_view name) {
  std::string n = lower(name);
  std::replace(n.begin(), n.end(), '_', '-');
  if (n == "ram-lak" || n == "ramlak" || n == "ramp") return filter_window::ram_lak;
  if (n == "shepp-logan") return filter_window::shepp_logan;
  if (n == "cosine") return filter_window::cosine;
  if (n == "hamming") return filter_window::hamming;
  if (n == "hann" || n == "hanning") return filter_window::hann;
  throw usage_error(fmt::format(
      "--filter: unknown filter '{}' (expected ram-lak, shepp-logan, cosine, hamming or hann)", name));
}

std::string to_string(filter_window w) {
  switch (w) {
    case filter_window::ram_lak: return "ram-lak";
    case filter_window::shepp_logan: return "shepp-logan";
    case filter_window::cosine: return "cosine";
    case filter_window::hamming: return "hamming";
    case filter_window::hann: return "hann";
  }
  return "ram-lak";
}

backend resolve_backend(backend where, std::string* notice) {
  if (notice) notice->clear();
  switch (where) {
    case backend::cpu:
      return backend::cpu;
    case backend::cuda: {
#if defined(CTFORGE_WITH_CUDA)
      std::string why;
      CTFORGE_CHECK(detail::cuda_device_available(&why),
                    fmt::format("--backend cuda: no usable CUDA device ({})", why));
      return backend::cuda;
#else
      throw usage_error("--backend cuda: this build has no CUDA backend");
#endif
    }
    case backend::automatic: {
#if defined(CTFORGE_WITH_CUDA)
      std::string why;
      if (detail::cuda_device_available(&why)) return backend::cuda;
      if (notice) *notice = fmt::format("no usable CUDA device ({}); using the CPU backend", why);
#else
      if (notice) *notice = "this build has no CUDA backend; using the CPU backend";
#endif
      return backend::cpu;
    }
  }
  return backend::cpu;
}

volume reconstruct(const projection_stack& proj, const geometry& g, const volume_geometry& vg,
                   const recon_options& opt) {
  vg.validate();
  CTFORGE_EXPECTS(opt.threads >= 0, fmt::format("--threads must be >= 0 (got {})", opt.threads));
  const detail::fdk_setup setup = detail::make_fdk_setup(proj, g, opt);
  // The reference path is a CPU path by definition.
  const backend where = opt.reference ? backend::cpu : resolve_backend(opt.where);
  if (where == backend::cuda) {
#if defined(CTFORGE_WITH_CUDA)
    detail::cuda_options copt;
    copt.device = opt.device;
    copt.memory_limit_bytes = opt.gpu_memory_limit_bytes;
    return detail::cuda_reconstruct(proj, g, vg, opt, copt);
#endif
  }
  return reconstruct_cpu(proj, g, vg, opt, setup);
}

}  // namespace ctforge
