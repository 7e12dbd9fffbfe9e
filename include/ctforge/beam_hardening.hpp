// Beam hardening from a calibration scan: the empirical cupping correction (ECC) of
// Kachelriess, Sourbelle and Kalender, "Empirical cupping correction: a first-order raw data
// precorrection for cone-beam computed tomography", Med. Phys. 33, 1269 (2006), as RTK's water
// precorrection describes it. It reconstructs, so it lives with reconstruct (src/recon/); the
// correction itself is correct_beam_hardening (ctforge/preprocess.hpp). See
// docs/guide/real-data.md, "Beam hardening".
#pragma once

#include <optional>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace ctforge {

/// What fit_water_precorrection reconstructs and how it segments the object.
struct water_precorrection_options {
  int degree = 3;  ///< degree n of the polynomial, in [1, 8]
  /// The object: voxels of f_1 above this fraction of f_1's maximum, in (0, 1).
  double threshold = 0.5;
  /// Voxels (in x and y, each z plane) left out of the fit each side of the object's edge, so
  /// that the edge's blur fits neither the object nor the air; >= 0.
  int margin = 2;
  /// How the basis images are reconstructed: FDK or FBP only (they are linear in the
  /// projections); empty: default recon_options with algo = default_algorithm(g).
  std::optional<recon_options> recon;
};

/// Coefficients c_0..c_n (c_0 = 0) for correct_beam_hardening that flatten the reconstruction
/// of a homogeneous object, from its scan `calibration` (line integrals, views x rows x cols,
/// matching `g`) reconstructed on `vg`:
///  1. basis images f_k = reconstruct(p^k), k = 1..n (the reconstruction of sum_k c_k p^k is
///     sum_k c_k f_k);
///  2. the object: f_1 > threshold x max f_1; its interior: the object eroded by `margin`
///     voxels; the air: the voxels farther than `margin` from the object;
///  3. c_1..c_n minimise sum over interior and air of (sum_k c_k f_k - t)^2, the template t = 1
///     in the interior and 0 in the air (normal equations, in double);
///  4. scaled so that the corrected image's mean over the interior equals f_1's (the values
///     keep the uncorrected image's scale).
/// The object should be homogeneous (a water or plastic cylinder) and fill most of the field
/// of view that the scans to correct cover. usage_error naming the option for bad options;
/// ctforge::error when no voxel is left inside the object or the fit is degenerate.
std::vector<double> fit_water_precorrection(const projection_view& calibration, const geometry& g,
                                            const volume_geometry& vg,
                                            const water_precorrection_options& opt = {});

}  // namespace ctforge
