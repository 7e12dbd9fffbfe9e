// Files: projections and volumes in every format the library reads and writes, the HDF5 volume
// written slab by slab, and what a file holds.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "ctforge/checkpoint.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "ctforge/preprocess.hpp"

namespace ctforge::python {
namespace {

/// A (first, second) pair of integers; nullopt when not given.
std::optional<std::array<std::int64_t, 2>> range_of(keyword_options& kw, const char* key) {
  const py::object v = kw.object(key);
  if (v.is_none()) return std::nullopt;
  try {
    return v.cast<std::array<std::int64_t, 2>>();
  } catch (const py::cast_error&) {
    throw usage_error(std::string(key) + ": expected two integers (got " +
                      py::repr(v).cast<std::string>() + ")");
  }
}

io::intensity_mode mode_of(const std::string& mode) {
  if (mode == "auto") return io::intensity_mode::automatic;
  if (mode == "raw") return io::intensity_mode::raw;
  if (mode == "line-integrals") return io::intensity_mode::line_integrals;
  throw usage_error("mode: expected 'auto', 'raw' or 'line-integrals' (got '" + mode + "')");
}

/// The open-beam column ranges [(first, stop), ...].
std::vector<std::pair<std::int64_t, std::int64_t>> open_beam_of(keyword_options& kw) {
  const py::object v = kw.object("open_beam_cols");
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  if (v.is_none()) return out;
  std::vector<std::array<std::int64_t, 2>> ranges;
  try {
    ranges = v.cast<std::vector<std::array<std::int64_t, 2>>>();
  } catch (const py::cast_error&) {
    throw usage_error("open_beam_cols: expected a list of (first, stop) column pairs");
  }
  for (const auto& [a, b] : ranges) {
    if (!(0 <= a && a < b))
      throw usage_error("open_beam_cols: range (" + std::to_string(a) + ", " + std::to_string(b) +
                        "): expected 0 <= first < stop (columns first to stop-1)");
    out.emplace_back(a, b);
  }
  return out;
}

/// Projection read options from the keyword options of read_projections.
io::projection_read_options read_options(keyword_options& kw) {
  io::projection_read_options o;
  o.flat_path = kw.text("flat", "");
  o.dark_path = kw.text("dark", "");
  o.geometry_path = kw.text("geometry", "");
  constexpr std::array<std::int64_t, 2> all{0, -1};
  const auto views = range_of(kw, "views").value_or(all);
  const auto rows = range_of(kw, "rows").value_or(all);
  const auto cols = range_of(kw, "cols").value_or(all);
  o.select.views = {views[0], views[1]};
  o.select.rows = {rows[0], rows[1]};
  o.select.cols = {cols[0], cols[1]};
  o.bin_rows = kw.integer("bin_rows", 1);
  o.bin_cols = kw.integer("bin_cols", 1);
  o.pixel_size_mm = kw.number("pixel_size", 1.0);
  o.mode = mode_of(kw.text("mode", "auto"));
  o.min_transmission = kw.number("min_transmission", 1e-4);
  o.transpose = kw.flag("transpose", false);
  o.flip_u = kw.flag("flip_u", false);
  o.flip_v = kw.flag("flip_v", false);
  o.angles_path = kw.text("angles", "");
  const std::string angle_unit = kw.text("angle_unit", "deg");
  if (angle_unit != "deg" && angle_unit != "rad")
    throw usage_error("angle_unit: expected 'deg' or 'rad' (got '" + angle_unit + "')");
  o.angles_in_radians = angle_unit == "rad";
  o.sinogram = kw.flag("sinogram", false);
  o.open_beam_cols = open_beam_of(kw);
  o.datasets = {kw.text("data_path", ""), kw.text("flat_path", ""), kw.text("dark_path", ""),
                kw.text("angles_path", "")};
  return o;
}

/// A keyword's value as the table's options read it: a string, a number, or a sequence of
/// numbers ("c0,c1,...").
std::string setting_text(const std::string& key, const py::object& v) {
  const auto bad = [&] {
    return usage_error(key + ": expected a number, a string or a list of numbers (got " +
                       py::repr(v).cast<std::string>() + ")");
  };
  if (PyBool_Check(v.ptr())) throw bad();
  if (py::isinstance<py::str>(v) || PyNumber_Check(v.ptr()) != 0)
    return py::str(v).cast<std::string>();
  if (!py::isinstance<py::sequence>(v) && !py::hasattr(v, "__iter__")) throw bad();
  std::string out;
  for (const py::handle item : v) {
    if (PyBool_Check(item.ptr()) || PyNumber_Check(item.ptr()) == 0) throw bad();
    out += (out.empty() ? "" : ",") + py::str(item).cast<std::string>();
  }
  return out;
}

/// The preprocessing steps the keyword options name (preprocess_option_table()'s names).
preprocess_options steps_of(keyword_options& kw) {
  std::vector<preprocess_setting> given;
  for (const preprocess_option& e : preprocess_option_table()) {
    const std::string key(e.name);
    const py::object v = kw.object(key.c_str());
    if (v.is_none()) continue;
    given.push_back({key, setting_text(key, v)});
  }
  preprocess_options steps = parse_preprocess_options(given);
  steps.threads = kw.count("threads", 0);
  return steps;
}

/// Rows [r0, r1) of what read_projections_any(path, o) reads (`rows` rows), cleaned by `steps`
/// as those rows of the whole cleaned projections are (preprocessed_rows: the margin read too).
io::loaded_projections read_band(const std::string& path, const io::projection_read_options& o,
                                 std::int64_t rows, std::int64_t r0, std::int64_t r1,
                                 const preprocess_options& steps) {
  if (steps.empty()) return io::read_projections_any(path, io::row_band_options(o, rows, r0, r1));
  io::loaded_projections wide;
  const row_band_source source = [&](std::int64_t a, std::int64_t b) {
    wide = io::read_projections_any(path, io::row_band_options(o, rows, a, b));
    return std::move(wide.projections);
  };
  projection_stack band = preprocessed_rows(source, rows, steps)(r0, r1);
  wide.projections = std::move(band);
  wide.geom = io::read_projection_geometry(path, io::row_band_options(o, rows, r0, r1));
  wide.geometry_json = geometry_to_json(*wide.geom);
  return wide;
}

/// A native HDF5 volume written slab by slab; close() without commit() abandons it.
struct py_volume_writer {
  std::unique_ptr<io::volume_file_writer> w;
  io::volume_file_writer& get() {
    CTFORGE_EXPECTS(w != nullptr, "VolumeFileWriter: closed");
    return *w;
  }
};

py::dict info_dict(const io::loaded_projections& lp) {
  py::dict d;
  d["format"] = lp.format;
  d["warnings"] = lp.warnings;
  d["clamped"] = lp.clamped;
  return d;
}

}  // namespace

void register_projection_files(py::module_& m) {
  m.def(
      "read_projections",
      [](const std::string& path, const py::kwargs& options) -> py::tuple {
        keyword_options kw(options, "read_projections");
        io::projection_read_options o = read_options(kw);
        const std::optional<std::array<std::int64_t, 2>> band = range_of(kw, "band");
        const bool geometry_only = kw.flag("geometry_only", false);
        preprocess_options steps = steps_of(kw);
        kw.finish();
        io::loaded_projections lp;
        {
          py::gil_scoped_release nogil;
          if (geometry_only) {
            lp.geom = io::read_projection_geometry(path, o);
            lp.format = o.datasets.data.empty() ? io::projection_format(path) : "hdf5";
          } else if (band) {
            const geometry whole = io::read_projection_geometry(path, o);
            set_detector(steps, whole);
            lp = read_band(path, o, whole.rows, (*band)[0], (*band)[1], steps);
          } else {
            lp = io::read_projections_any(path, o);
            set_detector(steps, *lp.geom);
            const preprocess_report done = preprocess(lp.projections, steps);
            if (steps.zingers)
              lp.warnings += fmt::format("{}zingers: {} values replaced",
                                         lp.warnings.empty() ? "" : "; ", done.zingers_replaced);
          }
        }
        geometry g = *lp.geom;
        py::dict d = info_dict(lp);
        if (geometry_only) return py::make_tuple(py::none(), g, d);
        return py::make_tuple(to_numpy(std::move(lp.projections)), g, d);
      },
      py::arg("path"));
}

void register_volume_files(py::module_& m) {
  py::class_<py_volume_writer>(m, "VolumeFileWriter")
      .def(py::init([](const std::string& path, const volume_geometry& vg) {
             py_volume_writer w;
             w.w = std::make_unique<io::volume_file_writer>(path, vg);
             return w;
           }),
           py::arg("path"), py::arg("grid"))
      .def(
          "write_planes",
          [](py_volume_writer& w, std::int64_t k0, const py::handle& planes_obj) {
            const farray a = require_array(planes_obj, 3, "planes");
            const std::span<const float> s = span_of(a);
            py::gil_scoped_release nogil;
            w.get().write_planes(k0, s);
          },
          py::arg("k0"), py::arg("planes"))
      .def("commit",
           [](py_volume_writer& w) {
             {
               py::gil_scoped_release nogil;
               w.get().commit();
             }
             w.w.reset();
           })
      .def_property_readonly(
          "temporary_path",
          [](py_volume_writer& w) { return w.get().temporary_path(); })
      .def_property_readonly("data_offset",
                             [](py_volume_writer& w) { return w.get().data_offset(); })
      .def(
          "mark_written",
          [](py_volume_writer& w, std::int64_t k0, std::int64_t n) { w.get().mark_written(k0, n); },
          py::arg("k0"), py::arg("n"))
      .def("close", [](py_volume_writer& w) { w.w.reset(); });
  m.def(
      "write_volume_part",
      [](const std::string& temporary, std::uint64_t offset, const volume_geometry& vg,
         std::int64_t k0, const py::handle& planes_obj) {
        const farray a = require_array(planes_obj, 3, "planes");
        const std::span<const float> s = span_of(a);
        py::gil_scoped_release nogil;
        io::write_volume_part(temporary, offset, vg, k0, s);
      },
      py::arg("temporary"), py::arg("data_offset"), py::arg("grid"), py::arg("k0"),
      py::arg("planes"));
  m.def(
      "write_projections",
      [](const std::string& path, const py::handle& proj_obj, const geometry& g) {
        const farray in = require_array(proj_obj, 3, "projections");
        const projection_view p = projection_arg(in);
        py::gil_scoped_release nogil;
        io::write_projections(path, p, g);
      },
      py::arg("path"), py::arg("projections"), py::arg("geometry"));
  m.def(
      "read_volume",
      [](const std::string& path, std::optional<double> mu_water) {
        io::volume_read_options o;
        o.mu_water_per_mm = mu_water;
        volume v;
        {
          py::gil_scoped_release nogil;
          v = io::read_volume_any(path, o);
        }
        const volume_geometry vg = v.geom;
        return py::make_tuple(to_numpy(std::move(v)), vg);
      },
      py::arg("path"), py::arg("mu_water") = py::none());
  m.def(
      "write_volume",
      [](const std::string& path, const py::handle& vol_obj, const volume_geometry& vg,
         double mu_water, bool values_are_hu, bool compress, const std::string& description) {
        const farray in = require_array(vol_obj, 3, "volume");
        const volume_view v = volume_arg(in, vg, "volume");
        io::volume_write_options o;
        o.mu_water_per_mm = mu_water;
        o.values_are_hu = values_are_hu;
        o.compress = compress;
        o.series_description = description;
        py::gil_scoped_release nogil;
        io::write_volume_any(path, v, o);
      },
      py::arg("path"), py::arg("volume"), py::arg("grid"), py::arg("mu_water"),
      py::arg("values_are_hu"), py::arg("compress"), py::arg("series_description"));
  m.def(
      "write_preview_png",
      [](const std::string& path, const py::handle& vol_obj, const volume_geometry& vg, float lo,
         float hi) {
        const farray in = require_array(vol_obj, 3, "volume");
        const volume_view v = volume_arg(in, vg, "volume");
        py::gil_scoped_release nogil;
        io::write_preview_png(path, v, lo, hi);
      },
      py::arg("path"), py::arg("volume"), py::arg("grid"), py::arg("lo"), py::arg("hi"));
  m.def(
      "read_zarr_array",
      [](const std::string& path) {
        std::vector<std::int64_t> shape;
        std::vector<float> values;
        {
          py::gil_scoped_release nogil;
          values = io::read_zarr_array(path, shape);
        }
        return owning_array(std::move(values),
                            std::vector<py::ssize_t>(shape.begin(), shape.end()));
      },
      py::arg("path"));
  m.def("describe", &io::describe_any, py::arg("path"));
  m.def("object_name", &io::object_name, py::arg("url"));
  m.def(
      "download_object",
      [](const std::string& url, const std::string& dir) {
        py::gil_scoped_release nogil;
        return io::download(url, dir);
      },
      py::arg("url"), py::arg("dir"));
  m.def(
      "upload_object",
      [](const std::string& local, const std::string& url) {
        py::gil_scoped_release nogil;
        io::upload(local, url);
      },
      py::arg("local"), py::arg("url"));
  m.def("content_kind", &io::content_kind, py::arg("path"));
  m.def("projection_format", &io::projection_format, py::arg("path"));
  m.def("volume_format",
        [](const std::string& path) { return io::to_string(io::volume_format_of(path)); });
}

}  // namespace ctforge::python
