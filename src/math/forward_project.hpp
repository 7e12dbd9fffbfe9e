// Per-ray Joseph forward projection, shared by the CUDA kernel and the CPU path.
//
// Coordinates are voxel indices: voxel (i, j, k) has its centre at (x, y, z) = (i, j, k) and
// the volume holds nx * ny * nz voxels; values outside are zero. The sampler is any functor
// `float operator()(float x, float y, float z)` returning the trilinear interpolation with zero
// outside the volume: on the GPU a 3D texture in border mode read at (x+0.5, y+0.5, z+0.5), on
// the CPU trilinear_border_sampler below.
//
// Joseph's method: along the dominant axis of the ray direction (in index space), one sample
// per voxel plane at an integer coordinate of that axis; a trilinear fetch there is exactly
// bilinear in the other two axes. The sum is scaled by the ray length (mm) per unit step
// along the dominant axis, so the result is in mm * density.
#pragma once

#include "math/hd.hpp"

namespace ctforge::kernels {

/// Trilinear interpolation of a [nz][ny][nx] volume at index coordinates (x, y, z), zero
/// outside (each tap outside the volume reads zero, as a border-mode texture does).
CTFORGE_HD float sample_trilinear_border(const float* vol, int nx, int ny, int nz, float x, float y,
                                         float z) {
  if (!(x > -1.0f && x < static_cast<float>(nx) && y > -1.0f && y < static_cast<float>(ny) &&
        z > -1.0f && z < static_cast<float>(nz)))
    return 0.0f;
  const float fx = floor_f(x), fy = floor_f(y), fz = floor_f(z);
  const int i0 = static_cast<int>(fx), j0 = static_cast<int>(fy), k0 = static_cast<int>(fz);
  const float ax = x - fx, ay = y - fy, az = z - fz;
  float acc = 0.0f;
  for (int dk = 0; dk < 2; ++dk) {
    const int k = k0 + dk;
    const float wz = dk ? az : 1.0f - az;
    if (k < 0 || k >= nz || wz == 0.0f) continue;
    for (int dj = 0; dj < 2; ++dj) {
      const int j = j0 + dj;
      const float wy = dj ? ay : 1.0f - ay;
      if (j < 0 || j >= ny || wy == 0.0f) continue;
      const float* line = vol + (static_cast<std::int64_t>(k) * ny + j) * nx;
      const float a = (i0 >= 0) ? line[i0] : 0.0f;
      const float b = (i0 + 1 < nx) ? line[i0 + 1] : 0.0f;
      acc += wz * wy * ((1.0f - ax) * a + ax * b);
    }
  }
  return acc;
}

/// CPU sampler functor over a host volume (see sample_trilinear_border).
struct trilinear_border_sampler {
  const float* vol;
  int nx, ny, nz;
  CTFORGE_HD float operator()(float x, float y, float z) const {
    return sample_trilinear_border(vol, nx, ny, nz, x, y, z);
  }
};

/// The trilinear cell of a sample point shared by the samplers below: coordinates clamped to
/// [-1, n], the cell's first voxel (i, j, k), possibly -1, and the fractional offsets.
struct trilinear_cell {
  std::int64_t i, j, k;
  float ax, ay, az;
};
CTFORGE_HD trilinear_cell make_trilinear_cell(float x, float y, float z, int nx, int ny, int nz) {
  x = clamp_f(x, -1.0f, static_cast<float>(nx));
  y = clamp_f(y, -1.0f, static_cast<float>(ny));
  z = clamp_f(z, -1.0f, static_cast<float>(nz));
  const float fx = floor_f(x), fy = floor_f(y), fz = floor_f(z);
  return {static_cast<std::int64_t>(fx),
          static_cast<std::int64_t>(fy),
          static_cast<std::int64_t>(fz),
          x - fx,
          y - fy,
          z - fz};
}
/// Trilinear blend of a cell's eight taps: a (i, j, k), b (j + 1), c (k + 1), d (j + 1, k + 1),
/// each pair [x, x + 1].
CTFORGE_HD float trilinear_blend(const trilinear_cell& t, float a0, float a1, float b0, float b1,
                                 float c0, float c1, float d0, float d1) {
  const float ax = t.ax, ay = t.ay, az = t.az;
  const float lo = (1.0f - ay) * ((1.0f - ax) * a0 + ax * a1) + ay * ((1.0f - ax) * b0 + ax * b1);
  const float hi = (1.0f - ay) * ((1.0f - ax) * c0 + ax * c1) + ay * ((1.0f - ax) * d0 + ax * d1);
  return (1.0f - az) * lo + az * hi;
}

/// A volume copied into a zero-bordered array: one zero plane before and two after each axis,
/// i.e. (nx + 3) x (ny + 3) x (nz + 3) floats with voxel (0, 0, 0) at element (1, 1, 1).
/// Clamping coordinates to [-1, n] then makes every tap that falls outside the volume read a
/// zero, which reproduces sample_trilinear_border without branches (CPU fast path).
struct padded_volume_sampler {
  const float* data;  ///< element (-1, -1, -1) of the padded array
  int nx, ny, nz;     ///< size of the volume (not of the padded array)
  CTFORGE_HD float operator()(float x, float y, float z) const {
    const trilinear_cell t = make_trilinear_cell(x, y, z, nx, ny, nz);
    const std::int64_t px = nx + 3, py = ny + 3;
    const float* a = data + ((t.k + 1) * py + (t.j + 1)) * px + (t.i + 1);
    const float* b = a + px;       // y + 1
    const float* c = a + px * py;  // z + 1
    const float* d = c + px;       // y + 1, z + 1
    return trilinear_blend(t, a[0], a[1], b[0], b[1], c[0], c[1], d[0], d[1]);
  }
};

/// padded_volume_sampler's values and arithmetic read straight from an unpadded [z][y][x] array
/// (the caller's memory: no bordered copy): neighbours outside the volume read as zero. The
/// eight neighbours of an interior sample are read without checks.
struct border_volume_sampler {
  const float* data;  ///< element (0, 0, 0)
  int nx, ny, nz;
  CTFORGE_HD float at(std::int64_t i, std::int64_t j, std::int64_t k) const {
    if (i < 0 || j < 0 || k < 0 || i >= nx || j >= ny || k >= nz) return 0.0f;
    return data[(k * ny + j) * nx + i];
  }
  CTFORGE_HD float operator()(float x, float y, float z) const {
    const trilinear_cell t = make_trilinear_cell(x, y, z, nx, ny, nz);
    const std::int64_t i = t.i, j = t.j, k = t.k;
    if (i >= 0 && j >= 0 && k >= 0 && i + 1 < nx && j + 1 < ny && k + 1 < nz) {
      const std::int64_t sx = nx, sxy = static_cast<std::int64_t>(nx) * ny;
      const float* a = data + (k * ny + j) * sx + i;
      return trilinear_blend(t, a[0], a[1], a[sx], a[sx + 1], a[sxy], a[sxy + 1], a[sxy + sx],
                             a[sxy + sx + 1]);
    }
    return trilinear_blend(t, at(i, j, k), at(i + 1, j, k), at(i, j + 1, k), at(i + 1, j + 1, k),
                           at(i, j, k + 1), at(i + 1, j, k + 1), at(i, j + 1, k + 1),
                           at(i + 1, j + 1, k + 1));
  }
};

/// Parameter interval [t0, t1] (intersected with the one given) where p + t d lies within
/// [lo, hi] along one axis. Returns false when it is empty.
CTFORGE_HD bool clip_axis(float p, float d, float lo, float hi, float& t0, float& t1) {
  if (fabsf(d) < 1e-12f) return p >= lo && p <= hi;
  float a = (lo - p) / d, b = (hi - p) / d;
  if (a > b) {
    const float s = a;
    a = b;
    b = s;
  }
  t0 = max_f(t0, a);
  t1 = min_f(t1, b);
  return t0 <= t1;
}

/// A sampler of one slab (planes [z0, z0 + depth) of a larger volume) addressed with the
/// whole volume's index coordinates: `inner` samples the slab on its own (local plane 0 =
/// global plane z0, zero outside the slab). z - z0 is exact in float for |z|, z0 < 2^24, so a
/// sample reads the same weights as in the whole volume. The whole volume's samples are the
/// sums of its slabs' samples (trilinear interpolation is linear in the voxel values), which is
/// how a volume larger than device memory is projected slab by slab.
template <class Sampler>
struct z_slab_sampler {
  Sampler inner;
  float z0;
  CTFORGE_HD float operator()(float x, float y, float z) const { return inner(x, y, z - z0); }
};

/// joseph_ray restricted to the ray points with z_lo <= z <= z_hi (index coordinates); the
/// planes sampled are those of joseph_ray whose ray point falls in that range. With a slab
/// sampler of planes [z0, z0 + depth) and [z_lo, z_hi] = [z0 - 1, z0 + depth], every sample
/// left out reads zero from the slab (up to float rounding at the window's ends, where the
/// slab's weight is ~0), so the sum over slabs is the whole volume's joseph_ray.
/// [z_lo, z_hi] = [-1, nz] is joseph_ray itself.
template <class Sampler>
CTFORGE_HD float joseph_ray_window(const Sampler& sample, f3 p, f3 d, int nx, int ny, int nz,
                                   float dir_mm, float t_min, float z_lo, float z_hi);

/// Joseph line integral of the ray p + t d (index coordinates) through a volume of
/// nx * ny * nz voxels, in mm * density. `dir_mm` is the length in mm of the direction vector
/// d (i.e. of d converted back to world units), so that a unit step in t covers dir_mm mm.
/// d must be non-zero. Only the part t >= t_min counts (cone beam: t_min = the source's
/// parameter, so that nothing behind the source is integrated, as the back-projection ignores
/// voxels behind the source); the default integrates the whole line. Samples the planes of
/// the dominant axis whose ray point lies within the volume box extended by one voxel,
/// [-1, n] in each axis (beyond it every tap reads zero).
template <class Sampler>
CTFORGE_HD float joseph_ray(const Sampler& sample, f3 p, f3 d, int nx, int ny, int nz, float dir_mm,
                            float t_min = -3.0e38f) {
  return joseph_ray_window(sample, p, d, nx, ny, nz, dir_mm, t_min, -1.0f, static_cast<float>(nz));
}

/// The plane walk of one ray, as joseph_ray_samples takes it (index coordinates): the dominant
/// axis, the planes k0..k1 of that axis it samples, and what the sample point and cell weight
/// of plane k are computed from (joseph_plane_sample). The CPU's vectorised forward projector
/// walks several rays at once from the same plans, so both visit the same samples.
struct joseph_walk {
  int axis;      ///< dominant axis: 0 = x, 1 = y, 2 = z (ties resolved towards x, then y)
  int k0, k1;    ///< first and last plane sampled (index along `axis`)
  float pm, dm;  ///< main-axis coordinate of p and of d
  float mc;      ///< main coordinate of the t_min cut (+-inf or huge without one)
  f3 p, s;       ///< the ray's point and its step per unit of the main coordinate (s[axis] = 1)
};

/// Plans the walk of joseph_ray_samples. Returns false when the ray (its part t >= t_min) misses
/// the box [-1, nx] x [-1, ny] x [-1, nz] (z further restricted to [z_lo, z_hi]) or no plane is
/// left to sample; `walk` is then unspecified.
CTFORGE_HD bool joseph_ray_plan(f3 p, f3 d, int nx, int ny, int nz, float t_min, float z_lo,
                                float z_hi, joseph_walk& walk) {
  const float ax = fabsf(d.x), ay = fabsf(d.y), az = fabsf(d.z);
  // Dominant axis: 0 = x, 1 = y, 2 = z (ties resolved towards x, then y).
  const int axis = (ax >= ay && ax >= az) ? 0 : (ay >= az ? 1 : 2);
  float t0 = t_min, t1 = 3.0e38f;
  if (!clip_axis(p.x, d.x, -1.0f, static_cast<float>(nx), t0, t1)) return false;
  if (!clip_axis(p.y, d.y, -1.0f, static_cast<float>(ny), t0, t1)) return false;
  if (!clip_axis(p.z, d.z, max_f(z_lo, -1.0f), min_f(z_hi, static_cast<float>(nz)), t0, t1))
    return false;

  // Main-axis quantities, and the step per unit of the main coordinate.
  const float pm = axis == 0 ? p.x : (axis == 1 ? p.y : p.z);
  const float dm = axis == 0 ? d.x : (axis == 1 ? d.y : d.z);
  const int nm = axis == 0 ? nx : (axis == 1 ? ny : nz);
  const float inv = 1.0f / dm;
  const f3 s{d.x * inv, d.y * inv, d.z * inv};  // s[axis] == 1

  // Main-coordinate range covered by [t0, t1], restricted to the voxel planes [0, nm - 1]
  // (samples at other integer main coordinates read zero).
  float m0 = pm + t0 * dm, m1 = pm + t1 * dm;
  if (m0 > m1) {
    const float tmp = m0;
    m0 = m1;
    m1 = tmp;
  }
  // Slightly widen: a plane just outside the clipped range contributes (near) zero anyway,
  // and this guards against rounding dropping a plane that matters.
  m0 = clamp_f(m0, -1.0f, static_cast<float>(nm));
  m1 = clamp_f(m1, -1.0f, static_cast<float>(nm));
  int k0 = static_cast<int>(floor_f(m0)), k1 = static_cast<int>(floor_f(m1)) + 1;
  k0 = k0 < 0 ? 0 : k0;
  k1 = k1 > nm - 1 ? nm - 1 : k1;
  if (k0 > k1) return false;
  walk.axis = axis;
  walk.k0 = k0;
  walk.k1 = k1;
  walk.pm = pm;
  walk.dm = dm;
  walk.mc = pm + t_min * dm;
  walk.p = p;
  walk.s = s;
  return true;
}

/// The sample of plane k of a walk: its point (x, y, z) in index coordinates, exactly k along
/// the main axis, and its cell weight, returned. Each plane sample stands for the main-axis cell
/// [k - 1/2, k + 1/2]; a cell cut by t_min counts with the fraction of it beyond the cut (1
/// everywhere without a cut). A weight of 0 means the plane is not sampled.
CTFORGE_HD float joseph_plane_sample(const joseph_walk& walk, int k, float& x, float& y, float& z) {
  const float dk = static_cast<float>(k) - walk.pm;
  const float kf = static_cast<float>(k);
  const float w = clamp_f(walk.dm > 0.0f ? kf + 0.5f - walk.mc : walk.mc - (kf - 0.5f), 0.0f, 1.0f);
  x = walk.p.x + dk * walk.s.x;
  y = walk.p.y + dk * walk.s.y;
  z = walk.p.z + dk * walk.s.z;
  // Exactly on the plane: the trilinear fetch reduces to a bilinear one.
  if (walk.axis == 0)
    x = kf;
  else if (walk.axis == 1)
    y = kf;
  else
    z = kf;
  return w;
}

/// The samples of joseph_ray_window: visit(x, y, z, w) for each plane sample (index
/// coordinates, cell weight w), in order. Returns |d| along the dominant axis, so that the line
/// integral is (sum of w * sample) * dir_mm / |d_main|; 0 when the ray misses the box (and then
/// nothing was visited). The forward projector and its exact transpose (joseph_scatter) share it.
template <class Visit>
CTFORGE_HD float joseph_ray_samples(f3 p, f3 d, int nx, int ny, int nz, float t_min, float z_lo,
                                    float z_hi, Visit&& visit) {
  joseph_walk walk;
  if (!joseph_ray_plan(p, d, nx, ny, nz, t_min, z_lo, z_hi, walk)) return 0.0f;
  for (int k = walk.k0; k <= walk.k1; ++k) {
    float x, y, z;
    const float w = joseph_plane_sample(walk, k, x, y, z);
    if (w == 0.0f) continue;
    visit(x, y, z, w);
  }
  return fabsf(walk.dm);
}

template <class Sampler>
CTFORGE_HD float joseph_ray_window(const Sampler& sample, f3 p, f3 d, int nx, int ny, int nz,
                                   float dir_mm, float t_min, float z_lo, float z_hi) {
  float acc = 0.0f;
  const float adm =
      joseph_ray_samples(p, d, nx, ny, nz, t_min, z_lo, z_hi,
                         [&](float x, float y, float z, float w) { acc += w * sample(x, y, z); });
  if (adm == 0.0f) return 0.0f;
  return acc * dir_mm / adm;
}

/// Adds the four in-plane taps of one plane sample: w00 at `base` (tap (iu, iv) of the
/// transverse axes u, v), w01 at tap (iu + 1, iv), w10 at (iu, iv + 1), w11 at (iu + 1, iv + 1);
/// stride_u / stride_v: elements between neighbours along u / v. With iu in [-1, nu] and iv in
/// [-1, nv] (make_trilinear_cell's clamp), taps outside the volume are dropped, as the sampler
/// reads them as zero. Shared by joseph_scatter_planes and the CPU's vectorised transpose.
template <class Add>
CTFORGE_HD void add_plane_taps(Add& add, std::int64_t base, int iu, int iv, int nu, int nv,
                               std::int64_t stride_u, std::int64_t stride_v, float w00, float w01,
                               float w10, float w11) {
  if (iu >= 0 && iv >= 0 && iu + 1 < nu && iv + 1 < nv) {
    add(base, w00);
    add(base + stride_u, w01);
    add(base + stride_v, w10);
    add(base + stride_u + stride_v, w11);
    return;
  }
  // Near a face: tap iu is inside for 0 <= iu < nu, tap iu + 1 for iu < nu - 1 (same in v).
  const bool u0 = iu >= 0 && iu < nu, u1 = iu + 1 < nu;
  const bool v0 = iv >= 0 && iv < nv, v1 = iv + 1 < nv;
  if (u0 && v0) add(base, w00);
  if (u1 && v0) add(base + stride_u, w01);
  if (u0 && v1) add(base + stride_v, w10);
  if (u1 && v1) add(base + stride_u + stride_v, w11);
}

/// The plane samples of one walk scattered: for plane k, the four taps of its sample in the plane
/// (the sample lies exactly on it, so the main-axis tap k + 1 has weight 0 and is not visited),
/// each with `scale` x cell weight x its bilinear weight. Axis: the walk's dominant axis; u, v are
/// the transverse axes (y, z), (x, z) or (x, y), as in the CPU's vectorised forward loop.
template <int Axis, class Add>
CTFORGE_HD void joseph_scatter_planes(Add& add, const joseph_walk& walk, int nx, int ny, int nz,
                                      float scale) {
  const std::int64_t sxy = static_cast<std::int64_t>(nx) * ny;
  const int nu = Axis == 0 ? ny : nx, nv = Axis == 2 ? ny : nz;
  const std::int64_t stride_m = Axis == 0 ? 1 : (Axis == 1 ? nx : sxy);
  const std::int64_t stride_u = Axis == 0 ? nx : 1, stride_v = Axis == 2 ? nx : sxy;
  for (int k = walk.k0; k <= walk.k1; ++k) {
    float x, y, z;
    const float w = joseph_plane_sample(walk, k, x, y, z);
    if (w == 0.0f) continue;
    // make_trilinear_cell's clamp and floor, in the two transverse axes.
    const float cu = clamp_f(Axis == 0 ? y : x, -1.0f, static_cast<float>(nu));
    const float cv = clamp_f(Axis == 2 ? y : z, -1.0f, static_cast<float>(nv));
    const float fu = floor_f(cu), fv = floor_f(cv);
    const int iu = static_cast<int>(fu), iv = static_cast<int>(fv);
    const float au = cu - fu, av = cv - fv;
    const float c = scale * w;
    // trilinear_blend's weights with the main-axis fraction 0: (1 - av)(1 - au) for tap
    // (iu, iv), and so on.
    const float w00 = c * (1.0f - av) * (1.0f - au), w01 = c * (1.0f - av) * au;
    const float w10 = c * av * (1.0f - au), w11 = c * av * au;
    add_plane_taps(add, k * stride_m + iu * stride_u + iv * stride_v, iu, iv, nu, nv, stride_u,
                   stride_v, w00, w01, w10, w11);
  }
}

/// The exact transpose of joseph_ray with border_volume_sampler: calls add(v, value * (the
/// weight joseph_ray gives voxel v)) for every voxel v (linear index into the [nz][ny][nx]
/// volume) of the ray's samples; taps outside the volume are dropped, as the sampler reads them
/// as zero. `add` accumulates: a plain += into a volume of the calling thread's own on the CPU
/// (joseph_scatter), an atomicAdd into the shared volume on the GPU.
template <class Add>
CTFORGE_HD void joseph_scatter_with(Add&& add, int nx, int ny, int nz, f3 p, f3 d, float dir_mm,
                                    float t_min, float value) {
  joseph_walk walk;
  if (!joseph_ray_plan(p, d, nx, ny, nz, t_min, -1.0f, static_cast<float>(nz), walk)) return;
  // joseph_ray_window's final scale, the same for every sample.
  const float scale = value * dir_mm / fabsf(walk.dm);
  if (walk.axis == 0)
    joseph_scatter_planes<0>(add, walk, nx, ny, nz, scale);
  else if (walk.axis == 1)
    joseph_scatter_planes<1>(add, walk, nx, ny, nz, scale);
  else
    joseph_scatter_planes<2>(add, walk, nx, ny, nz, scale);
}

/// joseph_scatter_with adding into `vol` ([nz][ny][nx]). Not thread-safe on `vol`: the caller
/// gives each thread its own volume.
CTFORGE_HD void joseph_scatter(float* vol, int nx, int ny, int nz, f3 p, f3 d, float dir_mm,
                               float t_min, float value) {
  joseph_scatter_with([vol](std::int64_t v, float a) { vol[v] += a; }, nx, ny, nz, p, d, dir_mm,
                      t_min, value);
}

}  // namespace ctforge::kernels
