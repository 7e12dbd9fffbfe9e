// RTK XML and ASTRA vector interchange: round trips and, independently of our own vector
// construction, agreement of where a world point lands on the detector.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  const auto dir =
      fs::temp_directory_path() / ("ctforge_interchange_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

void expect_vec_near(vec3 a, vec3 b, double tol, const std::string& what) {
  EXPECT_NEAR(a.x, b.x, tol) << what;
  EXPECT_NEAR(a.y, b.y, tol) << what;
  EXPECT_NEAR(a.z, b.z, tol) << what;
}

// Vectors agree within 1e-9 mm: all conversions are a few double-precision rotations of
// quantities of ~1e3 mm (rounding ~1e-13 mm), and files carry 17 significant digits.
void expect_same_vectors(const geometry& a, const geometry& b) {
  ASSERT_EQ(a.view_count(), b.view_count());
  ASSERT_EQ(a.cols, b.cols);
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.beam, b.beam);
  for (std::int64_t i = 0; i < a.view_count(); ++i) {
    const auto& x = a.views[static_cast<std::size_t>(i)];
    const auto& y = b.views[static_cast<std::size_t>(i)];
    const std::string v = "view " + std::to_string(i);
    if (a.beam == beam_kind::cone) {
      expect_vec_near(x.source, y.source, 1e-9, v + " source");
    } else {
      // Parallel rays: only the direction matters (sign and length do not move projections).
      EXPECT_LT(norm(cross((1 / norm(x.source)) * x.source, (1 / norm(y.source)) * y.source)),
                1e-12)
          << v;
    }
    expect_vec_near(x.detector_center, y.detector_center, 1e-9, v + " detector_center");
    expect_vec_near(x.u, y.u, 1e-9, v + " u");
    expect_vec_near(x.v, y.v, 1e-9, v + " v");
  }
}

// ---- an independent implementation of RTK's projection -----------------------------------------
// Straight from RTK's definition (rtkThreeDCircularProjectionGeometry::AddProjectionInRadians):
// P = T(sx - px, sy - py) * M(-sdd, -sid) * T(-sx, -sy, 0) * Rz(-ia) Rx(-oa) Ry(-ga), applied
// to RTK world points; written out component by component here rather than as matrices.
struct rtk_uv {
  double u, v;
};
rtk_uv rtk_project(const io::rtk_projection& p, vec3 X) {
  const double ga = deg_to_rad(p.gantry_deg), oa = deg_to_rad(p.out_of_plane_deg),
               ia = deg_to_rad(p.in_plane_deg);
  // Ry(-ga)
  vec3 a{std::cos(ga) * X.x - std::sin(ga) * X.z, X.y, std::sin(ga) * X.x + std::cos(ga) * X.z};
  // Rx(-oa)
  vec3 b{a.x, std::cos(oa) * a.y + std::sin(oa) * a.z, -std::sin(oa) * a.y + std::cos(oa) * a.z};
  // Rz(-ia)
  vec3 c{std::cos(ia) * b.x + std::sin(ia) * b.y, -std::sin(ia) * b.x + std::cos(ia) * b.y, b.z};
  const double xs = c.x - p.source_offset_x, ys = c.y - p.source_offset_y;
  if (p.sdd == 0)
    return {xs + p.source_offset_x - p.proj_offset_x, ys + p.source_offset_y - p.proj_offset_y};
  const double w = c.z - p.sid;
  return {-p.sdd * xs / w + p.source_offset_x - p.proj_offset_x,
          -p.sdd * ys / w + p.source_offset_y - p.proj_offset_y};
}

// Our pixel indices of a world point through compute_projection_matrix.
std::pair<double, double> our_pixel(const geometry& g, std::int64_t view, vec3 x) {
  const auto m = compute_projection_matrix(g, view);
  const double p0 = m[0] * x.x + m[1] * x.y + m[2] * x.z + m[3];
  const double p1 = m[4] * x.x + m[5] * x.y + m[6] * x.z + m[7];
  const double p2 = m[8] * x.x + m[9] * x.y + m[10] * x.z + m[11];
  return {p0 / p2, p1 / p2};
}

std::vector<vec3> random_points(int n, double extent, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-extent, extent);
  std::vector<vec3> pts;
  for (int i = 0; i < n; ++i) pts.push_back({d(rng), d(rng), d(rng)});
  return pts;
}

TEST(RtkGeometry, FrameMappingIsAProperRotation) {
  // x = X, y = -Z, z = Y: orthonormal with determinant +1, and the inverse undoes it.
  const vec3 ex = io::world_from_rtk({1, 0, 0}), ey = io::world_from_rtk({0, 1, 0}),
             ez = io::world_from_rtk({0, 0, 1});
  EXPECT_DOUBLE_EQ(dot(cross(ex, ey), ez), 1.0);
  const vec3 p{1.5, -2.25, 3.125};
  EXPECT_EQ(io::rtk_from_world(io::world_from_rtk(p)), p);
}

TEST(RtkGeometry, CircularConeRoundTripThroughXmlFile) {
  // Odd detector, per-view offsets, angles beyond 360 degrees.
  auto angles = angle_range(deg_to_rad(-30), deg_to_rad(47), 9);
  std::vector<double> ou, ov;
  for (int i = 0; i < 9; ++i) {
    ou.push_back(0.5 * i - 2);
    ov.push_back(-0.25 * i);
  }
  const geometry g = make_cone_geometry(31, 7, 0.8, 1.1, 600, 950, angles, ou, ov);
  const std::string path = temp_path("cone_rtk.xml");
  io::write_rtk_geometry(path, g);
  const geometry back = io::read_rtk_geometry(path, g.cols, g.rows, g.pixel_u_mm, g.pixel_v_mm);
  ASSERT_TRUE(back.orbit.has_value())
      << "untilted constant-distance RTK geometry should stay circular";
  EXPECT_EQ(back.type_name(), "cone");
  expect_same_vectors(g, back);
  EXPECT_DOUBLE_EQ(back.orbit->source_to_isocenter_mm, 600);
  EXPECT_DOUBLE_EQ(back.orbit->source_to_detector_mm, 950);
}

// Cylindrical detectors travel as RTK's RadiusCylindricalDetector = SDD (RTK: the cylinder is
// tangent to the flat panel along its v axis through the un-offset origin, u along the arc,
// which with radius SDD is ours: centred on the source, offsets as arc lengths).
TEST(RtkGeometry, CylindricalDetectorRoundTrip) {
  auto angles = angle_range(deg_to_rad(5), deg_to_rad(40), 9);
  const geometry g = make_cone_geometry(31, 7, 0.8, 1.1, 600, 950, angles, {2.5}, {-1.0},
                                        detector_shape::cylindrical);
  const std::string path = temp_path("cyl_rtk.xml");
  io::write_rtk_geometry(path, g);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<RadiusCylindricalDetector>950</RadiusCylindricalDetector>"),
            std::string::npos)
      << text;
  const geometry back = io::read_rtk_geometry(path, g.cols, g.rows, g.pixel_u_mm, g.pixel_v_mm);
  EXPECT_EQ(back.shape, detector_shape::cylindrical);
  expect_same_vectors(g, back);
  // The flat geometry's file has no radius and reads back flat.
  const geometry flat = make_cone_geometry(31, 7, 0.8, 1.1, 600, 950, angles);
  EXPECT_EQ(io::rtk_xml(io::rtk_from_geometry(flat)).find("RadiusCylindricalDetector"),
            std::string::npos);
  // A radius other than SDD is a cylinder we do not model: refused, not read as flat.
  std::ofstream(path) << "<RTKThreeDCircularGeometry version=\"3\">"
                         "<SourceToIsocenterDistance>1000</SourceToIsocenterDistance>"
                         "<SourceToDetectorDistance>1536</SourceToDetectorDistance>"
                         "<RadiusCylindricalDetector>1200</RadiusCylindricalDetector>"
                         "<Projection><GantryAngle>10</GantryAngle></Projection>"
                         "</RTKThreeDCircularGeometry>";
  try {
    (void)io::read_rtk_geometry(path, 4, 4, 1, 1);
    ADD_FAILURE() << "a cylinder of radius != SDD was accepted";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("RadiusCylindricalDetector"), std::string::npos)
        << e.what();
  }
  // ASTRA's vectors describe flat detectors only.
  EXPECT_THROW((void)io::astra_vectors(g), usage_error);
}

// A helix goes to RTK as SourceOffsetY advancing with the gantry angle and the detector offset
// with it (RTK's own helical description); it comes back as a helix, also with the angles
// wrapped into [0, 360) as RTK stores them, on flat and cylindrical detectors, angles up or
// down. A source off the helix makes a flat scan per-view vectors and a curved one a refusal.
TEST(RtkGeometry, HelixRoundTrip) {
  for (const detector_shape shape : {detector_shape::flat, detector_shape::cylindrical})
    for (const double step : {9.0, -7.0}) {
      const geometry g = make_helical_geometry(31, 5, 0.9, 1.1, 400, 800,
                                               angle_range(deg_to_rad(20), deg_to_rad(step), 200),
                                               -6.5, 12, 0.4, -0.3, shape);
      auto p = io::rtk_from_geometry(g);
      for (auto& q : p) q.gantry_deg = std::fmod(std::fmod(q.gantry_deg, 360) + 360, 360);
      const geometry b = io::geometry_from_rtk(io::parse_rtk_xml(io::rtk_xml(p)), 31, 5, 0.9, 1.1);
      ASSERT_TRUE(b.helix.has_value()) << step;
      EXPECT_EQ(b.shape, shape);
      EXPECT_NEAR(b.helix->pitch_mm_per_turn, -6.5, 1e-9);
      double worst = 0;
      for (std::size_t i = 0; i < g.views.size(); ++i)
        worst = std::max({worst, norm(b.views[i].source - g.views[i].source),
                          norm(b.views[i].detector_center - g.views[i].detector_center),
                          norm(b.views[i].u - g.views[i].u), norm(b.views[i].v - g.views[i].v)});
      EXPECT_LT(worst, 1e-9);
      p[57].source_offset_y += 0.01;
      p[57].proj_offset_y += 0.01;
      if (shape == detector_shape::flat) {
        EXPECT_EQ(io::geometry_from_rtk(p, 31, 5, 0.9, 1.1).type_name(), "cone_vec");
      } else {
        ctforge::testing::expect_usage_error_naming(
            [&] { (void)io::geometry_from_rtk(p, 31, 5, 0.9, 1.1); }, "helix");
      }
    }
}

TEST(RtkGeometry, ParallelRoundTrip) {
  const geometry g =
      make_parallel_geometry(16, 1, 0.5, 0.5, angle_range(0, deg_to_rad(20), 10), {1.5}, {});
  const auto p = io::rtk_from_geometry(g);
  const geometry back =
      io::geometry_from_rtk(io::parse_rtk_xml(io::rtk_xml(p)), g.cols, g.rows, 0.5, 0.5);
  EXPECT_EQ(back.type_name(), "parallel");
  expect_same_vectors(g, back);
}

// A tilted, offset RTK geometry (every one of the 9 parameters non-trivial) imported as a
// vector geometry: each point projects to the same pixel as RTK's own formula says.
TEST(RtkGeometry, TiltedGeometryProjectsPointsLikeRtk) {
  std::vector<io::rtk_projection> projs;
  for (int i = 0; i < 6; ++i) {
    io::rtk_projection p;
    p.sid = 700 + 10 * i;
    p.sdd = 1100 + 5 * i;
    p.gantry_deg = 13 + 61.5 * i;
    p.proj_offset_x = 3.5 - i;
    p.proj_offset_y = -2 + 0.3 * i;
    p.out_of_plane_deg = 4 - 1.5 * i;
    p.in_plane_deg = -7 + 2.5 * i;
    p.source_offset_x = 1.25 * i - 2;
    p.source_offset_y = 0.75 - 0.5 * i;
    projs.push_back(p);
  }
  const std::int64_t cols = 40, rows = 25;
  const double du = 0.7, dv = 0.9;
  const geometry g = io::geometry_from_rtk(projs, cols, rows, du, dv);
  EXPECT_EQ(g.type_name(), "cone_vec");
  for (std::size_t i = 0; i < projs.size(); ++i) {
    for (const vec3 X : random_points(20, 60, 7 + static_cast<unsigned>(i))) {
      // RTK: projection coordinates (mm) of the RTK-world point; pixel = (u - origin) / spacing
      // with the centred image origin -(size - 1) / 2 * spacing.
      const rtk_uv uv = rtk_project(projs[i], X);
      const double col = uv.u / du + 0.5 * (cols - 1), row = uv.v / dv + 0.5 * (rows - 1);
      const auto [c, r] = our_pixel(g, static_cast<std::int64_t>(i), io::world_from_rtk(X));
      // 1e-9 px: both are closed forms in double precision (~1e-12 relative).
      EXPECT_NEAR(c, col, 1e-9) << "projection " << i;
      EXPECT_NEAR(r, row, 1e-9) << "projection " << i;
    }
  }
  // Export recovers the 9 parameters (so RTK reads back the same geometry) ...
  const auto again = io::rtk_from_geometry(g);
  ASSERT_EQ(again.size(), projs.size());
  for (std::size_t i = 0; i < projs.size(); ++i) {
    EXPECT_NEAR(again[i].sid, projs[i].sid, 1e-9);
    EXPECT_NEAR(again[i].sdd, projs[i].sdd, 1e-9);
    EXPECT_NEAR(std::remainder(again[i].gantry_deg - projs[i].gantry_deg, 360.0), 0, 1e-9);
    EXPECT_NEAR(again[i].out_of_plane_deg, projs[i].out_of_plane_deg, 1e-9);
    EXPECT_NEAR(again[i].in_plane_deg, projs[i].in_plane_deg, 1e-9);
    EXPECT_NEAR(again[i].proj_offset_x, projs[i].proj_offset_x, 1e-9);
    EXPECT_NEAR(again[i].proj_offset_y, projs[i].proj_offset_y, 1e-9);
    EXPECT_NEAR(again[i].source_offset_x, projs[i].source_offset_x, 1e-9);
    EXPECT_NEAR(again[i].source_offset_y, projs[i].source_offset_y, 1e-9);
  }
  // ... and the XML round trip keeps the vectors.
  const std::string path = temp_path("tilted_rtk.xml");
  io::write_rtk_geometry(path, g);
  expect_same_vectors(g, io::read_rtk_geometry(path, cols, rows, du, dv));
}

TEST(RtkGeometry, MatrixInFileMatchesRtkFormula) {
  io::rtk_projection p;
  p.sid = 1000;
  p.sdd = 1536;
  p.gantry_deg = 37;
  p.proj_offset_x = 4;
  p.out_of_plane_deg = 2;
  p.source_offset_y = -3;
  const auto m = io::rtk_matrix(p);
  for (const vec3 X : random_points(10, 100, 3)) {
    const rtk_uv uv = rtk_project(p, X);
    const double w = m[8] * X.x + m[9] * X.y + m[10] * X.z + m[11];
    EXPECT_NEAR((m[0] * X.x + m[1] * X.y + m[2] * X.z + m[3]) / w, uv.u, 1e-9);
    EXPECT_NEAR((m[4] * X.x + m[5] * X.y + m[6] * X.z + m[7]) / w, uv.v, 1e-9);
  }
}

TEST(RtkGeometry, ReadsHandWrittenRtkFileWithGlobalsAndLegacyNames) {
  // Globals before the projections carry over (RTK's reader semantics); "Angle" is RTK's old
  // name of GantryAngle; element names are case-insensitive.
  const std::string xml = R"(<?xml version="1.0"?>
<!DOCTYPE RTKGEOMETRY>
<RTKThreeDCircularGeometry version="2">
  <SourceToIsocenterDistance>1000</SourceToIsocenterDistance>
  <SourceToDetectorDistance>1500</SourceToDetectorDistance>
  <Projection><GantryAngle>0</GantryAngle></Projection>
  <Projection><angle>90</angle><ProjectionOffsetX>2</ProjectionOffsetX></Projection>
</RTKThreeDCircularGeometry>
)";
  const auto p = io::parse_rtk_xml(xml, "inline");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].sid, 1000);
  EXPECT_EQ(p[1].sdd, 1500);
  EXPECT_EQ(p[1].gantry_deg, 90);
  EXPECT_EQ(p[1].proj_offset_x, 2);
  const geometry g = io::geometry_from_rtk(p, 10, 10, 1, 1);
  // RTK gantry angle 0: source on RTK +z = our -y, as our angle 0.
  expect_vec_near(g.views[0].source, {0, -1000, 0}, 1e-9, "source at angle 0");
  expect_vec_near(g.views[1].source, {1000, 0, 0}, 1e-9, "source at 90 degrees");
}

TEST(RtkGeometry, MalformedFilesNameTheFile) {
  const std::string path = temp_path("bad_rtk.xml");
  auto expect_error = [&](const std::string& text, const std::string& needle) {
    std::ofstream(path) << text;
    try {
      io::read_rtk_geometry(path, 4, 4, 1, 1);
      ADD_FAILURE() << "no error for: " << text;
    } catch (const error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  expect_error("<RTKThreeDCircularGeometry version=\"3\"><Projection><GantryAngle>1",
               "malformed XML");
  expect_error(
      "<RTKThreeDCircularGeometry "
      "version=\"3\"><Projection><GantryAngle>x</GantryAngle></Projection>"
      "</RTKThreeDCircularGeometry>",
      "GantryAngle");
  expect_error("<Other/>", "not an RTK geometry");
  expect_error("<RTKThreeDCircularGeometry version=\"3\"></RTKThreeDCircularGeometry>",
               "without any");
  expect_error(
      "<RTKThreeDCircularGeometry "
      "version=\"3\"><SourceToIsocenterDistance>1000</SourceToIsocenterDistance>"
      "<SourceToDetectorDistance>1500</SourceToDetectorDistance><Projection><GantryAngle>10</"
      "GantryAngle>"
      "<Matrix>1 2 3 4 5 6 7 8 9 10 11 12</Matrix></Projection></RTKThreeDCircularGeometry>",
      "disagrees");
  EXPECT_THROW(io::read_rtk_geometry(temp_path("missing.xml"), 4, 4, 1, 1), error);
}

// ---- ASTRA -------------------------------------------------------------------------------------

// Independent ASTRA projection: solve src + t (X - src) = d + a u + b v (Cramer's rule) and
// use ASTRA's pixel convention: pixel (row i, col j) centre = d + (j + 0.5 - cols/2) u +
// (i + 0.5 - rows/2) v.
std::pair<double, double> astra_pixel(const io::astra_vector& r, beam_kind beam, std::int64_t cols,
                                      std::int64_t rows, vec3 X) {
  const vec3 s{r[0], r[1], r[2]}, d{r[3], r[4], r[5]}, u{r[6], r[7], r[8]}, v{r[9], r[10], r[11]};
  const vec3 dir = beam == beam_kind::cone ? X - s : s;  // parallel: s is the ray direction
  const vec3 from = beam == beam_kind::cone ? s : X;
  // from + t dir = d + a u + b v  =>  a u + b v - t dir = from - d
  const vec3 rhs = from - d, m_dir = -1.0 * dir;
  const double det = dot(u, cross(v, m_dir));
  const double a = dot(rhs, cross(v, m_dir)) / det;
  const double b = dot(u, cross(rhs, m_dir)) / det;
  return {a - 0.5 + 0.5 * static_cast<double>(cols), b - 0.5 + 0.5 * static_cast<double>(rows)};
}

struct astra_case {
  beam_kind beam;
  std::int64_t cols, rows, views;
};

class AstraVectors : public ::testing::TestWithParam<astra_case> {};

TEST_P(AstraVectors, RoundTripAndSameDetectorPositions) {
  const auto c = GetParam();
  const auto angles = angle_range(0.3, deg_to_rad(360.0 / static_cast<double>(c.views)), c.views);
  geometry circ =
      c.beam == beam_kind::cone
          ? make_cone_geometry(c.cols, c.rows, 0.6, 0.45, 400, 650, angles, {1.25}, {-0.5})
          : make_parallel_geometry(c.cols, c.rows, 0.6, 0.45, angles, {1.25}, {-0.5});
  // A tilted vector geometry too: rotate every vector of the circular one about x.
  std::vector<view_vectors> tilted = circ.views;
  const double t = deg_to_rad(5);
  auto rot = [&](vec3 p) {
    return vec3{p.x, std::cos(t) * p.y - std::sin(t) * p.z, std::sin(t) * p.y + std::cos(t) * p.z};
  };
  for (auto& w : tilted)
    w = {rot(w.source), rot(w.detector_center) + vec3{0.3, 0, 0.2}, rot(w.u), rot(w.v)};
  const geometry vec = make_vec_geometry(c.beam, c.cols, c.rows, tilted);
  for (const geometry& g : {circ, vec}) {
    const std::string path = temp_path("astra_vectors.txt");
    io::write_astra_vectors(path, g);
    const geometry back = io::read_astra_vectors(path, c.beam, c.cols, c.rows);
    expect_same_vectors(g, back);
    const auto rows12 = io::astra_vectors(g);
    for (std::int64_t i = 0; i < g.view_count(); ++i) {
      for (const vec3 X : random_points(5, 30, 11 + static_cast<unsigned>(i))) {
        const auto [ac, ar] =
            astra_pixel(rows12[static_cast<std::size_t>(i)], c.beam, c.cols, c.rows, X);
        const auto [oc, orow] = our_pixel(g, i, X);
        EXPECT_NEAR(oc, ac, 1e-9);  // closed forms in double precision
        EXPECT_NEAR(orow, ar, 1e-9);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AstraVectors,
                         ::testing::Values(astra_case{beam_kind::cone, 33, 17, 12},
                                           astra_case{beam_kind::cone, 8, 1, 1},
                                           astra_case{beam_kind::parallel, 21, 5, 7},
                                           astra_case{beam_kind::parallel, 1, 1, 3}));

TEST(AstraVectors, AgreesWithAstraConeConversion) {
  // ASTRA's cone -> cone_vec conversion (astra.geom_2vec / GeometryUtil3D): src = (sin a * dso,
  // -cos a * dso, 0), d = (-sin a * dod, cos a * dod, 0), u = (cos a, sin a, 0) * du,
  // v = (0, 0, dv). Our circular cone must produce exactly these rows.
  const double dso = 500, dod = 300, du = 0.4, dv = 0.7;
  const auto angles = angle_range(0.1, 0.5, 4);
  const geometry g = make_cone_geometry(10, 6, du, dv, dso, dso + dod, angles);
  const auto rows = io::astra_vectors(g);
  for (std::size_t i = 0; i < angles.size(); ++i) {
    const double a = angles[i];
    const io::astra_vector expect{std::sin(a) * dso,
                                  -std::cos(a) * dso,
                                  0,
                                  -std::sin(a) * dod,
                                  std::cos(a) * dod,
                                  0,
                                  std::cos(a) * du,
                                  std::sin(a) * du,
                                  0,
                                  0,
                                  0,
                                  dv};
    for (int k = 0; k < 12; ++k)
      EXPECT_NEAR(rows[i][static_cast<std::size_t>(k)], expect[static_cast<std::size_t>(k)], 1e-9);
  }
}

TEST(AstraVectors, BadFilesNameTheFile) {
  const std::string path = temp_path("bad_astra.txt");
  std::ofstream(path) << "1 2 3 4 5 6 7 8 9 10 11\n";
  try {
    io::read_astra_vectors(path, beam_kind::cone, 4, 4);
    ADD_FAILURE() << "11 numbers accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::ofstream(path) << "# comment only\n";
  EXPECT_THROW(io::read_astra_vectors(path, beam_kind::cone, 4, 4), error);
  std::ofstream(path) << "0 -500 0 0 300 0 1 0 0 0 0 nan\n";
  EXPECT_THROW(io::read_astra_vectors(path, beam_kind::cone, 4, 4), error);
  // Degenerate detector (u parallel to v): usage_error naming the file.
  std::ofstream(path) << "0,-500,0, 0,300,0, 1,0,0, 2,0,0\n";
  try {
    io::read_astra_vectors(path, beam_kind::cone, 4, 4);
    ADD_FAILURE() << "degenerate detector accepted";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctforge
