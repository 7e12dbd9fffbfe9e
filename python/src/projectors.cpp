// Projectors: forward and back projection, and the persistent projector pair (the library's
// projector_pair: device resources kept between calls).
#include <utility>

#include "common.hpp"

namespace ctforge::python {
namespace {

/// "projections: array shape (...) does not match the geometry" unless `a` is g's stack.
void require_projection_shape(const farray& a, const geometry& g) {
  if (a.shape(0) != g.view_count() || a.shape(1) != g.rows || a.shape(2) != g.cols)
    throw usage_error("projections: array shape (" + std::to_string(a.shape(0)) + ", " +
                      std::to_string(a.shape(1)) + ", " + std::to_string(a.shape(2)) +
                      ") does not match the geometry (views, rows, cols) = (" +
                      std::to_string(g.view_count()) + ", " + std::to_string(g.rows) + ", " +
                      std::to_string(g.cols) + ")");
}

/// A new float32 array of `shape`, or `out` (None: new) when it is a writeable C-contiguous
/// float32 array of that shape that does not overlap `in`: the products write into the
/// caller's memory (a batch's slice, a PyTorch tensor's storage) instead of a new buffer.
farray output_array(const py::object& out, const std::vector<py::ssize_t>& shape,
                    const farray& in) {
  if (out.is_none()) return farray(shape);
  const farray a = require_array(out, 3, "out");
  if (a.shape(0) != shape[0] || a.shape(1) != shape[1] || a.shape(2) != shape[2])
    throw usage_error("out: array shape (" + std::to_string(a.shape(0)) + ", " +
                      std::to_string(a.shape(1)) + ", " + std::to_string(a.shape(2)) +
                      ") is not the result's (" + std::to_string(shape[0]) + ", " +
                      std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ")");
  if (!a.writeable()) throw usage_error("out: the array is read-only");
  const float* o = a.data();
  const float* i = in.data();
  if (o < i + in.size() && i < o + a.size())
    throw usage_error("out: must not overlap the input");
  return a;
}

}  // namespace

void register_projectors(py::module_& m) {
  m.def(
      "forward_project",
      [](const py::handle& vol_obj, const volume_geometry& vg, const geometry& g,
         const py::kwargs& options) {
        keyword_options kw(options, "forward_project");
        const projector_options po = read_projector_options(kw);
        kw.finish();
        const farray in = require_array(vol_obj, 3, "volume");
        const volume_view v = volume_arg(in, vg, "volume");
        projection_stack out;
        {
          py::gil_scoped_release nogil;
          out = forward_project(v, g, po);
        }
        return to_numpy(std::move(out));
      },
      py::arg("volume"), py::arg("grid"), py::arg("geometry"));
  m.def(
      "back_project",
      [](const py::handle& proj_obj, const geometry& g, const volume_geometry& vg,
         const py::kwargs& options) {
        keyword_options kw(options, "back_project");
        const projector_options po = read_projector_options(kw);
        const bool reference = kw.flag("reference", false);
        const bool matched = kw.flag("matched", false);
        kw.finish();
        const farray in = require_array(proj_obj, 3, "projections");
        const projection_view p = projection_arg(in);
        CTFORGE_EXPECTS(!matched || po.where != backend::cuda,
                        "matched: the matched back-projector runs on the CPU; use backend='cpu' "
                        "or 'auto'");
        volume out;
        {
          py::gil_scoped_release nogil;
          out = matched     ? back_project_matched(p, g, vg, po.threads)
                : reference ? back_project(p, g, vg, po.threads, true)
                            : back_project(p, g, vg, po);
        }
        return to_numpy(std::move(out));
      },
      py::arg("projections"), py::arg("geometry"), py::arg("grid"));
}

void register_projector_pair(py::module_& m) {
  py::class_<projector_pair>(m, "ProjectorPair")
      .def(py::init([](const geometry& g, const volume_geometry& vg, const py::kwargs& options) {
             keyword_options kw(options, "ProjectorPair");
             const projector_options po = read_projector_options(kw);
             const bool matched = kw.flag("matched", true);
             kw.finish();
             py::gil_scoped_release nogil;
             return std::make_unique<projector_pair>(
                 g, vg, po, matched ? backprojector::matched : backprojector::voxel);
           }),
           py::arg("geometry"), py::arg("grid"))
      .def(
          "apply",
          [](projector_pair& A, const py::handle& vol_obj, const py::object& out_obj) {
            const farray in = require_array(vol_obj, 3, "volume");
            const volume_view v = volume_arg(in, A.grid(), "volume");
            const geometry& g = A.geom();
            farray out = output_array(out_obj, {g.view_count(), g.rows, g.cols}, in);
            const std::span<float> dst(out.mutable_data(), static_cast<std::size_t>(out.size()));
            {
              py::gil_scoped_release nogil;
              A.apply(v.data, dst);
            }
            return out;
          },
          py::arg("volume"), py::arg("out") = py::none())
      .def(
          "apply_adjoint",
          [](projector_pair& A, const py::handle& proj_obj, const py::object& out_obj) {
            const farray in = require_array(proj_obj, 3, "projections");
            require_projection_shape(in, A.geom());
            const volume_geometry& vg = A.grid();
            farray out = output_array(out_obj, {vg.nz, vg.ny, vg.nx}, in);
            const std::span<float> dst(out.mutable_data(), static_cast<std::size_t>(out.size()));
            {
              py::gil_scoped_release nogil;
              A.apply_adjoint(span_of(in), dst);
            }
            return out;
          },
          py::arg("projections"), py::arg("out") = py::none())
      .def_property_readonly(
          "backend",
          [](const projector_pair& A) { return A.where() == backend::cuda ? "cuda" : "cpu"; })
      .def_property_readonly(
          "matched", [](const projector_pair& A) { return A.adjoint() == backprojector::matched; })
      .def_property_readonly("volume_shape",
                             [](const projector_pair& A) {
                               const volume_geometry& vg = A.grid();
                               return py::make_tuple(vg.nz, vg.ny, vg.nx);
                             })
      .def_property_readonly("projection_shape",
                             [](const projector_pair& A) {
                               const geometry& g = A.geom();
                               return py::make_tuple(g.view_count(), g.rows, g.cols);
                             })
      .def("stats", [](const projector_pair& A) {
        const projector_pair_stats s = A.stats();
        py::dict d;
        d["allocations"] = s.allocations;
        d["bytes_uploaded"] = s.bytes_uploaded;
        d["bytes_downloaded"] = s.bytes_downloaded;
        d["apply_calls"] = s.apply_calls;
        d["adjoint_calls"] = s.adjoint_calls;
        return d;
      });
}

}  // namespace ctforge::python
