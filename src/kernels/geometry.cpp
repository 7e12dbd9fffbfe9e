#include "kernels/geometry.cuh"

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

}  // namespace ctforge::kernels
