// Per-voxel arithmetic of the total-variation proximal step (fast gradient projection, FGP, on
// the dual of isotropic TV; Beck & Teboulle 2009), shared by the CPU loop
// (src/recon/iterative_space_cpu.cpp) and the CUDA kernels (src/cuda/iterative_space.cu).
//
// The prox of weight `lam` of a volume b ([z][y][x], nx * ny * nz, 64-bit indices) is
//   x = P_C(b + lam div p*),  p* the maximiser over |p_i| <= 1 of the dual of
//   min_z 0.5 |z - b|^2 + lam TV(z), TV(z) = max over |p_i| <= 1 of <p, grad z>,
// reached by iterating, from r = p = 0, t = 1:
//   z   = P_C(b + lam div r)                                     (tv_primal_at, every voxel)
//   q   = P_ball(r + grad z / (L lam)), L = 4 * dims (8 in 2D, 12 in 3D)
//   t'  = (1 + sqrt(1 + 4 t^2)) / 2
//   r   = q + ((t - 1) / t') (q - p),  p = q                       (tv_dual_at, every voxel)
// and finally x = P_C(b + lam div p) (tv_primal_at with p). P_C clamps at 0 when nonnegative,
// else is the identity. grad: forward differences, 0 across the last plane of each axis
// (Neumann); div = -grad^T (backward differences with the matching boundary terms). The dual
// field has one array per axis (px, py, pz); pz is unused (and may be null) when nz == 1.
#pragma once

#include <cstdint>

#include "math/hd.hpp"

namespace ctforge::kernels {

/// Volume dimensions of the TV step; voxel i = (z * ny + y) * nx + x.
struct tv_dims {
  std::int64_t nx = 1, ny = 1, nz = 1;
  CTFORGE_HD std::int64_t count() const { return nx * ny * nz; }
  /// Axes with more than one voxel among x, y (and z when nz > 1): 2 or 3 (the Lipschitz
  /// constant of grad is 4 per axis).
  CTFORGE_HD int axes() const { return nz > 1 ? 3 : 2; }
};

/// (div p)_i with div = -grad^T for grad = forward differences, zero at the last index.
CTFORGE_HD float tv_divergence_at(const float* px, const float* py, const float* pz, tv_dims d,
                                  std::int64_t i) {
  const std::int64_t x = i % d.nx;
  const std::int64_t y = (i / d.nx) % d.ny;
  const std::int64_t z = i / (d.nx * d.ny);
  float div = 0.0f;
  // Along each axis: p_i (if i is not the last) - p_{i-1} (if i is not the first).
  if (d.nx > 1) {
    if (x < d.nx - 1) div += px[i];
    if (x > 0) div -= px[i - 1];
  }
  if (d.ny > 1) {
    if (y < d.ny - 1) div += py[i];
    if (y > 0) div -= py[i - d.nx];
  }
  if (d.nz > 1 && pz) {
    const std::int64_t plane = d.nx * d.ny;
    if (z < d.nz - 1) div += pz[i];
    if (z > 0) div -= pz[i - plane];
  }
  return div;
}

/// z_i = P_C(b_i + lam (div p)_i) = P_C(b_i - lam (grad^T p)_i): the primal point of the dual
/// field p (TV(z) = max over |p_i| <= 1 of <p, grad z>, so the prox is b - lam grad^T p* with
/// the dual ascent step of tv_dual_at along +grad z).
CTFORGE_HD float tv_primal_at(const float* b, const float* px, const float* py, const float* pz,
                              tv_dims d, float lam, bool nonnegative, std::int64_t i) {
  const float v = b[i] + lam * tv_divergence_at(px, py, pz, d, i);
  return nonnegative ? max_f(v, 0.0f) : v;
}

/// One dual update at voxel i: q = P_ball(r_i + grad(z)_i / (L lam)), then
/// r_i = q + momentum (q - p_i), p_i = q, for every axis. `momentum` = (t - 1) / t'.
/// Reads z (the whole primal iterate) and writes only index i of r and p, so every voxel may
/// be updated in parallel.
CTFORGE_HD void tv_dual_at(const float* z, float* rx, float* ry, float* rz, float* px, float* py,
                           float* pz, tv_dims d, float lam, float momentum, std::int64_t i) {
  const std::int64_t x = i % d.nx;
  const std::int64_t y = (i / d.nx) % d.ny;
  const std::int64_t zz = i / (d.nx * d.ny);
  const bool three = d.nz > 1 && rz != nullptr;
  const float step = 1.0f / (4.0f * static_cast<float>(three ? 3 : 2) * lam);
  const float zi = z[i];
  const float gx = (d.nx > 1 && x < d.nx - 1) ? z[i + 1] - zi : 0.0f;
  const float gy = (d.ny > 1 && y < d.ny - 1) ? z[i + d.nx] - zi : 0.0f;
  const float gz = (three && zz < d.nz - 1) ? z[i + d.nx * d.ny] - zi : 0.0f;
  float qx = rx[i] + step * gx;
  float qy = ry[i] + step * gy;
  float qz = three ? rz[i] + step * gz : 0.0f;
  // Project onto the unit ball (isotropic TV).
  const float n2 = qx * qx + qy * qy + qz * qz;
  if (n2 > 1.0f) {
#if defined(__CUDA_ARCH__)
    const float inv = rsqrtf(n2);
#else
    const float inv = 1.0f / std::sqrt(n2);
#endif
    qx *= inv;
    qy *= inv;
    qz *= inv;
  }
  rx[i] = qx + momentum * (qx - px[i]);
  ry[i] = qy + momentum * (qy - py[i]);
  px[i] = qx;
  py[i] = qy;
  if (three) {
    rz[i] = qz + momentum * (qz - pz[i]);
    pz[i] = qz;
  }
}

/// |grad x|_i in double: voxel i's term of the isotropic TV tv_prox penalises (forward
/// differences, 0 across the last plane of each axis; z only when nz > 1).
CTFORGE_HD double tv_norm_at(const float* x, tv_dims d, std::int64_t i) {
  const std::int64_t xi = i % d.nx;
  const std::int64_t yi = (i / d.nx) % d.ny;
  const std::int64_t zi = i / (d.nx * d.ny);
  const double v = x[i];
  const double gx = xi + 1 < d.nx ? x[i + 1] - v : 0.0;
  const double gy = yi + 1 < d.ny ? x[i + d.nx] - v : 0.0;
  const double gz = d.nz > 1 && zi + 1 < d.nz ? x[i + d.nx * d.ny] - v : 0.0;
  return sqrt(gx * gx + gy * gy + gz * gz);
}

/// The FGP momentum sequence: t' = (1 + sqrt(1 + 4 t^2)) / 2 (host side, double).
inline double tv_next_t(double t) {
  return 0.5 * (1.0 + std::sqrt(1.0 + 4.0 * t * t));
}

}  // namespace ctforge::kernels
