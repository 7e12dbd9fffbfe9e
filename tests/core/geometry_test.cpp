// Geometry: JSON round trips, validation errors, the circular-orbit convention, and projection
// matrices against pixel centres.
#include "ctforge/geometry.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ctforge/error.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

// Degrees in the file and radians in memory: each conversion rounds, so a value read back
// differs from the original by a few ulps at most (relative 1e-15); per-view vectors built from
// sin/cos of such angles then differ by ~1e-15 * |vector|. 1e-12 relative is far below any
// real error (a wrong sign or a missing offset is O(1)).
void expect_same_views(const geometry& a, const geometry& b, double tol_rel = 1e-12) {
  ASSERT_EQ(a.beam, b.beam);
  ASSERT_EQ(a.cols, b.cols);
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.view_count(), b.view_count());
  ASSERT_EQ(a.type_name(), b.type_name());
  auto near = [&](vec3 x, vec3 y, const char* what, std::size_t i) {
    const double tol = tol_rel * (1 + norm(x));
    EXPECT_NEAR(x.x, y.x, tol) << what << " view " << i;
    EXPECT_NEAR(x.y, y.y, tol) << what << " view " << i;
    EXPECT_NEAR(x.z, y.z, tol) << what << " view " << i;
  };
  for (std::size_t i = 0; i < a.views.size(); ++i) {
    near(a.views[i].source, b.views[i].source, "source", i);
    near(a.views[i].detector_center, b.views[i].detector_center, "detector_center", i);
    near(a.views[i].u, b.views[i].u, "u", i);
    near(a.views[i].v, b.views[i].v, "v", i);
  }
  ASSERT_EQ(a.orbit.has_value(), b.orbit.has_value());
  if (a.orbit) {
    EXPECT_EQ(a.orbit->source_to_isocenter_mm, b.orbit->source_to_isocenter_mm);
    EXPECT_EQ(a.orbit->source_to_detector_mm, b.orbit->source_to_detector_mm);
    for (std::size_t i = 0; i < a.views.size(); ++i) {
      EXPECT_NEAR(a.orbit->angles_rad[i], b.orbit->angles_rad[i], 1e-14);
      EXPECT_EQ(a.orbit->offset_u_mm[i], b.orbit->offset_u_mm[i]);
      EXPECT_EQ(a.orbit->offset_v_mm[i], b.orbit->offset_v_mm[i]);
    }
  }
}

geometry round_trip(const geometry& g) {
  return geometry_from_json(geometry_to_json(g));
}

TEST(GeometryJson, ConeWithAngleListAndPerViewOffsets) {
  const std::string text = R"({"type": "cone", "detector": {"cols": 17, "rows": 9,
      "pixel_mm": [0.8, 1.2], "offset_mm": [[1.5, -0.5], [0, 0], [-2, 0.25]]},
      "source_to_isocenter_mm": 500, "source_to_detector_mm": 800,
      "angles_deg": [0, 37.5, 181]})";
  const geometry g = geometry_from_json(text);
  ASSERT_EQ(g.view_count(), 3);
  EXPECT_EQ(g.type_name(), "cone");
  EXPECT_EQ(g.orbit->offset_u_mm[2], -2);
  EXPECT_EQ(g.orbit->offset_v_mm[0], -0.5);
  const geometry h = round_trip(g);
  expect_same_views(g, h);
  // And the JSON of the copy is a fixed point up to the degree/radian rounding.
  expect_same_views(h, round_trip(h));
}

TEST(GeometryJson, ConeWithAngleRange) {
  const geometry g = geometry_from_json(R"({"type": "cone",
      "detector": {"cols": 4, "rows": 1, "pixel_mm": [1, 1], "offset_mm": [0.5, 0]},
      "source_to_isocenter_mm": 100, "source_to_detector_mm": 150,
      "angles_deg": {"start": 10, "step": -2.5, "count": 7}})");
  ASSERT_EQ(g.view_count(), 7);
  EXPECT_NEAR(g.orbit->angles_rad[6], deg_to_rad(10 - 15.0), 1e-15);
  for (double o : g.orbit->offset_u_mm) EXPECT_EQ(o, 0.5);  // one offset for every view
  expect_same_views(g, round_trip(g));
  // Same as building it in code.
  expect_same_views(
      g, make_cone_geometry(4, 1, 1, 1, 100, 150, angle_range(deg_to_rad(10), deg_to_rad(-2.5), 7),
                            {0.5}, {0}));
}

TEST(GeometryJson, Parallel) {
  const geometry g =
      make_parallel_geometry(33, 2, 0.5, 0.25, angle_range(0, deg_to_rad(1), 180), {1.25}, {-0.5});
  EXPECT_EQ(g.type_name(), "parallel");
  expect_same_views(g, round_trip(g));
}

std::vector<view_vectors> odd_views() {
  // Tilted, non-orthogonal detector steps; arbitrary positions.
  return {{{300, -20, 5}, {-200, 10, -3}, {0.1, 0.9, 0.05}, {0.02, -0.1, 1.1}},
          {{-10, 310, -7}, {12, -180, 4}, {-0.95, 0.0, 0.1}, {0.0, 0.05, 0.9}}};
}

TEST(GeometryJson, VectorTypesRoundTripExactly) {
  for (beam_kind b : {beam_kind::cone, beam_kind::parallel}) {
    const geometry g = make_vec_geometry(b, 21, 6, odd_views());
    EXPECT_EQ(g.type_name(), b == beam_kind::cone ? "cone_vec" : "parallel_vec");
    const geometry h = round_trip(g);
    expect_same_views(g, h, 0.0);  // no angle conversion: bit-identical
  }
}

// Every validation error: usage_error whose message names the field.
TEST(GeometryJson, ValidationErrorsNameTheField) {
  const std::string det = R"("detector": {"cols": 8, "rows": 4, "pixel_mm": [1, 1]})";
  // A cone geometry on `det` with these distances and angles (JSON texts).
  const auto cone = [&](const std::string& sid, const std::string& sdd, const std::string& angles) {
    return R"({"type": "cone", )" + det + R"(, "source_to_isocenter_mm": )" + sid +
           R"(, "source_to_detector_mm": )" + sdd + R"(, "angles_deg": )" + angles + "}";
  };
  const std::string cone_tail =
      R"("source_to_isocenter_mm": 100, "source_to_detector_mm": 200, "angles_deg": [0, 90])";
  const std::string view_ok =
      R"({"source": [0, -100, 0], "detector_center": [0, 50, 0], "u": [1, 0, 0], "v": [0, 0, 1]})";
  struct bad_case {
    std::string text, needle;
  };
  const bad_case cases[] = {
      {"{\"type\": ", "invalid JSON"},
      {R"({"type": "cone", )" + det + R"(, "source_to_detector_mm": 200, "angles_deg": [0]})",
       "'source_to_isocenter_mm': missing"},
      {R"({"type": "cone", )" + det + "}", "'angles_deg': missing"},
      {R"({"type": "cone", "detector": {"rows": 4, "pixel_mm": [1, 1]}, )" + cone_tail + "}",
       "detector.cols"},
      {R"({"type": "cone", "detector": {"cols": 0, "rows": 4, "pixel_mm": [1, 1]}, )" + cone_tail +
           "}",
       "detector.cols"},
      {R"({"type": "cone", "detector": {"cols": 3, "rows": -1, "pixel_mm": [1, 1]}, )" + cone_tail +
           "}",
       "detector.rows"},
      {cone("100", "100", "[0]"), "source_to_detector_mm"},
      {cone("0", "100", "[0]"), "source_to_isocenter_mm"},
      {cone("-5", "100", "[0]"), "source_to_isocenter_mm"},
      {cone("100", "200", "[]"), "angles_deg"},
      {R"({"type": "parallel", )" + det + R"(, "angles_deg": {"step": 1, "count": 0}})",
       "angles_deg.count"},
      {R"({"type": "parallel", )" + det + R"(, "angles_deg": [0, "a"]})", "angles_deg[1]"},
      {R"({"type": "parallel", "detector": {"cols": 8, "rows": 4, "pixel_mm": [1, 0]},
           "angles_deg": [0]})",
       "detector.pixel_mm"},
      {R"({"type": "cone", "detector": {"cols": 8, "rows": 4, "pixel_mm": [1, 1],
           "offset_mm": [[0, 0], [1, 1], [2, 2]]}, )" +
           cone_tail + "}",
       "detector.offset_mm"},
      {R"({"type": "fan", )" + det + "}", "'type'"},
      {R"({"type": 3, )" + det + "}", "'type'"},
      {R"({"type": "cone_vec", "detector": {"cols": 8, "rows": 4}, "views": []})", "views"},
      {R"({"type": "cone_vec", "detector": {"cols": 8, "rows": 4}, "views": [)" + view_ok +
           R"(, {"source": [0, -100, 0], "detector_center": [0, 50, 0], "u": [1, 0, 0],
           "v": [2, 0, 0]}]})",
       "views[1].u"},  // u parallel to v
      {R"({"type": "cone_vec", "detector": {"cols": 8, "rows": 4}, "views": [{"source": [0, -100, 0],
           "detector_center": [0, 50, 0], "u": [1, 0, 0]}]})",
       "views[0].v"},  // missing
      {R"({"type": "parallel_vec", "detector": {"cols": 8, "rows": 4}, "views": [{"ray": [1, 0, 0],
           "detector_center": [0, 50, 0], "u": [1, 0, 0], "v": [0, 0, 1]}]})",
       "views[0].ray"},  // ray within the detector plane
      {R"({"type": "cone_vec", "detector": {"cols": 8, "rows": 4}, "views": [{"source": [0, 1e999, 0],
           "detector_center": [0, 50, 0], "u": [1, 0, 0], "v": [0, 0, 1]}]})",
       "1e999"},  // JSON has no Inf literal: overflow is the way to write a non-finite number
  };
  for (const auto& c : cases) {
    try {
      geometry_from_json(c.text, "scan.json");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const usage_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("scan.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << "'" << msg << "' lacks " << c.needle;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a usage_error: " << e.what() << " for " << c.text;
    }
  }
}

// Validation through the C++ API (non-finite values cannot be written in JSON).
TEST(GeometryValidate, NonFiniteAndDegenerateThroughTheApi) {
  auto expect_usage = [](auto&& make, const std::string& needle) {
    try {
      make();
      ADD_FAILURE() << "accepted, expected an error naming " << needle;
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const double nan = std::nan(""), inf = INFINITY;
  expect_usage([&] { make_cone_geometry(8, 8, 1, 1, nan, 200, {0.0}); }, "source_to_isocenter_mm");
  expect_usage([&] { make_cone_geometry(8, 8, 1, 1, 100, inf, {0.0}); }, "source_to_detector_mm");
  expect_usage([&] { make_cone_geometry(8, 8, 1, 1, 100, 200, {0.0, nan}); }, "angles_deg");
  expect_usage([&] { make_parallel_geometry(8, 8, inf, 1, {0.0}); }, "pixel_mm");
  expect_usage([&] { make_parallel_geometry(0, 8, 1, 1, {0.0}); }, "detector.cols");
  expect_usage([&] { make_parallel_geometry(8, 8, 1, 1, {}); }, "view");
  auto views = odd_views();
  views[1].detector_center.y = nan;
  expect_usage([&] { make_vec_geometry(beam_kind::cone, 4, 4, views); },
               "views[1].detector_center");
  views = odd_views();
  views[0].v = 3.0 * views[0].u;
  expect_usage([&] { make_vec_geometry(beam_kind::cone, 4, 4, views); }, "views[0].u");
  expect_usage([&] { make_vec_geometry(beam_kind::parallel, 4, 4, {}); }, "view");
}

// A vector geometry has no 'detector.pixel_mm': a zero, tiny (its length underflows) or
// overflowing u / v of any view, view 0 included, is named as views[i].u / .v.
TEST(GeometryValidate, PixelVectorsAreNamedByView) {
  for (const auto& [view, field, bad] :
       {std::tuple{0, "u", vec3{0, 0, 0}}, std::tuple{0, "v", vec3{1e-200, 0, 0}},
        std::tuple{1, "u", vec3{1e-12, 0, 0}}, std::tuple{1, "v", vec3{0, 0, 1e300}}}) {
    auto views = odd_views();
    ASSERT_LT(view, static_cast<int>(views.size()));
    (std::string(field) == "u" ? views[view].u : views[view].v) = bad;
    const std::string name = "views[" + std::to_string(view) + "]." + field;
    for (beam_kind b : {beam_kind::cone, beam_kind::parallel})
      testing::expect_error_naming([&] { make_vec_geometry(b, 4, 4, views); }, name);
    try {
      make_vec_geometry(beam_kind::cone, 4, 4, views);
    } catch (const usage_error& e) {
      EXPECT_EQ(std::string(e.what()).find("pixel_mm"), std::string::npos) << e.what();
    }
  }
  // Circular geometries still name their own field.
  testing::expect_error_naming([&] { make_parallel_geometry(8, 8, 1e-200, 1, {0.0}); },
                               "detector.pixel_mm");
}

TEST(GeometryConvention, CircularConeVectors) {
  const double sid = 400, sdd = 650, du = 0.7, dv = 1.3, ou = 2.5, ov = -1.5;
  const std::vector<double> angles{0.0, 0.5, deg_to_rad(90), deg_to_rad(200)};
  const geometry g = make_cone_geometry(10, 6, du, dv, sid, sdd, angles, {ou}, {ov});
  for (std::size_t i = 0; i < angles.size(); ++i) {
    const double t = angles[i], s = std::sin(t), c = std::cos(t);
    const view_vectors& w = g.views[i];
    const vec3 uh{c, s, 0}, vh{0, 0, 1};
    auto expect_vec = [&](vec3 a, vec3 b, const char* what) {
      EXPECT_NEAR(a.x, b.x, 1e-12 * sdd) << what << " view " << i;
      EXPECT_NEAR(a.y, b.y, 1e-12 * sdd) << what << " view " << i;
      EXPECT_NEAR(a.z, b.z, 1e-12 * sdd) << what << " view " << i;
    };
    expect_vec(w.source, {sid * s, -sid * c, 0}, "source");
    expect_vec(w.detector_center, vec3{-(sdd - sid) * s, (sdd - sid) * c, 0} + ou * uh + ov * vh,
               "detector_center");
    expect_vec(w.u, du * uh, "u");
    expect_vec(w.v, dv * vh, "v");
  }
  // At angle 0 the source is on -y, the detector on +y, u along +x.
  EXPECT_LT(g.views[0].source.y, 0);
  EXPECT_GT(g.views[0].detector_center.y, 0);
  EXPECT_GT(g.views[0].u.x, 0);
}

TEST(GeometryConvention, CircularParallelVectors) {
  const geometry g = make_parallel_geometry(5, 3, 1.5, 2.0, {0.0, 1.0}, {0.5}, {0.0});
  for (int i = 0; i < 2; ++i) {
    const double t = i, s = std::sin(t), c = std::cos(t);
    EXPECT_NEAR(g.views[i].source.x, -s, 1e-15);
    EXPECT_NEAR(g.views[i].source.y, c, 1e-15);
    EXPECT_EQ(g.views[i].source.z, 0);
    EXPECT_NEAR(g.views[i].detector_center.x, 0.5 * c, 1e-15);
    EXPECT_NEAR(g.views[i].detector_center.y, 0.5 * s, 1e-15);
  }
}

TEST(GeometryConvention, PixelCentreFormula) {
  const geometry g = make_vec_geometry(beam_kind::cone, 6, 3, odd_views());
  const view_vectors& w = g.views[1];
  const vec3 p = pixel_center(g, 1, 0, 2);  // (col - 2.5) u + (row - 1) v
  const vec3 e = w.detector_center + (-2.5) * w.u + 1.0 * w.v;
  EXPECT_NEAR(norm(p - e), 0, 1e-12);
}

// Points on the ray of pixel (col, row), at several depths, must project back to (col, row).
// Double precision throughout; coordinates are O(1e3) so 1e-9 pixel is ~1e5 ulps of margin
// against rounding yet far below any error of the matrix derivation.
void check_matrices(const geometry& g) {
  const auto mats = compute_projection_matrices(g);
  ASSERT_EQ(static_cast<std::int64_t>(mats.size()), g.view_count());
  for (std::int64_t view = 0; view < g.view_count(); ++view) {
    const projection_matrix& m = mats[view];
    EXPECT_EQ(m, compute_projection_matrix(g, view));
    for (double col : {0.0, 0.5 * (g.cols - 1), static_cast<double>(g.cols - 1), -3.25}) {
      for (double row : {0.0, static_cast<double>(g.rows - 1), 1.75}) {
        const vec3 px = pixel_center(g, view, col, row);
        const vec3 s = g.views[view].source;
        for (double lambda : {0.1, 0.45, 0.8, 1.0, 1.6}) {
          // Cone: the point at fraction lambda of the way from the source to the pixel, whose
          // depth fraction is lambda. Parallel: the pixel shifted along the ray (p2 == 1).
          const vec3 x =
              g.beam == beam_kind::cone ? s + lambda * (px - s) : px + (300.0 * (lambda - 0.7)) * s;
          const double p0 = m[0] * x.x + m[1] * x.y + m[2] * x.z + m[3];
          const double p1 = m[4] * x.x + m[5] * x.y + m[6] * x.z + m[7];
          const double p2 = m[8] * x.x + m[9] * x.y + m[10] * x.z + m[11];
          EXPECT_NEAR(p0 / p2, col, 1e-9) << g.type_name() << " view " << view;
          EXPECT_NEAR(p1 / p2, row, 1e-9) << g.type_name() << " view " << view;
          EXPECT_NEAR(p2, g.beam == beam_kind::cone ? lambda : 1.0, 1e-12);
        }
      }
    }
  }
}

TEST(ProjectionMatrix, CircularCone) {
  check_matrices(
      make_cone_geometry(64, 48, 0.8, 0.9, 500, 900, angle_range(0.1, 0.9, 7), {3.0}, {-1.5}));
}
TEST(ProjectionMatrix, FanBeamSingleRowSingleView) {
  check_matrices(make_cone_geometry(31, 1, 1.0, 1.0, 410.66, 553.74, {deg_to_rad(33)}));
}
TEST(ProjectionMatrix, CircularParallel) {
  check_matrices(make_parallel_geometry(17, 5, 0.5, 1.5, angle_range(0, 0.4, 5), {0.75}, {0.2}));
}
TEST(ProjectionMatrix, VectorGeometriesWithTiltedDetectors) {
  check_matrices(make_vec_geometry(beam_kind::cone, 13, 7, odd_views()));
  check_matrices(make_vec_geometry(beam_kind::parallel, 13, 7, odd_views()));
}

}  // namespace
}  // namespace ctforge

// Unknown keys are errors naming the key, with the nearest known one as a suggestion (a typo
// such as "colz" was silently ignored); notes under "_..." / "comment" are allowed; absurd view
// counts and non-regular files are refused before anything large is allocated or read.
TEST(GeometryJson, UnknownKeysSizesAndFiles) {
  using namespace ctforge;
  const std::string base = R"({"type":"cone","source_to_isocenter_mm":500,
      "source_to_detector_mm":1000,"detector":{"cols":4,"rows":2,"pixel_mm":[1,1]},
      "angles_deg":{"start":0,"step":1,"count":3})";
  EXPECT_NO_THROW(geometry_from_json(base + "}"));
  EXPECT_NO_THROW(geometry_from_json(base + R"(,"comment":"scanner B","_id":7})"));
  struct bad {
    std::string text, needle;
  };
  const std::vector<bad> cases = {
      {R"({"type":"cone","source_to_isocenter_mm":500,"source_to_detector_mm":1000,
          "detector":{"cols":4,"colz":2,"rows":2,"pixel_mm":[1,1]},"angles_deg":[0]})",
       "'detector.colz': unknown key; did you mean 'cols'?"},
      {base + R"(,"source_to_isocentre_mm":500})", "did you mean 'source_to_isocenter_mm'?"},
      {R"({"type":"cone","source_to_isocenter_mm":500,"source_to_detector_mm":1000,
          "detector":{"cols":4,"rows":2,"pixel_mm":[1,1]},"angles_deg":{"start":0,"stp":1,"count":3}})",
       "'angles_deg.stp'"},
      {R"({"type":"cone_vec","detector":{"cols":4,"rows":2},"views":[{"source":[0,-5,0],
          "detector_center":[0,5,0],"u":[1,0,0],"v":[0,0,1],"w":[0,0,0]}]})",
       "'views[0].w'"},
      {R"({"type":"cone","source_to_isocenter_mm":500,"source_to_detector_mm":1000,
          "detector":{"cols":4,"rows":2,"pixel_mm":[1,1]},"angles_deg":{"step":1,"count":1000000000}})",
       "at most 10000000"},
  };
  for (const auto& c : cases) {
    try {
      (void)geometry_from_json(c.text, "g.json");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
  try {
    (void)load_geometry("/dev/zero");
    ADD_FAILURE() << "/dev/zero accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

// ---- cylindrical (curved) detectors -------------------------------------------------------------

namespace ctforge {
namespace {

vec3 normalized_xy(vec3 a) {
  const double n = std::hypot(a.x, a.y);
  return {a.x / n, a.y / n, 0};
}

const std::string k_cyl_json =
    R"({"type": "cone", "detector": {"shape": "cylindrical", "cols": 64, "rows": 8,
        "pixel_mm": [1.5, 1.2], "offset_mm": [[4, -1], [3.5, 0], [0, 2]]},
        "source_to_isocenter_mm": 600, "source_to_detector_mm": 1100,
        "angles_deg": [0, 100, 230]})";

TEST(GeometryCylindrical, JsonRoundTrip) {
  const geometry g = geometry_from_json(k_cyl_json);
  EXPECT_EQ(g.shape, detector_shape::cylindrical);
  EXPECT_TRUE(g.curved());
  const std::string text = geometry_to_json(g);
  EXPECT_NE(text.find(R"("shape":"cylindrical")"), std::string::npos) << text;
  const geometry back = geometry_from_json(text);
  EXPECT_EQ(back.shape, detector_shape::cylindrical);
  expect_same_views(g, back);
  // "flat" is the default and is what a flat geometry means; it is not written out.
  const geometry flat = geometry_from_json(
      R"({"type": "cone", "detector": {"shape": "flat", "cols": 4, "rows": 4, "pixel_mm": [1, 1]},
          "source_to_isocenter_mm": 100, "source_to_detector_mm": 200, "angles_deg": [0]})");
  EXPECT_EQ(flat.shape, detector_shape::flat);
  EXPECT_EQ(geometry_to_json(flat).find("shape"), std::string::npos);
}

TEST(GeometryCylindrical, BadCombinationsNameTheField) {
  const auto expect_refused = [](const std::string& text, const std::string& needle) {
    try {
      (void)geometry_from_json(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused(R"({"type": "parallel", "detector": {"shape": "cylindrical", "cols": 4,
                  "rows": 4, "pixel_mm": [1, 1]}, "angles_deg": [0]})",
                 "detector.shape");
  expect_refused(R"({"type": "parallel_vec", "detector": {"shape": "cylindrical", "cols": 4,
                  "rows": 4}, "views": [{"ray": [0, 1, 0], "detector_center": [0, 50, 0],
                  "u": [1, 0, 0], "v": [0, 0, 1]}]})",
                 "detector.shape");
  // cone_vec: each view's cylinder stands on its source with its axis along z.
  expect_refused(R"({"type": "cone_vec", "detector": {"shape": "cylindrical", "cols": 4,
                  "rows": 4}, "views": [{"source": [0, -100, 0], "detector_center": [0, 50, 0],
                  "u": [1, 0, 0], "v": [0, 0.1, 1]}]})",
                 "views[0].v");
  expect_refused(R"({"type": "cone_vec", "detector": {"shape": "cylindrical", "cols": 4,
                  "rows": 4}, "views": [{"source": [0, -100, 0], "detector_center": [0, 50, 0],
                  "u": [1, 0, 0], "v": [0, 0, 1]}, {"source": [0, -100, 0],
                  "detector_center": [0, 50, 0], "u": [1, 0.2, 0], "v": [0, 0, 1]}]})",
                 "views[1].u");
  expect_refused(R"({"type": "cone", "detector": {"shape": "round", "cols": 4, "rows": 4,
                  "pixel_mm": [1, 1]}, "source_to_isocenter_mm": 100,
                  "source_to_detector_mm": 200, "angles_deg": [0]})",
                 "detector.shape");
  expect_refused(R"({"type": "cone", "detector": {"shape": 1, "cols": 4, "rows": 4,
                  "pixel_mm": [1, 1]}, "source_to_isocenter_mm": 100,
                  "source_to_detector_mm": 200, "angles_deg": [0]})",
                 "detector.shape");
  // Through the API: a curved vector geometry needs tangent frames of cylinders about the
  // sources; a tilted detector is none.
  geometry g = make_cone_geometry(4, 4, 1, 1, 100, 200, {0.0});
  g.orbit.reset();
  g.shape = detector_shape::cylindrical;
  EXPECT_NO_THROW(g.validate());
  g.views[0].v = vec3{0, 0.05, 1};
  EXPECT_THROW(g.validate(), usage_error);
  // Projection matrices describe flat detectors only.
  try {
    (void)compute_projection_matrix(geometry_from_json(k_cyl_json), 0);
    ADD_FAILURE() << "a curved detector got a projection matrix";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("detector.shape"), std::string::npos) << e.what();
  }
}

// A cone_vec geometry holding a curved circular cone's view vectors is the same detector: the
// same pixel centres and projections, and its JSON keeps the shape.
TEST(GeometryCylindrical, VectorViewsOfACylinderAreTheSameDetector) {
  const geometry c = geometry_from_json(k_cyl_json);
  const geometry v = make_vec_geometry(beam_kind::cone, c.cols, c.rows, c.views, c.shape);
  EXPECT_EQ(v.type_name(), "cone_vec");
  ASSERT_TRUE(v.curved());
  const geometry back = geometry_from_json(geometry_to_json(v));
  EXPECT_TRUE(back.curved());
  expect_same_views(v, back);
  for (std::int64_t k = 0; k < c.view_count(); ++k) {
    for (double col : {0.0, 17.25, 63.0})
      for (double row : {0.0, 5.5})
        EXPECT_NEAR(norm(pixel_center(v, k, col, row) - pixel_center(c, k, col, row)), 0, 1e-9);
    for (const vec3 x : {vec3{0, 0, 0}, vec3{30, -20, 4}, vec3{-45, 10, -3}}) {
      const detector_coords a = project_to_detector(c, k, x), b = project_to_detector(v, k, x);
      EXPECT_NEAR(a.col, b.col, 1e-9);
      EXPECT_NEAR(a.row, b.row, 1e-9);
    }
  }
}

// Every pixel centre lies on the cylinder of radius SDD about the source (axis along z), at
// height (row - r0) dv + off_v; columns are equally spaced in arc length (du apart, measured as
// the angle between adjacent pixels times SDD); the centre pixel of an unshifted curved detector
// is the flat detector's.
TEST(GeometryCylindrical, PixelCentresLieOnTheCylinder) {
  const geometry g = geometry_from_json(k_cyl_json);
  const double sdd = 1100, du = 1.5, dv = 1.2;
  for (std::int64_t v = 0; v < g.view_count(); ++v) {
    const vec3 s = g.views[static_cast<std::size_t>(v)].source;
    const double ou = g.orbit->offset_u_mm[static_cast<std::size_t>(v)];
    const double ov = g.orbit->offset_v_mm[static_cast<std::size_t>(v)];
    const double t = g.orbit->angles_rad[static_cast<std::size_t>(v)];
    const vec3 central{-std::sin(t), std::cos(t), 0};  // source towards the isocentre
    for (double row : {0.0, 3.5, 7.0}) {
      for (double col : {0.0, 13.0, 31.5, 63.0}) {
        const vec3 p = pixel_center(g, v, col, row);
        const vec3 r = p - s;
        EXPECT_NEAR(std::hypot(r.x, r.y), sdd, 1e-9);
        EXPECT_NEAR(p.z, (row - 3.5) * dv + ov, 1e-9);
        // Signed fan angle from the central ray: arc (col - c0) du + off_u over SDD.
        const double gamma = std::atan2(dot(r, vec3{std::cos(t), std::sin(t), 0}), dot(r, central));
        EXPECT_NEAR(gamma * sdd, (col - 31.5) * du + ou, 1e-9);
      }
      const vec3 a = pixel_center(g, v, 20, row), b = pixel_center(g, v, 21, row);
      const double ang = std::acos(dot(normalized_xy(a - s), normalized_xy(b - s)));
      EXPECT_NEAR(ang * sdd, du, 1e-6);
    }
  }
  const auto angles = std::vector<double>{0.0, 1.0, 2.5};
  const geometry c =
      make_cone_geometry(65, 9, 1.5, 1.2, 600, 1100, angles, {}, {}, detector_shape::cylindrical);
  const geometry f = make_cone_geometry(65, 9, 1.5, 1.2, 600, 1100, angles);
  for (std::int64_t v = 0; v < 3; ++v) {
    const vec3 pc = pixel_center(c, v, 32, 4), pf = pixel_center(f, v, 32, 4);
    EXPECT_NEAR(norm(pc - pf), 0.0, 1e-9);
    // Off the centre the curved pixel sits closer to the source than the flat one.
    const auto k = static_cast<std::size_t>(v);
    EXPECT_GT(norm(pixel_center(f, v, 0, 4) - f.views[k].source) -
                  norm(pixel_center(c, v, 0, 4) - c.views[k].source),
              0.5);
  }
}

}  // namespace
}  // namespace ctforge
