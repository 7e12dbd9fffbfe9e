#include "core/parallel_copy.hpp"
#include "ctforge/phantom.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "core/json_reader.hpp"
#include "ctforge/error.hpp"

namespace ctforge {
namespace {

using json = nlohmann::json;

/// An ellipsoid prepared for intersection tests: world -> unit-sphere frame.
struct unit_frame {
  vec3 c;         // centre (mm)
  double cs, sn;  // cos / sin of the rotation about z
  vec3 inv_axes;  // 1 / semi-axes
  double density;
  // Axis-aligned bounding box half-extents (mm).
  double hx, hy, hz;

  explicit unit_frame(const ellipsoid& e) : c(e.center), density(e.density) {
    const double phi = deg_to_rad(e.rotation_deg);
    cs = std::cos(phi);
    sn = std::sin(phi);
    inv_axes = {1.0 / e.semi_axes.x, 1.0 / e.semi_axes.y, 1.0 / e.semi_axes.z};
    // The body x axis points along (cs, sn, 0), the body y axis along (-sn, cs, 0).
    hx = std::hypot(e.semi_axes.x * cs, e.semi_axes.y * sn);
    hy = std::hypot(e.semi_axes.x * sn, e.semi_axes.y * cs);
    hz = e.semi_axes.z;
  }
  /// World vector -> scaled body frame (rotation by -phi, then division by the semi-axes).
  vec3 to_unit(vec3 w) const {
    return {(cs * w.x + sn * w.y) * inv_axes.x, (-sn * w.x + cs * w.y) * inv_axes.y,
            w.z * inv_axes.z};
  }
  /// Interval [t0, t1] of the line point + t dir inside the (closed) ellipsoid; false if the
  /// line misses it or only touches it.
  bool intersect(vec3 point, vec3 dir, double& t0, double& t1) const {
    const vec3 p = to_unit(point - c), d = to_unit(dir);
    // The direction scaled by its largest component m (s = m t): |d|^2 would underflow for an
    // ellipsoid of semi-axes 1e200 mm (and overflow for tiny ones) where the chord is fine.
    const double m = std::max({std::abs(d.x), std::abs(d.y), std::abs(d.z)});
    if (!(m > 0) || !std::isfinite(m)) return false;
    const vec3 dn{d.x / m, d.y / m, d.z / m};
    const double a = dot(dn, dn);  // in [1, 3]
    const double b = dot(p, dn);   // half of the linear coefficient
    const double cc = dot(p, p) - 1.0;
    const double disc = b * b - a * cc;
    if (!(disc > 0)) return false;
    const double r = std::sqrt(disc);
    // Numerically stable roots.
    const double q = b >= 0 ? -(b + r) : -(b - r);
    double sa = q / a, sb = (q != 0) ? cc / q : -sa;
    if (sa > sb) std::swap(sa, sb);
    t0 = sa / m;
    t1 = sb / m;
    return true;
  }
};

std::vector<unit_frame> prepare(const phantom& p) {
  std::vector<unit_frame> f;
  f.reserve(p.ellipsoids.size());
  for (const auto& e : p.ellipsoids) f.emplace_back(e);
  return f;
}

/// Integral along point + t dir for t >= t_min (the whole line by default). `hits`, when
/// given, counts per ellipsoid the lines that cross it.
double integral(const std::vector<unit_frame>& frames, vec3 point, vec3 dir,
                double t_min = -std::numeric_limits<double>::infinity(),
                std::int64_t* hits = nullptr) {
  const double len = norm(dir);
  if (!(len > 0)) return 0.0;
  double sum = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const unit_frame& f = frames[i];
    double t0, t1;
    if (!f.intersect(point, dir, t0, t1)) continue;
    const double chord = std::max(0.0, t1 - std::max(t0, t_min));
    sum += f.density * chord * len;
    if (hits && chord > 0) ++hits[i];
  }
  return sum;
}

using detail::vec_json;
using reader = detail::json_reader;

/// splitmix64 step: a well-mixed 64-bit value from a 64-bit state.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

phantom shepp_logan_phantom(double size_mm) {
  CTFORGE_EXPECTS(
      std::isfinite(size_mm) && size_mm > 0,
      fmt::format("Shepp-Logan phantom: size must be positive and finite (got {} mm)", size_mm));
  // Kak & Slaney 3D ellipsoids in unit coordinates: centre, semi-axes, rotation about z (deg),
  // contrast of the "modified" (Toft) phantom; density = contrast * 0.1 /mm.
  struct row {
    double x, y, z, a, b, c, phi, contrast;
  };
  static constexpr row table[] = {
      {0, 0, 0, 0.69, 0.92, 0.90, 0, 1.0},
      {0, 0, 0, 0.6624, 0.874, 0.88, 0, -0.8},
      {-0.22, 0, -0.25, 0.41, 0.16, 0.21, 108, -0.2},
      {0.22, 0, -0.25, 0.31, 0.11, 0.22, 72, -0.2},
      {0, 0.35, -0.25, 0.21, 0.25, 0.50, 0, 0.1},
      {0, 0.1, -0.25, 0.046, 0.046, 0.046, 0, 0.1},
      {-0.08, -0.65, -0.25, 0.046, 0.023, 0.02, 0, 0.1},
      {0.06, -0.65, -0.25, 0.046, 0.023, 0.02, 90, 0.1},
      {0.06, -0.105, 0.625, 0.056, 0.04, 0.10, 90, 0.1},
      {0, 0.1, 0.625, 0.056, 0.056, 0.10, 0, -0.1},
  };
  const double s = 0.5 * size_mm;
  phantom p;
  for (const row& r : table)
    p.ellipsoids.push_back(
        {{s * r.x, s * r.y, s * r.z}, {s * r.a, s * r.b, s * r.c}, r.phi, 0.1 * r.contrast});
  return p;
}

phantom phantom_from_json(std::string_view text, std::string_view origin) {
  reader r{std::string(origin)};
  const json j = r.parse(text);
  if (!j.is_object()) r.fail("", "expected a JSON object");
  r.known_keys(j, "", {"ellipsoids"});
  auto it = j.find("ellipsoids");
  if (it == j.end()) r.fail("ellipsoids", "missing");
  if (!it->is_array() || it->empty())
    r.fail("ellipsoids", "expected a non-empty list of ellipsoids");
  phantom p;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& e = (*it)[i];
    const std::string base = fmt::format("ellipsoids[{}]", i);
    if (!e.is_object()) r.fail(base, "expected an object");
    r.known_keys(e, base, {"center", "semi_axes", "density", "rotation_deg"});
    auto need = [&](const char* key) -> const json& {
      auto f = e.find(key);
      if (f == e.end()) r.fail(base + "." + key, "missing");
      return *f;
    };
    ellipsoid el;
    el.center = r.triple(need("center"), base + ".center", false);
    el.semi_axes = r.triple(need("semi_axes"), base + ".semi_axes", true);
    el.density = r.number(need("density"), base + ".density");
    if (auto f = e.find("rotation_deg"); f != e.end())
      el.rotation_deg = r.number(*f, base + ".rotation_deg");
    p.ellipsoids.push_back(el);
  }
  return p;
}

std::string phantom_to_json(const phantom& p) {
  json list = json::array();
  for (const auto& e : p.ellipsoids)
    list.push_back({{"center", vec_json(e.center)},
                    {"semi_axes", vec_json(e.semi_axes)},
                    {"rotation_deg", e.rotation_deg},
                    {"density", e.density}});
  json j;
  j["ellipsoids"] = list;
  return j.dump(2);
}

double line_integral(const phantom& p, vec3 point, vec3 dir) {
  return integral(prepare(p), point, dir);
}

void require_representable(const phantom& p, std::string_view origin) {
  for (std::size_t i = 0; i < p.ellipsoids.size(); ++i) {
    const ellipsoid& e = p.ellipsoids[i];
    if (e.density == 0) continue;
    const vec3 a = e.semi_axes;
    const double axis = std::max({std::abs(a.x), std::abs(a.y), std::abs(a.z)});
    const double rho = std::abs(e.density);
    // The longest chord is the longest diameter: the largest line integral through it.
    const double peak = 2.0 * axis * rho;
    const bool over = !(peak <= std::numeric_limits<float>::max());
    const bool under = peak < std::numeric_limits<float>::min();
    if (!over && !under) continue;
    // Blame the field further from everyday magnitudes (semi-axes ~ 1 mm, densities ~ 1 / mm).
    const bool axes = std::abs(std::log10(axis)) >= std::abs(std::log10(rho));
    throw usage_error(fmt::format(
        "{}: field 'ellipsoids[{}].{}': line integrals through ellipsoid {} reach {:g} (2 x "
        "semi-axis {:g} mm x |density| {:g} / mm), {} single precision's {} ({:g}): its "
        "projections would {}",
        origin, i, axes ? "semi_axes" : "density", i, peak, axis, rho, over ? "beyond" : "below",
        over ? "largest value" : "smallest normal value",
        over ? static_cast<double>(std::numeric_limits<float>::max())
             : static_cast<double>(std::numeric_limits<float>::min()),
        over ? "overflow to infinity" : "vanish by underflow"));
  }
}

projection_stack project_analytic(const phantom& p, const geometry& g, int threads,
                                  analytic_report* report) {
  g.validate();
  const auto frames = prepare(p);
  projection_stack out(g.view_count(), g.rows, g.cols);
  const std::int64_t n_lines = g.view_count() * g.rows;
  const bool cone = g.beam == beam_kind::cone;
  std::vector<std::int64_t> hits(report ? frames.size() : 0, 0);
#pragma omp parallel num_threads(detail::resolve_threads(threads))
  {
    std::vector<std::int64_t> mine(hits.size(), 0);
    std::int64_t* h = report ? mine.data() : nullptr;
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t line = 0; line < n_lines; ++line) {
      const std::int64_t v = line / g.rows, r = line % g.rows;
      const vec3 s = g.views[static_cast<std::size_t>(v)].source;
      for (std::int64_t c = 0; c < g.cols; ++c) {
        const vec3 px = pixel_center(g, v, static_cast<double>(c), static_cast<double>(r));
        // Cone beam: the half-line from the source through the pixel (nothing behind the
        // source); parallel beam: the whole line through the pixel along the ray direction.
        out.at(v, r, c) = static_cast<float>(
            cone ? integral(frames, s, px - s, 0.0, h)
                 : integral(frames, px, s, -std::numeric_limits<double>::infinity(), h));
      }
    }
#pragma omp critical
    for (std::size_t i = 0; i < hits.size(); ++i) hits[i] += mine[i];
  }
  if (report) report->rays_hit = std::move(hits);
  return out;
}

volume voxelize(const phantom& p, const volume_geometry& vg, int supersample, int threads) {
  vg.validate();
  CTFORGE_EXPECTS(supersample >= 1 && supersample <= 64,
                  fmt::format("voxelize: supersample must be in [1, 64] (got {})", supersample));
  const auto frames = prepare(p);
  volume out(vg);
  const int S = supersample;
  const std::int64_t nx = vg.nx, ny = vg.ny, nz = vg.nz;
  const double dx = vg.spacing_mm[0], dy = vg.spacing_mm[1], dz = vg.spacing_mm[2];
  // Sub-point offsets within a voxel, as fractions of the spacing: (s + 1/2) / S - 1/2.
  std::vector<double> off(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) off[static_cast<std::size_t>(s)] = (s + 0.5) / S - 0.5;
  const double weight = 1.0 / (static_cast<double>(S) * S * S);

#pragma omp parallel num_threads(detail::resolve_threads(threads))
  {
    // Difference array over the row: +rho at the first voxel whose sub-point enters the
    // ellipsoid, -rho after the last one; a prefix sum gives the per-voxel sum.
    std::vector<double> diff(static_cast<std::size_t>(nx + 1));
    std::vector<const unit_frame*> hits;
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t row = 0; row < ny * nz; ++row) {
      const std::int64_t k = row / ny, j = row % ny;
      const vec3 centre = vg.voxel_center(0, static_cast<double>(j), static_cast<double>(k));
      // Ellipsoids whose bounding box meets this row's slab.
      hits.clear();
      for (const auto& f : frames)
        if (std::abs(centre.y - f.c.y) <= f.hy + 0.5 * dy &&
            std::abs(centre.z - f.c.z) <= f.hz + 0.5 * dz)
          hits.push_back(&f);
      if (hits.empty()) continue;
      std::fill(diff.begin(), diff.end(), 0.0);
      bool any = false;
      for (int sz = 0; sz < S; ++sz)
        for (int sy = 0; sy < S; ++sy) {
          const vec3 lp{centre.x, centre.y + off[static_cast<std::size_t>(sy)] * dy,
                        centre.z + off[static_cast<std::size_t>(sz)] * dz};
          for (const unit_frame* f : hits) {
            double t0, t1;  // x = lp.x + t along the row (dir (1, 0, 0) mm)
            if (!f->intersect(lp, {1, 0, 0}, t0, t1)) continue;
            for (int sx = 0; sx < S; ++sx) {
              // Voxel i's sub-point is at t = i dx + off dx: inside when t0 <= t <= t1.
              const double o = off[static_cast<std::size_t>(sx)] * dx;
              const double lo = std::ceil((t0 - o) / dx), hi = std::floor((t1 - o) / dx);
              const double a = std::max(lo, 0.0), b = std::min(hi, static_cast<double>(nx - 1));
              if (a > b) continue;
              diff[static_cast<std::size_t>(a)] += f->density;
              diff[static_cast<std::size_t>(b) + 1] -= f->density;
              any = true;
            }
          }
        }
      if (!any) continue;
      double run = 0;
      float* dst = out.data.data() + row * nx;
      for (std::int64_t i = 0; i < nx; ++i) {
        run += diff[static_cast<std::size_t>(i)];
        dst[i] = static_cast<float>(run * weight);
      }
    }
  }
  return out;
}

noise_report add_noise(projection_stack& proj, const noise_options& opt) {
  CTFORGE_EXPECTS(std::isfinite(opt.incident_photons) && opt.incident_photons > 0,
                  fmt::format("noise: incident photon count must be positive and finite (got {})",
                              opt.incident_photons));
  CTFORGE_EXPECTS(std::isfinite(opt.electronic_sigma) && opt.electronic_sigma >= 0,
                  fmt::format("noise: electronic sigma must be >= 0 and finite (got {})",
                              opt.electronic_sigma));
  CTFORGE_EXPECTS(proj.size() == static_cast<std::int64_t>(proj.data.size()),
                  "noise: projection stack size does not match its dimensions");
  for (std::int64_t i = 0; i < proj.size(); ++i)
    if (!std::isfinite(proj.data[static_cast<std::size_t>(i)])) {
      const std::int64_t per_view = proj.rows * proj.cols;
      CTFORGE_EXPECTS(false, fmt::format("noise: projection value at view {}, row {}, col {} is "
                                         "not finite",
                                         i / per_view, (i % per_view) / proj.cols, i % proj.cols));
    }
  const double i0 = opt.incident_photons;
  const std::int64_t per_view = proj.rows * proj.cols;
  std::int64_t clamped = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : clamped)
  for (std::int64_t v = 0; v < proj.views; ++v) {
    // One generator per view, seeded from (seed, view): the noise does not depend on how views
    // are spread over threads.
    std::mt19937_64 gen(splitmix64(opt.seed ^ splitmix64(static_cast<std::uint64_t>(v))));
    std::normal_distribution<double> gauss(0.0,
                                           opt.electronic_sigma > 0 ? opt.electronic_sigma : 1.0);
    float* data = proj.view(v);
    for (std::int64_t i = 0; i < per_view; ++i) {
      const double mean = i0 * std::exp(-static_cast<double>(data[i]));
      double n = 0;
      if (mean > 0) {
        // std::poisson_distribution<long long> is exact for any mean that fits; beyond 2^62
        // the count is indistinguishable from its mean.
        if (mean < 4.0e18) {
          std::poisson_distribution<long long> pois(mean);
          n = static_cast<double>(pois(gen));
        } else {
          n = mean;
        }
      }
      if (opt.electronic_sigma > 0) n += gauss(gen);
      if (!(n > 0)) {
        n = 0.5;
        ++clamped;
      }
      data[i] = static_cast<float>(-std::log(n / i0));
    }
  }
  return {clamped};
}

}  // namespace ctforge
