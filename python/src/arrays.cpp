// numpy arrays <-> the library's views and buffers, and progress callbacks with the GIL.
//
// Arrays: inputs are C-contiguous float32 numpy arrays, read in place through the library's
// non-owning views (volume_view, projection_view); the Python layer converts anything else once.
// Results are numpy arrays that own the C++ buffer (a capsule deletes it), so no copy is made
// in either direction.
#include <utility>

#include "common.hpp"

namespace ctforge::python {

farray require_array(const py::handle& obj, int ndim, const char* what) {
  if (!farray::check_(obj))
    throw usage_error(std::string(what) + ": expected a C-contiguous float32 array");
  farray a = py::reinterpret_borrow<farray>(obj);
  if (a.ndim() != ndim)
    throw usage_error(std::string(what) + ": expected " + std::to_string(ndim) +
                      " dimensions, got " + std::to_string(a.ndim()));
  return a;
}

farray owning_array(std::vector<float>&& data, std::vector<py::ssize_t> shape) {
  auto* holder = new std::vector<float>(std::move(data));
  py::capsule owner(holder, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return farray(std::move(shape), holder->data(), owner);
}

farray to_numpy(volume&& v) {
  const auto g = v.geom;
  return owning_array(std::move(v.data), {g.nz, g.ny, g.nx});
}

farray to_numpy(projection_stack&& p) {
  const auto shape = std::vector<py::ssize_t>{p.views, p.rows, p.cols};
  return owning_array(std::move(p.data), shape);
}

volume_view volume_arg(const farray& a, const volume_geometry& vg, const char* what) {
  if (a.shape(0) != vg.nz || a.shape(1) != vg.ny || a.shape(2) != vg.nx)
    throw usage_error(std::string(what) + ": array shape (" + std::to_string(a.shape(0)) + ", " +
                      std::to_string(a.shape(1)) + ", " + std::to_string(a.shape(2)) +
                      ") does not match the grid (nz, ny, nx) = (" + std::to_string(vg.nz) + ", " +
                      std::to_string(vg.ny) + ", " + std::to_string(vg.nx) + ")");
  return volume_view(vg, span_of(a));
}

void python_progress::operator()(double f) {
  py::gil_scoped_acquire gil;
  if (pending) return;
  if (PyErr_CheckSignals() != 0) {
    pending.emplace();
    token.request();
    return;
  }
  if (callback.is_none()) return;
  try {
    callback(f);
  } catch (py::error_already_set& e) {
    pending.emplace(std::move(e));
    token.request();
  }
}

void python_progress::rethrow_pending() {
  if (!pending) return;
  py::error_already_set e = std::move(*pending);
  pending.reset();
  throw e;  // KeyboardInterrupt, or what the progress callback raised
}

}  // namespace ctforge::python
