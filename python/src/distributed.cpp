// Work units for ctforge.distributed: a slab run (FDK / FBP units recorded in a checkpoint
// directory), computed one unit at a time with keyword options.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "ctforge/checkpoint.hpp"

namespace ctforge::python {

void register_slab_run(py::module_& m) {
  py::class_<slab_run>(m, "SlabRun")
      .def(py::init([](const geometry& g, const volume_geometry& vg, const std::string& dir,
                       std::int64_t planes, const std::string& record) {
             checkpoint_options co;
             co.dir = dir;
             co.planes_per_unit = planes;
             py::gil_scoped_release nogil;
             return std::make_unique<slab_run>(g, vg, co, record);
           }),
           py::arg("geometry"), py::arg("grid"), py::arg("dir"), py::arg("planes"),
           py::arg("record"))
      .def_property_readonly("units",
                             [](const slab_run& r) {
                               py::list out;
                               for (const auto& u : r.units())
                                 out.append(py::make_tuple(u.k0, u.k1, u.r0, u.r1, u.v0, u.v1));
                               return out;
                             })
      .def_property_readonly("dir", &slab_run::dir)
      .def_property_readonly("fingerprint", &slab_run::fingerprint)
      .def(
          "is_recorded",
          [](const slab_run& r, std::size_t i) {
            CTFORGE_EXPECTS(i < r.units().size(), "unit index out of range");
            std::string why;
            bool ok;
            {
              py::gil_scoped_release nogil;
              ok = r.is_recorded(i, &why);
            }
            return py::make_tuple(ok, why);
          },
          py::arg("unit"))
      .def(
          "read_unit",
          [](const slab_run& r, std::size_t i, const volume_geometry& vg) {
            CTFORGE_EXPECTS(i < r.units().size(), "unit index out of range");
            const slab_unit u = r.units()[i];
            std::vector<float> data;
            {
              py::gil_scoped_release nogil;
              data = r.read_unit(i);
            }
            return owning_array(std::move(data), {u.k1 - u.k0, vg.ny, vg.nx});
          },
          py::arg("unit"), py::arg("grid"))
      .def(
          "compute_unit",
          [](const slab_run& r, std::size_t i, const py::handle& band_obj,
             const py::kwargs& options) {
            CTFORGE_EXPECTS(i < r.units().size(), "unit index out of range");
            keyword_options kw(options, "compute_unit");
            const recon_options opt = read_recon_options(kw, nullptr);
            kw.finish();
            const farray band = require_array(band_obj, 3, "band");
            const projection_view p = projection_arg(band);
            py::gil_scoped_release nogil;
            r.compute_unit(i, p, opt);
          },
          py::arg("unit"), py::arg("band"));
  m.def("default_unit_planes", &default_unit_planes, py::arg("grid"));
  m.def(
      "plan_slab_units",
      [](const geometry& g, const volume_geometry& vg, std::int64_t planes) {
        py::list out;
        for (const auto& u : plan_slab_units(g, vg, planes))
          out.append(py::make_tuple(u.k0, u.k1, u.r0, u.r1, u.v0, u.v1));
        return out;
      },
      py::arg("geometry"), py::arg("grid"), py::arg("planes"));
  // One unit computed without recording it anywhere (reconstruct_unit): what a unit recorded in
  // object storage runs, the same floats as SlabRun.compute_unit.
  m.def(
      "reconstruct_unit",
      [](const py::handle& band_obj, const geometry& g, const volume_geometry& vg,
         const std::vector<std::int64_t>& unit, const py::kwargs& options) {
        CTFORGE_EXPECTS(unit.size() == 6, "unit: expected (k0, k1, r0, r1, v0, v1)");
        keyword_options kw(options, "reconstruct_unit");
        const recon_options opt = read_recon_options(kw, nullptr);
        kw.finish();
        const slab_unit u{unit[0], unit[1], unit[2], unit[3], unit[4], unit[5]};
        const farray band = require_array(band_obj, 3, "band");
        const projection_view p = projection_arg(band);
        volume v;
        {
          py::gil_scoped_release nogil;
          v = reconstruct_unit(p, g, vg, opt, u);
        }
        return to_numpy(std::move(v));
      },
      py::arg("band"), py::arg("geometry"), py::arg("grid"), py::arg("unit"));
}

}  // namespace ctforge::python
