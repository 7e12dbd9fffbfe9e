// The module's exceptions: usage_error -> UsageError(Error, ValueError), error ->
// Error(RuntimeError).
#include "common.hpp"

namespace ctforge::python {
namespace {

PyObject* g_error = nullptr;        // ctforge.Error(RuntimeError)
PyObject* g_usage_error = nullptr;  // ctforge.UsageError(Error, ValueError)

}  // namespace

void register_errors(py::module_& m) {
  g_error = PyErr_NewExceptionWithDoc(
      "ctforge.Error",
      "A run-time failure: a missing or corrupt file, a CUDA / cuFFT / HDF5 failure (exit "
      "status 1 of the command line). The message names the file, dataset or call.",
      PyExc_RuntimeError, nullptr);
  py::tuple usage_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_usage_error = PyErr_NewExceptionWithDoc(
      "ctforge.UsageError",
      "An invalid request: a bad option value, an invalid geometry or phantom, mismatched "
      "shapes (exit status 2 of the command line). The message names the option or field.",
      usage_bases.ptr(), nullptr);
  m.attr("Error") = py::handle(g_error);
  m.attr("UsageError") = py::handle(g_usage_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const usage_error& e) {
      PyErr_SetString(g_usage_error, e.what());
    } catch (const ctforge::error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

}  // namespace ctforge::python
