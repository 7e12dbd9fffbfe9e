// The view vectors of a cylindrical detector on a circular or helical orbit (shared by the
// geometry makers of src/core/geometry.cpp and helical_geometry.cpp).
#pragma once

#include <cmath>

#include "ctforge/geometry.hpp"

namespace ctforge::detail {

/// Fills w's detector centre and steps for a cylinder of radius sdd about w.source: the centre
/// pixel at arc length off_u from the central ray nh (source towards the axis), u the tangent
/// there (along uh at off_u = 0), v = dv vh, the centre raised by off_v along vh.
inline void place_curved_detector(view_vectors& w, vec3 nh, vec3 uh, vec3 vh, double sdd,
                                  double off_u, double off_v, double du, double dv) {
  const double g0 = off_u / sdd, cg = std::cos(g0), sg = std::sin(g0);
  w.detector_center = w.source + sdd * (cg * nh + sg * uh) + off_v * vh;
  w.u = du * (cg * uh - sg * nh);
  w.v = dv * vh;
}

}  // namespace ctforge::detail
