// What the parts of ctforge._core share: numpy arrays <-> the library's views, the DLPack
// reader, progress callbacks with the GIL, keyword options, and the registration function of
// each part (module.cpp calls them in order).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ctforge/cancel.hpp"
#include "ctforge/device.hpp"
#include "ctforge/error.hpp"
#include "ctforge/execution.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace ctforge::python {

namespace py = pybind11;

using farray = py::array_t<float, py::array::c_style>;

// ---- arrays (arrays.cpp)

/// A C-contiguous float32 array of `ndim` dimensions, or a UsageError naming `what`. The Python
/// layer has converted other dtypes and layouts already, so this never copies.
farray require_array(const py::handle& obj, int ndim, const char* what);

inline std::span<const float> span_of(const farray& a) {
  return {a.data(), static_cast<std::size_t>(a.size())};
}

/// numpy array owning `data` (moved onto the heap; the capsule deletes it): no copy.
farray owning_array(std::vector<float>&& data, std::vector<py::ssize_t> shape);
farray to_numpy(volume&& v);
farray to_numpy(projection_stack&& p);

/// `a` as a view of grid `vg`, or a UsageError naming `what` when the shapes differ.
volume_view volume_arg(const farray& a, const volume_geometry& vg, const char* what);
inline projection_view projection_arg(const farray& a) {
  return projection_view(a.shape(0), a.shape(1), a.shape(2), span_of(a));
}

// ---- DLPack (devices.cpp)

/// A 3-D C-contiguous float32 DLPack tensor as a projection_view (host or device memory), or a
/// UsageError naming what is wrong. The capsule stays owned by Python, borrowed for the call.
projection_view dlpack_projections(const py::capsule& cap);
int dlpack_device_id(const py::capsule& cap);

/// A device_array shared between Python objects and the DLPack capsules handed out for it.
struct py_device_array {
  std::shared_ptr<device_array> array;
};

// ---- progress

/// Progress and cancellation for a long call: the callback runs with the GIL; Python's pending
/// signals are checked there (PyErr_CheckSignals runs the interpreter's SIGINT handler, which
/// raises KeyboardInterrupt), and an exception from either cancels the call through its token.
struct python_progress {
  py::object callback;  // None or callable(fraction)
  cancellation_token token;
  std::optional<py::error_already_set> pending;  // destroyed with the GIL held

  void operator()(double f);
  /// With the GIL: raises what the callback raised (or KeyboardInterrupt), if anything.
  void rethrow_pending();
};

// ---- keyword options (options.cpp)

/// The keyword options of one call, taken one by one by name; finish() refuses any left over
/// (a UsageError naming it). Conversion errors name the keyword.
class keyword_options {
 public:
  keyword_options(const py::kwargs& kw, std::string call);

  bool has(const char* key) const;
  /// The value of `key` (removed from those left), or `fallback` when it was not given or None.
  std::string text(const char* key, const std::string& fallback);
  std::int64_t integer(const char* key, std::int64_t fallback);
  int count(const char* key, int fallback);  ///< an integer that fits an int
  double number(const char* key, double fallback);
  bool flag(const char* key, bool fallback);
  /// A byte count >= 0 (0 = no limit).
  std::int64_t bytes(const char* key);
  /// The object itself (None when not given).
  py::object object(const char* key);
  /// UsageError "<call>: unknown option '<key>'" for the first key not taken.
  void finish() const;

 private:
  py::dict left_;
  std::string call_;
};

/// backend, device, threads, gpu_memory_limit, gpu_interpolation and, with `host_memory`,
/// memory_limit (recon_options::memory_limit_bytes) from `kw`. Progress and cancellation are
/// set by the call that runs.
execution_context read_execution_context(keyword_options& kw, bool host_memory);
projector_options read_projector_options(keyword_options& kw);
/// Every field of recon_options that a keyword names (the execution context included), with
/// the library's defaults for those not given; algorithm: default_algorithm(*g) when absent
/// (required when g is null).
recon_options read_recon_options(keyword_options& kw, const geometry* g);

// ---- the parts of the module, in the order module.cpp registers them

/// An iterative method's per-iteration figures as a list of dicts (recon.cpp).
py::list log_rows(const std::vector<iteration_info>& log);

void register_errors(py::module_& m);
void register_volume_geometry(py::module_& m);
void register_geometry(py::module_& m);
void register_geometry_makers(py::module_& m);
void register_phantoms(py::module_& m);
void register_projectors(py::module_& m);
void register_projector_pair(py::module_& m);
void register_reconstruction(py::module_& m);
void register_recon_option_table(py::module_& m);
void register_center(py::module_& m);
void register_backend_queries(py::module_& m);
void register_projection_files(py::module_& m);
void register_volume_files(py::module_& m);
void register_slab_run(py::module_& m);
void register_view_parts(py::module_& m);
void register_device_arrays(py::module_& m);
void register_metrics(py::module_& m);
void register_preprocessing(py::module_& m);

}  // namespace ctforge::python
