// One reconstructed slice per candidate rotation-axis column (see formats.hpp,
// reconstruct_center_candidates).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/recon.hpp"

namespace ctforge {

volume reconstruct_center_candidates(const projection_view& proj, const geometry& g,
                                     std::int64_t row, std::span<const double> columns,
                                     std::int64_t size, int threads) {
  require_host(proj, "reconstruct_center_candidates");
  CTFORGE_EXPECTS(g.orbit.has_value(),
                  fmt::format("center candidates: needs a circular geometry (cone or parallel), "
                              "got {}",
                              g.type_name()));
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  fmt::format("center candidates: projections {}x{}x{} do not match the geometry "
                              "({} views, {} rows, {} cols)",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(
      row >= 0 && row < g.rows,
      fmt::format("center candidates: row {} is off the detector (rows 0 .. {})", row, g.rows - 1));
  CTFORGE_EXPECTS(!columns.empty(), "center candidates: no candidate column");
  CTFORGE_EXPECTS(static_cast<std::int64_t>(columns.size()) <= max_center_candidates,
                  fmt::format("center candidates: {} candidates; at most {}", columns.size(),
                              max_center_candidates));
  CTFORGE_EXPECTS(size >= 0 && size <= 4096,
                  fmt::format("center candidates: slice size must be in 0 .. 4096 (got {})", size));
  std::vector<geometry> moved;  // checks every column before the first reconstruction
  for (const double c : columns) moved.push_back(with_center_of_rotation(g, c));

  const std::int64_t n = size > 0 ? size : std::min<std::int64_t>(g.cols, 512);
  grid_request req;
  req.size = std::array<std::int64_t, 3>{n, n, 1};
  req.size_option = "size";
  volume_geometry vg = default_grid(g, req);
  // The plane through `row` at the axis: the middle column's pixel centre, brought to the
  // isocentre by the magnification (cone beams; the source orbits in the plane z = 0).
  const double m = magnification(g);
  vg.spacing_mm[2] = g.pixel_v_mm / m;
  vg.origin_mm[2] =
      pixel_center(g, 0, 0.5 * static_cast<double>(g.cols - 1), static_cast<double>(row)).z / m;

  recon_options ro;
  ro.algo = default_algorithm(g);
  CTFORGE_EXPECTS(!is_iterative(ro.algo),
                  "center candidates: the geometry has no analytic reconstruction (FBP / FDK)");
  ro.where = backend::cpu;
  ro.threads = threads;
  volume_geometry out_geom = vg;
  out_geom.nz = static_cast<std::int64_t>(columns.size());
  volume out(out_geom);
  for (std::size_t k = 0; k < moved.size(); ++k) {
    const volume slice = reconstruct(proj, moved[k], vg, ro);
    std::copy(slice.data.begin(), slice.data.end(),
              out.data.begin() + static_cast<std::ptrdiff_t>(k * static_cast<std::size_t>(n * n)));
  }
  return out;
}

}  // namespace ctforge
