// OS-SART: SIRT's update per ordered subset of views,
//   for s = 0 .. S-1:  x <- x + lambda C_s B_s (R_s (p_s - A_s x)),
// R_s = 1 / A_s(1) (inverse ray lengths), C_s = 1 / B_s(1) (inverse weight of the subset's views
// at each voxel). One iteration is one pass over every subset: S updates for the cost of one
// SIRT iteration, hence faster early convergence; with one subset it is SIRT. Subset s holds
// views s, s + S, ... (each spans the whole orbit). C_s takes one volume per subset. The
// iterate is the whole state (the weights are recomputed exactly): resumable bit for bit.
#include <algorithm>
#include <vector>

#include "recon/iterative/iterative.hpp"

namespace ctforge::detail {

volume run_os_sart(iterative_run& run) {
  iterative_space& sp = run.space();
  const recon_options& opt = run.options();
  const volume_geometry& vg = sp.grid();
  const int n_sub = sp.subset_count();
  run.progress(0.0);

  const double min_spacing = *std::min_element(vg.spacing_mm.begin(), vg.spacing_mm.end());
  std::vector<space_buffer> p, row_w, q, col_w;
  space_buffer x = sp.volume();
  sp.fill(x, 1.0f);
  for (int s = 0; s < n_sub; ++s) {
    row_w.push_back(sp.projections(s));
    sp.forward(x, row_w.back(), s);
    sp.invert_above(row_w.back(), static_cast<float>(1e-3 * min_spacing));
    q.push_back(sp.projections(s));
    sp.fill(q.back(), 1.0f);
    col_w.push_back(sp.volume());
    sp.back(q.back(), col_w.back(), s, run.kind());
    sp.invert_above(col_w.back(), 1e-3f);
    p.push_back(run.upload_projections(s));
  }
  space_buffer u = sp.volume();
  bool from_initial = false;
  x = run.initial_volume(0.0f, &from_initial);
  const bool resumed = run.resume_into({&x}, 0) != nullptr;
  const double p2 = run.data_norm2();
  const auto lambda = static_cast<float>(opt.relaxation);
  bool x_is_zero = !from_initial && !resumed;
  for (int it = run.first_iteration(); it < opt.iterations; ++it) {
    run.before_update(x);
    for (int s = 0; s < n_sub; ++s) {
      // r_s = R_s (p_s - A_s x), in q_s; A x = 0 while x is the zero start.
      if (x_is_zero)
        sp.fill(q[s], 0.0f);
      else
        sp.forward(x, q[s], s);
      sp.weighted_residual(row_w[s], p[s], q[s], q[s]);
      sp.back(q[s], u, s, run.kind());
      sp.weighted_update(x, lambda, col_w[s], u, opt.nonnegative);
      x_is_zero = false;
    }
    const double rel = run.relative_update(x);
    double residual = 0, objective = 0;
    if (run.wants_figures()) {
      double r2 = 0;
      for (int s = 0; s < n_sub; ++s) {
        sp.forward(x, q[s], s);
        r2 += sp.dot(q[s], q[s]) - 2 * sp.dot(q[s], p[s]) + sp.dot(p[s], p[s]);
      }
      residual = relative_norm(r2, p2);
      objective = 0.5 * std::max(r2, 0.0);
    }
    if (run.end_iteration(it + 1, residual, objective, rel, rel, {&x})) break;
  }
  return run.result(x);
}

}  // namespace ctforge::detail
