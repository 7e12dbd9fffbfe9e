// Centre of rotation: the estimate, the search with its metric, and the candidate slices.
#include <pybind11/stl.h>

#include <utility>
#include <vector>

#include "common.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/io.hpp"

namespace ctforge::python {

void register_center(py::module_& m) {
  m.def(
      "estimate_center_of_rotation",
      [](const py::handle& proj_obj, const geometry& g) {
        const farray in = require_array(proj_obj, 3, "projections");
        const projection_view p = projection_arg(in);
        py::gil_scoped_release nogil;
        return estimate_center_of_rotation(p, g);
      },
      py::arg("projections"), py::arg("geometry"));
  m.def(
      "find_center_of_rotation",
      [](const py::handle& proj_obj, const geometry& g, std::int64_t row, double min_column,
         double max_column, double wedge_ratio) {
        const farray in = require_array(proj_obj, 3, "projections");
        const projection_view p = projection_arg(in);
        center_search_options o;
        o.row = row;
        o.min_column = min_column;
        o.max_column = max_column;
        o.wedge_ratio = wedge_ratio;
        center_estimate e;
        {
          py::gil_scoped_release nogil;
          e = find_center_of_rotation(p, g, o);
        }
        return py::make_tuple(
            e.column, e.confidence, e.method, e.registration_column,
            py::array_t<double>(static_cast<py::ssize_t>(e.candidates.size()), e.candidates.data()),
            py::array_t<double>(static_cast<py::ssize_t>(e.metric.size()), e.metric.data()));
      },
      py::arg("projections"), py::arg("geometry"), py::arg("row"), py::arg("min_column"),
      py::arg("max_column"), py::arg("wedge_ratio"));
  m.def(
      "center_candidates",
      [](const py::handle& proj_obj, const geometry& g, std::int64_t row,
         const std::vector<double>& columns, std::int64_t size, int threads) {
        const farray in = require_array(proj_obj, 3, "projections");
        const projection_view p = projection_arg(in);
        volume out;
        {
          py::gil_scoped_release nogil;
          out = reconstruct_center_candidates(p, g, row, columns, size, threads);
        }
        return to_numpy(std::move(out));
      },
      py::arg("projections"), py::arg("geometry"), py::arg("row"), py::arg("columns"),
      py::arg("size"), py::arg("threads"));
  m.def(
      "write_center_montage",
      [](const std::string& path, const py::handle& slices_obj,
         const std::vector<double>& columns) {
        const farray a = require_array(slices_obj, 3, "slices");
        const volume_geometry vg =
            volume_geometry::centered(a.shape(2), a.shape(1), a.shape(0), {1.0, 1.0, 1.0});
        const volume_view v = volume_arg(a, vg, "slices");
        py::gil_scoped_release nogil;
        io::write_center_montage(path, v, columns);
      },
      py::arg("path"), py::arg("slices"), py::arg("columns"));
}

}  // namespace ctforge::python
