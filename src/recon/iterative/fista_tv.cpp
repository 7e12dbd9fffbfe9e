// FISTA-TV (Beck & Teboulle 2009): minimises F(x) = 0.5 |A x - p|^2 / L + w TV(x) (+ x >= 0
// with nonnegative), L = ||A||^2, by
//   x_k+1 = prox_{w TV}(y_k - A^T (A y_k - p) / L)       (gradient step 1 on the scaled data
//                                                            term, whose gradient is 1-Lipschitz)
//   t_k+1 = (1 + sqrt(1 + 4 t_k^2)) / 2,  y_k+1 = x_k+1 + ((t_k - 1) / t_k+1) (x_k+1 - x_k)
// from y_0 = x_0 (0 or the warm start), t_0 = 1. The prox is iterative_space::tv_prox
// (tv_iterations FGP steps, non-negativity inside). L: power iteration on A^T A from A^T 1,
// times a safety factor (an underestimate would make the step too long). A y_k is
// the same combination of A x_k+1 and A x_k, so each iteration runs one forward projection
// (of x_k+1, which also gives the residual) and one back-projection. State (iterative_state):
// x, y, A x, A y and t, L (so that a resumed run does not estimate L again).
#include <cmath>
#include <utility>

#include "recon/iterative/iterative.hpp"

namespace ctforge::detail {
namespace {

constexpr int k_power_iterations = 12;  ///< at most
constexpr double k_power_tolerance = 1e-3;
constexpr double k_lipschitz_safety = 1.1;

/// ||A||^2 = the largest eigenvalue of A^T A, by power iteration (uses `v`, `w`, `q` as scratch).
double estimate_lipschitz(iterative_space& sp, space_buffer& v, space_buffer& w, space_buffer& q) {
  // The start: A^T 1, non-negative as A^T A's top eigenvector, and zero only where no ray
  // passes (where that eigenvector is zero too). Made where the space keeps its buffers: no
  // volume passes through here (a partitioned run's parts hold their planes of it).
  sp.fill(q, 1.0f);
  sp.back(q, v, -1, backprojector_kind::matched);
  double n = std::sqrt(sp.dot(v, v));
  if (!(n > 0)) return 0;
  sp.lincomb(static_cast<float>(1 / n), v, 0.0f, v, v);
  double lambda = 0;
  for (int k = 0; k < k_power_iterations; ++k) {
    sp.forward(v, q, -1);
    sp.back(q, w, -1, backprojector_kind::matched);
    const double previous = lambda;
    lambda = std::sqrt(sp.dot(w, w));  // |A^T A v| for |v| = 1
    if (!(lambda > 0)) return 0;
    sp.lincomb(static_cast<float>(1 / lambda), w, 0.0f, w, v);
    // The estimates of a symmetric positive semi-definite operator rise towards its largest
    // eigenvalue: once they have settled to k_power_tolerance, the safety factor covers the rest
    // (each step costs a forward and a back-projection).
    if (k >= 2 && lambda - previous <= k_power_tolerance * lambda) break;
  }
  return lambda;
}

}  // namespace

volume run_fista_tv(iterative_run& run) {
  iterative_space& sp = run.space();
  const recon_options& opt = run.options();
  const backprojector_kind kind = backprojector_kind::matched;
  run.progress(0.0);
  space_buffer p = run.upload_projections(-1);
  space_buffer qx = sp.projections(-1), qx_prev = sp.projections(-1), qy = sp.projections(-1);
  space_buffer y = sp.volume(), g = sp.volume(), x_prev = sp.volume();
  bool from_initial = false;
  space_buffer x = run.initial_volume(0.0f, &from_initial, /*track_update=*/false);
  double lip = 0, t = 1;
  if (const auto* saved = run.resume_into({&x, &y, &qx, &qy}, 2)) {
    t = (*saved)[0];
    lip = (*saved)[1];
    CTFORGE_EXPECTS(lip > 0 && t >= 1, "FISTA-TV: the saved state's step or momentum is invalid");
  } else {
    lip = k_lipschitz_safety * estimate_lipschitz(sp, y, g, qy);
    if (!(lip > 0)) return run.result(x);  // no ray meets the grid: nothing to update
    if (from_initial)
      sp.forward(x, qx, -1);
    else
      sp.fill(qx, 0.0f);
    sp.copy(x, y);
    sp.copy(qx, qy);
  }
  const double p2 = run.data_norm2();
  const auto weight = static_cast<float>(opt.tv_weight);
  for (int it = run.first_iteration(); it < opt.iterations; ++it) {
    // The gradient at y: A^T (A y - p).
    sp.lincomb(1.0f, qy, -1.0f, p, qy);
    sp.back(qy, g, -1, kind);
    sp.copy(x, x_prev);
    std::swap(qx, qx_prev);
    sp.lincomb(1.0f, y, static_cast<float>(-1 / lip), g, x);
    sp.tv_prox(x, weight, opt.tv_iterations, opt.nonnegative);
    sp.forward(x, qx, -1);
    const double t_next = 0.5 * (1 + std::sqrt(1 + 4 * t * t));
    const auto m = static_cast<float>((t - 1) / t_next);
    t = t_next;
    sp.lincomb(1.0f + m, x, -m, x_prev, y);
    sp.lincomb(1.0f + m, qx, -m, qx_prev, qy);
    double rel = 0, residual = 0, objective = 0;
    if (run.wants_update()) {
      sp.lincomb(1.0f, x, -1.0f, x_prev, x_prev);
      rel = relative_norm(sp.dot(x_prev, x_prev), sp.dot(x, x));
    }
    if (run.wants_figures()) {
      const double r2 = sp.dot(qx, qx) - 2 * sp.dot(qx, p) + p2;
      residual = relative_norm(r2, p2);
      objective = 0.5 * std::max(r2, 0.0) / lip + opt.tv_weight * sp.total_variation(x);
    }
    if (run.end_iteration(it + 1, residual, objective, rel, rel, {&x, &y, &qx, &qy}, {t, lip}))
      break;
  }
  return run.result(x);
}

}  // namespace ctforge::detail
