#include "core/projection_maps.hpp"

#include <cmath>
#include <string>

#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"

namespace ctforge::kernels {

std::vector<proj_matrix> float_matrices(const ctforge::geometry& g) {
  std::vector<proj_matrix> out(static_cast<std::size_t>(g.view_count()));
  for (std::int64_t v = 0; v < g.view_count(); ++v) {
    const auto m = compute_projection_matrix(g, v);
    for (int i = 0; i < 12; ++i) out[static_cast<std::size_t>(v)].m[i] = static_cast<float>(m[i]);
  }
  return out;
}

std::vector<cyl_map_d> cylinder_maps_d(const ctforge::geometry& g) {
  std::vector<cyl_map_d> out(static_cast<std::size_t>(g.view_count()));
  for (std::int64_t v = 0; v < g.view_count(); ++v) {
    const cylinder_frame f = cylinder_frame_of(g, v);
    CTFORGE_EXPECTS(std::abs(f.t.z) < 1e-9 && std::abs(f.n.z) < 1e-9 &&
                        std::abs(std::abs(f.v_hat.z) - 1) < 1e-9,
                    "cylindrical detector: view " + std::to_string(v) +
                        " is not a circular orbit's (rows along z, columns across it)");
    const vec3 a = (1.0 / f.radius) * f.t, c = (1.0 / f.radius) * f.n;
    const double bz = f.v_hat.z / f.dv;
    cyl_map_d& m = out[static_cast<std::size_t>(v)];
    m = {a.x, a.y, -dot(a, f.source), c.x, c.y, -dot(c, f.source), bz, -bz * f.source.z,
         0.5 * static_cast<double>(g.rows - 1) - f.hc / f.dv, 0.5 * static_cast<double>(g.cols - 1),
         f.radius / f.du, 0.0};
  }
  return out;
}

std::vector<cyl_map> cylinder_maps(const ctforge::geometry& g) {
  const std::vector<cyl_map_d> d = cylinder_maps_d(g);
  std::vector<cyl_map> out(d.size());
  for (std::size_t v = 0; v < d.size(); ++v)
    for (int i = 0; i < 12; ++i) out[v].m[i] = static_cast<float>(d[v][static_cast<std::size_t>(i)]);
  return out;
}

}  // namespace ctforge::kernels
