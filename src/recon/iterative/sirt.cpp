// SIRT: x <- x + lambda C B (R (p - A x)), R = 1 / A(1), C = 1 / B(1) (see recon.hpp).
// Resumable: the iterate after a number of iterations is the whole state (R and C are
// recomputed exactly), so a run resumed from a saved iterate continues bit for bit.
#include <algorithm>

#include "recon/iterative/iterative.hpp"

namespace ctforge::detail {

volume run_sirt(iterative_run& run) {
  iterative_space& sp = run.space();
  const recon_options& opt = run.options();
  const volume_geometry& vg = sp.grid();
  run.progress(0.0);

  // R: inverse ray lengths through the grid (mm); a ray grazing it over less than 1/1000 of a
  // voxel gets no weight (its residual would be amplified a thousandfold). C: inverse number
  // of views (bilinear weights summed) that see each voxel.
  space_buffer x = sp.volume();
  space_buffer row_w = sp.projections(-1);
  sp.fill(x, 1.0f);
  sp.forward(x, row_w, -1);
  const double min_spacing = *std::min_element(vg.spacing_mm.begin(), vg.spacing_mm.end());
  sp.invert_above(row_w, static_cast<float>(1e-3 * min_spacing));
  space_buffer r = sp.projections(-1);
  space_buffer col_w = sp.volume();
  sp.fill(r, 1.0f);
  sp.back(r, col_w, -1, run.kind());
  sp.invert_above(col_w, 1e-3f);

  space_buffer p = run.upload_projections(-1);
  space_buffer q = sp.projections(-1);  // A x
  space_buffer u = sp.volume();
  bool from_initial = false;
  x = run.initial_volume(0.0f, &from_initial);
  const bool resumed = run.resume_into({&x}, 0) != nullptr;
  // A x = 0 for the first iterate x = 0 (q is zero-filled).
  bool q_is_ax = !resumed && !from_initial;
  const double p2 = run.data_norm2();
  const auto lambda = static_cast<float>(opt.relaxation);
  for (int it = run.first_iteration(); it < opt.iterations; ++it) {
    // r = R (p - A x)
    if (!q_is_ax) sp.forward(x, q, -1);
    sp.weighted_residual(row_w, p, q, r);
    // x += lambda C B r, clamped at 0 when asked.
    sp.back(r, u, -1, run.kind());
    run.before_update(x);
    sp.weighted_update(x, lambda, col_w, u, opt.nonnegative);
    q_is_ax = false;
    const double rel = run.relative_update(x);
    double residual = 0, objective = 0;
    if (run.wants_figures()) {  // A x of the new iterate, used again by the next iteration
      sp.forward(x, q, -1);
      q_is_ax = true;
      const double r2 = sp.dot(q, q) - 2 * sp.dot(q, p) + p2;
      residual = relative_norm(r2, p2);
      objective = 0.5 * std::max(r2, 0.0);
    }
    if (run.end_iteration(it + 1, residual, objective, rel, rel, {&x})) break;
  }
  return run.result(x);
}

}  // namespace ctforge::detail
