// The CPU FDK / FBP backend (src/recon/fdk.cpp); its back-projection is detail::backproject
// (recon/backproject.hpp).
#pragma once

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"
#include "math/cylinder.hpp"
#include "math/geometry.hpp"
#include "recon/fdk_setup.hpp"

namespace ctforge::detail {

/// FDK / FBP on the CPU of a circular geometry `g` after make_fdk_setup (pre-weighting, ramp
/// filter, back-projection: the fast loop, or opt.reference's double-precision one). Reports
/// progress through opt.progress and checks opt.cancel.
volume fdk_reconstruct_cpu(const projection_view& proj, const geometry& g,
                           const volume_geometry& vg, const recon_options& opt,
                           const fdk_setup& setup);

}  // namespace ctforge::detail
