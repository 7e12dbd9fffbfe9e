#include "ctforge/geometry.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/detector_frame.hpp"
#include "core/json_reader.hpp"
#include "core/text_file.hpp"
#include "ctforge/error.hpp"
#include "math/cylinder.hpp"

namespace ctforge {
namespace {

using json = nlohmann::json;

bool finite(vec3 a) {
  return std::isfinite(a.x) && std::isfinite(a.y) && std::isfinite(a.z);
}

// Expands an offset list (empty, one value, or one per view) to one value per view.
std::vector<double> per_view(std::vector<double> values, std::size_t n, const char* field) {
  if (values.empty()) return std::vector<double>(n, 0.0);
  if (values.size() == 1) return std::vector<double>(n, values[0]);
  CTFORGE_EXPECTS(values.size() == n,
                  fmt::format("{}: {} values given for {} views (give one value or one per view)",
                              field, values.size(), n));
  return values;
}

using reader = detail::json_reader;

// The shortest pixel pitch accepted, in mm (a picometre): below it the detector's extent and
// the products of pitches in the projection matrices underflow, and no detector comes close.
constexpr double k_min_pixel_mm = 1e-9;
bool pixel_pitch_ok(double pitch) {
  return std::isfinite(pitch) && std::abs(pitch) >= k_min_pixel_mm;
}

// Far more views than any scanner takes (a 10-hour scan at 250 views/s): a count above it is a
// typo, and its angle list alone would take 80 MB per million.
constexpr std::int64_t k_max_views = 10'000'000;
using detail::vec_json;

std::vector<double> parse_angles(const reader& r, const json& j) {
  const std::string field = "angles_deg";
  std::vector<double> deg;
  if (j.is_array()) {
    deg = r.numbers(j, field);
  } else if (j.is_object()) {
    r.known_keys(j, field, {"start", "step", "count"});
    double start = j.contains("start") ? r.number(j["start"], field + ".start") : 0.0;
    double step = r.number(r.member(j, field, "step"), field + ".step");
    std::int64_t count = r.integer(r.member(j, field, "count"), field + ".count");
    if (count < 1) r.fail(field + ".count", "must be >= 1");
    if (count > k_max_views)
      r.fail(field + ".count",
             fmt::format("{} views: at most {} are supported", count, k_max_views));
    for (std::int64_t i = 0; i < count; ++i) deg.push_back(start + step * static_cast<double>(i));
  } else {
    r.fail(field, "expected a list of angles or {\"start\", \"step\", \"count\"}");
  }
  if (deg.empty()) r.fail(field, "at least one view is required");
  std::vector<double> rad;
  rad.reserve(deg.size());
  for (double d : deg) rad.push_back(deg_to_rad(d));
  return rad;
}

// Offsets: "offset_mm": [u, v] for all views, or [[u, v], ...] per view.
void parse_offsets(const reader& r, const json& det, std::vector<double>& ou,
                   std::vector<double>& ov) {
  auto it = det.find("offset_mm");
  if (it == det.end()) return;
  const std::string field = "detector.offset_mm";
  const json& j = *it;
  if (!j.is_array() || j.empty()) r.fail(field, "expected [u, v] or a list of [u, v] per view");
  if (j[0].is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      auto p = r.numbers(j[i], fmt::format("{}[{}]", field, i));
      if (p.size() != 2) r.fail(fmt::format("{}[{}]", field, i), "expected [u, v]");
      ou.push_back(p[0]);
      ov.push_back(p[1]);
    }
  } else {
    auto p = r.numbers(j, field);
    if (p.size() != 2) r.fail(field, "expected [u, v]");
    ou.push_back(p[0]);
    ov.push_back(p[1]);
  }
}

void validate_helix(const geometry& g) {
  const helical_orbit& h = *g.helix;
  CTFORGE_EXPECTS(!g.orbit && g.beam == beam_kind::cone,
                  "helical geometry: a helix is a cone-beam orbit of its own");
  CTFORGE_EXPECTS(h.angles_rad.size() == g.views.size(),
                  "helical geometry: angle count differs from view count");
  for (std::size_t i = 0; i < h.angles_rad.size(); ++i) {
    CTFORGE_EXPECTS(std::isfinite(h.angles_rad[i]),
                    "helical geometry: field 'angles_deg' holds a non-finite angle");
    CTFORGE_EXPECTS(
        i < 2 || (h.angles_rad[i] - h.angles_rad[i - 1]) * (h.angles_rad[1] - h.angles_rad[0]) > 0,
        fmt::format("helical geometry: field 'angles_deg' must run one way "
                    "(strictly increasing or decreasing): view {} turns back",
                    i));
  }
  CTFORGE_EXPECTS(h.angles_rad.size() < 2 || h.angles_rad[1] != h.angles_rad[0],
                  "helical geometry: field 'angles_deg' repeats its first angle");
  CTFORGE_EXPECTS(std::isfinite(h.source_to_isocenter_mm) && h.source_to_isocenter_mm > 0,
                  fmt::format("helical geometry: field 'source_to_isocenter_mm' must be > 0 (got "
                              "{})",
                              h.source_to_isocenter_mm));
  CTFORGE_EXPECTS(
      std::isfinite(h.source_to_detector_mm) && h.source_to_detector_mm > h.source_to_isocenter_mm,
      fmt::format("helical geometry: field 'source_to_detector_mm' ({}) must be "
                  "greater than 'source_to_isocenter_mm' ({})",
                  h.source_to_detector_mm, h.source_to_isocenter_mm));
  CTFORGE_EXPECTS(std::isfinite(h.pitch_mm_per_turn),
                  "helical geometry: field 'pitch_mm_per_turn' is not finite");
  CTFORGE_EXPECTS(std::isfinite(h.z_start_mm),
                  "helical geometry: field 'z_start_mm' is not finite");
  CTFORGE_EXPECTS(std::isfinite(h.offset_u_mm) && std::isfinite(h.offset_v_mm),
                  "helical geometry: field 'detector.offset_mm' is not finite");
}

// Type "helical": the circular cone's fields plus the table feed (pitch_mm_per_turn, or
// pitch_factor times the detector's height at the isocentre) and the first view's height.
geometry helical_from_json(const reader& r, const json& j, const json& det, std::int64_t cols,
                           std::int64_t rows, detector_shape shape, std::string_view origin) {
  auto px = r.numbers(r.member(det, "detector", "pixel_mm"), "detector.pixel_mm");
  if (px.size() != 2) r.fail("detector.pixel_mm", "expected [u, v]");
  if (!(pixel_pitch_ok(px[0]) && pixel_pitch_ok(px[1])))
    r.fail("detector.pixel_mm", fmt::format("pixel sizes must be at least {:g} mm in magnitude "
                                            "(got [{}, {}])",
                                            k_min_pixel_mm, px[0], px[1]));
  auto angles = parse_angles(r, r.member(j, "", "angles_deg"));
  std::vector<double> ou, ov;
  parse_offsets(r, det, ou, ov);
  if (ou.size() > 1)
    r.fail("detector.offset_mm", "a helical geometry takes one offset [u, v] for all views");
  const double sid = r.number(r.member(j, "", "source_to_isocenter_mm"), "source_to_isocenter_mm");
  const double sdd = r.number(r.member(j, "", "source_to_detector_mm"), "source_to_detector_mm");
  if (!(sid > 0)) r.fail("source_to_isocenter_mm", fmt::format("must be > 0 (got {})", sid));
  if (!(sdd > sid))
    r.fail("source_to_detector_mm",
           fmt::format("must be greater than source_to_isocenter_mm ({} <= {})", sdd, sid));
  const bool by_mm = j.contains("pitch_mm_per_turn"), by_factor = j.contains("pitch_factor");
  if (by_mm == by_factor)
    r.fail(by_mm ? "pitch_factor" : "pitch_mm_per_turn",
           by_mm ? "give pitch_mm_per_turn or pitch_factor, not both"
                 : "a helical geometry needs the table feed: pitch_mm_per_turn (mm per turn, its "
                   "sign the direction along z) or pitch_factor (feed over the detector's height "
                   "at the isocentre)");
  double pitch = 0;
  if (by_mm) {
    pitch = r.number(j["pitch_mm_per_turn"], "pitch_mm_per_turn");
  } else {
    const double factor = r.number(j["pitch_factor"], "pitch_factor");
    pitch = factor * static_cast<double>(rows) * std::abs(px[1]) * sid / sdd;
  }
  const double z0 = j.contains("z_start_mm") ? r.number(j["z_start_mm"], "z_start_mm") : 0.0;
  try {
    return make_helical_geometry(cols, rows, px[0], px[1], sid, sdd, std::move(angles), pitch, z0,
                                 ou.empty() ? 0.0 : ou[0], ov.empty() ? 0.0 : ov[0], shape);
  } catch (const usage_error& e) {
    throw usage_error(fmt::format("{}: {}", origin, e.what()));
  }
}

}  // namespace

namespace {

// A cone_vec geometry with a cylindrical detector: each view's cylinder stands on its source
// with its axis along z (math/cylinder.hpp reads the view vectors as its tangent frame at the
// centre pixel), so v must run along z and u be horizontal and tangent to the cylinder there.
void validate_cylinder_views(const geometry& g) {
  for (std::size_t i = 0; i < g.views.size(); ++i) {
    const view_vectors& w = g.views[i];
    const double lu = norm(w.u), lv = norm(w.v);
    vec3 e = w.detector_center - w.source;
    e.z = 0;
    const double r = norm(e);
    CTFORGE_EXPECTS(
        std::abs(w.v.x) <= 1e-9 * lv && std::abs(w.v.y) <= 1e-9 * lv &&
            std::abs(w.u.z) <= 1e-9 * lu && r > 1e-9 * lu && std::abs(dot(w.u, e)) <= 1e-9 * lu * r,
        fmt::format("cone_vec geometry: field 'detector.shape' is 'cylindrical', which needs every "
                    "view's detector on a cylinder about its source with its axis along z: "
                    "'views[{}].v' must run along z and 'views[{}].u' be horizontal and "
                    "perpendicular to the horizontal direction from the source to "
                    "'detector_center'",
                    i, i));
  }
}

}  // namespace

std::string geometry::type_name() const {
  if (helix) return "helical";
  if (orbit) return beam == beam_kind::cone ? "cone" : "parallel";
  return beam == beam_kind::cone ? "cone_vec" : "parallel_vec";
}

void geometry::validate() const {
  const std::string t = type_name();
  CTFORGE_EXPECTS(cols >= 1,
                  fmt::format("{} geometry: field 'detector.cols' must be >= 1 (got {})", t, cols));
  CTFORGE_EXPECTS(rows >= 1,
                  fmt::format("{} geometry: field 'detector.rows' must be >= 1 (got {})", t, rows));
  CTFORGE_EXPECTS(!views.empty(), fmt::format("{} geometry: at least one view is required", t));
  // Circular orbits build their views from 'detector.pixel_mm'; vector geometries have no such
  // field (the pitch is the length of views[0].u / .v), so their views are checked first, each
  // naming its own field.
  if (orbit || helix)
    CTFORGE_EXPECTS(
        pixel_pitch_ok(pixel_u_mm) && pixel_pitch_ok(pixel_v_mm),
        fmt::format("{} geometry: field 'detector.pixel_mm' ([{}, {}]) must be finite with a "
                    "magnitude of at least {:g} mm (a negative pitch reverses the direction of "
                    "columns or rows)",
                    t, pixel_u_mm, pixel_v_mm, k_min_pixel_mm));
  if (curved())
    CTFORGE_EXPECTS(beam == beam_kind::cone,
                    fmt::format("{} geometry: field 'detector.shape' is 'cylindrical', which needs "
                                "a cone beam ('cone', 'helical' or 'cone_vec': the cylinder is "
                                "centred on the source); use 'flat'",
                                t));
  if (helix) validate_helix(*this);
  if (orbit) {
    const auto& o = *orbit;
    CTFORGE_EXPECTS(o.angles_rad.size() == views.size(),
                    "geometry: angle count differs from view count");
    for (double a : o.angles_rad)
      CTFORGE_EXPECTS(std::isfinite(a),
                      fmt::format("{} geometry: field 'angles_deg' holds a non-finite angle", t));
    if (beam == beam_kind::cone) {
      CTFORGE_EXPECTS(
          std::isfinite(o.source_to_isocenter_mm) && o.source_to_isocenter_mm > 0,
          fmt::format("cone geometry: field 'source_to_isocenter_mm' must be > 0 (got {})",
                      o.source_to_isocenter_mm));
      CTFORGE_EXPECTS(
          std::isfinite(o.source_to_detector_mm) &&
              o.source_to_detector_mm > o.source_to_isocenter_mm,
          fmt::format("cone geometry: field 'source_to_detector_mm' ({}) must be greater than "
                      "'source_to_isocenter_mm' ({})",
                      o.source_to_detector_mm, o.source_to_isocenter_mm));
    }
  }
  for (std::size_t i = 0; i < views.size(); ++i) {
    const auto& w = views[i];
    auto field = [&](const char* f) {
      return fmt::format("{} geometry: field 'views[{}].{}'", t, i, f);
    };
    const char* src = beam == beam_kind::cone ? "source" : "ray";
    CTFORGE_EXPECTS(finite(w.source), field(src) + " is not finite");
    CTFORGE_EXPECTS(finite(w.detector_center), field("detector_center") + " is not finite");
    for (const auto& [name, a] : {std::pair{"u", w.u}, std::pair{"v", w.v}})
      CTFORGE_EXPECTS(finite(a) && pixel_pitch_ok(norm(a)),
                      fmt::format("{} must be a finite vector at least {:g} mm long (one pixel "
                                  "step on the detector; got [{}, {}, {}], length {})",
                                  field(name), k_min_pixel_mm, a.x, a.y, a.z, norm(a)));
    const vec3 n = cross(w.u, w.v);
    CTFORGE_EXPECTS(norm(n) > 1e-9 * norm(w.u) * norm(w.v),
                    field("u") + " and 'v' are parallel (degenerate detector)");
    if (beam == beam_kind::cone) {
      const double depth = dot(w.detector_center - w.source, n) / norm(n);
      CTFORGE_EXPECTS(std::abs(depth) > 1e-9, field("source") + " lies in the detector plane");
    } else {
      CTFORGE_EXPECTS(norm(w.source) > 0, field("ray") + " must be non-zero");
      CTFORGE_EXPECTS(std::abs(dot(w.source, n)) > 1e-9 * norm(w.source) * norm(n),
                      field("ray") + " is parallel to the detector plane");
    }
  }
  CTFORGE_EXPECTS(pixel_pitch_ok(pixel_u_mm) && pixel_pitch_ok(pixel_v_mm),
                  fmt::format("{} geometry: pixel pitch {} x {} mm does not match views[0].u / .v",
                              t, pixel_u_mm, pixel_v_mm));
  if (curved() && !orbit && !helix) validate_cylinder_views(*this);
}

std::vector<double> angle_range(double start, double step, std::int64_t count) {
  std::vector<double> a;
  a.reserve(static_cast<std::size_t>(std::max<std::int64_t>(count, 0)));
  for (std::int64_t i = 0; i < count; ++i) a.push_back(start + step * static_cast<double>(i));
  return a;
}

static geometry make_circular(beam_kind beam, std::int64_t cols, std::int64_t rows, double du,
                              double dv, double sid, double sdd, std::vector<double> angles,
                              std::vector<double> ou, std::vector<double> ov,
                              detector_shape shape = detector_shape::flat) {
  geometry g;
  g.beam = beam;
  g.shape = shape;
  g.cols = cols;
  g.rows = rows;
  g.pixel_u_mm = du;
  g.pixel_v_mm = dv;
  circular_orbit o;
  o.source_to_isocenter_mm = sid;
  o.source_to_detector_mm = sdd;
  const std::size_t n = angles.size();
  o.offset_u_mm = per_view(std::move(ou), n, "detector.offset_mm (u)");
  o.offset_v_mm = per_view(std::move(ov), n, "detector.offset_mm (v)");
  o.angles_rad = std::move(angles);
  g.views.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double t = o.angles_rad[i], c = std::cos(t), s = std::sin(t);
    const vec3 uh{c, s, 0}, vh{0, 0, 1};
    view_vectors& w = g.views[i];
    if (beam == beam_kind::cone) {
      w.source = {sid * s, -sid * c, 0};
      w.detector_center = vec3{-(sdd - sid) * s, (sdd - sid) * c, 0};
    } else {
      w.source = {-s, c, 0};
      w.detector_center = {0, 0, 0};
    }
    if (shape == detector_shape::cylindrical && beam == beam_kind::cone) {
      // Curved: the centre pixel lies on the cylinder of radius SDD about the source, at the
      // arc length off_u (fan angle off_u / SDD) from the central ray; u is the tangent there.
      const vec3 nh{-s, c, 0};  // from the source towards the isocentre
      detail::place_curved_detector(w, nh, uh, vh, sdd, o.offset_u_mm[i], o.offset_v_mm[i], du, dv);
      continue;
    }
    w.detector_center = w.detector_center + o.offset_u_mm[i] * uh + o.offset_v_mm[i] * vh;
    w.u = du * uh;
    w.v = dv * vh;
  }
  g.orbit = std::move(o);
  g.validate();
  return g;
}

geometry make_cone_geometry(std::int64_t cols, std::int64_t rows, double du, double dv, double sid,
                            double sdd, std::vector<double> angles, std::vector<double> ou,
                            std::vector<double> ov, detector_shape shape) {
  CTFORGE_EXPECTS(
      sid > 0 && sdd > sid,
      fmt::format(
          "cone geometry: need source_to_detector_mm ({}) > source_to_isocenter_mm ({}) > 0", sdd,
          sid));
  return make_circular(beam_kind::cone, cols, rows, du, dv, sid, sdd, std::move(angles),
                       std::move(ou), std::move(ov), shape);
}

geometry make_parallel_geometry(std::int64_t cols, std::int64_t rows, double du, double dv,
                                std::vector<double> angles, std::vector<double> ou,
                                std::vector<double> ov) {
  return make_circular(beam_kind::parallel, cols, rows, du, dv, 0, 0, std::move(angles),
                       std::move(ou), std::move(ov));
}

geometry make_vec_geometry(beam_kind beam, std::int64_t cols, std::int64_t rows,
                           std::vector<view_vectors> views, detector_shape shape) {
  geometry g;
  g.beam = beam;
  g.shape = shape;
  g.cols = cols;
  g.rows = rows;
  g.views = std::move(views);
  if (!g.views.empty()) {
    g.pixel_u_mm = norm(g.views[0].u);
    g.pixel_v_mm = norm(g.views[0].v);
  }
  g.validate();
  return g;
}

geometry geometry_from_json(std::string_view text, std::string_view origin) {
  reader r{std::string(origin)};
  const json j = r.parse(text);
  if (!j.is_object()) r.fail("", "expected a JSON object");
  r.known_keys(j, "",
               {"type", "detector", "source_to_isocenter_mm", "source_to_detector_mm", "angles_deg",
                "views", "pitch_mm_per_turn", "pitch_factor", "z_start_mm"});
  const json& type_j = r.member(j, "", "type");
  if (!type_j.is_string()) r.fail("type", "expected a string");
  const std::string type = type_j.get<std::string>();
  const json& det = r.member(j, "", "detector");
  r.known_keys(det, "detector", {"cols", "rows", "pixel_mm", "offset_mm", "shape"});
  detector_shape shape = detector_shape::flat;
  if (auto it = det.find("shape"); it != det.end()) {
    if (!it->is_string()) r.fail("detector.shape", "expected \"flat\" or \"cylindrical\"");
    const std::string sh = it->get<std::string>();
    if (sh == "cylindrical")
      shape = detector_shape::cylindrical;
    else if (sh != "flat")
      r.fail("detector.shape",
             fmt::format("unknown detector shape '{}' (expected flat or cylindrical)", sh));
  }
  const std::int64_t cols = r.integer(r.member(det, "detector", "cols"), "detector.cols");
  const std::int64_t rows = r.integer(r.member(det, "detector", "rows"), "detector.rows");
  if (shape == detector_shape::cylindrical && type != "cone" && type != "helical" &&
      type != "cone_vec")
    r.fail("detector.shape",
           fmt::format("'cylindrical' needs type 'cone', 'helical' or 'cone_vec' (a cone beam: "
                       "the cylinder is centred on the source), not '{}'",
                       type));
  if (type != "helical")
    for (const char* key : {"pitch_mm_per_turn", "pitch_factor", "z_start_mm"})
      if (j.contains(key))
        r.fail(key, fmt::format("applies to type 'helical' only, not '{}'", type));
  if (cols < 1) r.fail("detector.cols", fmt::format("must be >= 1 (got {})", cols));
  if (rows < 1) r.fail("detector.rows", fmt::format("must be >= 1 (got {})", rows));

  if (type == "cone" || type == "parallel") {
    auto px = r.numbers(r.member(det, "detector", "pixel_mm"), "detector.pixel_mm");
    if (px.size() != 2) r.fail("detector.pixel_mm", "expected [u, v]");
    if (!(pixel_pitch_ok(px[0]) && pixel_pitch_ok(px[1])))
      r.fail("detector.pixel_mm",
             fmt::format("pixel sizes must be at least {:g} mm in magnitude (negative: columns "
                         "run along -u, rows along -v; got [{}, {}])",
                         k_min_pixel_mm, px[0], px[1]));
    auto angles = parse_angles(r, r.member(j, "", "angles_deg"));
    std::vector<double> ou, ov;
    parse_offsets(r, det, ou, ov);
    if (!ou.empty() && ou.size() != 1 && ou.size() != angles.size())
      r.fail("detector.offset_mm",
             fmt::format("{} offsets given for {} views", ou.size(), angles.size()));
    if (type == "cone") {
      double sid = r.number(r.member(j, "", "source_to_isocenter_mm"), "source_to_isocenter_mm");
      double sdd = r.number(r.member(j, "", "source_to_detector_mm"), "source_to_detector_mm");
      if (!(sid > 0)) r.fail("source_to_isocenter_mm", fmt::format("must be > 0 (got {})", sid));
      if (!(sdd > sid))
        r.fail("source_to_detector_mm",
               fmt::format("must be greater than source_to_isocenter_mm ({} <= {})", sdd, sid));
      return make_cone_geometry(cols, rows, px[0], px[1], sid, sdd, std::move(angles), ou, ov,
                                shape);
    }
    return make_parallel_geometry(cols, rows, px[0], px[1], std::move(angles), ou, ov);
  }
  if (type == "helical") return helical_from_json(r, j, det, cols, rows, shape, origin);
  if (type == "cone_vec" || type == "parallel_vec") {
    const bool cone = type == "cone_vec";
    const json& vj = r.member(j, "", "views");
    if (!vj.is_array() || vj.empty()) r.fail("views", "expected a non-empty list of views");
    if (static_cast<std::int64_t>(vj.size()) > k_max_views)
      r.fail("views", fmt::format("{} views: at most {} are supported", vj.size(), k_max_views));
    std::vector<view_vectors> views;
    for (std::size_t i = 0; i < vj.size(); ++i) {
      const std::string p = fmt::format("views[{}]", i);
      r.known_keys(vj[i], p, {cone ? "source" : "ray", "detector_center", "u", "v"});
      view_vectors w;
      const char* src = cone ? "source" : "ray";
      w.source = r.triple(r.member(vj[i], p, src), p + "." + src);
      w.detector_center = r.triple(r.member(vj[i], p, "detector_center"), p + ".detector_center");
      w.u = r.triple(r.member(vj[i], p, "u"), p + ".u");
      w.v = r.triple(r.member(vj[i], p, "v"), p + ".v");
      views.push_back(w);
    }
    try {
      return make_vec_geometry(cone ? beam_kind::cone : beam_kind::parallel, cols, rows,
                               std::move(views), shape);
    } catch (const usage_error& e) {
      throw usage_error(fmt::format("{}: {}", origin, e.what()));
    }
  }
  r.fail("type",
         fmt::format("unknown geometry type '{}' (expected cone, parallel, helical, cone_vec or "
                     "parallel_vec)",
                     type));
}

geometry load_geometry(const std::string& path) {
  return geometry_from_json(detail::read_description_file(path, "geometry file"), path);
}

std::string geometry_to_json(const geometry& g) {
  json j;
  j["type"] = g.type_name();
  j["detector"] = {{"cols", g.cols}, {"rows", g.rows}};
  if (g.helix) {
    const helical_orbit& h = *g.helix;
    j["detector"]["pixel_mm"] = {g.pixel_u_mm, g.pixel_v_mm};
    if (g.curved()) j["detector"]["shape"] = to_string(g.shape);
    if (h.offset_u_mm != 0 || h.offset_v_mm != 0)
      j["detector"]["offset_mm"] = {h.offset_u_mm, h.offset_v_mm};
    j["source_to_isocenter_mm"] = h.source_to_isocenter_mm;
    j["source_to_detector_mm"] = h.source_to_detector_mm;
    json angles = json::array();
    for (double a : h.angles_rad) angles.push_back(rad_to_deg(a));
    j["angles_deg"] = angles;
    j["pitch_mm_per_turn"] = h.pitch_mm_per_turn;
    j["z_start_mm"] = h.z_start_mm;
  } else if (g.orbit) {
    const auto& o = *g.orbit;
    j["detector"]["pixel_mm"] = {g.pixel_u_mm, g.pixel_v_mm};
    if (g.curved()) j["detector"]["shape"] = to_string(g.shape);
    if (g.beam == beam_kind::cone) {
      j["source_to_isocenter_mm"] = o.source_to_isocenter_mm;
      j["source_to_detector_mm"] = o.source_to_detector_mm;
    }
    json angles = json::array();
    for (double a : o.angles_rad) angles.push_back(rad_to_deg(a));
    j["angles_deg"] = angles;
    bool any_offset = false;
    for (std::size_t i = 0; i < o.angles_rad.size(); ++i)
      any_offset = any_offset || o.offset_u_mm[i] != 0 || o.offset_v_mm[i] != 0;
    if (any_offset) {
      json off = json::array();
      for (std::size_t i = 0; i < o.angles_rad.size(); ++i)
        off.push_back({o.offset_u_mm[i], o.offset_v_mm[i]});
      j["detector"]["offset_mm"] = off;
    }
  } else {
    if (g.curved()) j["detector"]["shape"] = to_string(g.shape);
    json views = json::array();
    const char* src = g.beam == beam_kind::cone ? "source" : "ray";
    for (const auto& w : g.views)
      views.push_back({{src, vec_json(w.source)},
                       {"detector_center", vec_json(w.detector_center)},
                       {"u", vec_json(w.u)},
                       {"v", vec_json(w.v)}});
    j["views"] = views;
  }
  return j.dump();
}

projection_matrix compute_projection_matrix(const geometry& g, std::int64_t view) {
  CTFORGE_EXPECTS(view >= 0 && view < g.view_count(), fmt::format("view {} out of range", view));
  CTFORGE_EXPECTS(!g.curved(),
                  "geometry field 'detector.shape' is 'cylindrical': a curved detector has no "
                  "projection matrix (this operation supports flat detectors only)");
  const view_vectors& w = g.views[static_cast<std::size_t>(view)];
  const double c0 = 0.5 * static_cast<double>(g.cols - 1);
  const double r0 = 0.5 * static_cast<double>(g.rows - 1);
  const vec3 s = w.source, d = w.detector_center, u = w.u, v = w.v;
  const vec3 uv = cross(u, v);
  vec3 na, nb, nw;
  double ta, tb, tw;  // translations
  if (g.beam == beam_kind::cone) {
    // Ray from s through x meets the detector at d + a u + b v. With r = x - s:
    //   a = r.((s-d) x v) / r.(u x v),  b = r.(u x (s-d)) / r.(u x v).
    // Normalise by D0 = (d-s).(u x v) so that p2 = depth fraction (1 on the detector).
    const double d0 = dot(d - s, uv);
    na = (1.0 / d0) * cross(s - d, v);
    nb = (1.0 / d0) * cross(u, s - d);
    nw = (1.0 / d0) * uv;
    ta = -dot(na, s);
    tb = -dot(nb, s);
    tw = -dot(nw, s);
  } else {
    // x + t r = d + a u + b v  =>  a = (x-d).(v x r) / r.(u x v),  b = (x-d).(r x u) / r.(u x v)
    const vec3 r = w.source;
    const double den = dot(r, uv);
    na = (1.0 / den) * cross(v, r);
    nb = (1.0 / den) * cross(r, u);
    nw = {0, 0, 0};
    ta = -dot(na, d);
    tb = -dot(nb, d);
    tw = 1.0;
  }
  return {na.x + c0 * nw.x,
          na.y + c0 * nw.y,
          na.z + c0 * nw.z,
          ta + c0 * tw,
          nb.x + r0 * nw.x,
          nb.y + r0 * nw.y,
          nb.z + r0 * nw.z,
          tb + r0 * tw,
          nw.x,
          nw.y,
          nw.z,
          tw};
}

std::vector<projection_matrix> compute_projection_matrices(const geometry& g) {
  std::vector<projection_matrix> m;
  m.reserve(g.views.size());
  for (std::int64_t i = 0; i < g.view_count(); ++i) m.push_back(compute_projection_matrix(g, i));
  return m;
}

namespace {
void to_array(vec3 a, double out[3]) {
  out[0] = a.x;
  out[1] = a.y;
  out[2] = a.z;
}
}  // namespace

const char* to_string(detector_shape s) {
  return s == detector_shape::cylindrical ? "cylindrical" : "flat";
}

vec3 pixel_center(const geometry& g, std::int64_t view, double col, double row) {
  const view_vectors& w = g.views[static_cast<std::size_t>(view)];
  const double sc = col - 0.5 * static_cast<double>(g.cols - 1);
  const double sr = row - 0.5 * static_cast<double>(g.rows - 1);
  if (g.curved()) {
    double s[3], d[3], u[3], v[3], out[3];
    to_array(w.source, s);
    to_array(w.detector_center, d);
    to_array(w.u, u);
    to_array(w.v, v);
    kernels::cylinder_pixel_center(s, d, u, v, sc, sr, out);
    return {out[0], out[1], out[2]};
  }
  return w.detector_center + (col - 0.5 * static_cast<double>(g.cols - 1)) * w.u +
         (row - 0.5 * static_cast<double>(g.rows - 1)) * w.v;
}

detector_coords project_to_detector(const geometry& g, std::int64_t view, vec3 x) {
  CTFORGE_EXPECTS(view >= 0 && view < g.view_count(), fmt::format("view {} out of range", view));
  if (!g.curved()) {
    const projection_matrix m = compute_projection_matrix(g, view);
    const double p0 = m[0] * x.x + m[1] * x.y + m[2] * x.z + m[3];
    const double p1 = m[4] * x.x + m[5] * x.y + m[6] * x.z + m[7];
    const double p2 = m[8] * x.x + m[9] * x.y + m[10] * x.z + m[11];
    if (!(p2 > 0)) return {0, 0, 0};
    return {p0 / p2, p1 / p2, p2};
  }
  const cylinder_frame f = cylinder_frame_of(g, view);
  const vec3 r = x - f.source;
  const double a = dot(f.t, r), b = dot(f.v_hat, r), c = dot(f.n, r);
  const double l = std::sqrt(a * a + c * c);
  if (!(c > 0) || !(l > 0)) return {0, 0, 0};
  return {0.5 * static_cast<double>(g.cols - 1) + f.radius / f.du * std::atan2(a, c),
          0.5 * static_cast<double>(g.rows - 1) + (b * f.radius / l - f.hc) / f.dv, l / f.radius};
}

cylinder_frame cylinder_frame_of(const geometry& g, std::int64_t view) {
  CTFORGE_EXPECTS(g.curved(), "cylinder_frame_of: the detector is flat");
  const view_vectors& w = g.views[static_cast<std::size_t>(view)];
  cylinder_frame f;
  f.source = w.source;
  f.du = norm(w.u);
  f.dv = norm(w.v);
  f.v_hat = (1.0 / f.dv) * w.v;
  f.t = (1.0 / f.du) * w.u;
  const vec3 e = w.detector_center - w.source;
  f.hc = dot(e, f.v_hat);
  const vec3 rc = e - f.hc * f.v_hat;
  f.radius = norm(rc);
  f.n = (1.0 / f.radius) * rc;
  return f;
}

}  // namespace ctforge
