#include "recon/fdk_geometry.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"

namespace ctforge::detail {
namespace {

constexpr double k_pi = std::numbers::pi;
constexpr double k_orbit_tolerance = 0.01;  // of the radius (cone); rad (parallel)

vec3 normalized(vec3 a) {
  return (1.0 / norm(a)) * a;
}

// Solves the 3x3 system A x = b by Cramer's rule; false when A is (nearly) singular.
bool solve3(const double A[3][3], const double b[3], double x[3]) {
  auto det3 = [](const double m[3][3]) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
           m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  };
  const double d = det3(A);
  double scale = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) scale = std::max(scale, std::abs(A[i][j]));
  if (!(std::abs(d) > 1e-12 * scale * scale * scale)) return false;
  for (int k = 0; k < 3; ++k) {
    double m[3][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) m[i][j] = j == k ? b[i] : A[i][j];
    x[k] = det3(m) / d;
  }
  return true;
}

// Angle difference wrapped into (-pi, pi].
double wrap(double d) {
  while (d > k_pi) d -= 2 * k_pi;
  while (d <= -k_pi) d += 2 * k_pi;
  return d;
}

// Orthonormal in-plane basis (ex, ey) with ex x ey = a; ex as close to world +x as possible.
void plane_basis(vec3 a, vec3& ex, vec3& ey) {
  vec3 x{1, 0, 0};
  vec3 e = x - dot(x, a) * a;
  if (norm(e) < 1e-6) e = vec3{0, 1, 0} - a.y * a;
  ex = normalized(e);
  ey = cross(a, ex);
}

// Axis normal to the plane spanned by consecutive vectors p[i] (sources about their centroid,
// or ray directions): sum of their cross products, oriented towards +z when it has a z
// component. Returns a zero vector when the vectors are (nearly) collinear.
vec3 fit_axis(const std::vector<vec3>& p, double scale) {
  vec3 n{};
  for (std::size_t i = 0; i + 1 < p.size(); ++i) n = n + cross(p[i], p[i + 1]);
  if (p.size() > 2) n = n + cross(p.back(), p.front());
  // A closed loop can cancel for exactly half-turn sets; fall back to the largest pair.
  if (norm(n) < 1e-9 * scale * scale) {
    for (std::size_t i = 0; i < p.size(); ++i)
      for (std::size_t j = i + 1; j < p.size(); ++j) {
        const vec3 c = cross(p[i], p[j]);
        if (norm(c) > norm(n)) n = dot(c, n) < 0 ? -c : c;
      }
  }
  if (norm(n) < 1e-6 * scale * scale) return {};
  vec3 a = normalized(n);
  if (a.z < -1e-9 || (std::abs(a.z) <= 1e-9 && a.y < 0)) a = -a;
  return a;
}

}  // namespace

namespace {

// What the steps of build() share: the input geometry and the wording of their errors.
struct build_input {
  const geometry& g;
  const std::string& algo;  ///< "fdk" or "fbp", the prefix of every message
  bool cone;
  std::int64_t n;    ///< views
  std::size_t N;     ///< views, as an index
  std::string type;  ///< g.type_name()
  std::string sirt_hint;
};

// The fitted orbit: axis a, in-plane basis (ex, ey), per view the in-plane unit vector from the
// axis towards the source (cone) or against the ray (parallel).
struct orbit_fit {
  vec3 a, ex, ey;
  std::vector<vec3> s_hat;
};

// Cone beam: the axis normal to the plane of the sources, the centre and radius by a Kasa
// circle fit in that plane; every source within k_orbit_tolerance of the radius, radially and
// along the axis. Fills eq's radius and deviations.
orbit_fit fit_cone_orbit(const build_input& in, circular_equivalent& eq) {
  const geometry& g = in.g;
  const std::int64_t n = in.n;
  const std::size_t N = in.N;
  orbit_fit o;
  o.s_hat.resize(N);
  std::vector<double> radius(N, 0), height(N, 0);
  vec3 mean{};
  for (const auto& w : g.views) mean = mean + w.source;
  mean = (1.0 / static_cast<double>(n)) * mean;
  std::vector<vec3> rel(N);
  double scale = 0;
  for (std::size_t i = 0; i < N; ++i) {
    rel[i] = g.views[i].source - mean;
    scale = std::max(scale, norm(rel[i]));
  }
  o.a = scale > 0 ? fit_axis(rel, scale) : vec3{};
  CTFORGE_EXPECTS(norm(o.a) > 0,
                  fmt::format("{}: the sources of this {} geometry lie on a line or a point, "
                              "not on a circular orbit{}",
                              in.algo, in.type, in.sirt_hint));
  plane_basis(o.a, o.ex, o.ey);
  // Kasa circle fit: x^2 + y^2 + D x + E y + F = 0 in least squares.
  double A[3][3] = {}, b[3] = {};
  for (std::size_t i = 0; i < N; ++i) {
    const double x = dot(rel[i], o.ex), y = dot(rel[i], o.ey);
    const double row[3] = {x, y, 1};
    const double rhs = -(x * x + y * y);
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) A[r][c] += row[r] * row[c];
      b[r] += row[r] * rhs;
    }
  }
  double sol[3];
  CTFORGE_EXPECTS(solve3(A, b, sol),
                  fmt::format("{}: cannot fit a circle to the sources of this {} geometry{}",
                              in.algo, in.type, in.sirt_hint));
  const double cx = -0.5 * sol[0], cy = -0.5 * sol[1];
  double h_mean = 0;
  for (std::size_t i = 0; i < N; ++i) h_mean += dot(rel[i], o.a);
  h_mean /= static_cast<double>(n);
  const vec3 centre = mean + cx * o.ex + cy * o.ey + h_mean * o.a;
  double r_mean = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const vec3 d = g.views[i].source - centre;
    height[i] = dot(d, o.a);
    const vec3 in_plane = d - height[i] * o.a;
    radius[i] = norm(in_plane);
    CTFORGE_EXPECTS(radius[i] > 0,
                    fmt::format("{}: view {}'s source lies on the fitted rotation axis{}", in.algo,
                                i, in.sirt_hint));
    o.s_hat[i] = (1.0 / radius[i]) * in_plane;
    r_mean += radius[i];
  }
  r_mean /= static_cast<double>(n);
  eq.radius_mm = r_mean;
  std::size_t worst_r = 0, worst_h = 0;
  for (std::size_t i = 0; i < N; ++i) {
    if (std::abs(radius[i] - r_mean) > std::abs(radius[worst_r] - r_mean)) worst_r = i;
    if (std::abs(height[i]) > std::abs(height[worst_h])) worst_h = i;
  }
  eq.max_radial_deviation_mm = std::abs(radius[worst_r] - r_mean);
  eq.max_axial_deviation_mm = std::abs(height[worst_h]);
  const double tol = k_orbit_tolerance * r_mean;
  CTFORGE_EXPECTS(
      eq.max_radial_deviation_mm <= tol && eq.max_axial_deviation_mm <= tol,
      fmt::format("{}: the sources of this {} geometry are not on a circular orbit: view {} "
                  "is {:.3f} mm from the fitted circle of radius {:.3f} mm and view {} is "
                  "{:.3f} mm from its plane (tolerance {:.3f} mm, 1% of the radius; helical "
                  "and other non-circular trajectories need an iterative method){}",
                  in.algo, in.type, worst_r, eq.max_radial_deviation_mm, r_mean, worst_h,
                  eq.max_axial_deviation_mm, tol, in.sirt_hint));
  return o;
}

// Parallel beam: the axis normal to the ray directions, every ray within k_orbit_tolerance rad
// of perpendicular to it. Fills eq.max_axis_tilt_rad.
orbit_fit fit_parallel_orbit(const build_input& in, circular_equivalent& eq) {
  const geometry& g = in.g;
  const std::size_t N = in.N;
  orbit_fit o;
  o.s_hat.resize(N);
  std::vector<vec3> dirs(N);
  for (std::size_t i = 0; i < N; ++i) dirs[i] = normalized(g.views[i].source);
  o.a = fit_axis(dirs, 1.0);
  CTFORGE_EXPECTS(norm(o.a) > 0,
                  fmt::format("{}: the rays of this {} geometry all have one direction; a "
                              "circular orbit needs views at different angles{}",
                              in.algo, in.type, in.sirt_hint));
  plane_basis(o.a, o.ex, o.ey);
  std::size_t worst = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const double t = std::abs(std::asin(std::clamp(dot(dirs[i], o.a), -1.0, 1.0)));
    if (t > eq.max_axis_tilt_rad) {
      eq.max_axis_tilt_rad = t;
      worst = i;
    }
    o.s_hat[i] = normalized(-(dirs[i] - dot(dirs[i], o.a) * o.a));
  }
  CTFORGE_EXPECTS(
      eq.max_axis_tilt_rad <= k_orbit_tolerance,
      fmt::format("{}: the rays of this {} geometry do not share a rotation axis: "
                  "view {}'s ray is {:.4f} rad from perpendicular to the fitted "
                  "axis (tolerance {} rad){}",
                  in.algo, in.type, worst, eq.max_axis_tilt_rad, k_orbit_tolerance, in.sirt_hint));
  return o;
}

// The source angles, unwrapped (make_circular's convention: s_hat = sin t ex - cos t ey).
std::vector<double> source_angles(const orbit_fit& o) {
  std::vector<double> angle(o.s_hat.size());
  for (std::size_t i = 0; i < angle.size(); ++i) {
    const double raw = std::atan2(dot(o.s_hat[i], o.ex), -dot(o.s_hat[i], o.ey));
    angle[i] = i == 0 ? raw : angle[i - 1] + wrap(raw - angle[i - 1]);
  }
  return angle;
}

// The virtual detector's orientation, pitch and distance: u_hat = ray x a (columns across the
// axis), v = a; the pitches are the means of the real steps (the one closer to u_hat gives the
// columns: a transposed detector has its v there), the columns `oversample` times finer.
struct virtual_detector {
  std::vector<vec3> u_hat;
  bool transposed = false;
  double du = 0, dv = 0, sdd = 0;  ///< signed pitches; source-detector distance (cone)
};

virtual_detector fit_virtual_detector(const build_input& in, const orbit_fit& o,
                                      std::int64_t oversample) {
  const geometry& g = in.g;
  const std::size_t N = in.N;
  const std::int64_t n = in.n;
  virtual_detector d;
  d.u_hat.resize(N);
  double h_sum = 0, w_sum = 0, h_dir = 0, w_dir = 0, sdd_sum = 0;
  std::int64_t transposed_votes = 0;
  for (std::size_t i = 0; i < N; ++i) {
    d.u_hat[i] = cross(-o.s_hat[i], o.a);
    const view_vectors& w = g.views[i];
    const double cu = std::abs(dot(d.u_hat[i], w.u)) / norm(w.u);
    const double cv = std::abs(dot(d.u_hat[i], w.v)) / norm(w.v);
    if (cv > cu) ++transposed_votes;
  }
  d.transposed = 2 * transposed_votes > n;
  for (std::size_t i = 0; i < N; ++i) {
    const view_vectors& w = g.views[i];
    const vec3 h = d.transposed ? w.v : w.u, vv = d.transposed ? w.u : w.v;
    h_sum += norm(h);
    w_sum += norm(vv);
    h_dir += dot(h, d.u_hat[i]);
    w_dir += dot(vv, o.a);
    if (in.cone) {
      // Distance from the source along the central ray (-s_hat) to the detector plane.
      const vec3 nd = cross(w.u, w.v);
      const double den = dot(-o.s_hat[i], nd);
      const double t = dot(w.detector_center - w.source, nd) / den;
      CTFORGE_EXPECTS(std::abs(den) > 1e-6 * norm(nd) && t > 0,
                      fmt::format("{}: view {}'s detector does not face the source (the ray from "
                                  "the source through the rotation axis does not meet it){}",
                                  in.algo, i, in.sirt_hint));
      sdd_sum += t;
    }
  }
  d.du = (h_dir >= 0 ? 1.0 : -1.0) * h_sum / static_cast<double>(n * oversample);
  d.dv = (w_dir >= 0 ? 1.0 : -1.0) * w_sum / static_cast<double>(n);
  d.sdd = in.cone ? sdd_sum / static_cast<double>(n) : 0.0;
  return d;
}

// The image of the real detector on each virtual one: its centre's (a, b) (per view) and the
// largest half-extents of its corner pixels' images about it (over the views).
struct detector_footprint {
  std::vector<vec3> centre_img;
  double half_a = 0, half_b = 0;
};

detector_footprint footprint_on_virtual(const build_input& in, const orbit_fit& o,
                                        const virtual_detector& d) {
  const geometry& g = in.g;
  detector_footprint f;
  f.centre_img.resize(in.N);
  for (std::size_t i = 0; i < in.N; ++i) {
    const vec3 s = g.views[i].source;
    auto image = [&](const vec3& X, double& A, double& B) {
      if (in.cone) {
        const double depth = -dot(X - s, o.s_hat[i]);
        CTFORGE_EXPECTS(depth > 1e-9 * d.sdd,
                        fmt::format("{}: part of view {}'s detector lies behind its source{}",
                                    in.algo, i, in.sirt_hint));
        const vec3 Y = s + (d.sdd / depth) * (X - s);  // on the virtual plane
        A = dot(Y - s, d.u_hat[i]);
        B = dot(Y - s, o.a);
      } else {
        A = dot(X, d.u_hat[i]);
        B = dot(X, o.a);
      }
    };
    double ca, cb;
    image(g.views[i].detector_center, ca, cb);
    f.centre_img[i] = {ca, cb, 0};
    for (int k = 0; k < 4; ++k) {
      const double col = (k & 1) ? static_cast<double>(g.cols - 1) : 0.0;
      const double row = (k & 2) ? static_cast<double>(g.rows - 1) : 0.0;
      double A, B;
      image(pixel_center(g, static_cast<std::int64_t>(i), col, row), A, B);
      f.half_a = std::max(f.half_a, std::abs(A - ca));
      f.half_b = std::max(f.half_b, std::abs(B - cb));
    }
  }
  return f;
}

// The virtual lattice (columns, rows): centred on the image of the real detector's centre with
// the real detector's parity, extended symmetrically by whole pixels until it covers the image
// of every real pixel centre (up to a tenth of a pixel); refused when that is far larger than
// the real detector.
void virtual_size(const build_input& in, const virtual_detector& d, const detector_footprint& f,
                  std::int64_t oversample, std::int64_t& cols_v, std::int64_t& rows_v) {
  const geometry& g = in.g;
  // Real extents along the virtual axes: cols x |du| for an untransposed detector.
  const std::int64_t n_a = d.transposed ? g.rows : g.cols, n_b = d.transposed ? g.cols : g.rows;
  const auto count_for = [](std::int64_t n_real, double half, double pitch) {
    const double base = 0.5 * static_cast<double>(n_real - 1);  // half-extent in pixels
    const double extra = std::ceil(half / std::abs(pitch) - base - 0.1);
    return n_real + 2 * static_cast<std::int64_t>(std::max(0.0, extra));
  };
  cols_v = count_for(oversample * (n_a - 1) + 1, f.half_a, d.du);
  rows_v = count_for(n_b, f.half_b, d.dv);
  CTFORGE_EXPECTS(
      cols_v <= 4 * std::max(g.cols, g.rows) + 16 && rows_v <= 4 * std::max(g.cols, g.rows) + 16,
      fmt::format("{}: the detector of this {} geometry is seen too obliquely to "
                  "resample it for {} ({} x {} pixels would be needed){}",
                  in.algo, in.type, in.algo, cols_v, rows_v, in.sirt_hint));
}

// eq.geom: the circular geometry (orbit set) on the virtual detectors of cols_v x rows_v pixels.
void set_virtual_geometry(const build_input& in, const orbit_fit& o, const virtual_detector& d,
                          const detector_footprint& f, std::int64_t cols_v, std::int64_t rows_v,
                          circular_equivalent& eq) {
  const geometry& g = in.g;
  const bool cone = in.cone;
  geometry& v = eq.geom;
  v.beam = g.beam;
  v.cols = cols_v;
  v.rows = rows_v;
  v.pixel_u_mm = d.du;
  v.pixel_v_mm = d.dv;
  v.views.resize(in.N);
  circular_orbit orbit;
  orbit.source_to_isocenter_mm = cone ? eq.radius_mm : 0;
  orbit.source_to_detector_mm = d.sdd;
  orbit.angles_rad = source_angles(o);
  orbit.offset_u_mm.resize(in.N);
  orbit.offset_v_mm.resize(in.N);
  for (std::size_t i = 0; i < in.N; ++i) {
    const double off_u = f.centre_img[i].x;
    const double off_v = f.centre_img[i].y;
    orbit.offset_u_mm[i] = off_u;
    orbit.offset_v_mm[i] = off_v;
    view_vectors& w = v.views[i];
    if (cone) {
      w.source = g.views[i].source;
      w.detector_center = w.source - d.sdd * o.s_hat[i] + off_u * d.u_hat[i] + off_v * o.a;
    } else {
      w.source = -o.s_hat[i];
      w.detector_center = off_u * d.u_hat[i] + off_v * o.a;
    }
    w.u = d.du * d.u_hat[i];
    w.v = d.dv * o.a;
  }
  v.orbit = std::move(orbit);
  CTFORGE_EXPECTS(!cone || d.sdd > eq.radius_mm,
                  fmt::format("{}: the detector ({:.3f} mm from the sources) lies between the "
                              "sources and the rotation axis ({:.3f} mm); FDK needs it beyond "
                              "the axis{}",
                              in.algo, d.sdd, eq.radius_mm, in.sirt_hint));
  v.validate();
}

// eq.maps (virtual pixel -> input pixel, per view), eq.needs_resampling and eq.integral, from
// five virtual pixels per view (the corners and the centre).
void set_pixel_maps(const geometry& g, circular_equivalent& eq) {
  const geometry& v = eq.geom;
  const std::int64_t cols_v = v.cols, rows_v = v.rows;
  eq.input_cols = g.cols;
  eq.input_rows = g.rows;
  eq.maps.resize(v.views.size());
  const double c0v = 0.5 * static_cast<double>(cols_v - 1),
               r0v = 0.5 * static_cast<double>(rows_v - 1);
  bool identity = cols_v == g.cols && rows_v == g.rows;
  bool integral = true;  // every virtual pixel centre maps onto an input pixel centre
  for (std::size_t i = 0; i < v.views.size(); ++i) {
    const projection_matrix P = compute_projection_matrix(g, static_cast<std::int64_t>(i));
    const view_vectors& w = v.views[i];
    const vec3 U = w.u, V = w.v, Y0 = w.detector_center - c0v * w.u - r0v * w.v;
    kernels::homography& H = eq.maps[i];
    for (int r = 0; r < 3; ++r) {
      const vec3 pr{P[4 * r], P[4 * r + 1], P[4 * r + 2]};
      H.h[3 * r] = dot(pr, U);
      H.h[3 * r + 1] = dot(pr, V);
      H.h[3 * r + 2] = dot(pr, Y0) + P[4 * r + 3];
    }
    for (int k = 0; k < 5; ++k) {
      const double col = k == 4 ? std::floor(c0v) : (k & 1) ? static_cast<double>(cols_v - 1) : 0.0;
      const double row = k == 4 ? std::floor(r0v) : (k & 2) ? static_cast<double>(rows_v - 1) : 0.0;
      const kernels::source_pixel p = kernels::map_pixel(H, col, row);
      identity = identity && std::abs(p.col - col) < 1e-6 && std::abs(p.row - row) < 1e-6;
      integral = integral && std::abs(p.col - std::round(p.col)) < 1e-6 &&
                 std::abs(p.row - std::round(p.row)) < 1e-6;
    }
  }
  eq.needs_resampling = !identity;
  eq.integral = integral;
}

// make_circular_equivalent with virtual columns `oversample` times finer than the real ones.
circular_equivalent build(const geometry& g, const std::string& algo, std::int64_t oversample) {
  g.validate();
  const bool cone = g.beam == beam_kind::cone;
  const std::int64_t n = g.view_count();
  const build_input in{g,
                       algo,
                       cone,
                       n,
                       static_cast<std::size_t>(n),
                       g.type_name(),
                       "; reconstruct it with --algorithm sirt"};
  // The virtual detectors are flat: a cylindrical detector given by view vectors (a flying
  // focal spot's) has no circular equivalent here.
  CTFORGE_EXPECTS(!g.curved(),
                  fmt::format("{}: the {} geometry has a cylindrical detector given by view "
                              "vectors, which FDK / FBP do not resample{}",
                              algo, in.type, in.sirt_hint));
  CTFORGE_EXPECTS(n >= (cone ? 3 : 2),
                  fmt::format("{}: a {} geometry needs at least {} views to determine its "
                              "circular orbit (it has {}){}",
                              algo, in.type, cone ? 3 : 2, n, in.sirt_hint));
  circular_equivalent eq;
  const orbit_fit o = cone ? fit_cone_orbit(in, eq) : fit_parallel_orbit(in, eq);
  const virtual_detector d = fit_virtual_detector(in, o, oversample);
  const detector_footprint f = footprint_on_virtual(in, o, d);
  std::int64_t cols_v = 0, rows_v = 0;
  virtual_size(in, d, f, oversample, cols_v, rows_v);
  set_virtual_geometry(in, o, d, f, cols_v, rows_v, eq);
  set_pixel_maps(g, eq);
  return eq;
}

}  // namespace

circular_equivalent make_circular_equivalent(const geometry& g, const std::string& algo) {
  circular_equivalent eq = build(g, algo, 1);
  // A detector that is only reordered (flipped, transposed) is copied pixel for pixel; one that
  // must be interpolated (turned, tilted, jittered) gets virtual columns at half the pitch, so
  // that the back-projection's own bilinear interpolation does not add a second blur on top of
  // the resampling's (a detector turned by 7 degrees: 26.2 dB against 26.5 dB untilted, 24.3 dB
  // at the full pitch; rows need no such care, they are not filtered).
  if (eq.needs_resampling && !eq.integral) {
    eq = build(g, algo, 2);
    eq.oversample = 2;
  }
  return eq;
}

projection_stack resample(const circular_equivalent& eq, const projection_view& proj, int threads) {
  require_host(proj, "resampling projections");
  CTFORGE_EXPECTS(proj.cols == eq.input_cols && proj.rows == eq.input_rows &&
                      proj.views == static_cast<std::int64_t>(eq.maps.size()),
                  "resample: projections do not match the geometry they were analysed for");
  projection_stack out(proj.views, eq.geom.rows, eq.geom.cols);
  const int nt = resolve_threads(threads);
  const int cols = static_cast<int>(proj.cols), rows = static_cast<int>(proj.rows);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t v = 0; v < proj.views; ++v) {
    const kernels::homography& H = eq.maps[static_cast<std::size_t>(v)];
    const float* img = proj.view(v);
    float* dst = out.view(v);
    for (std::int64_t r = 0; r < out.rows; ++r)
      for (std::int64_t c = 0; c < out.cols; ++c)
        dst[r * out.cols + c] =
            kernels::resample_pixel(H, img, cols, rows, static_cast<int>(c), static_cast<int>(r));
  }
  return out;
}

projection_stack resample_adjoint(const circular_equivalent& eq, const projection_view& virt,
                                  int threads) {
  require_host(virt, "the adjoint of resampling");
  CTFORGE_EXPECTS(virt.cols == eq.geom.cols && virt.rows == eq.geom.rows &&
                      virt.views == static_cast<std::int64_t>(eq.maps.size()),
                  "resample_adjoint: projections do not match the virtual detectors");
  projection_stack out(virt.views, eq.input_rows, eq.input_cols);
  const int nt = resolve_threads(threads);
  const int cols = static_cast<int>(eq.input_cols), rows = static_cast<int>(eq.input_rows);
  const std::int64_t pixels = eq.input_rows * eq.input_cols;
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> acc(static_cast<std::size_t>(pixels));
#pragma omp for schedule(static)
    for (std::int64_t v = 0; v < virt.views; ++v) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const kernels::homography& H = eq.maps[static_cast<std::size_t>(v)];
      const float* src = virt.view(v);
      for (std::int64_t r = 0; r < virt.rows; ++r)
        for (std::int64_t c = 0; c < virt.cols; ++c)
          kernels::resample_pixel_adjoint(H, src[r * virt.cols + c], acc.data(), cols, rows,
                                          static_cast<int>(c), static_cast<int>(r));
      float* dst = out.view(v);
      for (std::int64_t p = 0; p < pixels; ++p) dst[p] = static_cast<float>(acc[static_cast<std::size_t>(p)]);
    }
  }
  return out;
}

recon_options options_on_virtual_detector(const circular_equivalent& eq, const recon_options& opt) {
  recon_options used = opt;
  if (!eq.needs_resampling || eq.oversample <= 1) return used;
  if (opt.cutoff > 0 && opt.cutoff <= 1) used.cutoff = opt.cutoff / eq.oversample;  // else refused
  if (opt.offset_transition_px >= 1)  // else refused later
    used.offset_transition_px = opt.offset_transition_px * eq.oversample;
  return used;
}

}  // namespace ctforge::detail
