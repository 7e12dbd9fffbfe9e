#include "ctforge/volume.hpp"

#include <fmt/format.h>

#include <cmath>

#include "ctforge/error.hpp"

namespace ctforge {

volume_geometry volume_geometry::centered(std::int64_t nx, std::int64_t ny, std::int64_t nz,
                                          std::array<double, 3> spacing_mm) {
  volume_geometry g;
  g.nx = nx;
  g.ny = ny;
  g.nz = nz;
  g.spacing_mm = spacing_mm;
  const std::int64_t n[3] = {nx, ny, nz};
  for (int a = 0; a < 3; ++a) g.origin_mm[a] = -0.5 * static_cast<double>(n[a] - 1) * spacing_mm[a];
  g.validate();
  return g;
}

void volume_geometry::validate() const {
  CTFORGE_EXPECTS(nx >= 1 && ny >= 1 && nz >= 1,
                  fmt::format("volume size must be >= 1 in x, y and z (got {}x{}x{})", nx, ny, nz));
  for (int a = 0; a < 3; ++a) {
    CTFORGE_EXPECTS(std::isfinite(spacing_mm[a]) && spacing_mm[a] > 0,
                    fmt::format("volume spacing must be positive and finite (got {}, {}, {} mm)",
                                spacing_mm[0], spacing_mm[1], spacing_mm[2]));
    CTFORGE_EXPECTS(std::isfinite(origin_mm[a]), "volume origin must be finite");
  }
}

}  // namespace ctforge
