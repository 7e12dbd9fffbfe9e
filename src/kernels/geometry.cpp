#include "kernels/geometry.cuh"

#include "ctforge/geometry.hpp"
#include "kernels/cylinder.cuh"

namespace ctforge::kernels {

std::vector<proj_matrix> float_matrices(const ctforge::geometry& g) {
  std::vector<proj_matrix> out(static_cast<std::size_t>(g.view_count()));
  for (std::int64_t v = 0; v < g.view_count(); ++v) {
    const auto m = compute_projection_matrix(g, v);
    for (int i = 0; i < 12; ++i) out[static_cast<std::size_t>(v)].m[i] = static_cast<float>(m[i]);
  }
  return out;
}

std::vector<cyl_map> cylinder_maps(const ctforge::geometry& g) {
  std::vector<cyl_map> out(static_cast<std::size_t>(g.view_count()));
  for (std::int64_t v = 0; v < g.view_count(); ++v) {
    const cylinder_frame f = cylinder_frame_of(g, v);
    // Rows a = t.(x - s) / R, b = v_hat.(x - s) / dv, c = n.(x - s) / R.
    const vec3 rows[3] = {(1.0 / f.radius) * f.t, (1.0 / f.dv) * f.v_hat, (1.0 / f.radius) * f.n};
    cyl_map& m = out[static_cast<std::size_t>(v)];
    for (int k = 0; k < 3; ++k) {
      m.m[4 * k + 0] = static_cast<float>(rows[k].x);
      m.m[4 * k + 1] = static_cast<float>(rows[k].y);
      m.m[4 * k + 2] = static_cast<float>(rows[k].z);
      m.m[4 * k + 3] = static_cast<float>(-dot(rows[k], f.source));
    }
    m.col0 = static_cast<float>(0.5 * static_cast<double>(g.cols - 1));
    m.col_scale = static_cast<float>(f.radius / f.du);
    m.row0 = static_cast<float>(0.5 * static_cast<double>(g.rows - 1) - f.hc / f.dv);
  }
  return out;
}

}  // namespace ctforge::kernels
