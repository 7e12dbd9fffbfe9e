// Host helpers that turn a ctforge::geometry into the per-view arithmetic data of src/math/:
// float projection matrices (kernels::proj_matrix) and the cylindrical detector mappings
// (kernels::cyl_map). They need the geometry type, so they live in core, above math.
#pragma once

#include <vector>

#include "ctforge/geometry.hpp"
#include "math/cylinder.hpp"
#include "math/geometry.hpp"

namespace ctforge::kernels {

/// Float matrices for every view of a geometry.
std::vector<proj_matrix> float_matrices(const ctforge::geometry& g);

/// Host helpers: the mappings of every view of a cylindrical-detector geometry, computed from
/// ctforge::cylinder_frame_of in double (usage_error for a flat detector, or for view vectors
/// that are not those of a circular orbit about z).
std::vector<cyl_map_d> cylinder_maps_d(const ctforge::geometry& g);
std::vector<cyl_map> cylinder_maps(const ctforge::geometry& g);

}  // namespace ctforge::kernels
