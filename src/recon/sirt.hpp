// SIRT (src/recon/sirt.cpp) and CGLS (src/recon/cgls.cpp), reached through ctforge::reconstruct.
#pragma once

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::detail {

/// Validates the SIRT options (iterations >= 1, relaxation in (0, 2)) and the projections
/// against the geometry; throws usage_error naming the option or mismatch.
void validate_sirt(const projection_view& proj, const geometry& g, const recon_options& opt);

/// SIRT of `vg` from `proj` on backend `where` (cpu or cuda, already resolved); see
/// ctforge::reconstruct. Reports progress once per iteration.
volume sirt_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, backend where);

/// CGLS of `vg` from `proj` on the CPU with the matched projector pair; see
/// ctforge::reconstruct. Reports progress once per iteration.
volume cgls_reconstruct(const projection_view& proj, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt);

}  // namespace ctforge::detail
