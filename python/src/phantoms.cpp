// Phantoms and simulation: analytic phantoms, their exact projections, voxelisation and noise.
#include <pybind11/stl.h>

#include <cstdint>
#include <utility>

#include "common.hpp"
#include "ctforge/phantom.hpp"

namespace ctforge::python {

void register_phantoms(py::module_& m) {
  py::class_<phantom>(m, "Phantom")
      .def("to_json", &phantom_to_json)
      .def_property_readonly("ellipsoid_count",
                             [](const phantom& p) { return p.ellipsoids.size(); })
      .def("__repr__", [](const phantom& p) {
        return "Phantom(" + std::to_string(p.ellipsoids.size()) + " ellipsoids)";
      });
  m.def("shepp_logan", &shepp_logan_phantom, py::arg("size_mm"));
  m.def("phantom_from_json", &phantom_from_json, py::arg("text"), py::arg("origin") = "phantom");
  m.def(
      "project_analytic",
      [](const phantom& p, const geometry& g, int threads) {
        projection_stack out;
        {
          py::gil_scoped_release nogil;
          out = project_analytic(p, g, threads);
        }
        return to_numpy(std::move(out));
      },
      py::arg("phantom"), py::arg("geometry"), py::arg("threads") = 0);
  m.def(
      "voxelize",
      [](const phantom& p, const volume_geometry& vg, int supersample, int threads) {
        volume out;
        {
          py::gil_scoped_release nogil;
          out = voxelize(p, vg, supersample, threads);
        }
        return to_numpy(std::move(out));
      },
      py::arg("phantom"), py::arg("grid"), py::arg("supersample") = 4, py::arg("threads") = 0);
  m.def(
      "add_noise",
      [](const py::handle& proj_obj, double i0, double sigma, std::uint64_t seed) {
        const farray in = require_array(proj_obj, 3, "projections");
        projection_stack p = to_stack(projection_arg(in));  // the result is a new array
        noise_options no;
        no.incident_photons = i0;
        no.electronic_sigma = sigma;
        no.seed = seed;
        noise_report r;
        {
          py::gil_scoped_release nogil;
          r = add_noise(p, no);
        }
        return py::make_tuple(to_numpy(std::move(p)), r.non_positive);
      },
      py::arg("projections"), py::arg("i0"), py::arg("sigma"), py::arg("seed"));
}

}  // namespace ctforge::python
