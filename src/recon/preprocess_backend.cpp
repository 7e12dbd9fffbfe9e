// preprocess(): the steps of include/ctforge/preprocess.hpp on the backend the options choose.
// The CPU steps live in src/preprocess/; with the CUDA backend zinger removal and phase
// retrieval run in src/cuda/preprocess.cu and Vo's stripe methods in src/cuda/stripes.cu, with
// the same arithmetic, after the same checks (src/preprocess/steps.hpp, stripe_methods.hpp).
// The beam-hardening polynomial stays on the CPU: one pass over host data, which a transfer to
// the GPU and back would only slow down (bench_preprocess on an H200 host: 834 Mpixel/s on 16
// CPU threads, 279 through the GPU); so do the Fourier-wavelet and Titarenko stripe methods.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>

#include "ctforge/backend.hpp"
#include "ctforge/preprocess.hpp"
#include "cuda/cuda_api.hpp"
#include "math/vo_stripes.hpp"
#include "preprocess/common.hpp"
#include "preprocess/steps.hpp"
#include "preprocess/stripe_methods.hpp"

namespace ctforge {

namespace {

#if defined(CTFORGE_WITH_CUDA)
std::int64_t zingers_on_gpu(projections_ref p, const preprocess_options& opt) {
  outlier_options z = *opt.zingers;
  z.threads = opt.threads;
  if (z.size * z.size * z.views > k_gpu_zinger_window) return remove_outliers(p, z);
  detail::check_outlier_options(z);
  detail::require_finite(p, "zinger removal", detail::thread_count(opt.threads));
  return detail::cuda_remove_outliers(p.data, p.views, p.rows, p.cols, z.size, z.views, z.threshold,
                                      opt);
}

void phase_on_gpu(projections_ref p, const preprocess_options& opt) {
  const phase_options ph = detail::phase_in_sample_plane(opt);
  const kernels::phase_grid grid = detail::make_phase_grid(p.rows, p.cols, ph);
  detail::require_finite(p, "phase retrieval", detail::thread_count(opt.threads));
  float value = 0;
  const std::int64_t i = detail::cuda_retrieve_phase(p.data, p.views, grid, opt, &value);
  if (i < 0) return;
  const std::int64_t plane = p.rows * p.cols;
  detail::throw_phase_failure(i / plane, i % plane / p.cols, i % p.cols, value);
}

/// Whether remove_stripes with `r` on `p` has a GPU path: Vo's methods with windows the kernel
/// holds, one row's sinogram (and its padded transforms) countable in 32 bits, a view's rows
/// within the 2D copies' pitch limit (2 GiB).
bool stripes_have_gpu_path(const stripe_options& r, const projections_ref& p) {
  const std::int64_t padded = p.views + 2 * kernels::lowpass_pad(p.views);
  return r.method != stripe_method::fourier_wavelet && r.method != stripe_method::titarenko &&
         std::max(r.size, r.la_size) <= k_gpu_stripe_window && p.cols * padded <= INT32_MAX &&
         p.rows * p.cols * 4 <= INT32_MAX;
}

void stripes_on_gpu(projections_ref p, const preprocess_options& opt) {
  stripe_options r = *opt.rings;
  r.threads = opt.threads;
  if (!stripes_have_gpu_path(r, p)) return remove_stripes(p, r);
  detail::check_stripe_options(r);
  detail::require_finite(p, "stripe removal", detail::thread_count(opt.threads));
  CTFORGE_EXPECTS(p.views <= INT32_MAX,
                  fmt::format("stripe removal: {} views, more than {}", p.views, INT32_MAX));
  detail::stripe_decisions decide;
  decide.large_drop = detail::large_stripe_drop(p.views, r.drop_ratio);
  decide.large_mask = [&r](std::span<const double> ratios) {
    return detail::detect_stripes(ratios, r.snr);
  };
  decide.dead_plan = [&r](std::span<const double> roughness, std::int32_t* left,
                          std::int32_t* right) {
    const detail::dead_column_plan plan = detail::plan_dead_columns(roughness, r);
    std::copy(plan.left.begin(), plan.left.end(), left);
    std::copy(plan.right.begin(), plan.right.end(), right);
    return plan.any;
  };
  detail::cuda_remove_stripes(p.data, p.views, p.rows, p.cols, r, decide, opt);
}

preprocess_report preprocess_gpu(projections_ref p, const preprocess_options& opt) {
  preprocess_report report;
  if (opt.zingers) report.zingers_replaced = zingers_on_gpu(p, opt);
  if (opt.rings) stripes_on_gpu(p, opt);
  if (opt.phase) phase_on_gpu(p, opt);
  if (opt.beam_hardening) correct_beam_hardening(p, *opt.beam_hardening, opt.threads);
  return report;
}
#endif

}  // namespace

preprocess_report preprocess(projections_ref p, const preprocess_options& opt) {
  if (opt.empty()) return {};
  const bool gpu_steps = opt.zingers || opt.phase || opt.rings;
  if (!gpu_steps || resolve_backend(opt.where, nullptr, opt.device) != backend::cuda)
    return detail::preprocess_cpu(p, opt);
#if defined(CTFORGE_WITH_CUDA)
  return preprocess_gpu(p, opt);
#else
  return detail::preprocess_cpu(p, opt);  // resolve_backend refuses cuda in this build
#endif
}

}  // namespace ctforge
