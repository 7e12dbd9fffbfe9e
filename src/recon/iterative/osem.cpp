// OSEM (Hudson & Larkin 1994): the EM update of the Poisson likelihood per ordered subset,
//   for s = 0 .. S-1:  x <- x A_s^T (p_s / A_s x) / A_s^T 1,
// from a positive constant c = sum(p) / sum(A 1) (the uniform volume whose projections hold as
// much as the data) or the warm start. Non-negative by construction (x >= 0 stays >= 0); voxels
// no ray of a subset sees (A_s^T 1 below 1/1000 of a voxel) keep their value; rays with
// A_s x = 0 contribute nothing. With one subset it is MLEM, whose likelihood rises every
// iteration. Sensitivities A_s^T 1 take one volume per subset. The iterate is the whole state:
// resumable bit for bit.
#include <algorithm>
#include <vector>

#include "recon/iterative/iterative.hpp"

namespace ctforge::detail {

volume run_osem(iterative_run& run) {
  iterative_space& sp = run.space();
  const recon_options& opt = run.options();
  const volume_geometry& vg = sp.grid();
  const int n_sub = sp.subset_count();
  const auto sub = [](int s) { return static_cast<std::size_t>(s); };
  run.progress(0.0);
  const float sens_floor =
      static_cast<float>(1e-3 * *std::min_element(vg.spacing_mm.begin(), vg.spacing_mm.end()));

  std::vector<space_buffer> p, q, sens;
  double sum_a1 = 0, sum_p = 0;
  for (int s = 0; s < n_sub; ++s) {
    p.push_back(run.upload_projections(s));
    q.push_back(sp.projections(s));
    sp.fill(q.back(), 1.0f);
    sens.push_back(sp.volume());
    sp.back(q.back(), sens.back(), s, run.kind());
  }
  // sum(A 1) = <1, A^T 1> = sum of the sensitivities; sum(p) = <p, 1> (q holds ones).
  space_buffer u = sp.volume();
  sp.fill(u, 1.0f);
  for (int s = 0; s < n_sub; ++s) {
    sum_a1 += sp.dot(sens[sub(s)], u);
    sum_p += sp.dot(p[sub(s)], q[sub(s)]);
  }
  const float start = sum_a1 > 0 && sum_p > 0 ? static_cast<float>(sum_p / sum_a1) : 1.0f;
  space_buffer x = run.initial_volume(start);
  run.resume_into({&x}, 0);
  const double p2 = run.data_norm2();
  for (int it = run.first_iteration(); it < opt.iterations; ++it) {
    run.before_update(x);
    for (int s = 0; s < n_sub; ++s) {
      sp.forward(x, q[sub(s)], s);
      sp.ratio(p[sub(s)], q[sub(s)], 0.0f, q[sub(s)]);
      sp.back(q[sub(s)], u, s, run.kind());
      sp.multiply_ratio(x, u, sens[sub(s)], sens_floor);
    }
    const double rel = run.relative_update(x);
    double residual = 0, objective = 0;
    if (run.wants_figures()) {
      double r2 = 0, ll = 0;
      for (int s = 0; s < n_sub; ++s) {
        sp.forward(x, q[sub(s)], s);
        r2 += sp.dot(q[sub(s)], q[sub(s)]) - 2 * sp.dot(q[sub(s)], p[sub(s)]) +
              sp.dot(p[sub(s)], p[sub(s)]);
        ll += sp.poisson_log_likelihood(p[sub(s)], q[sub(s)]);
      }
      residual = relative_norm(r2, p2);
      objective = -ll;
    }
    if (run.end_iteration(it + 1, residual, objective, rel, rel, {&x})) break;
  }
  return run.result(x);
}

}  // namespace ctforge::detail
