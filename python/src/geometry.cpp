// Geometry: the voxel grid (VolumeGeometry), the acquisition geometry (Geometry) and the
// functions that make, read and convert them.
#include "ctforge/geometry.hpp"

#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"

namespace ctforge::python {
namespace {

/// The per-view vectors as an (n, 12) array: source (or ray), detector centre, u, v.
py::array_t<double> view_array(const geometry& g) {
  py::array_t<double> out({static_cast<py::ssize_t>(g.view_count()), py::ssize_t{12}});
  auto m = out.mutable_unchecked<2>();
  for (std::int64_t i = 0; i < g.view_count(); ++i) {
    const view_vectors& w = g.views[static_cast<std::size_t>(i)];
    const vec3 parts[4] = {w.source, w.detector_center, w.u, w.v};
    for (int p = 0; p < 4; ++p) {
      m(i, 3 * p) = parts[p].x;
      m(i, 3 * p + 1) = parts[p].y;
      m(i, 3 * p + 2) = parts[p].z;
    }
  }
  return out;
}

std::vector<view_vectors> views_from_array(
    const py::array_t<double, py::array::c_style | py::array::forcecast>& a) {
  if (a.ndim() != 2 || a.shape(1) != 12)
    throw usage_error("vectors: expected an (n, 12) array (source or ray, detector centre, u, v)");
  auto m = a.unchecked<2>();
  std::vector<view_vectors> views(static_cast<std::size_t>(a.shape(0)));
  for (py::ssize_t i = 0; i < a.shape(0); ++i) {
    auto& w = views[static_cast<std::size_t>(i)];
    vec3* parts[4] = {&w.source, &w.detector_center, &w.u, &w.v};
    for (int p = 0; p < 4; ++p) *parts[p] = {m(i, 3 * p), m(i, 3 * p + 1), m(i, 3 * p + 2)};
  }
  return views;
}

using vectors_array = py::array_t<double, py::array::c_style | py::array::forcecast>;

beam_kind beam_of(const std::string& beam) {
  CTFORGE_EXPECTS(beam == "cone" || beam == "parallel",
                  "beam: expected 'cone' or 'parallel' (got '" + beam + "')");
  return beam == "cone" ? beam_kind::cone : beam_kind::parallel;
}

/// (n, k) array of n rows of k doubles.
template <typename Rows>
py::array_t<double> rows_array(const Rows& rows, py::ssize_t k) {
  py::array_t<double> out({static_cast<py::ssize_t>(rows.size()), k});
  auto o = out.mutable_unchecked<2>();
  for (std::size_t v = 0; v < rows.size(); ++v)
    for (py::ssize_t j = 0; j < k; ++j)
      o(static_cast<py::ssize_t>(v), j) = rows[v][static_cast<std::size_t>(j)];
  return out;
}

py::object optional_array(bool present, const std::vector<double>& values) {
  if (!present) return py::none();
  return py::array_t<double>(py::cast(values));
}

std::string geometry_repr(const geometry& g) {
  std::string s = "Geometry(type='" + g.type_name() + "', views=" + std::to_string(g.view_count()) +
                  ", rows=" + std::to_string(g.rows) + ", cols=" + std::to_string(g.cols);
  if (g.orbit && g.beam == beam_kind::cone)
    s += ", sid=" + py::repr(py::float_(g.orbit->source_to_isocenter_mm)).cast<std::string>() +
         ", sdd=" + py::repr(py::float_(g.orbit->source_to_detector_mm)).cast<std::string>();
  if (g.helix)
    s += ", sid=" + py::repr(py::float_(g.helix->source_to_isocenter_mm)).cast<std::string>() +
         ", sdd=" + py::repr(py::float_(g.helix->source_to_detector_mm)).cast<std::string>() +
         ", pitch_mm_per_turn=" +
         py::repr(py::float_(g.helix->pitch_mm_per_turn)).cast<std::string>();
  return s + ")";
}

std::string volume_geometry_repr(const volume_geometry& g) {
  const auto triple = [](const std::array<double, 3>& a) {
    return py::repr(py::make_tuple(a[0], a[1], a[2])).cast<std::string>();
  };
  return "VolumeGeometry(shape_zyx=(" + std::to_string(g.nz) + ", " + std::to_string(g.ny) + ", " +
         std::to_string(g.nx) + "), spacing_xyz=" + triple(g.spacing_mm) +
         ", origin_xyz=" + triple(g.origin_mm) + ")";
}

}  // namespace

void register_volume_geometry(py::module_& m) {
  py::class_<volume_geometry>(m, "VolumeGeometry",
                              "A voxel grid: nz x ny x nx voxels (arrays are indexed [z, y, x]), "
                              "spacing_xyz (x, y, z) in mm and origin_xyz (x, y, z) in mm, the "
                              "centre of voxel (0, 0, 0); default origin: the grid centred on "
                              "the isocentre. shape is (nz, ny, nx); spacing and origin are "
                              "(x, y, z).")
      .def(py::init([](std::int64_t nz, std::int64_t ny, std::int64_t nx,
                       std::array<double, 3> spacing, std::optional<std::array<double, 3>> origin) {
             volume_geometry vg = volume_geometry::centered(nx, ny, nz, spacing);
             if (origin) vg.origin_mm = *origin;
             vg.validate();
             return vg;
           }),
           py::arg("nz"), py::arg("ny"), py::arg("nx"), py::arg("spacing_xyz"),
           py::arg("origin_xyz") = py::none())
      .def_readonly("nx", &volume_geometry::nx)
      .def_readonly("ny", &volume_geometry::ny)
      .def_readonly("nz", &volume_geometry::nz)
      .def_property_readonly(
          "shape", [](const volume_geometry& g) { return py::make_tuple(g.nz, g.ny, g.nx); })
      .def_property_readonly("spacing",
                             [](const volume_geometry& g) {
                               return py::make_tuple(g.spacing_mm[0], g.spacing_mm[1],
                                                     g.spacing_mm[2]);
                             })
      .def_property_readonly("origin",
                             [](const volume_geometry& g) {
                               return py::make_tuple(g.origin_mm[0], g.origin_mm[1],
                                                     g.origin_mm[2]);
                             })
      .def("__eq__",
           [](const volume_geometry& a, const volume_geometry& b) {
             return a.nx == b.nx && a.ny == b.ny && a.nz == b.nz && a.spacing_mm == b.spacing_mm &&
                    a.origin_mm == b.origin_mm;
           })
      .def("__repr__", &volume_geometry_repr);
  m.def(
      "default_grid",
      [](const geometry& g, std::optional<std::array<std::int64_t, 3>> shape_zyx,
         std::optional<std::array<double, 3>> spacing, std::optional<std::array<double, 3>> origin,
         bool whole_in_memory) {
        grid_request r;
        r.whole_in_memory = whole_in_memory;
        if (shape_zyx)
          r.size = std::array<std::int64_t, 3>{(*shape_zyx)[2], (*shape_zyx)[1], (*shape_zyx)[0]};
        r.spacing_mm = spacing;
        r.origin_mm = origin;
        r.size_option = "shape";
        r.spacing_option = "spacing";
        r.origin_option = "origin";
        return default_grid(g, r);
      },
      py::arg("geometry"), py::arg("shape") = py::none(), py::arg("spacing") = py::none(),
      py::arg("origin") = py::none(), py::arg("whole_in_memory") = true);
}

void register_geometry(py::module_& m) {
  const auto circular = [](const geometry& g) { return g.orbit.has_value(); };
  const auto cone_orbit = [](const geometry& g) { return g.orbit && g.beam == beam_kind::cone; };
  // SID and SDD of a circular cone or a helix (nothing otherwise).
  const auto distances = [](const geometry& g) -> std::optional<std::pair<double, double>> {
    if (g.orbit && g.beam == beam_kind::cone)
      return std::pair{g.orbit->source_to_isocenter_mm, g.orbit->source_to_detector_mm};
    if (g.helix) return std::pair{g.helix->source_to_isocenter_mm, g.helix->source_to_detector_mm};
    return std::nullopt;
  };
  py::class_<geometry>(m, "Geometry")
      .def_property_readonly("type", &geometry::type_name)
      .def_property_readonly(
          "beam", [](const geometry& g) { return g.beam == beam_kind::cone ? "cone" : "parallel"; })
      .def_readonly("cols", &geometry::cols)
      .def_readonly("rows", &geometry::rows)
      .def_property_readonly(
          "pixel_size",
          [](const geometry& g) { return py::make_tuple(g.pixel_u_mm, g.pixel_v_mm); })
      .def_property_readonly("view_count", &geometry::view_count)
      .def_property_readonly("detector_shape",
                             [](const geometry& g) { return std::string(to_string(g.shape)); })
      .def_property_readonly(
          "projection_shape",
          [](const geometry& g) { return py::make_tuple(g.view_count(), g.rows, g.cols); })
      .def_property_readonly("vectors", &view_array)
      .def_property_readonly("angles",
                             [=](const geometry& g) {
                               if (g.helix) return optional_array(true, g.helix->angles_rad);
                               return optional_array(circular(g), g.orbit ? g.orbit->angles_rad
                                                                          : std::vector<double>{});
                             })
      .def_property_readonly("sid",
                             [=](const geometry& g) -> py::object {
                               const auto d = distances(g);
                               return d ? py::object(py::float_(d->first)) : py::none();
                             })
      .def_property_readonly("sdd",
                             [=](const geometry& g) -> py::object {
                               const auto d = distances(g);
                               return d ? py::object(py::float_(d->second)) : py::none();
                             })
      .def_property_readonly("pitch_mm_per_turn",
                             [](const geometry& g) -> py::object {
                               if (!g.helix) return py::none();
                               return py::float_(g.helix->pitch_mm_per_turn);
                             })
      .def_property_readonly("z_start",
                             [](const geometry& g) -> py::object {
                               if (!g.helix) return py::none();
                               return py::float_(g.helix->z_start_mm);
                             })
      .def("helical_coverage",
           [](const geometry& g) {
             const helical_coverage c = helical_coverage_of(g);
             py::dict d;
             d["pitch_factor"] = c.pitch_factor;
             d["source_z_min"] = c.source_z_min_mm;
             d["source_z_max"] = c.source_z_max_mm;
             d["full_z_min"] = c.full_z_min_mm;
             d["full_z_max"] = c.full_z_max_mm;
             return d;
           })
      .def_property_readonly("offset_u",
                             [=](const geometry& g) {
                               return optional_array(circular(g), g.orbit ? g.orbit->offset_u_mm
                                                                          : std::vector<double>{});
                             })
      .def_property_readonly("offset_v",
                             [=](const geometry& g) {
                               return optional_array(circular(g), g.orbit ? g.orbit->offset_v_mm
                                                                          : std::vector<double>{});
                             })
      .def("to_json", &geometry_to_json)
      .def("projection_matrices",
           [](const geometry& g) {
             const auto mats = compute_projection_matrices(g);
             py::array_t<double> out(
                 {static_cast<py::ssize_t>(mats.size()), py::ssize_t{3}, py::ssize_t{4}});
             auto o = out.mutable_unchecked<3>();
             for (std::size_t v = 0; v < mats.size(); ++v)
               for (int k = 0; k < 12; ++k)
                 o(static_cast<py::ssize_t>(v), k / 4, k % 4) =
                     mats[v][static_cast<std::size_t>(k)];
             return out;
           })
      .def("with_center_of_rotation", &with_center_of_rotation, py::arg("col"))
      .def("to_astra", [](const geometry& g) { return rows_array(io::astra_vectors(g), 12); })
      .def("to_rtk_xml", [](const geometry& g) { return io::rtk_xml(io::rtk_from_geometry(g)); })
      .def("__eq__", [](const geometry& a,
                        const geometry& b) { return geometry_to_json(a) == geometry_to_json(b); })
      .def("__repr__", &geometry_repr);
}

void register_geometry_makers(py::module_& m) {
  m.def(
      "make_cone",
      [](std::int64_t cols, std::int64_t rows, double pixel_u, double pixel_v, double sid,
         double sdd, std::vector<double> angles, std::vector<double> offset_u,
         std::vector<double> offset_v, const std::string& detector_shape_name) {
        CTFORGE_EXPECTS(
            detector_shape_name == "flat" || detector_shape_name == "cylindrical",
            "detector_shape: expected 'flat' or 'cylindrical', got '" + detector_shape_name + "'");
        return make_cone_geometry(cols, rows, pixel_u, pixel_v, sid, sdd, std::move(angles),
                                  std::move(offset_u), std::move(offset_v),
                                  detector_shape_name == "cylindrical" ? detector_shape::cylindrical
                                                                       : detector_shape::flat);
      },
      py::arg("cols"), py::arg("rows"), py::arg("pixel_u"), py::arg("pixel_v"), py::arg("sid"),
      py::arg("sdd"), py::arg("angles"), py::arg("offset_u") = std::vector<double>{},
      py::arg("offset_v") = std::vector<double>{}, py::arg("detector_shape") = "flat");
  m.def(
      "make_helical",
      [](std::int64_t cols, std::int64_t rows, double pixel_u, double pixel_v, double sid,
         double sdd, std::vector<double> angles, double pitch_mm_per_turn, double z_start,
         double offset_u, double offset_v, const std::string& detector_shape_name) {
        CTFORGE_EXPECTS(
            detector_shape_name == "flat" || detector_shape_name == "cylindrical",
            "detector_shape: expected 'flat' or 'cylindrical', got '" + detector_shape_name + "'");
        return make_helical_geometry(cols, rows, pixel_u, pixel_v, sid, sdd, std::move(angles),
                                     pitch_mm_per_turn, z_start, offset_u, offset_v,
                                     detector_shape_name == "cylindrical"
                                         ? detector_shape::cylindrical
                                         : detector_shape::flat);
      },
      py::arg("cols"), py::arg("rows"), py::arg("pixel_u"), py::arg("pixel_v"), py::arg("sid"),
      py::arg("sdd"), py::arg("angles"), py::arg("pitch_mm_per_turn"), py::arg("z_start"),
      py::arg("offset_u"), py::arg("offset_v"), py::arg("detector_shape"));
  m.def("make_parallel", &make_parallel_geometry, py::arg("cols"), py::arg("rows"),
        py::arg("pixel_u"), py::arg("pixel_v"), py::arg("angles"),
        py::arg("offset_u") = std::vector<double>{}, py::arg("offset_v") = std::vector<double>{});
  m.def(
      "make_vec",
      [](const std::string& beam, std::int64_t cols, std::int64_t rows,
         const vectors_array& vectors) {
        return make_vec_geometry(beam_of(beam), cols, rows, views_from_array(vectors));
      },
      py::arg("beam"), py::arg("cols"), py::arg("rows"), py::arg("vectors"));
  m.def("geometry_from_json", &geometry_from_json, py::arg("text"), py::arg("origin") = "geometry");
  m.def("load_geometry", &load_geometry, py::arg("path"));
  m.def(
      "geometry_from_rtk_xml",
      [](const std::string& text, std::int64_t cols, std::int64_t rows, double du, double dv) {
        return io::geometry_from_rtk(io::parse_rtk_xml(text), cols, rows, du, dv);
      },
      py::arg("text"), py::arg("cols"), py::arg("rows"), py::arg("pixel_u"), py::arg("pixel_v"));
  m.def(
      "geometry_from_astra",
      [](const std::string& beam, std::int64_t cols, std::int64_t rows,
         const vectors_array& vectors) {
        const beam_kind b = beam_of(beam);
        views_from_array(vectors);  // the shape check, with its message
        std::vector<io::astra_vector> rows12;
        auto a = vectors.unchecked<2>();
        for (py::ssize_t i = 0; i < vectors.shape(0); ++i) {
          io::astra_vector r{};
          for (int k = 0; k < 12; ++k) r[static_cast<std::size_t>(k)] = a(i, k);
          rows12.push_back(r);
        }
        return io::geometry_from_astra(b, cols, rows, rows12);
      },
      py::arg("beam"), py::arg("cols"), py::arg("rows"), py::arg("vectors"));
  m.def("default_algorithm", [](const geometry& g) { return to_string(default_algorithm(g)); });
}

}  // namespace ctforge::python
