// Internal pieces of the rotation-centre estimate shared by center_of_rotation.cpp (opposite-view
// registration) and center_fourier.cpp (Vo's method, find_center_of_rotation).
#pragma once

#include <vector>

#include "ctforge/formats.hpp"

namespace ctforge::detail {

/// One estimate of the axis column per pair of opposite views (sorted ascending), by the
/// registration described at estimate_center_of_rotation. Throws usage_error for geometries or
/// scans it cannot use, ctforge::error when no pair holds structure.
std::vector<double> registration_estimates(const projection_view& proj, const geometry& g);

}  // namespace ctforge::detail
