// Geometry interchange with RTK (ThreeDCircularProjectionGeometry XML) and ASTRA (cone_vec /
// parallel3d_vec rows). Frame conventions: see include/ctforge/formats.hpp.
//
// RTK's projection of a world point X (RTK frame), for one projection with parameters
// (sid, sdd, ga, px, py, oa, ia, sx, sy) [rtkThreeDCircularProjectionGeometry.cxx]:
//     R   = Rz(-ia) Rx(-oa) Ry(-ga)        (ITK Euler3DTransform, ZXY order)
//     Xr  = R X - (sx, sy, 0)
//     cone:     u = -sdd Xr.x / (Xr.z - sid) + sx - px,  v likewise with y
//     parallel: u = Xr.x + sx - px                        (sdd == 0)
// i.e. in the rotated frame the source sits at (sx, sy, sid), the detector plane at
// z = sid - sdd with its u, v axes along x, y, and projection coordinate (u, v) at
// (u + px, v + py, sid - sdd). The detector normal +z points towards the source.
#include <expat.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/text_file.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"

namespace ctforge::io {
namespace {

using mat3 = std::array<std::array<double, 3>, 3>;

mat3 mul(const mat3& a, const mat3& b) {
  mat3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i][j] += a[i][k] * b[k][j];
  return c;
}
mat3 rot_x(double a) {
  const double c = std::cos(a), s = std::sin(a);
  return {{{1, 0, 0}, {0, c, -s}, {0, s, c}}};
}
mat3 rot_y(double a) {
  const double c = std::cos(a), s = std::sin(a);
  return {{{c, 0, s}, {0, 1, 0}, {-s, 0, c}}};
}
mat3 rot_z(double a) {
  const double c = std::cos(a), s = std::sin(a);
  return {{{c, -s, 0}, {s, c, 0}, {0, 0, 1}}};
}
/// RTK's rotation matrix of a projection (world -> rotated frame).
mat3 rtk_rotation(const rtk_projection& p) {
  return mul(rot_z(-deg_to_rad(p.in_plane_deg)),
             mul(rot_x(-deg_to_rad(p.out_of_plane_deg)), rot_y(-deg_to_rad(p.gantry_deg))));
}
/// R^T v: a rotated-frame vector in the RTK world frame.
vec3 apply_transposed(const mat3& r, vec3 v) {
  return {r[0][0] * v.x + r[1][0] * v.y + r[2][0] * v.z,
          r[0][1] * v.x + r[1][1] * v.y + r[2][1] * v.z,
          r[0][2] * v.x + r[1][2] * v.y + r[2][2] * v.z};
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string read_text_file(const std::string& path, const char* what) {
  return detail::read_description_file(path, what);
}

void write_text_file(const std::string& path, const std::string& text) {
  write_atomically(
      path, [&](const std::string& tmp) { write_file_bytes(tmp, text.data(), text.size(), path); });
}

// ---- RTK XML parsing (expat) -----------------------------------------------------------------

struct rtk_parse_state {
  std::string origin;
  std::string text;        // character data of the current element
  rtk_projection current;  // values carry over between projections, as in RTK
  std::array<double, 12> matrix{};
  bool have_matrix = false;
  bool saw_root = false;
  std::vector<rtk_projection> out;
  std::string failure;  // first error, reported after parsing stops
  XML_Parser parser = nullptr;

  void fail(const std::string& what) {
    if (failure.empty()) {
      failure = fmt::format("{}: line {}: {}", origin, XML_GetCurrentLineNumber(parser), what);
      XML_StopParser(parser, XML_FALSE);
    }
  }
  double number(std::string_view element) {
    std::string t = text;
    const auto b = t.find_first_not_of(" \t\r\n");
    const auto e = t.find_last_not_of(" \t\r\n");
    t = b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
    try {
      std::size_t used = 0;
      const double v = std::stod(t, &used);
      if (used != t.size() || !std::isfinite(v)) throw std::invalid_argument("x");
      return v;
    } catch (const std::exception&) {
      fail(fmt::format("<{}> holds '{}', expected a finite number", element, t));
      return 0;
    }
  }
};

void XMLCALL rtk_start(void* data, const XML_Char* name, const XML_Char** atts) {
  auto& s = *static_cast<rtk_parse_state*>(data);
  s.text.clear();
  const std::string_view n(name);
  if (iequals(n, "RTKThreeDCircularGeometry")) {
    s.saw_root = true;
    for (int i = 0; atts[i]; i += 2) {
      if (std::string_view(atts[i]) == "version") {
        const std::string v = atts[i + 1];
        if (v != "2" && v != "3")
          s.fail(fmt::format(
              "unsupported RTKThreeDCircularGeometry version \"{}\" (2 or 3 expected)", v));
      }
    }
  } else if (iequals(n, "Projection")) {
    s.have_matrix = false;
  }
}

void XMLCALL rtk_text(void* data, const XML_Char* chars, int len) {
  static_cast<rtk_parse_state*>(data)->text.append(chars, static_cast<std::size_t>(len));
}

void XMLCALL rtk_end(void* data, const XML_Char* name) {
  auto& s = *static_cast<rtk_parse_state*>(data);
  const std::string_view n(name);
  rtk_projection& c = s.current;
  struct field {
    const char* name;
    double rtk_projection::*member;
  };
  static constexpr field fields[] = {
      {"SourceToIsocenterDistance", &rtk_projection::sid},
      {"SourceToDetectorDistance", &rtk_projection::sdd},
      {"GantryAngle", &rtk_projection::gantry_deg},
      {"Angle", &rtk_projection::gantry_deg},  // RTK's older name
      {"ProjectionOffsetX", &rtk_projection::proj_offset_x},
      {"ProjectionOffsetY", &rtk_projection::proj_offset_y},
      {"OutOfPlaneAngle", &rtk_projection::out_of_plane_deg},
      {"InPlaneAngle", &rtk_projection::in_plane_deg},
      {"SourceOffsetX", &rtk_projection::source_offset_x},
      {"SourceOffsetY", &rtk_projection::source_offset_y},
  };
  for (const auto& f : fields) {
    if (iequals(n, f.name)) {
      c.*(f.member) = s.number(f.name);
      return;
    }
  }
  if (iequals(n, "RadiusCylindricalDetector")) {
    c.radius_cylindrical = s.number("RadiusCylindricalDetector");
  } else if (iequals(n, "Matrix")) {
    std::istringstream in(s.text);
    for (double& m : s.matrix) {
      if (!(in >> m) || !std::isfinite(m)) {
        s.fail("<Matrix> must hold 12 finite numbers (3 rows of 4)");
        return;
      }
    }
    s.have_matrix = true;
  } else if (iequals(n, "Projection")) {
    if (s.have_matrix) {
      const auto m = rtk_matrix(c);
      for (int i = 0; i < 12; ++i) {
        // RTK's reader uses the same absolute tolerance when it checks its own files.
        if (std::abs(m[i] - s.matrix[i]) > 1e-3) {
          s.fail(fmt::format(
              "projection {}: <Matrix> disagrees with the parameters (element {}: {} in "
              "the file, {} from the parameters)",
              s.out.size(), i, s.matrix[i], m[i]));
          return;
        }
      }
    }
    s.out.push_back(c);
  }
}

}  // namespace

std::array<double, 12> rtk_matrix(const rtk_projection& p) {
  const mat3 r = rtk_rotation(p);
  const double sx = p.source_offset_x, sy = p.source_offset_y;
  // 4x4 [R | -(sx, sy, 0)]: source translation after the rotation.
  double a[3][4];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) a[i][j] = r[i][j];
    a[i][3] = 0;
  }
  a[0][3] = -sx;
  a[1][3] = -sy;
  // Magnification (3x4 applied to the homogeneous rotated point), then projection translation.
  double m[3][4];
  if (p.sdd == 0) {
    for (int j = 0; j < 4; ++j) {
      m[0][j] = a[0][j];
      m[1][j] = a[1][j];
      m[2][j] = j == 3 ? 1.0 : 0.0;
    }
  } else {
    for (int j = 0; j < 4; ++j) {
      m[0][j] = -p.sdd * a[0][j];
      m[1][j] = -p.sdd * a[1][j];
      m[2][j] = a[2][j] + (j == 3 ? -p.sid : 0.0);
    }
  }
  const double tx = sx - p.proj_offset_x, ty = sy - p.proj_offset_y;
  std::array<double, 12> out{};
  for (int j = 0; j < 4; ++j) {
    out[j] = m[0][j] + tx * m[2][j];
    out[4 + j] = m[1][j] + ty * m[2][j];
    out[8 + j] = m[2][j];
  }
  return out;
}

std::vector<rtk_projection> parse_rtk_xml(std::string_view xml, std::string_view origin) {
  rtk_parse_state s;
  s.origin = std::string(origin);
  XML_Parser parser = XML_ParserCreate(nullptr);
  CTFORGE_CHECK(parser != nullptr, s.origin + ": cannot create an XML parser");
  s.parser = parser;
  XML_SetUserData(parser, &s);
  XML_SetElementHandler(parser, rtk_start, rtk_end);
  XML_SetCharacterDataHandler(parser, rtk_text);
  const auto status = XML_Parse(parser, xml.data(), static_cast<int>(xml.size()), XML_TRUE);
  std::string xml_error;
  if (status == XML_STATUS_ERROR && s.failure.empty())
    xml_error =
        fmt::format("{}: line {}: malformed XML: {}", s.origin, XML_GetCurrentLineNumber(parser),
                    XML_ErrorString(XML_GetErrorCode(parser)));
  XML_ParserFree(parser);
  CTFORGE_CHECK(s.failure.empty(), s.failure);
  CTFORGE_CHECK(xml_error.empty(), xml_error);
  CTFORGE_CHECK(s.saw_root,
                s.origin + ": not an RTK geometry (no <RTKThreeDCircularGeometry> element)");
  CTFORGE_CHECK(!s.out.empty(), s.origin + ": RTK geometry without any <Projection>");
  return s.out;
}

std::string rtk_xml(std::span<const rtk_projection> projections) {
  CTFORGE_EXPECTS(!projections.empty(), "RTK geometry: at least one projection is required");
  std::string x =
      "<?xml version=\"1.0\"?>\n<!DOCTYPE RTKGEOMETRY>\n<RTKThreeDCircularGeometry "
      "version=\"3\">\n";
  // Parameters constant over all projections are written once, before the first projection
  // (RTK's reader carries them over); zero-valued optional ones are omitted, as RTK does.
  struct field {
    const char* name;
    double rtk_projection::*member;
    bool optional;
  };
  static constexpr field fields[] = {
      {"SourceToIsocenterDistance", &rtk_projection::sid, false},
      {"SourceToDetectorDistance", &rtk_projection::sdd, false},
      {"SourceOffsetX", &rtk_projection::source_offset_x, true},
      {"SourceOffsetY", &rtk_projection::source_offset_y, true},
      {"ProjectionOffsetX", &rtk_projection::proj_offset_x, true},
      {"ProjectionOffsetY", &rtk_projection::proj_offset_y, true},
      {"InPlaneAngle", &rtk_projection::in_plane_deg, true},
      {"OutOfPlaneAngle", &rtk_projection::out_of_plane_deg, true},
      {"RadiusCylindricalDetector", &rtk_projection::radius_cylindrical, true},
  };
  std::vector<bool> global;
  for (const auto& f : fields) {
    const double v0 = projections[0].*(f.member);
    const bool constant = std::all_of(projections.begin(), projections.end(),
                                      [&](const rtk_projection& p) { return p.*(f.member) == v0; });
    global.push_back(constant);
    if (constant && !(f.optional && v0 == 0))
      x += fmt::format("  <{0}>{1:.17g}</{0}>\n", f.name, v0);
  }
  for (const auto& p : projections) {
    x += "  <Projection>\n";
    x += fmt::format("    <GantryAngle>{:.17g}</GantryAngle>\n", p.gantry_deg);
    for (std::size_t i = 0; i < std::size(fields); ++i)
      if (!global[i])
        x += fmt::format("    <{0}>{1:.17g}</{0}>\n", fields[i].name, p.*(fields[i].member));
    const auto m = rtk_matrix(p);
    x += "    <Matrix>\n";
    for (int r = 0; r < 3; ++r)
      x += fmt::format("      {:.17g} {:.17g} {:.17g} {:.17g}\n", m[4 * r], m[4 * r + 1],
                       m[4 * r + 2], m[4 * r + 3]);
    x += "    </Matrix>\n  </Projection>\n";
  }
  x += "</RTKThreeDCircularGeometry>\n";
  return x;
}

namespace {

constexpr double k_pi = 3.14159265358979323846;

// The helix RTK describes with source and detector offsets along its y axis (our z): no tilts,
// constant SID, SDD and in-plane offsets, SourceOffsetY linear in the (unwrapped, strictly
// monotonic) gantry angle and ProjectionOffsetY following it. Nothing when the projections
// are not such a helix.
std::optional<geometry> helix_of(std::span<const rtk_projection> ps, std::int64_t cols,
                                 std::int64_t rows, double du, double dv, bool cylindrical) {
  if (ps.size() < 3 || ps[0].sdd == 0) return std::nullopt;
  const rtk_projection& a = ps.front();
  std::vector<double> angles;
  for (const rtk_projection& p : ps) {
    const bool same = p.out_of_plane_deg == 0 && p.in_plane_deg == 0 && p.source_offset_x == 0 &&
                      p.sid == a.sid && p.sdd == a.sdd && p.proj_offset_x == a.proj_offset_x &&
                      std::abs((p.proj_offset_y - p.source_offset_y) -
                               (a.proj_offset_y - a.source_offset_y)) <= 1e-9 * a.sdd;
    if (!same) return std::nullopt;
    double t = deg_to_rad(p.gantry_deg);  // RTK stores angles in [0, 360): unwrap
    if (!angles.empty()) t += 2 * k_pi * std::round((angles.back() - t) / (2 * k_pi));
    angles.push_back(t);
  }
  const double step = angles[1] - angles[0];
  if (step == 0) return std::nullopt;
  for (std::size_t i = 1; i < angles.size(); ++i)
    if ((angles[i] - angles[i - 1]) * step <= 0 || std::abs(angles[i] - angles[i - 1]) >= k_pi)
      return std::nullopt;
  const double turns = std::abs(angles.back() - angles.front()) / (2 * k_pi);
  const double rise = ps.back().source_offset_y - a.source_offset_y;
  if (rise == 0) return std::nullopt;
  const double pitch = rise / turns;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const double z = a.source_offset_y + pitch * std::abs(angles[i] - angles.front()) / (2 * k_pi);
    if (std::abs(ps[i].source_offset_y - z) > 1e-6 * std::max(1.0, std::abs(z)))
      return std::nullopt;
  }
  if (!(a.sid > 0 && a.sdd > a.sid)) return std::nullopt;
  return make_helical_geometry(cols, rows, du, dv, a.sid, a.sdd, std::move(angles), pitch,
                               a.source_offset_y, a.proj_offset_x,
                               a.proj_offset_y - a.source_offset_y,
                               cylindrical ? detector_shape::cylindrical : detector_shape::flat);
}

}  // namespace

geometry geometry_from_rtk(std::span<const rtk_projection> projections, std::int64_t cols,
                           std::int64_t rows, double du, double dv) {
  CTFORGE_EXPECTS(!projections.empty(), "RTK geometry: at least one projection is required");
  CTFORGE_EXPECTS(cols >= 1 && rows >= 1,
                  fmt::format("RTK geometry: detector size {} x {} must be >= 1", cols, rows));
  CTFORGE_EXPECTS(du > 0 && dv > 0 && std::isfinite(du) && std::isfinite(dv),
                  "RTK geometry: pixel pitch must be positive");
  const bool parallel = projections[0].sdd == 0;
  for (const auto& p : projections)
    CTFORGE_EXPECTS(
        (p.sdd == 0) == parallel,
        "RTK geometry: mixes parallel (SourceToDetectorDistance 0) and divergent projections");
  const auto& p0 = projections[0];
  // Cylindrical detectors: ctforge's are centred on the source (radius = SDD) on a circular
  // cone orbit; RTK allows other radii, which we refuse rather than treat as flat.
  const bool cylindrical =
      std::any_of(projections.begin(), projections.end(),
                  [](const rtk_projection& p) { return p.radius_cylindrical != 0; });
  if (cylindrical)
    for (std::size_t i = 0; i < projections.size(); ++i) {
      const auto& p = projections[i];
      CTFORGE_EXPECTS(
          !parallel && std::abs(p.radius_cylindrical - p.sdd) <= 1e-9 * std::abs(p.sdd),
          fmt::format("RTK geometry: projection {}: RadiusCylindricalDetector {} differs from "
                      "SourceToDetectorDistance {}; only cylindrical detectors centred on the "
                      "source (radius = SDD; ctforge 'detector.shape' cylindrical) are supported",
                      i, p.radius_cylindrical, p.sdd));
    }
  const bool circular =
      std::all_of(projections.begin(), projections.end(), [&](const rtk_projection& p) {
        return p.out_of_plane_deg == 0 && p.in_plane_deg == 0 &&
               (parallel || (p.source_offset_x == 0 && p.source_offset_y == 0 && p.sid == p0.sid &&
                             p.sdd == p0.sdd));
      });
  if (circular && (parallel || (p0.sid > 0 && p0.sdd > p0.sid))) {
    std::vector<double> angles, ou, ov;
    for (const auto& p : projections) {
      angles.push_back(deg_to_rad(p.gantry_deg));
      ou.push_back(p.proj_offset_x);
      ov.push_back(p.proj_offset_y);
    }
    if (parallel) return make_parallel_geometry(cols, rows, du, dv, std::move(angles), ou, ov);
    return make_cone_geometry(cols, rows, du, dv, p0.sid, p0.sdd, std::move(angles), ou, ov,
                              cylindrical ? detector_shape::cylindrical : detector_shape::flat);
  }
  if (auto h = helix_of(projections, cols, rows, du, dv, cylindrical)) return std::move(*h);
  CTFORGE_EXPECTS(!cylindrical,
                  "RTK geometry: a cylindrical detector (RadiusCylindricalDetector) needs a "
                  "circular orbit (no tilt angles or source offsets, constant SID and SDD) or a "
                  "helix (SourceOffsetY advancing with the gantry angle, the detector with it)");
  std::vector<view_vectors> views;
  for (const auto& p : projections) {
    const mat3 r = rtk_rotation(p);
    view_vectors w;
    w.u = du * world_from_rtk(apply_transposed(r, {1, 0, 0}));
    w.v = dv * world_from_rtk(apply_transposed(r, {0, 1, 0}));
    if (parallel) {
      w.source = world_from_rtk(apply_transposed(r, {0, 0, -1}));
      w.detector_center =
          world_from_rtk(apply_transposed(r, {p.proj_offset_x, p.proj_offset_y, 0}));
    } else {
      w.source = world_from_rtk(apply_transposed(r, {p.source_offset_x, p.source_offset_y, p.sid}));
      w.detector_center =
          world_from_rtk(apply_transposed(r, {p.proj_offset_x, p.proj_offset_y, p.sid - p.sdd}));
    }
    views.push_back(w);
  }
  return make_vec_geometry(parallel ? beam_kind::parallel : beam_kind::cone, cols, rows,
                           std::move(views));
}

std::vector<rtk_projection> rtk_from_geometry(const geometry& g) {
  g.validate();

  std::vector<rtk_projection> out;
  if (g.helix) {  // RTK's helix: the source and the detector offset along its y axis (our z)
    const helical_orbit& h = *g.helix;
    for (const double t : h.angles_rad) {
      rtk_projection p;
      p.sid = h.source_to_isocenter_mm;
      p.sdd = h.source_to_detector_mm;
      p.gantry_deg = rad_to_deg(t);
      p.source_offset_y = h.z_at(t);
      p.proj_offset_x = h.offset_u_mm;
      p.proj_offset_y = h.z_at(t) + h.offset_v_mm;
      if (g.curved()) p.radius_cylindrical = h.source_to_detector_mm;
      out.push_back(p);
    }
    return out;
  }
  if (g.orbit) {
    const auto& o = *g.orbit;
    for (std::size_t i = 0; i < g.views.size(); ++i) {
      rtk_projection p;
      if (g.beam == beam_kind::cone) {
        p.sid = o.source_to_isocenter_mm;
        p.sdd = o.source_to_detector_mm;
      } else {
        p.sid = 1000;  // unused by RTK for parallel beams; RTK's own choice for such matrices
        p.sdd = 0;
      }
      p.gantry_deg = rad_to_deg(o.angles_rad[i]);
      p.proj_offset_x = o.offset_u_mm[i];
      p.proj_offset_y = o.offset_v_mm[i];
      // Our cylinder: radius SDD about the source, arc offsets as RTK measures them.
      if (g.curved()) p.radius_cylindrical = o.source_to_detector_mm;
      out.push_back(p);
    }
    return out;
  }
  const double du = norm(g.views[0].u), dv = norm(g.views[0].v);
  for (std::size_t i = 0; i < g.views.size(); ++i) {
    const auto& w = g.views[i];
    const double lu = norm(w.u), lv = norm(w.v);
    CTFORGE_EXPECTS(std::abs(dot(w.u, w.v)) <= 1e-9 * lu * lv,
                    fmt::format("RTK export: view {}: detector u and v are not orthogonal", i));
    CTFORGE_EXPECTS(
        std::abs(lu - du) <= 1e-9 * du && std::abs(lv - dv) <= 1e-9 * dv,
        fmt::format("RTK export: view {}: pixel pitch differs from view 0 (RTK keeps one "
                    "pixel spacing per projection stack)",
                    i));
    // Rows of R (world -> rotated) are the rotated axes expressed in the RTK world frame.
    const vec3 uh = rtk_from_world((1.0 / lu) * w.u), vh = rtk_from_world((1.0 / lv) * w.v);
    const vec3 nh = cross(uh, vh);
    // R = Rz(c) Rx(a) Ry(b) with a = -oa, b = -ga, c = -ia:
    //   R21 = sin a, R20 = -cos a sin b, R22 = cos a cos b, R01 = -sin c cos a, R11 = cos c cos a.
    const double r01 = uh.y, r11 = vh.y, r20 = nh.x, r21 = nh.y, r22 = nh.z;
    const double a = std::asin(std::clamp(r21, -1.0, 1.0));
    CTFORGE_EXPECTS(
        std::cos(a) > 1e-9,
        fmt::format("RTK export: view {}: out-of-plane angle of 90 degrees (gimbal lock)", i));
    const double b = std::atan2(-r20, r22), c = std::atan2(-r01, r11);
    rtk_projection p;
    p.out_of_plane_deg = rad_to_deg(-a);
    p.gantry_deg = rad_to_deg(-b);
    p.in_plane_deg = rad_to_deg(-c);
    const vec3 d = rtk_from_world(w.detector_center);
    p.proj_offset_x = dot(d, uh);
    p.proj_offset_y = dot(d, vh);
    if (g.beam == beam_kind::cone) {
      const vec3 s = rtk_from_world(w.source);
      p.source_offset_x = dot(s, uh);
      p.source_offset_y = dot(s, vh);
      p.sid = dot(s, nh);
      p.sdd = p.sid - dot(d, nh);
      CTFORGE_EXPECTS(p.sdd != 0,
                      fmt::format("RTK export: view {}: source lies in the detector plane", i));
    } else {
      const vec3 r = rtk_from_world(w.source);
      // The sign of the ray does not change where points project.
      CTFORGE_EXPECTS(
          norm(cross(r, nh)) <= 1e-9 * norm(r),
          fmt::format("RTK export: view {}: RTK parallel beams need rays perpendicular to "
                      "the detector",
                      i));
      p.sid = 1000;
      p.sdd = 0;
    }
    out.push_back(p);
  }
  return out;
}

geometry read_rtk_geometry(const std::string& path, std::int64_t cols, std::int64_t rows, double du,
                           double dv) {
  const auto projections = parse_rtk_xml(read_text_file(path, "RTK geometry"), path);
  try {
    return geometry_from_rtk(projections, cols, rows, du, dv);
  } catch (const usage_error& e) {
    throw usage_error(fmt::format("{}: {}", path, e.what()));
  }
}

void write_rtk_geometry(const std::string& path, const geometry& g) {
  const auto p = rtk_from_geometry(g);
  write_text_file(path, rtk_xml(p));
}

// ---- ASTRA -----------------------------------------------------------------------------------

std::vector<astra_vector> astra_vectors(const geometry& g) {
  CTFORGE_EXPECTS(!g.curved(),
                  "ASTRA export: geometry field 'detector.shape' is 'cylindrical'; ASTRA's "
                  "cone_vec geometry has flat detectors only");
  std::vector<astra_vector> out;
  out.reserve(g.views.size());
  for (const auto& w : g.views)
    out.push_back({w.source.x, w.source.y, w.source.z, w.detector_center.x, w.detector_center.y,
                   w.detector_center.z, w.u.x, w.u.y, w.u.z, w.v.x, w.v.y, w.v.z});
  return out;
}

geometry geometry_from_astra(beam_kind beam, std::int64_t cols, std::int64_t rows,
                             std::span<const astra_vector> rows_of_12) {
  std::vector<view_vectors> views;
  views.reserve(rows_of_12.size());
  for (const auto& r : rows_of_12)
    views.push_back(
        {{r[0], r[1], r[2]}, {r[3], r[4], r[5]}, {r[6], r[7], r[8]}, {r[9], r[10], r[11]}});
  return make_vec_geometry(beam, cols, rows, std::move(views));
}

void write_astra_vectors(const std::string& path, const geometry& g) {
  std::string t =
      fmt::format("# ASTRA {} vectors, detector {} rows x {} columns: src/ray(3) d(3) u(3) v(3)\n",
                  g.beam == beam_kind::cone ? "cone_vec" : "parallel3d_vec", g.rows, g.cols);
  for (const auto& r : astra_vectors(g)) {
    for (std::size_t i = 0; i < r.size(); ++i) t += fmt::format("{}{:.17g}", i ? " " : "", r[i]);
    t += '\n';
  }
  write_text_file(path, t);
}

geometry read_astra_vectors(const std::string& path, beam_kind beam, std::int64_t cols,
                            std::int64_t rows) {
  const std::string text = read_text_file(path, "ASTRA vector file");
  std::vector<astra_vector> rows_of_12;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream ls(line);
    std::vector<double> values;
    std::string tok;
    while (ls >> tok) {
      try {
        std::size_t used = 0;
        const double v = std::stod(tok, &used);
        if (used != tok.size() || !std::isfinite(v)) throw std::invalid_argument(tok);
        values.push_back(v);
      } catch (const std::exception&) {
        CTFORGE_FAIL(fmt::format("{}: line {}: '{}' is not a finite number", path, line_no, tok));
      }
    }
    if (values.empty()) continue;
    CTFORGE_CHECK(values.size() == 12,
                  fmt::format("{}: line {}: {} numbers, expected 12 (src/ray, d, u, v)", path,
                              line_no, values.size()));
    astra_vector r;
    std::copy(values.begin(), values.end(), r.begin());
    rows_of_12.push_back(r);
  }
  CTFORGE_CHECK(!rows_of_12.empty(), fmt::format("{}: no ASTRA vectors found", path));
  try {
    return geometry_from_astra(beam, cols, rows, rows_of_12);
  } catch (const usage_error& e) {
    throw usage_error(fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace ctforge::io
