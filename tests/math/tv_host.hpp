// Host references for the TV prox tests: the FGP iteration of math/tv.hpp run as a plain
// loop (the CPU tests check its properties, the GPU tests compare the device kernels with it)
// and isotropic total variation as a direct double loop over forward differences.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "math/tv.hpp"

namespace ctforge::testing {

/// The prox result x and the final dual field (px, py, pz; pz empty in 2D).
struct host_fgp_result {
  std::vector<float> x, px, py, pz;
};

/// `iters` FGP steps of weight `lam` on b, through tv_primal_at / tv_dual_at.
inline host_fgp_result host_tv_prox(const std::vector<float>& b, kernels::tv_dims d, float lam,
                                    int iters, bool nonnegative) {
  const std::size_t n = b.size();
  const bool three = d.nz > 1;
  std::vector<float> z(n), rx(n), ry(n), rz(three ? n : 0);
  host_fgp_result r{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
                    std::vector<float>(three ? n : 0)};
  float* rzp = three ? rz.data() : nullptr;
  float* pzp = three ? r.pz.data() : nullptr;
  double t = 1.0;
  for (int it = 0; it < iters; ++it) {
    for (std::size_t i = 0; i < n; ++i)
      z[i] = kernels::tv_primal_at(b.data(), rx.data(), ry.data(), rzp, d, lam, nonnegative,
                                   static_cast<std::int64_t>(i));
    const double t_next = kernels::tv_next_t(t);
    const auto momentum = static_cast<float>((t - 1.0) / t_next);
    for (std::size_t i = 0; i < n; ++i)
      kernels::tv_dual_at(z.data(), rx.data(), ry.data(), rzp, r.px.data(), r.py.data(), pzp, d,
                          lam, momentum, static_cast<std::int64_t>(i));
    t = t_next;
  }
  for (std::size_t i = 0; i < n; ++i)
    r.x[i] = kernels::tv_primal_at(b.data(), r.px.data(), r.py.data(), pzp, d, lam, nonnegative,
                                   static_cast<std::int64_t>(i));
  return r;
}

/// Isotropic TV with forward differences, 0 across the last plane of each axis.
inline double host_total_variation(const std::vector<float>& x, kernels::tv_dims d) {
  double tv = 0;
  for (std::int64_t i = 0; i < d.count(); ++i) {
    const std::int64_t xx = i % d.nx, yy = (i / d.nx) % d.ny, zz = i / (d.nx * d.ny);
    const double v = x[static_cast<std::size_t>(i)];
    const double gx = xx + 1 < d.nx ? x[static_cast<std::size_t>(i + 1)] - v : 0.0;
    const double gy = yy + 1 < d.ny ? x[static_cast<std::size_t>(i + d.nx)] - v : 0.0;
    const double gz = zz + 1 < d.nz ? x[static_cast<std::size_t>(i + d.nx * d.ny)] - v : 0.0;
    tv += std::sqrt(gx * gx + gy * gy + gz * gz);
  }
  return tv;
}

}  // namespace ctforge::testing
