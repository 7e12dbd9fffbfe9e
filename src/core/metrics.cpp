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

}  // namespace ctforge
