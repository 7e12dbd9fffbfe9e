// Empirical cupping correction (Kachelriess et al. 2006): include/ctforge/beam_hardening.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ctforge/beam_hardening.hpp"
#include "ctforge/error.hpp"
#include "preprocess/least_squares.hpp"

namespace ctforge {

namespace {

void check_options(const water_precorrection_options& o) {
  CTFORGE_EXPECTS(o.degree >= 1 && o.degree <= 8,
                  fmt::format("degree: must be in [1, 8] (got {})", o.degree));
  CTFORGE_EXPECTS(
      o.threshold > 0 && o.threshold < 1,
      fmt::format("threshold: a fraction of the maximum in (0, 1) (got {})", o.threshold));
  CTFORGE_EXPECTS(o.margin >= 0 && o.margin <= 1000,
                  fmt::format("margin: voxels in [0, 1000] (got {})", o.margin));
  if (o.recon)
    CTFORGE_EXPECTS(
        !is_iterative(o.recon->algo),
        fmt::format("recon: the basis images need FDK or FBP (got {})", to_string(o.recon->algo)));
}

/// reconstruct(p^k): the basis image of power k.
volume basis_image(const projection_view& p, const geometry& g, const volume_geometry& vg,
                   const recon_options& ro, int k) {
  projection_stack q(p.views, p.rows, p.cols);
  for (std::size_t i = 0; i < q.data.size(); ++i)
    q.data[i] = static_cast<float>(std::pow(static_cast<double>(p.data[i]), k));
  return reconstruct(q, g, vg, ro);
}

/// Whether any voxel of `in` within `r` voxels in x and y (a square) of each voxel is set
/// (dilation), or all are (erosion; voxels beyond the grid count as unset).
std::vector<char> morph_xy(const std::vector<char>& in, const volume_geometry& vg, int r,
                           bool erode) {
  std::vector<char> tmp(in.size()), out(in.size());
  const auto at = [&](std::int64_t z, std::int64_t y, std::int64_t x) {
    return static_cast<std::size_t>((z * vg.ny + y) * vg.nx + x);
  };
  const auto pass = [&](const std::vector<char>& src, std::vector<char>& dst, bool along_x) {
    for (std::int64_t z = 0; z < vg.nz; ++z)
      for (std::int64_t y = 0; y < vg.ny; ++y)
        for (std::int64_t x = 0; x < vg.nx; ++x) {
          bool any = false, all = true;
          for (std::int64_t d = -r; d <= r; ++d) {
            const std::int64_t xx = along_x ? x + d : x, yy = along_x ? y : y + d;
            const bool set = xx >= 0 && xx < vg.nx && yy >= 0 && yy < vg.ny && src[at(z, yy, xx)];
            any = any || set;
            all = all && set;
          }
          dst[at(z, y, x)] = erode ? all : any;
        }
  };
  pass(in, tmp, true);
  pass(tmp, out, false);
  return out;
}

/// The template's regions: 1 inside the object (eroded), 0 in the air (beyond the dilated
/// object), -1 in the edge band left out.
std::vector<signed char> template_regions(const volume& f1, double threshold, int margin) {
  float peak = 0;
  for (float v : f1.data) peak = std::max(peak, v);
  if (!(peak > 0))
    throw error(
        "water precorrection: the reconstruction of the calibration scan has no "
        "positive value (is it line integrals?)");
  std::vector<char> object(f1.data.size());
  for (std::size_t i = 0; i < object.size(); ++i) object[i] = f1.data[i] > threshold * peak;
  const std::vector<char> inside = morph_xy(object, f1.geom, margin, true);
  const std::vector<char> near = morph_xy(object, f1.geom, margin, false);
  std::vector<signed char> region(object.size());
  std::int64_t n_inside = 0;
  for (std::size_t i = 0; i < region.size(); ++i) {
    region[i] = inside[i] ? 1 : (near[i] ? -1 : 0);
    n_inside += inside[i];
  }
  if (n_inside == 0)
    throw error(
        fmt::format("water precorrection: no voxel is left inside the object (threshold "
                    "{}, margin {} voxels): lower the margin or check the scan",
                    threshold, margin));
  return region;
}

/// c_1..c_n minimising sum over the fitted regions of (sum_k c_k f_k - t)^2, by the normal
/// equations accumulated in double.
std::vector<double> fit_template(const std::vector<volume>& f,
                                 const std::vector<signed char>& region) {
  const std::size_t n = f.size();
  std::vector<double> gram(n * n, 0.0), rhs(n, 0.0), row(n);
  for (std::size_t i = 0; i < region.size(); ++i) {
    if (region[i] < 0) continue;
    for (std::size_t k = 0; k < n; ++k) row[k] = f[k].data[i];
    for (std::size_t j = 0; j < n; ++j) {
      rhs[j] += row[j] * region[i];
      for (std::size_t k = 0; k < n; ++k) gram[k * n + j] += row[j] * row[k];
    }
  }
  const auto m = static_cast<std::int64_t>(n);
  return detail::least_squares(std::move(gram), std::move(rhs), m, m);
}

}  // namespace

std::vector<double> fit_water_precorrection(const projection_view& calibration, const geometry& g,
                                            const volume_geometry& vg,
                                            const water_precorrection_options& opt) {
  check_options(opt);
  require_host(calibration, "water precorrection");
  recon_options ro;
  if (opt.recon) {
    ro = *opt.recon;
  } else {
    ro.algo = default_algorithm(g);
    CTFORGE_EXPECTS(!is_iterative(ro.algo),
                    "recon: the geometry has no circular orbit; the basis images need FDK or FBP");
  }
  std::vector<volume> f;
  for (int k = 1; k <= opt.degree; ++k) f.push_back(basis_image(calibration, g, vg, ro, k));
  const std::vector<signed char> region = template_regions(f[0], opt.threshold, opt.margin);
  const std::vector<double> c = fit_template(f, region);
  // Keep the uncorrected scale: the corrected mean over the interior equals f_1's.
  double fitted = 0, plain = 0;
  for (std::size_t i = 0; i < region.size(); ++i) {
    if (region[i] != 1) continue;
    plain += f[0].data[i];
    for (std::size_t k = 0; k < c.size(); ++k) fitted += c[k] * f[k].data[i];
  }
  if (!(fitted > 0) || !std::isfinite(fitted))
    throw error("water precorrection: the fitted image has no positive mean inside the object");
  std::vector<double> out(c.size() + 1, 0.0);
  for (std::size_t k = 0; k < c.size(); ++k) out[k + 1] = c[k] * plain / fitted;
  return out;
}

}  // namespace ctforge
