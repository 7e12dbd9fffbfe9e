// Acquisition geometry.
//
// Convention (see docs/geometry.md):
//  * World frame in mm, right-handed, rotation axis = +z. Volumes are indexed [z][y][x].
//  * Every geometry reduces to per-view vectors: source (cone) or ray direction (parallel),
//    detector centre, and the steps u (between adjacent columns) and v (between adjacent rows),
//    pixel size included. Pixel (col, row) centre =
//        detector_center + (col - (cols-1)/2) * u + (row - (rows-1)/2) * v.
//  * Circular "cone" at view angle t (radians internally, degrees in files):
//        source          = ( SID sin t, -SID cos t, 0)
//        detector_center = (-(SDD-SID) sin t, (SDD-SID) cos t, 0) + off_u * u_hat + off_v * v_hat
//        u = (cos t, sin t, 0) * du,   v = (0, 0, 1) * dv
//    (the convention of ASTRA's cone -> cone_vec conversion).
//  * Circular "parallel": ray direction (-sin t, cos t, 0), detector centre at the origin
//    (plus offsets), same u and v.
//  * A fan-beam / 2D scan is a geometry with rows = 1.
//  * Circular "cone" with "detector": {"shape": "cylindrical"}: the detector is a cylinder
//    centred on the source, axis along v (the rotation axis), radius SDD; the view vectors
//    above are its tangent frame at the centre pixel (with an offset off_u, the centre pixel
//    sits at fan angle off_u / SDD and u is the tangent there). Columns are equally spaced in
//    arc length (angular step du / SDD), rows are flat along v. pixel_center() and
//    project_to_detector() hold the curved mapping; projection matrices do not exist for it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ctforge/vec3.hpp"

namespace ctforge {

enum class beam_kind { cone, parallel };

/// Detector surface: flat (a plane, the default) or cylindrical (curved, cone beams only).
enum class detector_shape { flat, cylindrical };

/// One view of a vector geometry. All positions in mm, world frame.
struct view_vectors {
  vec3 source;           ///< cone: source position (mm); parallel: ray direction (non-zero)
  vec3 detector_center;  ///< detector centre (mm), see pixel-centre formula above
  vec3 u;                ///< step between adjacent columns (mm), pixel width included
  vec3 v;                ///< step between adjacent rows (mm), pixel height included
};

/// Parameters of a circular orbit; present for the types "cone" and "parallel".
/// FDK and parallel FBP need them (cosine and Parker weights, angular spacing).
struct circular_orbit {
  double source_to_isocenter_mm = 0;  ///< SID, cone only (> 0)
  double source_to_detector_mm = 0;   ///< SDD, cone only (> SID)
  std::vector<double> angles_rad;     ///< view angles (radians), one per view
  std::vector<double> offset_u_mm;    ///< detector offset along u_hat per view (mm)
  std::vector<double> offset_v_mm;    ///< detector offset along v_hat per view (mm)
};

/// Parameters of a helical cone-beam orbit (type "helical"): the source turns about the z axis
/// as in the circular "cone" while source and detector move along z, by pitch_mm_per_turn per
/// full turn. View i's source sits at z_i = z_start_mm + pitch_mm_per_turn |t_i - t_0| / (2 pi)
/// and its detector centre at the same height (plus offset_v); the rest as for "cone".
struct helical_orbit {
  double source_to_isocenter_mm = 0;  ///< SID (> 0)
  double source_to_detector_mm = 0;   ///< SDD (> SID)
  std::vector<double> angles_rad;     ///< view angles (radians), strictly monotonic
  double pitch_mm_per_turn = 0;       ///< table feed per turn (mm); its sign: direction along z
  double z_start_mm = 0;              ///< source height at the first view (mm)
  double offset_u_mm = 0;             ///< detector offset along u_hat (mm; arc length if curved)
  double offset_v_mm = 0;             ///< detector offset along z (mm)
  /// Source height (mm) at angle t (radians), on the helix through the views.
  double z_at(double t) const;
};

struct geometry {
  beam_kind beam = beam_kind::cone;
  std::int64_t cols = 0;  ///< detector columns (>= 1)
  std::int64_t rows = 0;  ///< detector rows (>= 1); 1 = fan beam / 2D
  double pixel_u_mm = 1;  ///< nominal pixel pitch along u (circular types; |u| for vectors)
  double pixel_v_mm = 1;  ///< nominal pixel pitch along v
  std::vector<view_vectors> views;
  std::optional<circular_orbit> orbit;  ///< set for "cone" and "parallel"
  std::optional<helical_orbit> helix;   ///< set for "helical" (orbit is then empty)
  /// JSON "detector.shape". cylindrical: curved detector of radius SDD centred on the source
  /// ("cone" and "helical"; "cone_vec": see make_vec_geometry; see the file comment).
  detector_shape shape = detector_shape::flat;

  bool curved() const { return shape == detector_shape::cylindrical; }

  std::int64_t view_count() const { return static_cast<std::int64_t>(views.size()); }
  /// "cone", "parallel", "helical", "cone_vec" or "parallel_vec".
  std::string type_name() const;
  /// Throws usage_error naming the offending field when the geometry is invalid.
  void validate() const;
};

/// Circular cone beam. Angles in radians; offsets (mm) either empty, one value, or one per view.
/// `shape` cylindrical: curved detector (offset_u is then an arc length, mm).
geometry make_cone_geometry(std::int64_t cols, std::int64_t rows, double pixel_u_mm,
                            double pixel_v_mm, double sid_mm, double sdd_mm,
                            std::vector<double> angles_rad, std::vector<double> offset_u_mm = {},
                            std::vector<double> offset_v_mm = {},
                            detector_shape shape = detector_shape::flat);
/// Circular parallel beam. Angles in radians.
geometry make_parallel_geometry(std::int64_t cols, std::int64_t rows, double pixel_u_mm,
                                double pixel_v_mm, std::vector<double> angles_rad,
                                std::vector<double> offset_u_mm = {},
                                std::vector<double> offset_v_mm = {});
/// Helical cone beam (see helical_orbit). Angles in radians, strictly monotonic; `shape`
/// cylindrical: curved detector centred on the source, as for the circular cone.
geometry make_helical_geometry(std::int64_t cols, std::int64_t rows, double pixel_u_mm,
                               double pixel_v_mm, double sid_mm, double sdd_mm,
                               std::vector<double> angles_rad, double pitch_mm_per_turn,
                               double z_start_mm = 0, double offset_u_mm = 0,
                               double offset_v_mm = 0, detector_shape shape = detector_shape::flat);
/// A helical scan's figures (ctforge info): the pitch factor (feed per turn over the detector's
/// height at the isocentre, rows x pitch_v x SID / SDD), the source's z range, and the range of
/// heights on the rotation axis that the detector rows see over at least half a turn (what a
/// helical reconstruction needs; full_z_min_mm > full_z_max_mm when no height is seen that
/// long: a pitch too large for the rows, or a scan shorter than half a turn). usage_error for
/// a geometry that is not "helical".
struct helical_coverage {
  double pitch_factor = 0;
  double source_z_min_mm = 0, source_z_max_mm = 0;
  double full_z_min_mm = 0, full_z_max_mm = 0;
};
helical_coverage helical_coverage_of(const geometry& g);
/// Vector geometries: explicit per-view vectors. `shape` cylindrical (cone beams): each view's
/// detector is a cylinder about its source with its axis along z, the view vectors its tangent
/// frame at the centre pixel (v along z; u horizontal, perpendicular to the horizontal direction
/// from the source to detector_center), of radius the horizontal distance between the two.
geometry make_vec_geometry(beam_kind beam, std::int64_t cols, std::int64_t rows,
                           std::vector<view_vectors> views,
                           detector_shape shape = detector_shape::flat);

/// `count` angles from `start` in steps of `step` (radians).
std::vector<double> angle_range(double start, double step, std::int64_t count);
inline constexpr double deg_to_rad(double d) {
  return d * 3.14159265358979323846 / 180.0;
}
inline constexpr double rad_to_deg(double r) {
  return r * 180.0 / 3.14159265358979323846;
}

/// Parses the JSON form (docs/geometry.md, "Geometry JSON"). `origin` names the source (a file
/// name) in error messages. Throws usage_error naming the field on invalid input.
geometry geometry_from_json(std::string_view text, std::string_view origin = "geometry");
/// Reads a geometry JSON file. Throws error when the file cannot be read.
geometry load_geometry(const std::string& path);
/// JSON text that geometry_from_json reads back into an identical geometry.
std::string geometry_to_json(const geometry& g);

/// Projection matrix of one view, computed in double precision.
/// For a world point x (mm): [p0, p1, p2] = M * [x, y, z, 1]; then
///   col = p0 / p2, row = p1 / p2   (0-based pixel indices, pixel centres at integers)
/// and p2 is the depth of x along the detector normal as a fraction of the depth of the
/// detector plane (cone: 1 on the detector, 0 at the source; parallel: p2 == 1).
/// Row-major 3x4. Flat detectors only: a cylindrical detector's mapping is not projective, and
/// asking for its matrix throws usage_error naming 'detector.shape' (use project_to_detector).
using projection_matrix = std::array<double, 12>;
projection_matrix compute_projection_matrix(const geometry& g, std::int64_t view);
std::vector<projection_matrix> compute_projection_matrices(const geometry& g);

/// World position (mm) of the centre of pixel (col, row) of a view (flat or cylindrical).
vec3 pixel_center(const geometry& g, std::int64_t view, double col, double row);

/// Where a world point x (mm) lands on the detector of a view: pixel indices (col, row), pixel
/// centres at integers, and w: flat detectors the depth fraction of compute_projection_matrix
/// (cone: 1 on the detector plane, 0 at the source; parallel: 1); cylindrical detectors the
/// in-plane distance from the source over SDD (1 on the cylinder), 0 at or behind the source
/// plane. col and row are meaningful only where w > 0.
struct detector_coords {
  double col = 0, row = 0, w = 0;
};
detector_coords project_to_detector(const geometry& g, std::int64_t view, vec3 x);

/// The frame of a cylindrical detector's view (see math/cylinder.hpp): source (mm), unit
/// vectors n (in-plane, source towards the centre pixel), t (tangent, along u) and v_hat,
/// radius (mm, = SDD), height hc (mm) of the centre pixel above the source along v_hat, and
/// the pitches du, dv (mm). usage_error for a flat detector.
struct cylinder_frame {
  vec3 source, n, t, v_hat;
  double radius = 0, hc = 0, du = 0, dv = 0;
};
cylinder_frame cylinder_frame_of(const geometry& g, std::int64_t view);

/// "flat" or "cylindrical".
const char* to_string(detector_shape s);

}  // namespace ctforge
