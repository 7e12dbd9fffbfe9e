// The helical cone-beam geometry (type "helical"): its views and its coverage along z.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/detector_frame.hpp"
#include "ctforge/error.hpp"
#include "ctforge/geometry.hpp"

namespace ctforge {

namespace {

constexpr double k_two_pi = 2 * 3.14159265358979323846;

// +1 when the angles increase along the scan, -1 when they decrease (one view: +1).
double scan_sign(const std::vector<double>& angles) {
  return angles.size() > 1 && angles.back() < angles.front() ? -1.0 : 1.0;
}

}  // namespace

double helical_orbit::z_at(double t) const {
  const double t0 = angles_rad.empty() ? 0.0 : angles_rad.front();
  return z_start_mm + pitch_mm_per_turn * scan_sign(angles_rad) * (t - t0) / k_two_pi;
}

geometry make_helical_geometry(std::int64_t cols, std::int64_t rows, double du, double dv,
                               double sid, double sdd, std::vector<double> angles,
                               double pitch_mm_per_turn, double z_start_mm, double offset_u_mm,
                               double offset_v_mm, detector_shape shape) {
  CTFORGE_EXPECTS(
      sid > 0 && sdd > sid,
      fmt::format("helical geometry: need source_to_detector_mm ({}) > source_to_isocenter_mm "
                  "({}) > 0",
                  sdd, sid));
  geometry g;
  g.beam = beam_kind::cone;
  g.shape = shape;
  g.cols = cols;
  g.rows = rows;
  g.pixel_u_mm = du;
  g.pixel_v_mm = dv;
  helical_orbit h;
  h.source_to_isocenter_mm = sid;
  h.source_to_detector_mm = sdd;
  h.angles_rad = std::move(angles);
  h.pitch_mm_per_turn = pitch_mm_per_turn;
  h.z_start_mm = z_start_mm;
  h.offset_u_mm = offset_u_mm;
  h.offset_v_mm = offset_v_mm;
  g.views.resize(h.angles_rad.size());
  for (std::size_t i = 0; i < h.angles_rad.size(); ++i) {
    const double t = h.angles_rad[i], c = std::cos(t), s = std::sin(t);
    const vec3 uh{c, s, 0}, vh{0, 0, 1}, nh{-s, c, 0};  // nh: source towards the axis
    const double z = h.z_at(t);
    view_vectors& w = g.views[i];
    w.source = {sid * s, -sid * c, z};
    if (shape == detector_shape::cylindrical) {  // as for the circular cone
      detail::place_curved_detector(w, nh, uh, vh, sdd, offset_u_mm, offset_v_mm, du, dv);
    } else {
      w.detector_center = w.source + sdd * nh + offset_u_mm * uh + offset_v_mm * vh;
      w.u = du * uh;
      w.v = dv * vh;
    }
  }
  g.helix = std::move(h);
  g.validate();
  return g;
}

helical_coverage helical_coverage_of(const geometry& g) {
  CTFORGE_EXPECTS(
      g.helix.has_value(),
      fmt::format("helical coverage: the geometry is '{}', not 'helical'", g.type_name()));
  const helical_orbit& h = *g.helix;
  helical_coverage c;
  const double sid = h.source_to_isocenter_mm, sdd = h.source_to_detector_mm;
  const double collimation = static_cast<double>(g.rows) * std::abs(g.pixel_v_mm) * sid / sdd;
  c.pitch_factor = h.pitch_mm_per_turn / collimation;
  const double z0 = h.z_at(h.angles_rad.front()), z1 = h.z_at(h.angles_rad.back());
  c.source_z_min_mm = std::min(z0, z1);
  c.source_z_max_mm = std::max(z0, z1);
  // A point on the axis at height z is on the rows (outermost pixel centres) while the source
  // height lies in [z - a_hi, z - a_lo]; it needs that for half a turn, pi |pitch| / (2 pi) mm.
  const double half = 0.5 * static_cast<double>(g.rows - 1) * std::abs(g.pixel_v_mm);
  const double a_lo = (h.offset_v_mm - half) * sid / sdd, a_hi = (h.offset_v_mm + half) * sid / sdd;
  const double half_turn = 0.5 * std::abs(h.pitch_mm_per_turn);
  c.full_z_min_mm = c.source_z_min_mm + half_turn + a_lo;
  c.full_z_max_mm = c.source_z_max_mm - half_turn + a_hi;
  if (a_hi - a_lo < half_turn) {  // no height is seen for half a turn
    c.full_z_min_mm = c.source_z_max_mm;
    c.full_z_max_mm = c.source_z_min_mm;
  }
  return c;
}

}  // namespace ctforge
