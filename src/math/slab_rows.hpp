// Which detector rows a slab of the volume needs: the one answer used by the CUDA plan (the
// rows it uploads for each slab, src/cuda/cuda_plan.cuh) and by the checkpointed slab-wise
// reconstruction (the rows it reads for each unit, src/recon/checkpoint.cpp), for flat
// detectors (3x4 projection matrices) and cylindrical ones (kernels::cyl_map_d).
//
// The slab is given as an axis-aligned box of world points (its corners' coordinates, mm); the
// band is the rows [floor(lo) - 1, floor(hi) + 3) clamped to the detector, where [lo, hi] holds
// every row a point of the box projects onto in any view (bilinear taps reach floor(row) and
// floor(row) + 1, plus one row of margin for float rounding), or every row when some view
// cannot bound it (a point at or behind a source).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace ctforge::kernels {

/// Detector rows [r0, r1) of a band.
struct row_band {
  std::int64_t r0 = 0, r1 = 0;
};

/// An axis-aligned box of world points (mm): x[0], x[1] its two x coordinates (either order),
/// likewise y and z.
struct slab_box {
  double x[2], y[2], z[2];
};

/// The box of the voxel centres of planes [z0, z0 + nz) of a grid (origin = centre of voxel
/// (0, 0, 0), spacing per axis, nx x ny voxels per plane).
inline slab_box slab_centres(const std::array<double, 3>& origin,
                             const std::array<double, 3>& spacing, std::int64_t nx, std::int64_t ny,
                             std::int64_t z0, std::int64_t nz) {
  return {{origin[0], origin[0] + static_cast<double>(nx - 1) * spacing[0]},
          {origin[1], origin[1] + static_cast<double>(ny - 1) * spacing[1]},
          {origin[2] + static_cast<double>(z0) * spacing[2],
           origin[2] + static_cast<double>(z0 + nz - 1) * spacing[2]}};
}

/// The rows [floor(lo) - 1, floor(hi) + 3) clamped to [0, rows) (r1 >= r0), or every row.
inline row_band rows_of_extent(double lo, double hi, bool all_rows, std::int64_t rows) {
  std::int64_t r0 = 0, r1 = rows;
  if (!all_rows) {
    const double last = static_cast<double>(rows);
    r0 = static_cast<std::int64_t>(std::clamp(std::floor(lo) - 1.0, 0.0, last));
    r1 = static_cast<std::int64_t>(std::clamp(std::floor(hi) + 3.0, 0.0, last));
    r1 = std::max(r1, r0);
  }
  return {r0, r1};
}

/// Widens [lo, hi] by the rows that points of `box` project onto through the flat-detector
/// matrix m (row = p1 / p2). A projective map keeps the box convex while it stays in front of
/// the source, so its 8 corners bound the rows; returns false (every row) when a corner is at
/// or behind the source plane (p2 <= 1e-6).
inline bool flat_view_rows(const std::array<double, 12>& m, const slab_box& box, double& lo,
                           double& hi) {
  bool bounded = true;
  for (double x : box.x)
    for (double y : box.y)
      for (double z : box.z) {
        const double p1 = m[4] * x + m[5] * y + m[6] * z + m[7];
        const double p2 = m[8] * x + m[9] * y + m[10] * z + m[11];
        if (!(p2 > 1e-6)) {
          bounded = false;
          continue;
        }
        lo = std::min(lo, p1 / p2);
        hi = std::max(hi, p1 / p2);
      }
  return bounded;
}

/// The same for a cylindrical detector's mapping m (kernels::cyl_map_d): row = row0 + b / l
/// with b = bz z + bt depending on z only and l (in-plane distance to the source over SDD) on
/// (x, y) only, so the extremes over the box lie among b at its two z ends combined with the
/// largest l (at a corner: l is convex) and the smallest (the distance from the source to the
/// box's xy-rectangle). A source within `half_voxel` of the rectangle: false (every row).
inline bool curved_view_rows(const std::array<double, 12>& m, const slab_box& box,
                             double half_voxel, double& lo, double& hi) {
  const double xl = std::min(box.x[0], box.x[1]), xh = std::max(box.x[0], box.x[1]),
               yl = std::min(box.y[0], box.y[1]), yh = std::max(box.y[0], box.y[1]);
  // a = m0 x + m1 y + m2, c = m3 x + m4 y + m5: a rotation scaled by 1 / R, so the source
  // (a = c = 0) is the solution of that 2x2 system and l = |xy - source_xy| / R.
  const double det = m[0] * m[4] - m[1] * m[3];
  const double sx = (-m[2] * m[4] + m[1] * m[5]) / det;
  const double sy = (-m[0] * m[5] + m[3] * m[2]) / det;
  const double scale = std::sqrt(m[0] * m[0] + m[1] * m[1]);  // 1 / R
  const double dx = std::max({xl - sx, 0.0, sx - xh}), dy = std::max({yl - sy, 0.0, sy - yh});
  const double near = std::hypot(dx, dy);
  if (!(near > half_voxel)) return false;
  double far = 0;
  for (double x : {xl, xh})
    for (double y : {yl, yh}) far = std::max(far, std::hypot(x - sx, y - sy));
  for (double z : box.z) {
    const double b = m[6] * z + m[7];
    for (double l : {near * scale, far * scale}) {
      lo = std::min(lo, m[8] + b / l);
      hi = std::max(hi, m[8] + b / l);
    }
  }
  return true;
}

/// The detector rows (of `rows`) that the points of `box` need in any of the `n` views whose
/// per-view data `maps` holds: 3x4 projection matrices of a flat detector (curved = false) or
/// cylinder mappings (curved = true, where a source within `half_voxel` (mm) of the box's
/// xy-rectangle takes every row).
inline row_band slab_row_band(const slab_box& box, const std::array<double, 12>* maps,
                              std::size_t n, std::int64_t rows, bool curved,
                              double half_voxel = 0) {
  double lo = 1e300, hi = -1e300;
  bool all_rows = false;
  for (std::size_t v = 0; v < n && !all_rows; ++v)
    all_rows = curved ? !curved_view_rows(maps[v], box, half_voxel, lo, hi)
                      : !flat_view_rows(maps[v], box, lo, hi);
  return rows_of_extent(lo, hi, all_rows, rows);
}

}  // namespace ctforge::kernels
