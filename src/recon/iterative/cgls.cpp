// CGLS: conjugate gradients on the normal equations A^T A x = A^T p, with A = forward_project
// (Joseph) and A^T = the matched back-projector (its exact transpose), from x0 (0 or the warm
// start):
//   r = p - A x0, s = A^T r, d = s, gamma = |s|^2
//   repeat: q = A d; alpha = gamma / |q|^2; x += alpha d; r -= alpha q;
//           s = A^T r; gamma' = |s|^2; d = s + (gamma' / gamma) d; gamma = gamma'
// Dot products in double; vectors in float. Deterministic for a given backend and thread
// count. The tolerance applies to the relative normal-equation residual |A^T r| / |A^T p|.
// State (iterative_state): x, r, d and gamma, |A^T p|^2, gamma_0; s is recomputed from r.
#include <cmath>

#include "recon/iterative/iterative.hpp"

namespace ctforge::detail {

volume run_cgls(iterative_run& run) {
  iterative_space& sp = run.space();
  const recon_options& opt = run.options();
  const backprojector_kind kind = backprojector_kind::matched;
  run.progress(0.0);
  bool from_initial = false;
  space_buffer x = run.initial_volume(0.0f, &from_initial, /*track_update=*/false);
  space_buffer r = run.upload_projections(-1);
  space_buffer q = sp.projections(-1);
  space_buffer s = sp.volume();
  space_buffer d = sp.volume();
  double gamma_p = 0;  // |A^T p|^2, the scale of the stopping criterion
  double gamma = 0, gamma0 = 0;
  if (const auto* saved = run.resume_into({&x, &r, &d}, 3)) {
    gamma = (*saved)[0];
    gamma_p = (*saved)[1];
    gamma0 = (*saved)[2];
  } else {
    if (from_initial) {
      sp.back(r, s, -1, kind);
      gamma_p = sp.dot(s, s);
      sp.forward(x, q, -1);
      sp.axpby(-1.0f, q, 1.0f, r);  // r = p - A x0
    }
    sp.back(r, s, -1, kind);
    sp.copy(s, d);
    gamma = sp.dot(s, s);
    if (!from_initial) gamma_p = gamma;
    gamma0 = gamma;
  }
  const double p2 = run.data_norm2();
  for (int it = run.first_iteration(); it < opt.iterations; ++it) {
    // A zero gradient (relative to the start): x minimises the residual already.
    if (!(gamma > 1e-30 * gamma0) || gamma0 == 0) {
      run.progress(1.0);
      break;
    }
    sp.forward(d, q, -1);
    const double qq = sp.dot(q, q);
    if (!(qq > 0)) break;
    const double alpha = gamma / qq;
    const double dd = run.wants_update() ? sp.dot(d, d) : 0.0;
    sp.axpby(static_cast<float>(alpha), d, 1.0f, x);
    sp.axpby(static_cast<float>(-alpha), q, 1.0f, r);
    sp.back(r, s, -1, kind);
    const double gamma_next = sp.dot(s, s);
    const double beta = gamma_next / gamma;
    gamma = gamma_next;
    sp.axpby(1.0f, s, static_cast<float>(beta), d);  // d = s + beta d
    double rel = 0, residual = 0, objective = 0;
    if (run.wants_update()) rel = relative_norm(alpha * alpha * dd, sp.dot(x, x));
    if (run.wants_figures()) {
      const double r2 = sp.dot(r, r);
      residual = relative_norm(r2, p2);
      objective = 0.5 * r2;
    }
    if (run.end_iteration(it + 1, residual, objective, rel, relative_norm(gamma, gamma_p),
                          {&x, &r, &d}, {gamma, gamma_p, gamma0}))
      break;
  }
  return run.result(x);
}

}  // namespace ctforge::detail
