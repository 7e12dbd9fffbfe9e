#include "ctforge/projector.hpp"

#include <fmt/format.h>
#include <omp.h>

#include "recon/cpu_simd.hpp"

#if defined(CTFORGE_SIMD_X86)
#include <immintrin.h>
// Functions compiled for AVX2 + FMA whatever the library's -march (CTFORGE_TARGET_AVX2,
// recon/cpu_simd.hpp), called only after the run-time check of the CPU (cpu_has_avx2_fma:
// detail::cpu_simd_level).
#define CTFORGE_FORWARD_AVX2 1
#endif

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "core/projection_maps.hpp"
#include "ctforge/error.hpp"
#include "math/backproject.hpp"
#include "math/forward_project.hpp"
#include "math/geometry.hpp"
#include "recon/backproject.hpp"
#include "recon/backproject_cpu.hpp"
#include "cuda/cuda_api.hpp"
#include "recon/fdk_setup.hpp"
#include "recon/forward_project_cpu.hpp"

namespace ctforge {
namespace {

void check_int_sizes(const volume_geometry& vg) {
  constexpr std::int64_t lim = std::int64_t{1} << 30;
  CTFORGE_EXPECTS(vg.nx < lim && vg.ny < lim && vg.nz < lim,
                  fmt::format("volume size {}x{}x{} too large", vg.nx, vg.ny, vg.nz));
}

/// Shapes, and no NaN or infinity among the voxels (a non-finite voxel would spread silently
/// into every ray through it): usage_error naming the first bad voxel.
void check_forward_inputs(const volume_view& vol, const geometry& g, int threads) {
  g.validate();
  vol.geom.validate();
  check_int_sizes(vol.geom);
  CTFORGE_EXPECTS(static_cast<std::int64_t>(vol.data.size()) == vol.geom.voxel_count(),
                  fmt::format("forward projection: volume holds {} values for {} voxels",
                              vol.data.size(), vol.geom.voxel_count()));
  const std::string bad = detail::first_non_finite_voxel(vol.data.data(), vol.geom, threads);
  if (!bad.empty())
    throw usage_error(fmt::format(
        "forward projection: the volume holds a non-finite value {}; projections need finite "
        "values",
        bad));
}

/// The ray through pixel (v, r, c): point p and direction d in index coordinates (re-anchored at
/// its point nearest to the volume centre, so that the float coordinates handed to the kernel
/// body are small), the direction's length in mm and the source's parameter (cone beam: the
/// integral starts there). The forward projector and its transpose trace the same rays.
struct ray_in_grid {
  kernels::f3 p, d;
  float dir_mm, t_min;
};
struct ray_setup {
  const geometry& g;
  vec3 org, inv_sp, centre;
  bool cone;
  ray_setup(const geometry& geom, const volume_geometry& vg)
      : g(geom),
        org{vg.origin_mm[0], vg.origin_mm[1], vg.origin_mm[2]},
        inv_sp{1.0 / vg.spacing_mm[0], 1.0 / vg.spacing_mm[1], 1.0 / vg.spacing_mm[2]},
        centre(vg.voxel_center(0.5 * static_cast<double>(vg.nx - 1),
                               0.5 * static_cast<double>(vg.ny - 1),
                               0.5 * static_cast<double>(vg.nz - 1))),
        cone(geom.beam == beam_kind::cone) {}
  ray_in_grid operator()(std::int64_t v, std::int64_t r, std::int64_t c) const {
    const vec3 s = g.views[static_cast<std::size_t>(v)].source;
    const vec3 px = pixel_center(g, v, static_cast<double>(c), static_cast<double>(r));
    const vec3 dir = cone ? px - s : s;
    const double len2 = dot(dir, dir);
    const vec3 anchor = px + (dot(centre - px, dir) / len2) * dir;
    const float t_min = cone ? static_cast<float>(dot(s - anchor, dir) / len2) : -3.0e38f;
    const vec3 p{(anchor.x - org.x) * inv_sp.x, (anchor.y - org.y) * inv_sp.y,
                 (anchor.z - org.z) * inv_sp.z};
    const vec3 d{dir.x * inv_sp.x, dir.y * inv_sp.y, dir.z * inv_sp.z};
    return {{static_cast<float>(p.x), static_cast<float>(p.y), static_cast<float>(p.z)},
            {static_cast<float>(d.x), static_cast<float>(d.y), static_cast<float>(d.z)},
            static_cast<float>(std::sqrt(len2)),
            t_min};
  }
};

/// The planes a projection reads: planes [z0, z0 + nz) of a [nz_all][ny][nx] volume whose
/// first element is `data`, sampled through kernels::z_slab_sampler (zero outside the slab) and
/// walked in the window [z0 - 1, z0 + nz] of the whole volume's z index coordinates.
struct slab_planes {
  const float* data;  ///< element (0, 0, z0)
  int nx, ny, nz;     ///< nz: planes in the slab
  int nz_all;         ///< planes in the whole volume
  int z0;
  float z_lo, z_hi;
  kernels::z_slab_sampler<kernels::border_volume_sampler> sampler() const {
    return {{data, nx, ny, nz}, static_cast<float>(z0)};
  }
};

/// The value of one ray through the scalar loop: kernels::joseph_ray_window, the CUDA kernel's
/// body (src/cuda/forward_project.cu), one sample after the other.
float scalar_ray(const slab_planes& s, const ray_in_grid& ray) {
  return kernels::joseph_ray_window(s.sampler(), ray.p, ray.d, s.nx, s.ny, s.nz_all, ray.dir_mm,
                                    ray.t_min, s.z_lo, s.z_hi);
}

/// Where the forward loops write: a projection stack's floats [view][row][col], held by a
/// projection_stack or by the caller (forward_project_into).
struct projections_out {
  float* data;
  std::int64_t rows, cols;
  float& at(std::int64_t v, std::int64_t r, std::int64_t c) const {
    return data[(v * rows + r) * cols + c];
  }
};

projections_out out_of(projection_stack& p) {
  return {p.data.data(), p.rows, p.cols};
}

void store(const projections_out& out, std::int64_t v, std::int64_t r, std::int64_t c,
           float value, bool accumulate) {
  if (accumulate)
    out.at(v, r, c) += value;
  else
    out.at(v, r, c) = value;
}

/// The scalar loop over all rays: OpenMP over detector lines (view, row), one ray at a time.
void project_planes_scalar(const slab_planes& s, const ray_setup& rays, const geometry& g,
                           bool accumulate, const projections_out& out, int threads) {
  const std::int64_t n_lines = g.view_count() * g.rows;
#pragma omp parallel for schedule(dynamic, 2) num_threads(detail::resolve_threads(threads))
  for (std::int64_t line = 0; line < n_lines; ++line) {
    const std::int64_t v = line / g.rows, r = line % g.rows;
    for (std::int64_t c = 0; c < g.cols; ++c)
      store(out, v, r, c, scalar_ray(s, rays(v, r, c)), accumulate);
  }
}

#if defined(CTFORGE_FORWARD_AVX2)

// ---- vectorised loop -------------------------------------------------------------------------
//
// Eight rays of one detector row (columns c0 .. c0 + 7) are walked together, one AVX2 lane per
// ray and one voxel plane per step, when their dominant axis is the same (a group that
// straddles a 45-degree ray direction takes one walk per axis, the other lanes idle). Each ray
// keeps its own walk (kernels::joseph_ray_plan: planes, point, step, cut, computed by the scalar
// code): the lanes step through the union of their plane ranges, a lane outside its own range
// adding weight 0; on the planes where every lane is inside its range with cell weight 1 (all
// of them unless a source lies inside the volume) the weights are left out. In plane k each
// lane's sample is bilinear in the two transverse axes (u, v) with kernels::
// border_volume_sampler's weights and zero-outside rule (the main-axis fraction is exactly 0):
// where all four taps of all lanes lie inside the slab, plain loads (64-bit pairs when u = x),
// otherwise clamped coordinates and masked gathers, a tap outside the slab reading 0. The
// arithmetic (cell weight, point, clamp, floor, blend, accumulation in plane order, final
// scale) is joseph_ray_window's, operation for operation; only fused multiply-adds may round
// differently from the scalar build (bit-identical with GCC 12, -march=x86-64-v3).
//
// Tasks and their order are described at project_planes_avx2.

constexpr int k_lanes = 8;

/// Up to 8 rays with the same dominant axis, lane l = column c0 + l. Lanes without a ray
/// (missing the volume, or past the last column) have an empty plane range and zero steps.
struct ray_lanes {
  alignas(32) float pu[k_lanes], pv[k_lanes];  ///< ray point, transverse axes u, v
  alignas(32) float su[k_lanes], sv[k_lanes];  ///< step per unit of the main coordinate
  alignas(32) float pm[k_lanes], mc[k_lanes];  ///< main coordinate of the point and of the cut
  alignas(32) std::int32_t pos[k_lanes];       ///< -1 where the main component of d is > 0
  alignas(32) std::int32_t k0m1[k_lanes];      ///< first plane - 1
  alignas(32) std::int32_t k1p1[k_lanes];      ///< last plane + 1
};

/// What a plane sample of the lanes needs, in registers. Axis: the dominant axis (0 = x, 1 = y,
/// 2 = z); the transverse axes u, v are (y, z), (x, z), (x, y).
template <int Axis>
struct lane_state {
  __m256 pu, pv, su, sv, pm;
  const float* data;                          ///< the slab's element (0, 0, 0)
  std::int32_t stride_m, stride_u, stride_v;  ///< floats between neighbours along m, u, v
  int nu, nv;                                 ///< voxels along u and v in the slab
  float z0;                                   ///< slab's first plane (global z index)
};

/// The floats at base[o[0]], ..., base[o[7]].
CTFORGE_AVX2_INLINE __m256 load_lanes(const float* base, const std::int32_t* o) {
  return _mm256_setr_ps(base[o[0]], base[o[1]], base[o[2]], base[o[3]], base[o[4]], base[o[5]],
                        base[o[6]], base[o[7]]);
}

/// [base[o0], base[o0 + 1], base[o1], base[o1 + 1]] (two 64-bit loads).
CTFORGE_AVX2_INLINE __m128 load_two_pairs(const float* base, std::int32_t o0, std::int32_t o1) {
  const __m128 lo = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(base + o0)));
  return _mm_loadh_pi(lo, reinterpret_cast<const __m64*>(base + o1));
}

/// The float pairs base[o[l]], base[o[l] + 1] of the 8 lanes as two vectors: lo = the first of
/// each pair, hi = the second (64-bit loads: two neighbouring taps along x at once).
CTFORGE_AVX2_INLINE void load_lane_pairs(const float* base, const std::int32_t* o, __m256& lo,
                                         __m256& hi) {
  const __m256 x0 = _mm256_insertf128_ps(_mm256_castps128_ps256(load_two_pairs(base, o[0], o[1])),
                                         load_two_pairs(base, o[4], o[5]), 1);
  const __m256 x1 = _mm256_insertf128_ps(_mm256_castps128_ps256(load_two_pairs(base, o[2], o[3])),
                                         load_two_pairs(base, o[6], o[7]), 1);
  lo = _mm256_shuffle_ps(x0, x1, 0x88);  // lanes 0 1 2 3 | 4 5 6 7
  hi = _mm256_shuffle_ps(x0, x1, 0xDD);
}

/// kernels::trilinear_blend with the main-axis fraction 0: bilinear in (u, v) from the taps
/// a (u, v), b (u + 1, v), c (u, v + 1), d (u + 1, v + 1).
CTFORGE_AVX2_INLINE __m256 blend_taps(__m256 au, __m256 av, __m256 a, __m256 b, __m256 c,
                                      __m256 d) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 bu = _mm256_sub_ps(one, au), bv = _mm256_sub_ps(one, av);
  const __m256 lo = _mm256_fmadd_ps(bu, a, _mm256_mul_ps(au, b));
  const __m256 hi = _mm256_fmadd_ps(bu, c, _mm256_mul_ps(au, d));
  return _mm256_fmadd_ps(bv, lo, _mm256_mul_ps(av, hi));
}

/// The lanes' samples at the transverse coordinates (cu, cv) (slab-local index coordinates) of
/// plane km of the slab: kernels::border_volume_sampler's value with the main-axis fraction 0
/// (coordinates clamped to [-1, n], floor, taps outside the slab reading 0).
/// Offsets (floats) of the taps (iu, iv) of plane km within the slab.
template <int Axis>
CTFORGE_AVX2_INLINE __m256i tap_offsets(const lane_state<Axis>& st, int km, __m256i iu,
                                        __m256i iv) {
  const __m256i ou = Axis == 0 ? _mm256_mullo_epi32(iu, _mm256_set1_epi32(st.stride_u)) : iu;
  const __m256i ov = _mm256_mullo_epi32(iv, _mm256_set1_epi32(st.stride_v));
  return _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32(km * st.stride_m), ou), ov);
}

/// The floats at data[offset] of the lanes whose mask is set, 0 in the others (not read).
CTFORGE_AVX2_INLINE __m256 gather_masked(const float* data, __m256i offset, __m256i mask) {
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), data, offset, _mm256_castsi256_ps(mask), 4);
}

/// The lanes' samples at the transverse coordinates (cu, cv) (slab-local index coordinates) of
/// plane km of the slab: kernels::border_volume_sampler's value with the main-axis fraction 0
/// (coordinates clamped to [-1, n], floor, taps outside the slab reading 0).
template <int Axis>
CTFORGE_AVX2_INLINE __m256 plane_sample(const lane_state<Axis>& st, int km, __m256 cu, __m256 cv) {
  // Common case first: every tap of every lane inside the slab, 0 <= cu < nu - 1 (then floor(cu)
  // lies in [0, nu - 2]) and the same in v, i.e. the sign bit of cu clear and that of cu - (nu - 1)
  // set (a difference of distinct floats is never rounded to 0; -0, infinities and NaN test
  // outside). There the clamp to [-1, n] changes nothing, and plain loads replace the gathers
  // (faster on the CPUs measured).
  const __m256 hu = _mm256_sub_ps(cu, _mm256_set1_ps(static_cast<float>(st.nu - 1)));
  const __m256 hv = _mm256_sub_ps(cv, _mm256_set1_ps(static_cast<float>(st.nv - 1)));
  if (_mm256_movemask_ps(_mm256_and_ps(_mm256_andnot_ps(cu, hu), _mm256_andnot_ps(cv, hv))) ==
      0xFF) {
    const __m256 fu = _mm256_floor_ps(cu), fv = _mm256_floor_ps(cv);
    const __m256i iu = _mm256_cvttps_epi32(fu), iv = _mm256_cvttps_epi32(fv);
    const __m256 au = _mm256_sub_ps(cu, fu), av = _mm256_sub_ps(cv, fv);
    alignas(32) std::int32_t o[k_lanes];
    _mm256_store_si256(reinterpret_cast<__m256i*>(o), tap_offsets(st, km, iu, iv));
    __m256 a, b, c, d;
    if constexpr (Axis == 0) {  // u = y: the four taps lie in different rows
      a = load_lanes(st.data, o);
      b = load_lanes(st.data + st.stride_u, o);
      c = load_lanes(st.data + st.stride_v, o);
      d = load_lanes(st.data + st.stride_u + st.stride_v, o);
    } else {  // u = x: taps (u, u + 1) are neighbours in memory
      load_lane_pairs(st.data, o, a, b);
      load_lane_pairs(st.data + st.stride_v, o, c, d);
    }
    return blend_taps(au, av, a, b, c, d);
  }
  // General case (near the faces of the slab): clamp, floor, masked gathers.
  const __m256 minus_one_f = _mm256_set1_ps(-1.0f);
  cu = _mm256_min_ps(_mm256_max_ps(cu, minus_one_f), _mm256_set1_ps(static_cast<float>(st.nu)));
  cv = _mm256_min_ps(_mm256_max_ps(cv, minus_one_f), _mm256_set1_ps(static_cast<float>(st.nv)));
  const __m256 gu = _mm256_floor_ps(cu), gv = _mm256_floor_ps(cv);
  const __m256 au = _mm256_sub_ps(cu, gu), av = _mm256_sub_ps(cv, gv);
  const __m256i iu = _mm256_cvttps_epi32(gu), iv = _mm256_cvttps_epi32(gv);
  const __m256i a_off = tap_offsets(st, km, iu, iv);
  const __m256i b_off = _mm256_add_epi32(a_off, _mm256_set1_epi32(st.stride_u));
  const __m256i c_off = _mm256_add_epi32(a_off, _mm256_set1_epi32(st.stride_v));
  const __m256i d_off = _mm256_add_epi32(b_off, _mm256_set1_epi32(st.stride_v));
  // With iu in [-1, nu]: tap u is inside for -1 < iu < nu, tap u + 1 for iu < nu - 1 (same in v).
  const __m256i minus_one = _mm256_set1_epi32(-1);
  const __m256i nu_m1 = _mm256_set1_epi32(st.nu - 1), nv_m1 = _mm256_set1_epi32(st.nv - 1);
  const __m256i u1 = _mm256_cmpgt_epi32(nu_m1, iu), v1 = _mm256_cmpgt_epi32(nv_m1, iv);
  const __m256i u0 =
      _mm256_andnot_si256(_mm256_cmpgt_epi32(iu, nu_m1), _mm256_cmpgt_epi32(iu, minus_one));
  const __m256i v0 =
      _mm256_andnot_si256(_mm256_cmpgt_epi32(iv, nv_m1), _mm256_cmpgt_epi32(iv, minus_one));
  return blend_taps(au, av, gather_masked(st.data, a_off, _mm256_and_si256(u0, v0)),
                    gather_masked(st.data, b_off, _mm256_and_si256(u1, v0)),
                    gather_masked(st.data, c_off, _mm256_and_si256(u0, v1)),
                    gather_masked(st.data, d_off, _mm256_and_si256(u1, v1)));
}

/// The lanes' transverse sample coordinates in plane k (kernels::joseph_plane_sample, then the
/// slab-local z of kernels::z_slab_sampler).
template <int Axis, bool Slab>
CTFORGE_AVX2_INLINE void plane_point(const lane_state<Axis>& st, __m256 kf, __m256& cu,
                                     __m256& cv) {
  const __m256 dk = _mm256_sub_ps(kf, st.pm);
  cu = _mm256_fmadd_ps(dk, st.su, st.pu);
  cv = _mm256_fmadd_ps(dk, st.sv, st.pv);
  if constexpr (Slab && Axis != 2) cv = _mm256_sub_ps(cv, _mm256_set1_ps(st.z0));
}

/// The per-lane cell weights of joseph_walk (kernels::joseph_plane_sample) and plane ranges.
struct lane_weights {
  __m256 mc, pos;
  __m256i k0m1, k1p1;
};

/// Each lane's cell weight in plane k (kernels::joseph_plane_sample), 0 outside its planes; `in`
/// gets the mask of the lanes within their planes. kf = k as floats.
CTFORGE_AVX2_INLINE __m256 cell_weight(const lane_weights& lw, int k, __m256 kf, __m256& in) {
  const __m256i kv = _mm256_set1_epi32(k);
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 w_pos = _mm256_sub_ps(_mm256_add_ps(kf, half), lw.mc);
  const __m256 w_neg = _mm256_sub_ps(lw.mc, _mm256_sub_ps(kf, half));
  const __m256 w =
      _mm256_min_ps(_mm256_max_ps(_mm256_blendv_ps(w_neg, w_pos, lw.pos), _mm256_setzero_ps()),
                    _mm256_set1_ps(1.0f));
  in = _mm256_castsi256_ps(
      _mm256_and_si256(_mm256_cmpgt_epi32(kv, lw.k0m1), _mm256_cmpgt_epi32(lw.k1p1, kv)));
  return _mm256_and_ps(w, in);
}

/// The lanes of L in registers: their points and steps into st (its other fields are the
/// caller's), their cell weights and plane ranges into lw.
template <int Axis>
CTFORGE_AVX2_INLINE void lanes_in_registers(const ray_lanes& L, lane_state<Axis>& st,
                                            lane_weights& lw) {
  st.pu = _mm256_load_ps(L.pu);
  st.pv = _mm256_load_ps(L.pv);
  st.su = _mm256_load_ps(L.su);
  st.sv = _mm256_load_ps(L.sv);
  st.pm = _mm256_load_ps(L.pm);
  lw.mc = _mm256_load_ps(L.mc);
  lw.pos = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(L.pos)));
  lw.k0m1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(L.k0m1));
  lw.k1p1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(L.k1p1));
}

/// acc + (each lane's cell weight in plane k, 0 outside its planes) x its sample.
template <int Axis, bool Slab>
CTFORGE_AVX2_INLINE __m256 weighted_plane(const lane_state<Axis>& st, const lane_weights& lw, int k,
                                          int km, __m256 acc) {
  const __m256 kf = _mm256_set1_ps(static_cast<float>(k));
  __m256 in;
  const __m256 w = cell_weight(lw, k, kf, in);
  __m256 cu, cv;
  plane_point<Axis, Slab>(st, kf, cu, cv);
  // Lanes outside their planes sample (0, 0) instead: inside the slab when it is at least 2
  // voxels across in u and v, so that they do not hold the others off the plain loads.
  cu = _mm256_and_ps(cu, in);
  cv = _mm256_and_ps(cv, in);
  return _mm256_fmadd_ps(w, plane_sample(st, km, cu, cv), acc);
}

/// Walks planes kmin..kmax of the lanes and stores each lane's sum of weight x sample in
/// acc_out. Planes [ks0, ks1] (possibly empty) are those where every lane with a ray is within
/// its own planes with cell weight exactly 1 (no cut); there the weight is left out (x 1 is
/// exact). Elsewhere each lane's weight is kernels::joseph_plane_sample's, 0 outside its planes.
/// For Axis = 2, kmin..kmax lie within the slab's planes. Lanes without a ray end with an
/// unspecified sum.
template <int Axis, bool Slab>
CTFORGE_TARGET_AVX2 void walk_lanes_avx2(const ray_lanes& L, int kmin, int kmax, int ks0, int ks1,
                                         const slab_planes& s, float* acc_out) {
  lane_state<Axis> st;
  lane_weights lw;
  lanes_in_registers(L, st, lw);
  st.data = s.data;
  const std::int32_t sxy = s.nx * s.ny;
  st.stride_m = Axis == 0 ? 1 : (Axis == 1 ? s.nx : sxy);
  st.stride_u = Axis == 0 ? s.nx : 1;
  st.stride_v = Axis == 2 ? s.nx : sxy;
  st.nu = Axis == 0 ? s.ny : s.nx;
  st.nv = Axis == 2 ? s.ny : s.nz;
  st.z0 = static_cast<float>(s.z0);
  const int km_shift = Axis == 2 ? s.z0 : 0;  // plane index within the slab = k - km_shift

  __m256 acc = _mm256_setzero_ps();
  const int head_end = std::min(kmax, ks0 - 1);
  int k = kmin;
  for (; k <= head_end; ++k) acc = weighted_plane<Axis, Slab>(st, lw, k, k - km_shift, acc);
  for (; k <= ks1; ++k) {
    __m256 cu, cv;
    plane_point<Axis, Slab>(st, _mm256_set1_ps(static_cast<float>(k)), cu, cv);
    acc = _mm256_add_ps(acc, plane_sample(st, k - km_shift, cu, cv));
  }
  for (; k <= kmax; ++k) acc = weighted_plane<Axis, Slab>(st, lw, k, k - km_shift, acc);
  _mm256_storeu_ps(acc_out, acc);
}

/// The lanes `active` (bit l: walk[l] has dominant axis `axis`) of a group in L. The others get
/// an empty plane range and the sample point (0, v0) on every plane (see walk_lanes_avx2).
void fill_lanes(const kernels::joseph_walk* walk, unsigned active, int axis, float v0,
                ray_lanes& L) {
  const int iu = axis == 0 ? 1 : 0, iv = axis == 2 ? 1 : 2;
  for (int l = 0; l < k_lanes; ++l) {
    if (active >> l & 1u) {
      const kernels::joseph_walk& w = walk[l];
      const float p[3] = {w.p.x, w.p.y, w.p.z}, st[3] = {w.s.x, w.s.y, w.s.z};
      L.pu[l] = p[iu];
      L.pv[l] = p[iv];
      L.su[l] = st[iu];
      L.sv[l] = st[iv];
      L.pm[l] = w.pm;
      L.mc[l] = w.mc;
      L.pos[l] = w.dm > 0.0f ? -1 : 0;
      L.k0m1[l] = w.k0 - 1;
      L.k1p1[l] = w.k1 + 1;
    } else {
      L.pu[l] = L.su[l] = L.sv[l] = L.pm[l] = L.mc[l] = 0.0f;
      L.pv[l] = v0;
      L.pos[l] = 0;
      L.k0m1[l] = INT_MAX;
      L.k1p1[l] = INT_MIN;
    }
  }
}

/// Walks the lanes `active` (bit l: walk[l] has dominant axis `axis`) together and stores their
/// sums of weight x sample in acc[l] (other lanes untouched).
void walk_axis_lanes(const slab_planes& s, const kernels::joseph_walk* walk, unsigned active,
                     int axis, float* acc) {
  int kmin = INT_MAX, kmax = INT_MIN, ks0 = INT_MIN, ks1 = INT_MAX;
  for (int l = 0; l < k_lanes; ++l) {
    if (!(active >> l & 1u)) continue;
    const kernels::joseph_walk& w = walk[l];
    kmin = std::min(kmin, w.k0);
    kmax = std::max(kmax, w.k1);
    // The cell weight is monotonic in k: 1 at both ends means 1 on every plane of the walk.
    float x, y, z;
    const bool whole = kernels::joseph_plane_sample(w, w.k0, x, y, z) == 1.0f &&
                       kernels::joseph_plane_sample(w, w.k1, x, y, z) == 1.0f;
    ks0 = std::max(ks0, whole ? w.k0 : INT_MAX);
    ks1 = std::min(ks1, w.k1);
  }
  if (axis == 2) {  // planes outside the slab read zero
    kmin = std::max(kmin, s.z0);
    kmax = std::min(kmax, s.z0 + s.nz - 1);
  }
  alignas(32) float sum[k_lanes] = {};
  if (kmin <= kmax) {
    ks0 = std::max(ks0, kmin);
    ks1 = std::min(ks1, kmax);
    ray_lanes L;
    fill_lanes(walk, active, axis, axis == 2 ? 0.0f : static_cast<float>(s.z0), L);
    const bool slab = s.z0 != 0;  // z - 0 is exact: whole volumes skip the subtraction
    if (axis == 0)
      slab ? walk_lanes_avx2<0, true>(L, kmin, kmax, ks0, ks1, s, sum)
           : walk_lanes_avx2<0, false>(L, kmin, kmax, ks0, ks1, s, sum);
    else if (axis == 1)
      slab ? walk_lanes_avx2<1, true>(L, kmin, kmax, ks0, ks1, s, sum)
           : walk_lanes_avx2<1, false>(L, kmin, kmax, ks0, ks1, s, sum);
    else
      slab ? walk_lanes_avx2<2, true>(L, kmin, kmax, ks0, ks1, s, sum)
           : walk_lanes_avx2<2, false>(L, kmin, kmax, ks0, ks1, s, sum);
  }
  for (int l = 0; l < k_lanes; ++l)
    if (active >> l & 1u) acc[l] = sum[l];
}

/// The rays of columns c0 .. c0 + n - 1 (n <= 8) of row r of view v. Rays sharing a dominant
/// axis are walked together (a group that straddles a 45-degree direction takes one walk per
/// axis, each lane in one of them). The ray set-up and plans are the scalar loop's code
/// (compiled for the library's target, not for AVX2), so that both loops walk the same rays.
void project_group_avx2(const slab_planes& s, const ray_setup& rays, std::int64_t v, std::int64_t r,
                        std::int64_t c0, int n, bool accumulate, const projections_out& out) {
  ray_in_grid ray[k_lanes];
  kernels::joseph_walk walk[k_lanes];
  unsigned lanes_of_axis[3] = {0, 0, 0};
  for (int l = 0; l < n; ++l) {
    ray[l] = rays(v, r, c0 + l);
    if (kernels::joseph_ray_plan(ray[l].p, ray[l].d, s.nx, s.ny, s.nz_all, ray[l].t_min, s.z_lo,
                                 s.z_hi, walk[l]))
      lanes_of_axis[walk[l].axis] |= 1u << l;
  }
  alignas(32) float acc[k_lanes] = {};
  for (int axis = 0; axis < 3; ++axis)
    if (lanes_of_axis[axis]) walk_axis_lanes(s, walk, lanes_of_axis[axis], axis, acc);
  const unsigned hit = lanes_of_axis[0] | lanes_of_axis[1] | lanes_of_axis[2];
  for (int l = 0; l < n; ++l) {
    // joseph_ray_window's scale: the sum times dir_mm / |d_main|.
    const float value = (hit >> l & 1u) ? acc[l] * ray[l].dir_mm / std::fabs(walk[l].dm) : 0.0f;
    store(out, v, r, c0 + l, value, accumulate);
  }
}

/// The vectorised loop over all rays. Task: a band of rows of one view; in a band, the
/// column blocks in turn and in each block the rows in turn. Tasks are ordered band by band,
/// all views of a band before the next: a band's rays cross the same slab of the volume in
/// every view, which then stays in the cache (on 256^3, 180 views of 256^2: 1.5x faster than
/// view by view, where each view streams the whole volume from memory again).
void project_planes_avx2(const slab_planes& s, const ray_setup& rays, const geometry& g,
                         bool accumulate, const projections_out& out, int threads) {
  // Rows of a band: neighbouring rows and column blocks share voxels, still in the cache when
  // the next one comes (measured on 256^3: 4 to 8 rows best, 16 -7 %, 32 -30 %).
  constexpr std::int64_t band = 8;
  const std::int64_t blocks = (g.cols + k_lanes - 1) / k_lanes;
  const std::int64_t bands = (g.rows + band - 1) / band;
  const std::int64_t views = g.view_count();
  const std::int64_t units = views * bands;
#pragma omp parallel for schedule(dynamic, 1) num_threads(detail::resolve_threads(threads))
  for (std::int64_t u = 0; u < units; ++u) {
    const std::int64_t v = u % views, r0 = (u / views) * band;
    const std::int64_t r1 = std::min(g.rows, r0 + band);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t c0 = b * k_lanes;
      const int n = static_cast<int>(std::min<std::int64_t>(k_lanes, g.cols - c0));
      for (std::int64_t r = r0; r < r1; ++r)
        project_group_avx2(s, rays, v, r, c0, n, accumulate, out);
    }
  }
}

// ---- vectorised transpose ---------------------------------------------------------------------
//
// The matched back-projector's loop: the rays of 8 neighbouring columns of a detector row walked
// together as in the forward loop (same plans, lanes, cell weights and plane points), each plane
// sample's four in-plane taps and bilinear weights computed in the lanes, then added into the
// volume one lane after the other (AVX2 has no scatter; neighbouring rays add into neighbouring
// voxels, which stay in the cache). Taps outside the volume are dropped, as
// kernels::joseph_scatter_planes drops them; the weights are its products, so the two loops
// differ by float rounding only.

/// Scatters value[l] x (cell weight x bilinear weight) of every plane sample of lane l, for the
/// lanes of L (a whole volume of nx * ny * nz voxels, element offsets within int32).
template <int Axis>
CTFORGE_TARGET_AVX2 void scatter_lanes_avx2(const ray_lanes& L, const float* value, int kmin,
                                            int kmax, float* vol, int nx, int ny, int nz) {
  lane_state<Axis> st;  // its points and steps only (no slab: the whole volume)
  lane_weights lw;
  lanes_in_registers(L, st, lw);
  const __m256 val = _mm256_loadu_ps(value);
  const std::int32_t sxy = nx * ny;
  const std::int32_t stride_m = Axis == 0 ? 1 : (Axis == 1 ? nx : sxy);
  const std::int32_t stride_u = Axis == 0 ? nx : 1, stride_v = Axis == 2 ? nx : sxy;
  const int nu = Axis == 0 ? ny : nx, nv = Axis == 2 ? ny : nz;
  const __m256 one = _mm256_set1_ps(1.0f), minus_one = _mm256_set1_ps(-1.0f);
  const __m256 nu_f = _mm256_set1_ps(static_cast<float>(nu)),
               nv_f = _mm256_set1_ps(static_cast<float>(nv));
  const __m256i su_i = _mm256_set1_epi32(stride_u), sv_i = _mm256_set1_epi32(stride_v);
  const auto add = [vol](std::int64_t at, float a) { vol[at] += a; };
  alignas(32) std::int32_t off[k_lanes], iu_a[k_lanes], iv_a[k_lanes];
  alignas(32) float w00[k_lanes], w01[k_lanes], w10[k_lanes], w11[k_lanes];
  for (int k = kmin; k <= kmax; ++k) {
    const __m256 kf = _mm256_set1_ps(static_cast<float>(k));
    __m256 in;
    const __m256 c = _mm256_mul_ps(val, cell_weight(lw, k, kf, in));
    const int live = _mm256_movemask_ps(_mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_NEQ_OQ));
    if (live == 0) continue;
    // The plane point, clamped to [-1, n] and split into cell and fractions.
    __m256 cu, cv;
    plane_point<Axis, false>(st, kf, cu, cv);
    cu = _mm256_min_ps(_mm256_max_ps(cu, minus_one), nu_f);
    cv = _mm256_min_ps(_mm256_max_ps(cv, minus_one), nv_f);
    const __m256 fu = _mm256_floor_ps(cu), fv = _mm256_floor_ps(cv);
    const __m256 au = _mm256_sub_ps(cu, fu), av = _mm256_sub_ps(cv, fv);
    const __m256i iu = _mm256_cvttps_epi32(fu), iv = _mm256_cvttps_epi32(fv);
    const __m256 bu = _mm256_sub_ps(one, au), bv = _mm256_sub_ps(one, av);
    const __m256 cb = _mm256_mul_ps(c, bv), ca = _mm256_mul_ps(c, av);
    _mm256_store_ps(w00, _mm256_mul_ps(cb, bu));
    _mm256_store_ps(w01, _mm256_mul_ps(cb, au));
    _mm256_store_ps(w10, _mm256_mul_ps(ca, bu));
    _mm256_store_ps(w11, _mm256_mul_ps(ca, au));
    _mm256_store_si256(reinterpret_cast<__m256i*>(off),
                       _mm256_add_epi32(_mm256_set1_epi32(k * stride_m),
                                        _mm256_add_epi32(_mm256_mullo_epi32(iu, su_i),
                                                         _mm256_mullo_epi32(iv, sv_i))));
    _mm256_store_si256(reinterpret_cast<__m256i*>(iu_a), iu);
    _mm256_store_si256(reinterpret_cast<__m256i*>(iv_a), iv);
    for (unsigned m = static_cast<unsigned>(live); m != 0; m &= m - 1) {
      const int l = __builtin_ctz(m);
      kernels::add_plane_taps(add, off[l], iu_a[l], iv_a[l], nu, nv, stride_u, stride_v, w00[l],
                              w01[l], w10[l], w11[l]);
    }
  }
}

/// The rays of columns c0 .. c0 + n - 1 (n <= 8) of row r of view v with their values row[c0 + l]
/// scattered into vol (whole volume): the plans and lanes of project_group_avx2, walked per
/// dominant axis.
void scatter_group_avx2(const ray_setup& rays, std::int64_t v, std::int64_t r, std::int64_t c0,
                        int n, const float* row, float* vol, int nx, int ny, int nz) {
  ray_in_grid ray[k_lanes];
  kernels::joseph_walk walk[k_lanes];
  unsigned lanes_of_axis[3] = {0, 0, 0};
  for (int l = 0; l < n; ++l) {
    if (row[c0 + l] == 0.0f) continue;
    ray[l] = rays(v, r, c0 + l);
    if (kernels::joseph_ray_plan(ray[l].p, ray[l].d, nx, ny, nz, ray[l].t_min, -1.0f,
                                 static_cast<float>(nz), walk[l]))
      lanes_of_axis[walk[l].axis] |= 1u << l;
  }
  for (int axis = 0; axis < 3; ++axis) {
    const unsigned active = lanes_of_axis[axis];
    if (!active) continue;
    int kmin = INT_MAX, kmax = INT_MIN;
    alignas(32) float value[k_lanes] = {};
    for (int l = 0; l < k_lanes; ++l) {
      if (!(active >> l & 1u)) continue;
      kmin = std::min(kmin, walk[l].k0);
      kmax = std::max(kmax, walk[l].k1);
      // joseph_ray_window's final scale, the same for every sample of the ray.
      value[l] = row[c0 + l] * ray[l].dir_mm / std::fabs(walk[l].dm);
    }
    ray_lanes L;
    fill_lanes(walk, active, axis, 0.0f, L);
    if (axis == 0)
      scatter_lanes_avx2<0>(L, value, kmin, kmax, vol, nx, ny, nz);
    else if (axis == 1)
      scatter_lanes_avx2<1>(L, value, kmin, kmax, vol, nx, ny, nz);
    else
      scatter_lanes_avx2<2>(L, value, kmin, kmax, vol, nx, ny, nz);
  }
}

// The shared run-time choice of the CPU loops (recon/cpu_simd.hpp): AVX2 and FMA present and
// not capped by CTFORGE_SIMD or detail::set_cpu_simd_level.
bool cpu_has_avx2_fma() {
  return detail::cpu_simd_level() >= detail::simd_level::avx2;
}

#endif  // CTFORGE_FORWARD_AVX2

/// Projects planes [z0, z0 + nz) of `vol` (the whole volume when nz = vol.geom.nz) into `out`
/// (adding when `accumulate`) with the per-ray set-up and body the CUDA kernel runs
/// (src/cuda/forward_project.cu), per slab as the GPU does when the volume exceeds device
/// memory, through the loop `path` selects.
void project_planes(const volume_view& vol, const geometry& g, std::int64_t z0, std::int64_t nz,
                    bool accumulate, const projections_out& out, int threads,
                    detail::forward_path path) {
  const volume_geometry& vg = vol.geom;
  // Reads the caller's planes in place (no bordered copy of the volume).
  const slab_planes s{vol.data.data() + z0 * vg.nx * vg.ny,
                      static_cast<int>(vg.nx),
                      static_cast<int>(vg.ny),
                      static_cast<int>(nz),
                      static_cast<int>(vg.nz),
                      static_cast<int>(z0),
                      static_cast<float>(z0) - 1.0f,
                      static_cast<float>(z0 + nz)};
  const ray_setup rays(g, vg);
#if defined(CTFORGE_FORWARD_AVX2)
  // The gathers address the slab with 32-bit offsets, taps one voxel outside included.
  const bool fits = (vg.nx + 2) * (vg.ny + 2) * (nz + 2) < (std::int64_t{1} << 31);
  if (path != detail::forward_path::scalar && fits && cpu_has_avx2_fma()) {
    project_planes_avx2(s, rays, g, accumulate, out, threads);
    return;
  }
#endif
  project_planes_scalar(s, rays, g, accumulate, out, threads);
}

/// forward_project after check_forward_inputs.
projection_stack forward_project_checked(
    const volume_view& vol, const geometry& g, int threads,
    detail::forward_path path = detail::forward_path::automatic) {
  projection_stack out(g.view_count(), g.rows, g.cols);
  project_planes(vol, g, 0, vol.geom.nz, false, out_of(out), threads, path);
  return out;
}

}  // namespace

projection_stack forward_project(const volume_view& vol, const geometry& g, int threads) {
  check_forward_inputs(vol, g, threads);
  return forward_project_checked(vol, g, threads);
}

namespace detail {

bool forward_project_vectorised() {
#if defined(CTFORGE_FORWARD_AVX2)
  return cpu_has_avx2_fma();
#else
  return false;
#endif
}

projection_stack forward_project_cpu(const volume_view& vol, const geometry& g, int threads,
                                     forward_path path) {
  check_forward_inputs(vol, g, threads);
  return forward_project_checked(vol, g, threads, path);
}

void forward_project_into(const volume_view& vol, const geometry& g, int threads,
                          std::span<float> out) {
  check_forward_inputs(vol, g, threads);
  CTFORGE_EXPECTS(static_cast<std::int64_t>(out.size()) == g.view_count() * g.rows * g.cols,
                  fmt::format("forward projection: {} values for {} views x {} rows x {} cols",
                              out.size(), g.view_count(), g.rows, g.cols));
  project_planes(vol, g, 0, vol.geom.nz, false, {out.data(), g.rows, g.cols}, threads,
                 forward_path::automatic);
}

projection_stack forward_project_slabs(const volume_view& vol, const geometry& g,
                                       std::int64_t slab_nz, int threads, forward_path path) {
  check_forward_inputs(vol, g, threads);
  CTFORGE_EXPECTS(slab_nz >= 1, "forward projection: slab depth must be at least 1 plane");
  projection_stack out(g.view_count(), g.rows, g.cols);
  for (std::int64_t z0 = 0; z0 < vol.geom.nz; z0 += slab_nz)
    project_planes(vol, g, z0, std::min(slab_nz, vol.geom.nz - z0), z0 > 0, out_of(out), threads,
                   path);
  return out;
}

std::int64_t forward_project_samples(const volume_geometry& vg, const geometry& g, int threads) {
  g.validate();
  vg.validate();
  check_int_sizes(vg);
  const ray_setup rays(g, vg);
  const int nx = static_cast<int>(vg.nx), ny = static_cast<int>(vg.ny),
            nz = static_cast<int>(vg.nz);
  const std::int64_t n_lines = g.view_count() * g.rows;
  std::int64_t total = 0;
  const int nt = resolve_threads(threads);
#pragma omp parallel for schedule(static) reduction(+ : total) num_threads(nt)
  for (std::int64_t line = 0; line < n_lines; ++line) {
    const std::int64_t v = line / g.rows, r = line % g.rows;
    for (std::int64_t c = 0; c < g.cols; ++c) {
      const ray_in_grid ray = rays(v, r, c);
      kernels::joseph_walk w;
      if (kernels::joseph_ray_plan(ray.p, ray.d, nx, ny, nz, ray.t_min, -1.0f,
                                   static_cast<float>(nz), w))
        total += w.k1 - w.k0 + 1;
    }
  }
  return total;
}

}  // namespace detail

namespace {

/// Shapes, and no NaN or infinity among the projections: usage_error naming the first bad
/// pixel (view, row, column).
void check_back_inputs(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                       int threads) {
  require_host(proj, "back-projection");
  g.validate();
  vg.validate();
  check_int_sizes(vg);
  CTFORGE_EXPECTS(proj.views == g.view_count() && proj.rows == g.rows && proj.cols == g.cols,
                  fmt::format("back-projection: projections are {} views x {} rows x {} cols but "
                              "the geometry has {} x {} x {}",
                              proj.views, proj.rows, proj.cols, g.view_count(), g.rows, g.cols));
  CTFORGE_EXPECTS(static_cast<std::int64_t>(proj.data.size()) == proj.size(),
                  "back-projection: projection data size does not match its dimensions");
  CTFORGE_EXPECTS(g.cols < (1 << 30) && g.rows < (1 << 30), "back-projection: detector too large");
  detail::check_finite_values(proj, threads);
}

/// back_project after check_back_inputs, into `out` (vg.voxel_count() floats, zero on entry):
/// detail::backproject, unweighted. The fast strategies take zero-bordered copies of the views;
/// flat detectors at most 1/8 of the views at a time (as FDK's), so that the caller's
/// projections are never copied whole.
void back_project_checked(const projection_view& proj, const geometry& g,
                          const volume_geometry& vg, int threads, bool reference, float* out) {
  detail::bp_job job;
  job.grid = vg;
  job.out = out;
  job.threads = detail::resolve_threads(threads);
  if (reference) {
    job.views = &proj;
    job.geom = &g;
    detail::backproject(job, detail::bp_strategy::reference);
    return;
  }
  if (g.curved()) {
    const auto maps = kernels::cylinder_maps(g);
    const auto padded =
        detail::make_padded_projections(proj.data.data(), proj.views, proj.rows, proj.cols);
    job.padded = &padded;
    job.maps = maps.data();
    detail::backproject(job);
    return;
  }
  const auto mats = kernels::float_matrices(g);
  const std::int64_t batches = std::min<std::int64_t>(proj.views, 8);
  const std::int64_t pixels = proj.rows * proj.cols;
  for (std::int64_t b = 0; b < batches; ++b) {
    const std::int64_t v0 = proj.views * b / batches, v1 = proj.views * (b + 1) / batches;
    const auto padded = detail::make_padded_projections(proj.data.data() + v0 * pixels, v1 - v0,
                                                        proj.rows, proj.cols);
    job.padded = &padded;
    job.mats = mats.data() + v0;
    detail::backproject(job);
  }
}

volume back_project_checked(const projection_view& proj, const geometry& g,
                            const volume_geometry& vg, int threads, bool reference) {
  volume out(vg);  // zero
  back_project_checked(proj, g, vg, threads, reference, out.data.data());
  return out;
}

}  // namespace

volume back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                    int threads, bool reference) {
  check_back_inputs(proj, g, vg, threads);
  return back_project_checked(proj, g, vg, threads, reference);
}

namespace {

/// Validates `opt` and says whether it selects the CUDA backend (filling *copt when it does).
bool use_cuda(const projector_options& opt, detail::cuda_options* copt) {
  detail::require_thread_count(opt.threads);
  if (resolve_backend(opt.where, nullptr, opt.device) != backend::cuda) return false;
  static_cast<execution_context&>(*copt) = opt;
  return true;
}

}  // namespace

projection_stack forward_project(const volume_view& vol, const geometry& g,
                                 const projector_options& opt) {
  check_forward_inputs(vol, g, opt.threads);  // before either backend
  detail::cuda_options copt;
  if (use_cuda(opt, &copt)) {
#if defined(CTFORGE_WITH_CUDA)
    return detail::cuda_forward_project(vol, g, copt);
#endif
  }
  return forward_project_checked(vol, g, opt.threads);
}

volume back_project(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                    const projector_options& opt) {
  check_back_inputs(proj, g, vg, opt.threads);  // before either backend
  detail::cuda_options copt;
  if (use_cuda(opt, &copt)) {
#if defined(CTFORGE_WITH_CUDA)
    return detail::cuda_back_project(proj, g, vg, copt);
#endif
  }
  return back_project_checked(proj, g, vg, opt.threads, false);
}

namespace {

/// back_project_matched through the loop `path` selects (vectorised: scatter_group_avx2 where
/// the CPU has AVX2 and FMA and the volume's offsets fit in int32), into `out` (overwritten).
/// The first thread scatters into `out` itself, the others into scratch.partial, kept between
/// calls; then the partial volumes are added to `out` in thread order.
void back_project_matched_impl(const projection_view& proj, const geometry& g,
                               const volume_geometry& vg, int threads, detail::forward_path path,
                               float* out, detail::matched_scratch& scratch) {
  require_host(proj, "back_project_matched");
  const int nt = detail::resolve_threads(threads);
  check_back_inputs(proj, g, vg, nt);
  check_int_sizes(vg);
  const ray_setup rays(g, vg);
  const int nx = static_cast<int>(vg.nx), ny = static_cast<int>(vg.ny),
            nz = static_cast<int>(vg.nz);
  const auto n_vox = static_cast<std::size_t>(vg.voxel_count());
#if defined(CTFORGE_FORWARD_AVX2)
  const bool vectorised = path != detail::forward_path::scalar && cpu_has_avx2_fma() &&
                          vg.voxel_count() < (std::int64_t{1} << 31);
#else
  const bool vectorised = false;
  (void)path;
#endif
  // One volume per thread (the rays of a static share of the detector lines scatter into it),
  // then summed in thread order: deterministic for a given thread count.
  detail::require_memory(
      static_cast<std::uint64_t>(n_vox) * static_cast<std::uint64_t>(nt - 1), sizeof(float),
      fmt::format("the matched back-projection's {} per-thread volumes", nt), "use fewer threads");
  scratch.partial.resize(static_cast<std::size_t>(std::max(nt - 1, 0)));
  // Lines in bands of 8 detector rows, all views of a band before the next: a band's rays cross
  // the same slab of the volume in every view, which then stays in the cache (as the forward
  // loop's tasks). A static share of the bands per thread.
  constexpr std::int64_t band = 8;
  const std::int64_t views = g.view_count();
  const std::int64_t n_lines = (g.rows + band - 1) / band * band * views;  // with the gaps
  int team = 1;
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
#pragma omp single
    team = omp_get_num_threads();
    float* acc = out;
    if (t > 0) {
      std::vector<float>& mine = scratch.partial[static_cast<std::size_t>(t - 1)];
      mine.assign(n_vox, 0.0f);  // no allocation once the size is kept
      acc = mine.data();
    } else {
      std::fill(out, out + n_vox, 0.0f);
    }
#pragma omp for schedule(static)
    for (std::int64_t line = 0; line < n_lines; ++line) {
      const std::int64_t b = line / (views * band), in_band = line % (views * band);
      const std::int64_t rows_in_band = std::min(band, g.rows - b * band);
      if (in_band >= views * rows_in_band) continue;  // the last band's missing rows
      const std::int64_t v = in_band / rows_in_band, r = b * band + in_band % rows_in_band;
      const float* row = proj.view(v) + r * proj.cols;
#if defined(CTFORGE_FORWARD_AVX2)
      if (vectorised) {
        for (std::int64_t c0 = 0; c0 < g.cols; c0 += k_lanes)
          scatter_group_avx2(rays, v, r, c0,
                             static_cast<int>(std::min<std::int64_t>(k_lanes, g.cols - c0)), row,
                             acc, nx, ny, nz);
        continue;
      }
#endif
      for (std::int64_t c = 0; c < g.cols; ++c) {
        if (row[c] == 0.0f) continue;
        const ray_in_grid ray = rays(v, r, c);
        kernels::joseph_scatter(acc, nx, ny, nz, ray.p, ray.d, ray.dir_mm, ray.t_min, row[c]);
      }
    }
  }
  // Only the threads that ran hold a partial volume (the runtime may start fewer than asked).
  for (int t = 1; t < team; ++t)
    detail::parallel_add(out, scratch.partial[static_cast<std::size_t>(t - 1)].data(),
                         static_cast<std::int64_t>(n_vox), nt);
}

volume back_project_matched_impl(const projection_view& proj, const geometry& g,
                                 const volume_geometry& vg, int threads,
                                 detail::forward_path path) {
  volume out(vg);
  detail::matched_scratch scratch;
  back_project_matched_impl(proj, g, vg, threads, path, out.data.data(), scratch);
  return out;
}

}  // namespace

volume back_project_matched(const projection_view& proj, const geometry& g,
                            const volume_geometry& vg, int threads) {
  return back_project_matched_impl(proj, g, vg, threads, detail::forward_path::automatic);
}

volume detail::back_project_matched_cpu(const projection_view& proj, const geometry& g,
                                        const volume_geometry& vg, int threads, forward_path path) {
  return back_project_matched_impl(proj, g, vg, threads, path);
}

void detail::back_project_matched_into(const projection_view& proj, const geometry& g,
                                       const volume_geometry& vg, int threads,
                                       std::span<float> out, matched_scratch& scratch) {
  CTFORGE_EXPECTS(static_cast<std::int64_t>(out.size()) == vg.voxel_count(),
                  fmt::format("back-projection: {} values for a volume of {} voxels", out.size(),
                              vg.voxel_count()));
  back_project_matched_impl(proj, g, vg, threads, forward_path::automatic, out.data(), scratch);
}

void detail::back_project_into(const projection_view& proj, const geometry& g,
                               const volume_geometry& vg, int threads, std::span<float> out) {
  check_back_inputs(proj, g, vg, threads);
  CTFORGE_EXPECTS(static_cast<std::int64_t>(out.size()) == vg.voxel_count(),
                  fmt::format("back-projection: {} values for a volume of {} voxels", out.size(),
                              vg.voxel_count()));
  detail::parallel_fill(out.data(), vg.voxel_count(), 0.0f, threads);
  back_project_checked(proj, g, vg, threads, false, out.data());
}

}  // namespace ctforge
