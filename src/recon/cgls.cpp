// CGLS: conjugate gradients on the normal equations A^T A x = A^T p, with A = forward_project
// (Joseph) and A^T = back_project_matched (its exact transpose), from x0 = 0:
//   r = p, s = A^T r, d = s, gamma = |s|^2
//   repeat: q = A d; alpha = gamma / |q|^2; x += alpha d; r -= alpha q;
//           s = A^T r; gamma' = |s|^2; d = s + (gamma' / gamma) d; gamma = gamma'
// Dot products in double; vectors in float. Deterministic for a given thread count.
#include <omp.h>

#include <cmath>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/projector.hpp"
#include "recon/sirt.hpp"

namespace ctforge::detail {
namespace {

double squared_norm(const std::vector<float>& v, int threads) {
  const auto n = static_cast<std::int64_t>(v.size());
  double s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = v[static_cast<std::size_t>(i)];
    s += x * x;
  }
  return s;
}

/// y += a * x
void axpy(std::vector<float>& y, double a, const std::vector<float>& x, int threads) {
  const auto n = static_cast<std::int64_t>(y.size());
  const auto af = static_cast<float>(a);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i)
    y[static_cast<std::size_t>(i)] += af * x[static_cast<std::size_t>(i)];
}

}  // namespace

volume cgls_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt) {
  const int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  const auto report = [&](double f) {
    if (opt.progress) opt.progress(f);
    opt.cancel.throw_if_requested("CGLS");
  };
  report(0.0);
  volume x(vg);
  projection_stack r(proj.views, proj.rows, proj.cols);
  std::copy(proj.data.begin(), proj.data.end(), r.data.begin());
  volume s = back_project_matched(r, g, vg, opt.threads);
  volume d = s;
  double gamma = squared_norm(s.data, threads);
  const double gamma0 = gamma;
  for (int it = 0; it < opt.iterations; ++it) {
    // A zero gradient (relative to the start): x minimises the residual already.
    if (!(gamma > 1e-30 * gamma0) || gamma0 == 0) {
      report(1.0);
      break;
    }
    const projection_stack q = forward_project(d, g, opt.threads);
    const double qq = squared_norm(q.data, threads);
    if (!(qq > 0)) break;
    const double alpha = gamma / qq;
    axpy(x.data, alpha, d.data, threads);
    axpy(r.data, -alpha, q.data, threads);
    s = back_project_matched(r, g, vg, opt.threads);
    const double gamma_next = squared_norm(s.data, threads);
    const double beta = gamma_next / gamma;
    gamma = gamma_next;
    // d = s + beta d
    const auto n = static_cast<std::int64_t>(d.data.size());
    const auto bf = static_cast<float>(beta);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      d.data[k] = s.data[k] + bf * d.data[k];
    }
    report(static_cast<double>(it + 1) / static_cast<double>(opt.iterations));
  }
  for (float v : x.data)
    CTFORGE_CHECK(std::isfinite(v), "CGLS: the iterate became non-finite (inconsistent input?)");
  return x;
}

}  // namespace ctforge::detail
