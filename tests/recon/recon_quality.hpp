// Shared by the FDK and FBP accuracy tests: the field-of-view mask, the accuracy criterion and
// its report, and pixel-integrated analytic projections.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "ctforge/geometry.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::testing {

inline std::span<const float> span_of(const volume& v) {
  return {v.data.data(), v.data.size()};
}

/// max |got - ref| / max |ref| over two arrays of the same size (two loops or paths compared).
/// A reference that is all zero fails the test: the comparison would prove nothing.
inline double max_diff_over_peak(std::span<const float> got, std::span<const float> ref) {
  EXPECT_EQ(got.size(), ref.size());
  double peak = 0, diff = 0;
  for (std::size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    peak = std::max(peak, static_cast<double>(std::abs(ref[i])));
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - ref[i])));
  }
  EXPECT_GT(peak, 0.0) << "the reference is all zero: the comparison would prove nothing";
  return peak > 0 ? diff / peak : 0.0;
}
inline double max_diff_over_peak(const volume& got, const volume& ref) {
  return max_diff_over_peak(span_of(got), span_of(ref));
}

/// Options of the CPU tests: algorithm `a` on the CPU backend, everything else default.
inline recon_options cpu_options(algorithm a) {
  recon_options o;
  o.algo = a;
  o.where = backend::cpu;
  return o;
}

// Accuracy criterion of RTK's FDK test (rtkfdktest: MAE < 0.03 and PSNR > 26 dB on a
// Shepp-Logan whose densities peak at 2), scaled to our densities which peak at 0.1 / mm:
// MAE < 0.03 * 0.1 / 2 = 0.0015 and PSNR (peak 0.1) > 26 dB. Parallel-beam FBP has no
// cone-beam approximation, so meeting it there is the least to expect.
inline constexpr double k_peak = 0.1;
inline constexpr double k_max_mae = 0.0015;
inline constexpr double k_min_psnr = 26.0;

struct quality {
  double mae, psnr;
};

/// Voxels inside the field of view: their centres project onto the detector (within the extent
/// of the pixel centres, 1e-6 pixel slack) in front of the source in every view (parallel
/// beam: p2 = 1). Outside it the scan lacks data for some views (e.g. the corners of a cubic
/// volume beyond the circle the detector covers) and FDK / FBP is not defined there, as in RTK
/// (FieldOfViewImageFilter), so accuracy criteria are evaluated inside.
inline std::vector<char> fov_mask(const geometry& g, const volume_geometry& vg) {
  // Cylindrical detectors have no matrices: project_to_detector (its w > 0 is in front of the
  // source plane) instead.
  const auto mats = g.curved() ? std::vector<projection_matrix>{} : compute_projection_matrices(g);
  std::vector<char> mask(static_cast<std::size_t>(vg.voxel_count()), 1);
  const double cmax = static_cast<double>(g.cols - 1) + 1e-6,
               rmax = static_cast<double>(g.rows - 1) + 1e-6;
#pragma omp parallel for schedule(dynamic, 16)
  for (std::int64_t row = 0; row < vg.ny * vg.nz; ++row) {
    const std::int64_t k = row / vg.ny, j = row % vg.ny;
    for (std::int64_t i = 0; i < vg.nx; ++i) {
      const vec3 x =
          vg.voxel_center(static_cast<double>(i), static_cast<double>(j), static_cast<double>(k));
      if (g.curved()) {
        for (std::int64_t v = 0; v < g.view_count(); ++v) {
          const detector_coords q = project_to_detector(g, v, x);
          if (!(q.w > 0 && q.col >= -1e-6 && q.col <= cmax && q.row >= -1e-6 && q.row <= rmax)) {
            mask[static_cast<std::size_t>(row * vg.nx + i)] = 0;
            break;
          }
        }
        continue;
      }
      for (const auto& m : mats) {
        const double p2 = m[8] * x.x + m[9] * x.y + m[10] * x.z + m[11];
        const double c = (m[0] * x.x + m[1] * x.y + m[2] * x.z + m[3]) / p2;
        const double r = (m[4] * x.x + m[5] * x.y + m[6] * x.z + m[7]) / p2;
        if (!(p2 > 0 && c >= -1e-6 && c <= cmax && r >= -1e-6 && r <= rmax)) {
          mask[static_cast<std::size_t>(row * vg.nx + i)] = 0;
          break;
        }
      }
    }
  }
  return mask;
}

/// MAE and PSNR (peak k_peak) of `rec` against `truth` inside the field of view of `g`, printed
/// with the whole-volume figures and recorded as test properties <label>_mae / _psnr_db. Fails
/// the test when the field of view holds less than half the volume (the comparison would be
/// vacuous).
inline quality compare_in_fov(const volume& rec, const volume& truth, const geometry& g,
                              const std::string& label) {
  const auto mask = fov_mask(g, rec.geom);
  std::vector<float> a, b;
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) {
      a.push_back(rec.data[i]);
      b.push_back(truth.data[i]);
    }
  EXPECT_GT(static_cast<double>(a.size()), 0.5 * static_cast<double>(mask.size())) << label;
  if (a.empty()) return {1e300, -1e300};
  const quality q{mean_abs_error(a, b), psnr_db(a, b, k_peak)};
  std::cout << "[ metric   ] " << label << ": in the field of view (" << a.size() << " of "
            << mask.size() << " voxels): MAE = " << q.mae << " /mm, PSNR = " << q.psnr
            << " dB (peak 0.1); whole volume: MAE = "
            << mean_abs_error(span_of(rec), span_of(truth))
            << ", PSNR = " << psnr_db(span_of(rec), span_of(truth), k_peak) << " dB\n";
  ::testing::Test::RecordProperty(label + "_mae", std::to_string(q.mae));
  ::testing::Test::RecordProperty(label + "_psnr_db", std::to_string(q.psnr));
  return q;
}

// MAE / PSNR (peak 0.1) of `rec` against `truth` over the voxels whose centres lie within
// `radius` mm of the rotation axis (the z axis), where every scan below has complete data.
inline quality compare_in_radius(const volume& rec, const volume& truth, double radius,
                                            const std::string& label) {
  const auto [a, b] = values_within_radius(rec, truth, radius);
  const quality q{mean_abs_error(a, b), psnr_db(a, b, k_peak)};
  std::cout << "[ metric   ] " << label << ": MAE " << q.mae << ", PSNR " << q.psnr << " dB over "
            << a.size() << " voxels\n";
  return q;
}

/// Largest |value| (0 when empty).
/// ||a - b|| / ||b|| (Euclidean, over all elements, in double).
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = static_cast<double>(a[i]) - b[i];
    num += e * e;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

inline double peak_abs(std::span<const float> values) {
  double p = 0;
  for (float x : values) p = std::max(p, static_cast<double>(std::abs(x)));
  return p;
}

/// The fast path against the double-precision reference on the same input: both finite, the
/// reference not all zero, and their mean absolute difference <= 1e-5 of the reference's peak
/// (float vs double accumulation over at most a few hundred views).
inline void expect_fast_matches_reference(const volume& fast, const volume& ref) {
  ASSERT_EQ(fast.data.size(), ref.data.size());
  for (float v : ref.data) ASSERT_TRUE(std::isfinite(v));
  for (float v : fast.data) ASSERT_TRUE(std::isfinite(v));
  const double peak = peak_abs(ref.data);
  EXPECT_GT(peak, 0.0) << "nothing was back-projected";
  EXPECT_LE(mean_abs_error(span_of(fast), span_of(ref)), 1e-5 * peak);
}

/// Means of sr x sc blocks of `fine` (views x rows*sr x cols*sc) as a views x rows x cols stack.
inline projection_stack average_blocks(const projection_stack& fine, std::int64_t rows,
                                       std::int64_t cols, int sr, int sc) {
  projection_stack p(fine.views, rows, cols);
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        double sum = 0;
        for (int b = 0; b < sr; ++b)
          for (int a = 0; a < sc; ++a) sum += fine.at(v, r * sr + b, c * sc + a);
        p.at(v, r, c) = static_cast<float>(sum / (sr * sc));
      }
  return p;
}

/// Analytic projections of `ph` with detector pixels that integrate over their area: s x s
/// rays per pixel (s x 1 for one row), taken as a circular cone or parallel geometry with s
/// times finer pixels, the same orbit and offsets, and averaged. The voxelized reference is a
/// voxel average too; point-sampling the thin, dense skull instead aliases (ringing outside the
/// phantom that is a property of the simulated data, not of the reconstruction).
inline projection_stack project_pixel_integrated(const phantom& ph, const geometry& g, int s) {
  const circular_orbit& o = *g.orbit;
  const int sr = g.rows > 1 ? s : 1;
  const geometry fine =
      g.beam == beam_kind::parallel
          ? make_parallel_geometry(g.cols * s, g.rows * sr, g.pixel_u_mm / s, g.pixel_v_mm / sr,
                                   o.angles_rad, o.offset_u_mm, o.offset_v_mm)
          : make_cone_geometry(g.cols * s, g.rows * sr, g.pixel_u_mm / s, g.pixel_v_mm / sr,
                               o.source_to_isocenter_mm, o.source_to_detector_mm, o.angles_rad,
                               o.offset_u_mm, o.offset_v_mm, g.shape);
  return average_blocks(project_analytic(ph, fine), g.rows, g.cols, sr, s);
}

/// The same for any geometry (vector ones included): s x s rays per pixel on a detector with
/// s times finer steps u / s, v / s about the same centre.
inline projection_stack project_pixel_integrated_vec(const phantom& ph, const geometry& g, int s) {
  std::vector<view_vectors> fine = g.views;
  for (auto& w : fine) {
    w.u = (1.0 / s) * w.u;
    w.v = (1.0 / s) * w.v;
  }
  return average_blocks(
      project_analytic(ph, make_vec_geometry(g.beam, g.cols * s, g.rows * s, fine)), g.rows, g.cols,
      s, s);
}

/// Parallel beam whose rays climb steeply (direction (cos a, sin a, 1.6): z is the dominant
/// axis of Joseph's method), detector through the isocentre; cols x rows pixels of 1.1 x 0.9
/// mm, `views` angles over 2 pi. Exercises the z-dominant branch and rays crossing many planes.
inline geometry steep_parallel_geometry(std::int64_t cols, std::int64_t rows, std::int64_t views) {
  std::vector<view_vectors> vv;
  for (std::int64_t k = 0; k < views; ++k) {
    const double a =
        0.2 + 2.0 * 3.14159265358979323846 * static_cast<double>(k) / static_cast<double>(views);
    const vec3 dir{std::cos(a), std::sin(a), 1.6};
    const vec3 u{-std::sin(a), std::cos(a), 0.0};
    const vec3 w = cross(dir, u);
    vv.push_back({dir, {0, 0, 0}, 1.1 * u, (0.9 / norm(w)) * w});
  }
  return make_vec_geometry(beam_kind::parallel, cols, rows, std::move(vv));
}

}  // namespace ctforge::testing
