#include "ctforge/metrics.hpp"

#include <cmath>

#include "ctforge/error.hpp"

namespace ctforge {
namespace {
void same_size(std::span<const float> a, std::span<const float> b) {
  CTFORGE_EXPECTS(a.size() == b.size() && !a.empty(),
                  "metrics: arrays differ in size or are empty");
}
}  // namespace

double mean_abs_error(std::span<const float> a, std::span<const float> b) {
  same_size(a, b);
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(double(a[i]) - double(b[i]));
  return s / static_cast<double>(a.size());
}

double rms_error(std::span<const float> a, std::span<const float> b) {
  same_size(a, b);
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    s += d * d;
  }
  return std::sqrt(s / static_cast<double>(a.size()));
}

double psnr_db(std::span<const float> a, std::span<const float> b, double peak) {
  return 20.0 * std::log10(peak / rms_error(a, b));
}

double correlation(std::span<const float> a, std::span<const float> b) {
  same_size(a, b);
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double da = a[i] - ma, db = b[i] - mb;
    sab += da * db;
    saa += da * da;
    sbb += db * db;
  }
  return (saa > 0 && sbb > 0) ? sab / std::sqrt(saa * sbb) : 0.0;
}

std::pair<std::vector<float>, std::vector<float>> values_within_radius(const volume& a,
                                                                       const volume& b,
                                                                       double radius_mm) {
  const volume_geometry& vg = a.geom;
  CTFORGE_EXPECTS(a.data.size() == b.data.size() &&
                      a.data.size() == static_cast<std::size_t>(vg.voxel_count()),
                  "metrics: volumes differ in size");
  std::vector<float> va, vb;
  for (std::int64_t k = 0; k < vg.nz; ++k)
    for (std::int64_t j = 0; j < vg.ny; ++j)
      for (std::int64_t i = 0; i < vg.nx; ++i) {
        const vec3 x =
            vg.voxel_center(static_cast<double>(i), static_cast<double>(j), static_cast<double>(k));
        if (x.x * x.x + x.y * x.y > radius_mm * radius_mm) continue;
        const auto n = static_cast<std::size_t>((k * vg.ny + j) * vg.nx + i);
        va.push_back(a.data[n]);
        vb.push_back(b.data[n]);
      }
  return {std::move(va), std::move(vb)};
}

}  // namespace ctforge
