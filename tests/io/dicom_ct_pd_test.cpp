// DICOM-CT-PD projections: our files read back (geometry and data), the format's frame checked
// against the manual's definitions written out here in its own coordinates, flying focal spots
// (per-view sources, and what centring the curved detector on each view's source costs),
// acquisition order, damaged files refused naming the file and the tag, and the command line
// reconstructing a helical scan of the Shepp-Logan phantom stored in the format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/io.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/recon.hpp"
#include "io/dicom_walk.hpp"
#include "recon/recon_quality.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
constexpr double k_pi = std::numbers::pi;

fs::path scratch(const std::string& name) {
  return testing::scratch_dir("dicom_ct_pd", name);
}

/// Projections whose values are f(view, row, col) for a scan of `s`'s size.
template <class F>
projection_stack data_for(const io::dicom_ct_pd_scan& s, F&& f) {
  return testing::scan_from(static_cast<std::int64_t>(s.views.size()), s.rows, s.cols, f);
}

// ---- the manual's geometry, in the format's own frame ----------------------------------------

/// Where our world point `x` lands on view k's detector by the format's definitions, written in
/// its left-handed frame (x_pd = x, y_pd = -y, z_pd = z; a position at (rho, phi, z) is
/// (-rho sin phi, rho cos phi, z)): the ray leaves the focal spot (rho0 + drho, phi0 + dphi,
/// z0 + dz); the detector belongs to the focal centre (rho0, phi0, z0): a cylinder of radius d0
/// about it (or the plane at d0 from it, perpendicular to its ray through the isocentre); with the
/// detector at 6 o'clock, column 1 is the leftmost seen from the table (columns run along +x_pd
/// there and turn with the gantry, counter-clockwise by phi0 seen from the table), row 1 the one
/// farthest from the table (largest z). Columns are equally spaced in arc length (cylinder) or
/// along the plane. Returns our 0-based (col, row) = (X - 1, rows - Y).
struct manual_point {
  double col = 0, row = 0;
};
manual_point manual_projection(const io::dicom_ct_pd_scan& s, std::size_t k, vec3 x) {
  const io::dicom_ct_pd_view& v = s.views[k];
  const double phi0 = v.focal_angle_rad, phis = phi0 + v.source_d_angle_rad;
  const double r0 = v.focal_radius_mm, rs = r0 + v.source_d_radius_mm, d0 = v.detector_radius_mm;
  const vec3 f{-r0 * std::sin(phi0), r0 * std::cos(phi0), v.focal_z_mm};
  const vec3 src{-rs * std::sin(phis), rs * std::cos(phis), v.focal_z_mm + v.source_d_z_mm};
  const vec3 p{x.x, -x.y, x.z};
  const vec3 n{std::sin(phi0), -std::cos(phi0), 0};  // focal centre towards the isocentre
  const vec3 e{std::cos(phi0), std::sin(phi0), 0};   // (1, 0) turned by phi0
  const vec3 d = p - src, a = src - f;
  double lambda = 0;
  if (s.shape == detector_shape::flat) {
    lambda = (d0 - dot(a, n)) / dot(d, n);
  } else {  // |(a + lambda d)_xy| = d0, the far root
    const double qa = d.x * d.x + d.y * d.y, qb = 2 * (a.x * d.x + a.y * d.y),
                 qc = a.x * a.x + a.y * a.y - d0 * d0;
    lambda = (-qb + std::sqrt(qb * qb - 4 * qa * qc)) / (2 * qa);
  }
  const vec3 q = src + lambda * d - f;
  const double along =
      s.shape == detector_shape::flat ? dot(q, e) : d0 * std::atan2(dot(q, e), dot(q, n));
  const double X = s.central_col + along / s.col_spacing_mm;
  const double Y = s.central_row - (q.z) / s.row_spacing_mm;
  return {X - 1, static_cast<double>(s.rows) - Y};
}

/// Largest |col| and |row| difference between the manual's projection and ours of points of the
/// cylinder of `radius` mm about the axis, `dz` mm above and below each view's focal centre,
/// over every view; points off the detector are skipped.
struct pixel_error {
  double col = 0, row = 0;
  int points = 0;
};
pixel_error compare_projections(const io::dicom_ct_pd_scan& s, const geometry& g, double radius,
                                double dz) {
  pixel_error err;
  for (std::size_t k = 0; k < s.views.size(); ++k)
    for (double r = 0; r <= radius; r += radius / 4)
      for (double a = 0; a < 2 * k_pi; a += k_pi / 6)
        for (double h : {-dz, 0.0, dz}) {
          const vec3 x{r * std::cos(a), r * std::sin(a), s.views[k].focal_z_mm + h};
          const manual_point m = manual_projection(s, k, x);
          if (m.col < 0 || m.col > static_cast<double>(s.cols - 1) || m.row < 0 ||
              m.row > static_cast<double>(s.rows - 1))
            continue;
          const detector_coords q = project_to_detector(g, static_cast<std::int64_t>(k), x);
          err.col = std::max(err.col, std::abs(q.col - m.col));
          err.row = std::max(err.row, std::abs(q.row - m.row));
          ++err.points;
        }
  return err;
}

// ---- scans -------------------------------------------------------------------------------------

/// A helix whose every number a float (the format's FL) holds exactly: 190 views 1/32 rad apart
/// from -3 rad, the source rising 1/16 mm per view from -10 mm (4 pi mm per turn), offsets of
/// half a column and row.
geometry exact_helix(detector_shape shape) {
  return make_helical_geometry(24, 8, 1.25, 1.5, 500, 1000, angle_range(-3, 1.0 / 32, 190),
                               4 * k_pi, -10, 0.625, -0.75, shape);
}

void expect_same_vectors(const geometry& a, const geometry& b, double tol_mm) {
  ASSERT_EQ(a.view_count(), b.view_count());
  double worst = 0;
  for (std::size_t i = 0; i < a.views.size(); ++i) {
    const view_vectors &p = a.views[i], &q = b.views[i];
    for (double d : {norm(p.source - q.source), norm(p.detector_center - q.detector_center),
                     norm(p.u - q.u), norm(p.v - q.v)})
      worst = std::max(worst, d);
  }
  EXPECT_LE(worst, tol_mm);
}

struct layout_case {
  detector_shape shape;
  bool transposed, explicit_vr;
};

class DicomCtPdRoundTrip : public ::testing::TestWithParam<layout_case> {};

// Our own files read back: the same helical geometry to 1e-6 mm (its numbers are exact in FL),
// every value on the grid of its view's rescale and within half a step of what was written.
TEST_P(DicomCtPdRoundTrip, HelixAndDataComeBack) {
  const layout_case c = GetParam();
  const geometry g = exact_helix(c.shape);
  const io::dicom_ct_pd_scan scan = io::dicom_ct_pd_from_geometry(g);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> value(-0.05, 3.0);
  const projection_stack p = data_for(scan, [&](auto, auto, auto) { return value(rng); });
  const fs::path dir = scratch("round_trip") / "scan";
  io::write_dicom_ct_pd(dir.string(), p, scan, {c.transposed, c.explicit_vr});
  EXPECT_TRUE(io::is_dicom_ct_pd(dir.string()));
  EXPECT_EQ(io::projection_format(dir.string()), "dicom-ct-pd");
  EXPECT_EQ(io::content_kind(dir.string()), "projections");

  const io::dicom_ct_pd_data d = io::read_dicom_ct_pd(dir.string());
  ASSERT_EQ(d.geom.type_name(), "helical") << d.warnings;
  EXPECT_EQ(d.geom.shape, c.shape);
  const helical_orbit &h = *d.geom.helix, &h0 = *g.helix;
  EXPECT_EQ(h.source_to_isocenter_mm, 500);
  EXPECT_EQ(h.source_to_detector_mm, 1000);
  EXPECT_EQ(h.z_start_mm, -10);
  EXPECT_NEAR(h.pitch_mm_per_turn, h0.pitch_mm_per_turn, 1e-9);
  EXPECT_EQ(h.offset_u_mm, 0.625);
  EXPECT_EQ(h.offset_v_mm, -0.75);
  EXPECT_EQ(h.angles_rad, h0.angles_rad);
  expect_same_vectors(d.geom, g, 1e-6);

  ASSERT_EQ(d.projections.views, p.views);
  ASSERT_EQ(d.projections.rows, p.rows);
  ASSERT_EQ(d.projections.cols, p.cols);
  double worst_step = 0;
  for (std::int64_t v = 0; v < p.views; ++v) {
    const io::dicom_ct_pd_view& w = d.scan.views[static_cast<std::size_t>(v)];
    worst_step = std::max(worst_step, w.rescale_slope);
    for (std::int64_t r = 0; r < p.rows; ++r)
      for (std::int64_t col = 0; col < p.cols; ++col) {
        const double x = p.at(v, r, col);
        const double k = std::round((x - w.rescale_intercept) / w.rescale_slope);
        ASSERT_EQ(d.projections.at(v, r, col),
                  static_cast<float>(k * w.rescale_slope + w.rescale_intercept))
            << "view " << v << " row " << r << " col " << col;
        ASSERT_LE(std::abs(d.projections.at(v, r, col) - x), 0.5 * w.rescale_slope + 1e-6);
      }
  }
  EXPECT_LT(worst_step, 3.1 / 65535 * 1.001);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DicomCtPdRoundTrip,
                         ::testing::Values(layout_case{detector_shape::cylindrical, false, true},
                                           layout_case{detector_shape::cylindrical, true, true},
                                           layout_case{detector_shape::flat, false, false},
                                           layout_case{detector_shape::flat, true, false}),
                         [](const auto& info) {
                           return std::string(info.param.shape == detector_shape::flat
                                                  ? "Flat"
                                                  : "Cylindrical") +
                                  (info.param.transposed ? "ColsByRows" : "RowsByCols") +
                                  (info.param.explicit_vr ? "Explicit" : "Implicit");
                         });

// Integer values 0 .. 65535 are stored with slope 1, intercept 0: exactly.
TEST(DicomCtPd, IntegerValuesAreExact) {
  const geometry g = exact_helix(detector_shape::cylindrical);
  const io::dicom_ct_pd_scan scan = io::dicom_ct_pd_from_geometry(g);
  const projection_stack p =
      data_for(scan, [](auto v, auto r, auto c) { return (v * 977 + r * 131 + c * 7) % 65536; });
  const fs::path dir = scratch("integers") / "scan";
  io::write_dicom_ct_pd(dir.string(), p, scan);
  const io::dicom_ct_pd_data d = io::read_dicom_ct_pd(dir.string());
  EXPECT_EQ(d.projections.data, p.data);
  EXPECT_EQ(d.scan.views.front().rescale_slope, 1);
  EXPECT_EQ(d.scan.views.front().rescale_intercept, 0);
}

// A clinical-sized helix whose numbers FL rounds (SID 595, SDD 1085.6, 576 views per turn over
// two turns): still a helix, the sources within float precision of ours.
TEST(DicomCtPd, ClinicalHelixKeepsFloatPrecision) {
  const geometry g = make_helical_geometry(32, 4, 1.2858, 1.0947, 595, 1085.6,
                                           angle_range(0.1, -2 * k_pi / 576, 1152), 23.04, 81.3,
                                           -1.4465, 0, detector_shape::cylindrical);
  const io::dicom_ct_pd_scan scan = io::dicom_ct_pd_from_geometry(g);
  const projection_stack p =
      data_for(scan, [](auto v, auto r, auto c) { return 0.001 * (v + r + c); });
  const fs::path dir = scratch("clinical") / "scan";
  io::write_dicom_ct_pd(dir.string(), p, scan);
  const io::dicom_ct_pd_data d = io::read_dicom_ct_pd(dir.string());
  ASSERT_EQ(d.geom.type_name(), "helical") << d.warnings;
  double worst = 0;
  for (std::size_t i = 0; i < g.views.size(); ++i)
    worst = std::max(worst, norm(d.geom.views[i].source - g.views[i].source));
  std::cout << "[ metric   ] clinical helix through FL tags: sources within " << worst << " mm\n";
  EXPECT_LT(worst, 1e-4);  // FL: 24 bits of 595 mm and of angles within +-pi
}

// Our frame against the manual's definitions: with the focal spot on the focal centre, every
// point of the field of view projects where the manual says (the format's frame, its angle
// direction, z, column and row directions and central element).
TEST(DicomCtPd, FrameMatchesTheManual) {
  for (const detector_shape shape : {detector_shape::cylindrical, detector_shape::flat}) {
    io::dicom_ct_pd_scan s;
    s.cols = 400;
    s.rows = 16;
    s.col_spacing_mm = 1.1;
    s.row_spacing_mm = 1.3;
    s.shape = shape;
    s.central_col = 201.375;  // a quarter-column offset, as real detectors have
    s.central_row = 8.75;
    for (int i = 0; i < 12; ++i) {
      io::dicom_ct_pd_view v;
      v.focal_angle_rad = std::remainder(2.0 + 0.53 * i, 2 * k_pi);  // wrapped, as stored
      v.focal_z_mm = 40.0 - 0.75 * i;  // the table moves into the gantry: z decreases
      v.focal_radius_mm = 570;
      v.detector_radius_mm = 1040;
      s.views.push_back(v);
    }
    std::string how;
    const geometry g = io::geometry_from_dicom_ct_pd(s, &how);
    EXPECT_EQ(g.type_name(), "helical") << how;
    const pixel_error e = compare_projections(s, g, 150, 4);
    EXPECT_GT(e.points, 1000);
    EXPECT_LT(e.col, 1e-6);
    EXPECT_LT(e.row, 1e-6);
    // Our angle is the format's negated; the source is where the manual puts the focal spot.
    for (std::size_t i = 0; i < s.views.size(); ++i) {
      const double phi = s.views[i].focal_angle_rad;
      EXPECT_NEAR(norm(g.views[i].source -
                       vec3{-570 * std::sin(phi), -570 * std::cos(phi), s.views[i].focal_z_mm}),
                  0, 1e-9);
    }
    // Irregular views are vectors, and still where the manual says.
    s.views[5].focal_angle_rad += 0.1;
    const geometry vec = io::geometry_from_dicom_ct_pd(s, &how);
    EXPECT_EQ(vec.type_name(), "cone_vec") << how;
    const pixel_error ev = compare_projections(s, vec, 150, 4);
    EXPECT_LT(ev.col, 1e-6);
    EXPECT_LT(ev.row, 1e-6);
  }
}

/// FFSXYZ as a Siemens-class scanner runs it: the focal spot alternates +-da along the tangent
/// (an angular shift da / rho0) and +-dr radially with +-dr tan(7 deg) along z, where (Flohr et
/// al. 2005; as FreeCT models it) da = SDD R sin(fan step) / (4 (SDD - R)), dr = SDD w / (4
/// (SDD - R) tan(anode angle)) for a collimated row width w: 0.39 mm and 2.70 mm for R = 595,
/// SDD = 1085.6, fan step 1.1844 mrad, w = 0.6 mm, anode angle 7 deg.
io::dicom_ct_pd_scan flying_focal_spot_scan(detector_shape shape, std::int64_t cols,
                                            std::int64_t rows, int views) {
  const double r0 = 595, sdd = 1085.6, step = 1.1844e-3, anode = 7 * k_pi / 180;
  const double da = sdd * r0 * std::sin(step) / (4 * (sdd - r0));
  const double dr = sdd * 0.6 / (4 * (sdd - r0) * std::tan(anode));
  io::dicom_ct_pd_scan s;
  s.cols = cols;
  s.rows = rows;
  s.col_spacing_mm = sdd * step;
  s.row_spacing_mm = 0.6 * sdd / r0;
  s.shape = shape;
  s.central_col = 0.5 * static_cast<double>(cols + 1) + 1.125;
  s.central_row = 0.5 * static_cast<double>(rows + 1);
  s.flying_focal_spot = "FFSXYZ";
  for (int i = 0; i < views; ++i) {
    io::dicom_ct_pd_view v;
    v.focal_angle_rad = std::remainder(0.7 + 2 * k_pi / 2304 * i * 37, 2 * k_pi);
    v.focal_z_mm = 20 - 0.02 * i;
    v.focal_radius_mm = r0;
    v.detector_radius_mm = sdd;
    const double sign_z = (i / 2) % 2 ? 1 : -1, sign_phi = i % 2 ? 1 : -1;
    v.source_d_angle_rad = sign_phi * da / r0;
    v.source_d_radius_mm = sign_z * dr;
    v.source_d_z_mm = sign_z * dr * std::tan(anode);
    v.instance = i + 1;
    s.views.push_back(v);
  }
  return s;
}

// A flying focal spot gives vectors whose sources are the focal spots' positions, written out
// here from the manual: (rho0 + drho, phi0 + dphi, z0 + dz) in its frame.
TEST(DicomCtPd, FlyingFocalSpotSourcesFollowTheManual) {
  const io::dicom_ct_pd_scan s = flying_focal_spot_scan(detector_shape::cylindrical, 48, 4, 16);
  const projection_stack p = data_for(s, [](auto v, auto r, auto c) { return 0.01 * (v + r * c); });
  const fs::path dir = scratch("ffs") / "scan";
  io::write_dicom_ct_pd(dir.string(), p, s);
  const io::dicom_ct_pd_data d = io::read_dicom_ct_pd(dir.string());
  ASSERT_EQ(d.geom.type_name(), "cone_vec") << d.warnings;
  EXPECT_TRUE(d.geom.curved());
  EXPECT_EQ(d.scan.flying_focal_spot, "FFSXYZ");
  EXPECT_NE(d.warnings.find("flying focal spot"), std::string::npos) << d.warnings;
  for (std::size_t i = 0; i < s.views.size(); ++i) {
    const io::dicom_ct_pd_view &w = s.views[i], &r = d.scan.views[i];
    // The files hold floats (FL): the values come back rounded to float.
    EXPECT_EQ(r.focal_angle_rad, static_cast<float>(w.focal_angle_rad));
    EXPECT_EQ(r.source_d_angle_rad, static_cast<float>(w.source_d_angle_rad));
    EXPECT_EQ(r.source_d_radius_mm, static_cast<float>(w.source_d_radius_mm));
    EXPECT_EQ(r.source_d_z_mm, static_cast<float>(w.source_d_z_mm));
    const double rho = r.focal_radius_mm + r.source_d_radius_mm;
    const double phi = r.focal_angle_rad + r.source_d_angle_rad;
    const vec3 manual{-rho * std::sin(phi), rho * std::cos(phi), r.focal_z_mm + r.source_d_z_mm};
    const vec3 ours{manual.x, -manual.y, manual.z};  // our frame: the vertical axis flipped
    EXPECT_NEAR(norm(d.geom.views[i].source - ours), 0, 1e-9) << "view " << i;
  }
  EXPECT_EQ(d.projections.data.size(), p.data.size());
  // A flat detector stays where the focal centre puts it: exact.
  const io::dicom_ct_pd_scan f = flying_focal_spot_scan(detector_shape::flat, 48, 4, 16);
  const geometry gf = io::geometry_from_dicom_ct_pd(f);
  const pixel_error e = compare_projections(f, gf, 150, 5);
  EXPECT_LT(e.col, 1e-6);
  EXPECT_LT(e.row, 1e-6);
}

// A flying focal spot's curved vector geometry: crops and bins keep the pixels on the arc,
// FDK refuses it (SIRT is the default), and SIRT reconstructs it.
TEST(DicomCtPd, FlyingFocalSpotGeometryInUse) {
  io::dicom_ct_pd_scan s = flying_focal_spot_scan(detector_shape::cylindrical, 96, 8, 0);
  s.col_spacing_mm *= 4;  // a coarse detector of 96 columns covering the same fan
  s.central_col = 48.5 + 0.25;
  for (int i = 0; i < 720; ++i) {  // one turn, axial, FFSXY: two focal spots per angle
    io::dicom_ct_pd_view v;
    v.focal_angle_rad = std::remainder(2 * k_pi / 360 * (i / 2), 2 * k_pi);
    v.focal_radius_mm = 595;
    v.detector_radius_mm = 1085.6;
    v.source_d_angle_rad = (i % 2 ? 1 : -1) * 6.6e-4;
    s.views.push_back(v);
  }
  const geometry g = io::geometry_from_dicom_ct_pd(s);
  ASSERT_TRUE(g.curved());
  ASSERT_EQ(g.type_name(), "cone_vec");
  const geometry crop = io::select_geometry(g, {{3, 5}, {2, 4}, {10, 60}}, 2, 3);
  ASSERT_TRUE(crop.curved());
  for (std::int64_t v = 0; v < crop.view_count(); ++v)
    for (double r : {0.0, 1.0})
      for (double c : {0.0, 9.0, 19.0}) {
        // Binned pixel (r, c): the mean of full pixels 2 + 2 r .. and 10 + 3 c .. (their centre).
        const vec3 a = pixel_center(crop, v, c, r);
        const vec3 b = pixel_center(g, v + 3, 10 + 3 * c + 1, 2 + 2 * r + 0.5);
        EXPECT_NEAR(norm(a - b), 0, 1e-9) << v << " " << r << " " << c;
      }
  EXPECT_EQ(default_algorithm(g), algorithm::sirt);
  const phantom ph = shepp_logan_phantom(120);
  const projection_stack p = project_analytic(ph, g);
  testing::expect_usage_error_naming(
      [&] {
        (void)reconstruct(p, g, volume_geometry::centered(8, 8, 1, {1, 1, 1}),
                          testing::cpu_options(algorithm::fdk));
      },
      "cylindrical");
  // SIRT reconstructs it as well as the same scan without the flying focal spot (a circular
  // cone of the same detector).
  const volume_geometry grid = volume_geometry::centered(64, 64, 1, {2, 2, 2});
  const volume truth = voxelize(ph, grid);
  const recon_options sirt = testing::cpu_iterative(algorithm::sirt, 30);
  const testing::quality q = testing::compare_in_radius(reconstruct(p, g, grid, sirt), truth, 55,
                                                        "SIRT, flying focal spot");
  io::dicom_ct_pd_scan plain = s;
  for (auto& v : plain.views) v.source_d_angle_rad = 0;
  const geometry gc = io::geometry_from_dicom_ct_pd(plain);
  ASSERT_EQ(gc.type_name(), "cone");
  const testing::quality qc = testing::compare_in_radius(
      reconstruct(project_analytic(ph, gc), gc, grid, sirt), truth, 55, "SIRT, focal centre");
  EXPECT_GT(q.psnr, qc.psnr - 0.5);  // measured 20.65 dB both
}

// What centring the cylinder on each view's source costs: a Siemens-class detector (736 columns
// of 1.2858 mm, 64 rows, SID 595, SDD 1085.6, quarter offset) with FFSXYZ's shifts, points
// within 250 mm of the axis: the column and row where a point projects, ours against the
// manual's (the cylinder about the focal centre), in pixels; and the same ignoring the shift.
TEST(DicomCtPd, CostOfTheCylinderAboutTheSource) {
  const io::dicom_ct_pd_scan s = flying_focal_spot_scan(detector_shape::cylindrical, 736, 64, 8);
  const geometry g = io::geometry_from_dicom_ct_pd(s);
  const pixel_error e = compare_projections(s, g, 250, 15);
  io::dicom_ct_pd_scan unshifted = s;
  for (auto& v : unshifted.views) v.source_d_angle_rad = v.source_d_radius_mm = v.source_d_z_mm = 0;
  const pixel_error ignored =
      compare_projections(s, io::geometry_from_dicom_ct_pd(unshifted), 250, 15);
  std::cout << "[ metric   ] flying focal spot, cylinder about the source: max " << e.col
            << " columns, " << e.row << " rows over " << e.points
            << " points; ignoring the shift: " << ignored.col << " columns, " << ignored.row
            << " rows\n";
  ::testing::Test::RecordProperty("ffs_cylinder_col_px", std::to_string(e.col));
  ::testing::Test::RecordProperty("ffs_cylinder_row_px", std::to_string(e.row));
  EXPECT_GT(e.points, 1000);
  EXPECT_LT(e.col, 0.08);              // measured 0.057 (docs/file-formats.md)
  EXPECT_LT(e.row, 0.02);              // measured 0.011
  EXPECT_GT(ignored.col, 10 * e.col);  // the shift itself matters far more
}

// Views come in Instance Number order whatever the file names.
TEST(DicomCtPd, ViewsSortedByInstanceNumber) {
  const geometry g = exact_helix(detector_shape::cylindrical);
  const io::dicom_ct_pd_scan scan = io::dicom_ct_pd_from_geometry(g);
  const projection_stack p =
      data_for(scan, [](auto v, auto r, auto c) { return v + 0.01 * (r + c); });
  const fs::path dir = scratch("shuffled") / "scan";
  io::write_dicom_ct_pd(dir.string(), p, scan);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<int> order(files.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  for (std::size_t i = 0; i < files.size(); ++i)  // name b_<k>.dcm holds a random view
    fs::rename(files[i], dir / ("b_" + std::to_string(order[i]) + ".dcm"));
  const io::dicom_ct_pd_data d = io::read_dicom_ct_pd(dir.string());
  ASSERT_EQ(d.geom.type_name(), "helical");
  expect_same_vectors(d.geom, g, 1e-6);
  for (std::int64_t v = 0; v < p.views; ++v)
    EXPECT_NEAR(d.projections.at(v, 0, 0), static_cast<double>(v), 1e-3) << v;
}

// ---- damaged files -----------------------------------------------------------------------------

std::vector<unsigned char> bytes_of(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& f, const std::vector<unsigned char>& b) {
  std::ofstream(f, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
/// The element (group, element) of an explicit VR file of ours (short VR: an 8-byte header).
io::detail::dicom_element element_of(const std::vector<unsigned char>& b, std::uint16_t g,
                                     std::uint16_t e) {
  const io::detail::dicom_walk w = io::detail::walk_dicom(b);
  const io::detail::dicom_element* x = w.find(g, e);
  EXPECT_NE(x, nullptr);
  return x ? *x : io::detail::dicom_element{};
}

class DicomCtPdDamaged : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch(::testing::UnitTest::GetInstance()->current_test_info()->name()) / "scan";
    scan_ = io::dicom_ct_pd_from_geometry(exact_helix(detector_shape::cylindrical));
    scan_.views.resize(3);
    io::write_dicom_ct_pd(dir_.string(), data_for(scan_, [](auto, auto, auto) { return 1.0; }),
                          scan_);
    file_ = dir_ / "view_00002.dcm";
    bytes_ = bytes_of(file_);
  }
  void expect_refused(const std::string& tag, const std::string& needle) {
    write_bytes(file_, bytes_);
    const std::string path = dir_.string();
    testing::expect_runtime_error_naming([&] { (void)io::read_dicom_ct_pd(path); }, file_.string(),
                                         tag);
    testing::expect_runtime_error_naming([&] { (void)io::read_projections_any(path); },
                                         file_.string(), needle);
  }
  fs::path dir_, file_;
  io::dicom_ct_pd_scan scan_;
  std::vector<unsigned char> bytes_;
};

TEST_F(DicomCtPdDamaged, MissingTag) {
  const auto e = element_of(bytes_, 0x7031, 0x1001);
  bytes_.erase(bytes_.begin() + static_cast<std::ptrdiff_t>(e.offset - 8),
               bytes_.begin() + static_cast<std::ptrdiff_t>(e.offset + e.length));
  expect_refused("(7031,1001) DetectorFocalCenterAngularPosition", "is missing");
}

TEST_F(DicomCtPdDamaged, WrongVr) {
  const auto e = element_of(bytes_, 0x7031, 0x1003);
  bytes_[e.offset - 4] = 'D';
  bytes_[e.offset - 3] = 'S';
  expect_refused("(7031,1003) DetectorFocalCenterRadialDistance", "has VR DS, expected FL");
}

TEST_F(DicomCtPdDamaged, WrongLength) {
  const auto e = element_of(bytes_, 0x7031, 0x1033);  // two floats; keep one
  bytes_[e.offset - 2] = 4;
  bytes_.erase(bytes_.begin() + static_cast<std::ptrdiff_t>(e.offset + 4),
               bytes_.begin() + static_cast<std::ptrdiff_t>(e.offset + 8));
  expect_refused("(7031,1033) DetectorCentralElement", "holds 4 bytes, expected 8");
}

TEST_F(DicomCtPdDamaged, ImageSizeDisagreesWithTheDetector) {
  const auto e = element_of(bytes_, 0x7029, 0x1010);  // NumberofDetectorRows 8 -> 9
  bytes_[e.offset] = 9;
  expect_refused("(0028,0010) Rows", "(7029,1010) NumberofDetectorRows");
}

TEST_F(DicomCtPdDamaged, RowCountDiffersBetweenFiles) {
  // A file of a scan with 6 rows among files of 8.
  io::dicom_ct_pd_scan other = scan_;
  other.rows = 6;
  other.central_row = 3.5;
  const fs::path odir = dir_.parent_path() / "other";
  io::write_dicom_ct_pd(odir.string(), data_for(other, [](auto, auto, auto) { return 1.0; }),
                        other);
  bytes_ = bytes_of(odir / "view_00002.dcm");
  expect_refused("(7029,1010) NumberofDetectorRows is 6", "one detector");
}

TEST_F(DicomCtPdDamaged, TruncatedPixels) {
  bytes_.resize(bytes_.size() - 100);
  expect_refused("(7FE0,0010) PixelData", "truncated file");
}

TEST_F(DicomCtPdDamaged, TruncatedHeader) {
  const auto e = element_of(bytes_, 0x7031, 0x1002);
  bytes_.resize(e.offset + 2);  // inside DetectorFocalCenterAxialPosition's value
  expect_refused("(7031,1002)", "truncated file");
}

TEST_F(DicomCtPdDamaged, DuplicateInstanceNumbers) {
  const auto e = element_of(bytes_, 0x0020, 0x0013);  // "2 " -> "3 "
  bytes_[e.offset] = '3';
  expect_refused("(0020,0013) InstanceNumber is 3", "number of its own");
}

// A DICOM-CT-PD directory is projections, not a volume; a CT image series stays a volume.
TEST(DicomCtPd, NotAVolume) {
  const io::dicom_ct_pd_scan scan =
      io::dicom_ct_pd_from_geometry(exact_helix(detector_shape::flat));
  const fs::path root = scratch("kinds");
  io::write_dicom_ct_pd((root / "pd").string(),
                        data_for(scan, [](auto, auto, auto) { return 1.0; }), scan);
  testing::expect_usage_error_naming([&] { (void)io::read_volume_any((root / "pd").string()); },
                                     "DICOM-CT-PD");
  volume v(volume_geometry::centered(8, 8, 3, {1, 1, 1}));
  io::write_volume_any((root / "ct").string(), v);
  EXPECT_FALSE(io::is_dicom_ct_pd((root / "ct").string()));
  EXPECT_EQ(io::content_kind((root / "ct").string()), "volume");
  EXPECT_EQ(io::content_kind((root / "pd").string()), "projections");
}

// ---- the command line --------------------------------------------------------------------------

class DicomCtPdCli : public testing::cli_dir_test {
 protected:
  DicomCtPdCli() : cli_dir_test("dicom_ct_pd_cli") {}
};

// A helical scan of the Shepp-Logan phantom (curved detector, 16 rows, pitch 1, as
// tests/recon/helical_test.cpp's curved16_p10) stored as DICOM-CT-PD: `ctforge info` names the
// format and the helix, `convert` writes the same projections and geometry, and `recon`
// reconstructs it with helical-fbp as well as the same reconstruction in memory (within 0.05
// dB) and above 30 dB, the bound helical_test.cpp holds the helical FBP of this scan to.
TEST_F(DicomCtPdCli, ReconstructsAHelicalScan) {
  constexpr double sid = 300, sdd = 600, radius = 27;
  constexpr std::int64_t nz = 25;
  const double collimation = 16 * 1.0 * sid / sdd, feed = collimation;
  const double z_lo = -0.5 * nz - collimation - feed, z_hi = -z_lo;
  const auto views = static_cast<std::int64_t>(std::ceil((z_hi - z_lo) / feed * 360)) + 1;
  const geometry g =
      make_helical_geometry(128, 16, 1, 1, sid, sdd, angle_range(0, deg_to_rad(1), views), feed,
                            z_lo, 0, 0, detector_shape::cylindrical);
  const phantom ph = shepp_logan_phantom(56);
  const projection_stack p = project_analytic(ph, g);
  io::write_dicom_ct_pd((dir_ / "scan").string(), p, io::dicom_ct_pd_from_geometry(g),
                        {/*transposed=*/true});

  const auto info = run("info scan");
  EXPECT_EQ(info.status, 0) << info.output;
  EXPECT_NE(info.output.find("DICOM-CT-PD"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("'helical'"), std::string::npos) << info.output;

  const auto conv = run("convert scan scan.h5");
  ASSERT_EQ(conv.status, 0) << conv.output;
  const io::projection_file h5 = io::read_projections((dir_ / "scan.h5").string());
  const io::dicom_ct_pd_data d = io::read_dicom_ct_pd((dir_ / "scan").string());
  EXPECT_EQ(h5.projections.data, d.projections.data);
  ASSERT_TRUE(h5.geom.has_value());
  EXPECT_EQ(h5.geom->type_name(), "helical");
  expect_same_vectors(*h5.geom, d.geom, 1e-9);

  const auto rec = run("recon scan -o vol.h5 --size-xyz 64,64,25 --spacing 0.875,0.875,1");
  ASSERT_EQ(rec.status, 0) << rec.output;
  const volume vol = io::read_volume((dir_ / "vol.h5").string());
  const volume truth = voxelize(ph, vol.geom);
  const testing::quality q = testing::compare_in_radius(vol, truth, radius, "DICOM-CT-PD helical");
  const volume mem = reconstruct(p, g, vol.geom, testing::cpu_options(algorithm::helical_fbp));
  const testing::quality qm = testing::compare_in_radius(mem, truth, radius, "in memory");
  EXPECT_GT(q.psnr, 30);
  EXPECT_NEAR(q.psnr, qm.psnr, 0.05);
  // Negative control: the rows taken the other way up (the format's row 1 as our row 0).
  const projection_stack flipped = io::reorient_projections(d.projections, false, false, true);
  const volume bad =
      reconstruct(flipped, d.geom, vol.geom, testing::cpu_options(algorithm::helical_fbp));
  EXPECT_LT(testing::compare_in_radius(bad, truth, radius, "rows reversed").psnr, q.psnr - 5);
}

}  // namespace
}  // namespace ctforge
