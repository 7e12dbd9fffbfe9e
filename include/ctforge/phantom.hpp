// Analytic phantoms made of ellipsoids, their exact line integrals (the oracle for projectors)
// and their voxelization (the oracle for reconstructions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/vec3.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// Ellipsoid in mm; rotation_deg rotates it about +z (counter-clockwise seen from +z).
/// density: linear attenuation coefficient in 1/mm; densities add where ellipsoids overlap.
struct ellipsoid {
  vec3 center;
  vec3 semi_axes;
  double rotation_deg = 0;
  double density = 0;
};

struct phantom {
  std::vector<ellipsoid> ellipsoids;
};

/// 3D Shepp-Logan (Kak & Slaney ellipsoids) with the higher-contrast "modified" densities
/// scaled by 0.1/mm, so the brain region has the attenuation of water (0.02/mm) and the skull
/// 0.1/mm. `size_mm` is the edge of the cube [-size/2, size/2]^3 the unit phantom is scaled to.
phantom shepp_logan_phantom(double size_mm);

/// Parses {"ellipsoids": [{"center": [x,y,z], "semi_axes": [a,b,c], "rotation_deg": phi,
/// "density": rho}, ...]}. Throws usage_error naming the field.
phantom phantom_from_json(std::string_view text, std::string_view origin = "phantom");
std::string phantom_to_json(const phantom& p);

/// Exact line integral of the phantom along the segment through `a` in direction `dir`
/// (infinite line). `dir` need not be normalised; the result is in (1/mm)*mm = unitless.
double line_integral(const phantom& p, vec3 point, vec3 dir);

/// Usage error unless every ellipsoid's line integrals fit single precision: the longest chord
/// times |density| must lie within [FLT_MIN, FLT_MAX] (else the projections overflow to
/// infinity or vanish by underflow). Names "<origin>: field 'ellipsoids[i].semi_axes'" (or
/// '.density', whichever is further from everyday magnitudes). Density 0 is always fine.
void require_representable(const phantom& p, std::string_view origin);

/// What project_analytic saw: per ellipsoid, the rays through pixel centres that cross it
/// (0: it lies outside the field of view, or between the rays).
struct analytic_report {
  std::vector<std::int64_t> rays_hit;
};

/// Exact projections of the phantom for any geometry: one ray through each pixel centre.
/// Multithreaded (threads = 0: all cores). `report`, when given, receives analytic_report.
projection_stack project_analytic(const phantom& p, const geometry& g, int threads = 0,
                                  analytic_report* report = nullptr);

/// Voxelization: mean density over each voxel, estimated with `supersample`^3 points per voxel.
volume voxelize(const phantom& p, const volume_geometry& vg, int supersample = 4, int threads = 0);

/// Poisson (+ optional Gaussian electronic) noise on line integrals.
struct noise_options {
  double incident_photons = 1e5;  ///< I0, photons per pixel for an unattenuated ray (> 0)
  double electronic_sigma = 0;    ///< std-dev of additive Gaussian noise, in photon counts
  std::uint64_t seed = 1;         ///< same seed, same noise (independent of thread count)
};
struct noise_report {
  std::int64_t non_positive = 0;  ///< pixels whose noisy count was <= 0 (clamped to 0.5 photon)
};
/// Replaces each line integral p by -log(N / I0), N ~ Poisson(I0 exp(-p)) + N(0, sigma^2).
/// Counts <= 0 are clamped to 0.5 photon and counted in the report; never produces NaN.
noise_report add_noise(projection_stack& proj, const noise_options& opt);

}  // namespace ctforge
