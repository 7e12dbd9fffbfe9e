// ctforge._core: the C++ library for Python (pybind11). The pure-Python package `ctforge`
// (python/ctforge/__init__.py) wraps these functions with keyword defaults, array conversion
// and DLPack; everything numerical happens here, with the GIL released.
//
// Arrays: inputs are C-contiguous float32 numpy arrays, read in place through the library's
// non-owning views (volume_view, projection_view); the Python layer converts anything else once.
// Results are numpy arrays that own the C++ buffer (a capsule deletes it), so no copy is made
// in either direction.
#include <dlpack/dlpack.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ctforge/backend.hpp"
#include "ctforge/cancel.hpp"
#include "ctforge/checkpoint.hpp"
#include "ctforge/device.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/geometry.hpp"
#include "ctforge/io.hpp"
#include "ctforge/metrics.hpp"
#include "ctforge/phantom.hpp"
#include "ctforge/projector.hpp"
#include "ctforge/recon.hpp"
#include "ctforge/volume.hpp"

namespace py = pybind11;
using namespace ctforge;

namespace {

using farray = py::array_t<float, py::array::c_style>;

PyObject* g_error = nullptr;        // ctforge.Error(RuntimeError)
PyObject* g_usage_error = nullptr;  // ctforge.UsageError(Error, ValueError)

/// A C-contiguous float32 array of `ndim` dimensions, or a UsageError naming `what`. The Python
/// layer has converted other dtypes and layouts already, so this never copies.
farray require_array(const py::handle& obj, int ndim, const char* what) {
  if (!farray::check_(obj))
    throw usage_error(std::string(what) + ": expected a C-contiguous float32 array");
  farray a = py::reinterpret_borrow<farray>(obj);
  if (a.ndim() != ndim)
    throw usage_error(std::string(what) + ": expected " + std::to_string(ndim) +
                      " dimensions, got " + std::to_string(a.ndim()));
  return a;
}

std::span<const float> span_of(const farray& a) {
  return {a.data(), static_cast<std::size_t>(a.size())};
}

/// numpy array owning `data` (moved onto the heap; the capsule deletes it): no copy.
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
                      ") does not match the grid (nz, ny, nx) = (" + std::to_string(vg.nz) +
                      ", " + std::to_string(vg.ny) + ", " + std::to_string(vg.nx) + ")");
  return volume_view(vg, span_of(a));
}

projection_view projection_arg(const farray& a) {
  return projection_view(a.shape(0), a.shape(1), a.shape(2), span_of(a));
}

// ---- DLPack (dlpack.h from libdlpack-dev) -------------------------------------------------
// The Python layer hands over the capsule of an object's __dlpack__() for arrays that live on a
// CUDA device; the capsule stays owned by Python (its destructor calls the producer's deleter)
// and is only borrowed for the duration of a call.

/// A 3-D C-contiguous float32 DLPack tensor as a projection_view (host or device memory), or a
/// UsageError naming what is wrong. `keep` holds the capsule while the view is in use.
projection_view dlpack_projections(const py::capsule& cap) {
  if (std::string(cap.name() ? cap.name() : "") != "dltensor")
    throw usage_error("projections: expected an unused DLPack capsule ('dltensor')");
  const auto* m = static_cast<const DLManagedTensor*>(cap.get_pointer());
  const DLTensor& t = m->dl_tensor;
  CTFORGE_EXPECTS(t.dtype.code == kDLFloat && t.dtype.bits == 32 && t.dtype.lanes == 1,
                  "projections: a DLPack tensor must hold float32 values");
  CTFORGE_EXPECTS(t.ndim == 3, "projections: expected 3 dimensions, got " + std::to_string(t.ndim));
  const std::int64_t v = t.shape[0], r = t.shape[1], c = t.shape[2];
  CTFORGE_EXPECTS(v >= 0 && r >= 0 && c >= 0, "projections: negative extent in a DLPack shape");
  CTFORGE_EXPECTS(t.data != nullptr || v * r * c == 0, "projections: DLPack tensor without data");
  CTFORGE_EXPECTS(t.byte_offset % sizeof(float) == 0,
                  "projections: DLPack byte_offset is not a multiple of 4 (misaligned floats)");
  if (t.strides != nullptr) {
    const bool c_order = (v <= 1 || t.strides[0] == r * c) && (r <= 1 || t.strides[1] == c) &&
                         (c <= 1 || t.strides[2] == 1);
    CTFORGE_EXPECTS(c_order, "projections: a DLPack tensor must be C-contiguous (copy it first)");
  }
  const bool device = t.device.device_type == kDLCUDA || t.device.device_type == kDLCUDAManaged;
  CTFORGE_EXPECTS(device || t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost,
                  "projections: DLPack device type " + std::to_string(t.device.device_type) +
                      " is neither the host nor a CUDA device");
  const auto* data = reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset);
  projection_view p(v, r, c, std::span<const float>(data, static_cast<std::size_t>(v * r * c)));
  if (device) p.space = memory_space::cuda_device;
  return p;
}

int dlpack_device_id(const py::capsule& cap) {
  return static_cast<const DLManagedTensor*>(cap.get_pointer())->dl_tensor.device.device_id;
}

/// A device_array shared between Python objects and the DLPack capsules handed out for it.
struct py_device_array {
  std::shared_ptr<device_array> array;
};

struct dlpack_context {
  std::shared_ptr<device_array> keep;
  std::vector<std::int64_t> shape;
  DLManagedTensor tensor{};
};

/// A DLPack capsule viewing `a` (no copy). The consumer calls the deleter when done.
py::capsule to_dlpack(const std::shared_ptr<device_array>& a) {
  auto* ctx = new dlpack_context{a, a->shape(), {}};
  DLTensor& t = ctx->tensor.dl_tensor;
  t.data = a->data();
  t.device = DLDevice{kDLCUDA, a->device()};
  t.ndim = static_cast<int>(ctx->shape.size());
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = ctx->shape.data();
  t.strides = nullptr;  // C order
  t.byte_offset = 0;
  ctx->tensor.manager_ctx = ctx;
  ctx->tensor.deleter = [](DLManagedTensor* self) {
    delete static_cast<dlpack_context*>(self->manager_ctx);
  };
  // An unconsumed capsule (still named "dltensor") frees the tensor itself.
  // An unconsumed capsule (still named "dltensor") frees the tensor; a consumed one
  // ("used_dltensor") belongs to its consumer. PyCapsule_IsValid sets no error.
  try {
    return py::capsule(&ctx->tensor, "dltensor", [](PyObject* o) {
      if (!PyCapsule_IsValid(o, "dltensor")) return;
      auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(o, "dltensor"));
      if (t && t->deleter) t->deleter(t);
    });
  } catch (...) {
    delete ctx;
    throw;
  }
}

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

std::vector<view_vectors> views_from_array(const py::array_t<double, py::array::c_style |
                                                                     py::array::forcecast>& a) {
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

/// Progress and cancellation for a long call: the callback runs with the GIL; Python's pending
/// signals are checked there (PyErr_CheckSignals runs the interpreter's SIGINT handler, which
/// raises KeyboardInterrupt), and an exception from either cancels the call through its token.
struct python_progress {
  py::object callback;  // None or callable(fraction)
  cancellation_token token;
  std::optional<py::error_already_set> pending;  // destroyed with the GIL held (see run)

  void operator()(double f) {
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
};

projector_options projector_opts(const std::string& where, int device, int threads,
                                 std::int64_t gpu_memory_limit, const std::string& interpolation) {
  projector_options po;
  po.where = parse_backend(where);
  po.device = device;
  po.threads = threads;
  CTFORGE_EXPECTS(gpu_memory_limit >= 0, "gpu_memory_limit: must be >= 0 bytes");
  po.gpu_memory_limit_bytes = gpu_memory_limit;
  CTFORGE_EXPECTS(interpolation == "exact" || interpolation == "hardware",
                  "gpu_interpolation: expected 'exact' or 'hardware' (got '" + interpolation + "')");
  po.gpu_hardware_interpolation = interpolation == "hardware";
  return po;
}

/// The reconstruction options every reconstructing entry point takes.
recon_options make_recon_options(const std::string& algo, const std::string& filter,
                                 double cutoff, int iterations, double relaxation,
                                 bool nonnegative, const std::string& where, int device,
                                 int threads, std::int64_t gpu_memory_limit,
                                 const std::string& interpolation, bool reference) {
  recon_options opt;
  opt.algo = parse_algorithm(algo);
  opt.filter = parse_filter(filter);
  opt.cutoff = cutoff;
  opt.iterations = iterations;
  opt.relaxation = relaxation;
  opt.nonnegative = nonnegative;
  const projector_options po =
      projector_opts(where, device, threads, gpu_memory_limit, interpolation);
  opt.where = po.where;
  opt.device = po.device;
  opt.threads = po.threads;
  opt.gpu_memory_limit_bytes = po.gpu_memory_limit_bytes;
  opt.gpu_hardware_interpolation = po.gpu_hardware_interpolation;
  opt.reference = reference;
  return opt;
}

/// Projection read options from the arguments of read_projections.
io::projection_read_options read_options(const std::string& flat, const std::string& dark,
                                         const std::string& geometry_path,
                                         std::array<std::int64_t, 2> views,
                                         std::array<std::int64_t, 2> rows,
                                         std::array<std::int64_t, 2> cols, std::int64_t bin_rows,
                                         std::int64_t bin_cols, double pixel_size,
                                         const std::string& mode, double min_transmission,
                                         bool transpose, bool flip_u, bool flip_v,
                                         const std::string& angles, const std::string& angle_unit,
                                         bool sinogram,
                                         const std::vector<std::array<std::int64_t, 2>>& open_beam) {
  io::projection_read_options o;
  o.flat_path = flat;
  o.dark_path = dark;
  o.geometry_path = geometry_path;
  o.select.views = {views[0], views[1]};
  o.select.rows = {rows[0], rows[1]};
  o.select.cols = {cols[0], cols[1]};
  o.bin_rows = bin_rows;
  o.bin_cols = bin_cols;
  o.pixel_size_mm = pixel_size;
  if (mode == "auto")
    o.mode = io::intensity_mode::automatic;
  else if (mode == "raw")
    o.mode = io::intensity_mode::raw;
  else if (mode == "line-integrals")
    o.mode = io::intensity_mode::line_integrals;
  else
    throw usage_error("mode: expected 'auto', 'raw' or 'line-integrals' (got '" + mode + "')");
  o.min_transmission = min_transmission;
  o.transpose = transpose;
  o.flip_u = flip_u;
  o.flip_v = flip_v;
  o.angles_path = angles;
  if (angle_unit != "deg" && angle_unit != "rad")
    throw usage_error("angle_unit: expected 'deg' or 'rad' (got '" + angle_unit + "')");
  o.angles_in_radians = angle_unit == "rad";
  o.sinogram = sinogram;
  for (const auto& [a, b] : open_beam) {
    if (!(0 <= a && a < b))
      throw usage_error("open_beam_cols: range (" + std::to_string(a) + ", " +
                        std::to_string(b) +
                        "): expected 0 <= first < stop (columns first to stop-1)");
    o.open_beam_cols.emplace_back(a, b);
  }
  return o;
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

PYBIND11_MODULE(_core, m) {
  m.doc() = "ctforge C++ core (use the `ctforge` package)";
  m.attr("__version__") = CTFORGE_VERSION;
#if defined(CTFORGE_WITH_CUDA)
  m.attr("cuda_compiled") = true;
#else
  m.attr("cuda_compiled") = false;
#endif

  // ---- errors: usage_error -> UsageError(Error, ValueError), error -> Error(RuntimeError)
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

  // ---- geometry
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
      .def_property_readonly("shape",
                             [](const volume_geometry& g) { return py::make_tuple(g.nz, g.ny, g.nx); })
      .def_property_readonly("spacing",
                             [](const volume_geometry& g) {
                               return py::make_tuple(g.spacing_mm[0], g.spacing_mm[1], g.spacing_mm[2]);
                             })
      .def_property_readonly("origin",
                             [](const volume_geometry& g) {
                               return py::make_tuple(g.origin_mm[0], g.origin_mm[1], g.origin_mm[2]);
                             })
      .def("__eq__",
           [](const volume_geometry& a, const volume_geometry& b) {
             return a.nx == b.nx && a.ny == b.ny && a.nz == b.nz && a.spacing_mm == b.spacing_mm &&
                    a.origin_mm == b.origin_mm;
           })
      .def("__repr__", [](const volume_geometry& g) {
        const auto triple = [](const std::array<double, 3>& a) {
          return py::repr(py::make_tuple(a[0], a[1], a[2])).cast<std::string>();
        };
        return "VolumeGeometry(shape_zyx=(" + std::to_string(g.nz) + ", " +
               std::to_string(g.ny) + ", " + std::to_string(g.nx) +
               "), spacing_xyz=" + triple(g.spacing_mm) + ", origin_xyz=" + triple(g.origin_mm) +
               ")";
      });
  m.def(
      "default_grid",
      [](const geometry& g, std::optional<std::array<std::int64_t, 3>> shape_zyx,
         std::optional<std::array<double, 3>> spacing, std::optional<std::array<double, 3>> origin,
         bool whole_in_memory) {
        grid_request r;
        r.whole_in_memory = whole_in_memory;
        if (shape_zyx) r.size = std::array<std::int64_t, 3>{(*shape_zyx)[2], (*shape_zyx)[1],
                                                            (*shape_zyx)[0]};
        r.spacing_mm = spacing;
        r.origin_mm = origin;
        r.size_option = "shape";
        r.spacing_option = "spacing";
        r.origin_option = "origin";
        return default_grid(g, r);
      },
      py::arg("geometry"), py::arg("shape") = py::none(), py::arg("spacing") = py::none(),
      py::arg("origin") = py::none(), py::arg("whole_in_memory") = true);

  py::class_<geometry>(m, "Geometry")
      .def_property_readonly("type", &geometry::type_name)
      .def_property_readonly(
          "beam", [](const geometry& g) { return g.beam == beam_kind::cone ? "cone" : "parallel"; })
      .def_readonly("cols", &geometry::cols)
      .def_readonly("rows", &geometry::rows)
      .def_property_readonly("pixel_size",
                             [](const geometry& g) { return py::make_tuple(g.pixel_u_mm, g.pixel_v_mm); })
      .def_property_readonly("view_count", &geometry::view_count)
      .def_property_readonly("detector_shape",
                             [](const geometry& g) { return std::string(to_string(g.shape)); })
      .def_property_readonly("projection_shape",
                             [](const geometry& g) { return py::make_tuple(g.view_count(), g.rows, g.cols); })
      .def_property_readonly("vectors", &view_array)
      .def_property_readonly("angles",
                             [](const geometry& g) -> py::object {
                               if (!g.orbit) return py::none();
                               return py::array_t<double>(py::cast(g.orbit->angles_rad));
                             })
      .def_property_readonly("sid",
                             [](const geometry& g) -> py::object {
                               if (!g.orbit || g.beam != beam_kind::cone) return py::none();
                               return py::float_(g.orbit->source_to_isocenter_mm);
                             })
      .def_property_readonly("sdd",
                             [](const geometry& g) -> py::object {
                               if (!g.orbit || g.beam != beam_kind::cone) return py::none();
                               return py::float_(g.orbit->source_to_detector_mm);
                             })
      .def_property_readonly("offset_u",
                             [](const geometry& g) -> py::object {
                               if (!g.orbit) return py::none();
                               return py::array_t<double>(py::cast(g.orbit->offset_u_mm));
                             })
      .def_property_readonly("offset_v",
                             [](const geometry& g) -> py::object {
                               if (!g.orbit) return py::none();
                               return py::array_t<double>(py::cast(g.orbit->offset_v_mm));
                             })
      .def("to_json", &geometry_to_json)
      .def("projection_matrices",
           [](const geometry& g) {
             const auto mats = compute_projection_matrices(g);
             py::array_t<double> out({static_cast<py::ssize_t>(mats.size()), py::ssize_t{3},
                                      py::ssize_t{4}});
             auto o = out.mutable_unchecked<3>();
             for (std::size_t v = 0; v < mats.size(); ++v)
               for (int k = 0; k < 12; ++k) o(static_cast<py::ssize_t>(v), k / 4, k % 4) = mats[v][static_cast<std::size_t>(k)];
             return out;
           })
      .def("with_center_of_rotation", &with_center_of_rotation, py::arg("col"))
      .def("to_astra", [](const geometry& g) {
             const auto rows = io::astra_vectors(g);
             py::array_t<double> out({static_cast<py::ssize_t>(rows.size()), py::ssize_t{12}});
             auto o = out.mutable_unchecked<2>();
             for (std::size_t v = 0; v < rows.size(); ++v)
               for (int k = 0; k < 12; ++k) o(static_cast<py::ssize_t>(v), k) = rows[v][static_cast<std::size_t>(k)];
             return out;
           })
      .def("to_rtk_xml",
           [](const geometry& g) { return io::rtk_xml(io::rtk_from_geometry(g)); })
      .def("__eq__", [](const geometry& a, const geometry& b) {
        return geometry_to_json(a) == geometry_to_json(b);
      })
      .def("__repr__", [](const geometry& g) {
        std::string s = "Geometry(type='" + g.type_name() + "', views=" +
                        std::to_string(g.view_count()) + ", rows=" + std::to_string(g.rows) +
                        ", cols=" + std::to_string(g.cols);
        if (g.orbit && g.beam == beam_kind::cone)
          s += ", sid=" + py::repr(py::float_(g.orbit->source_to_isocenter_mm)).cast<std::string>() +
               ", sdd=" + py::repr(py::float_(g.orbit->source_to_detector_mm)).cast<std::string>();
        return s + ")";
      });

  m.def(
      "make_cone",
      [](std::int64_t cols, std::int64_t rows, double pixel_u, double pixel_v, double sid,
         double sdd, std::vector<double> angles, std::vector<double> offset_u,
         std::vector<double> offset_v, const std::string& detector_shape_name) {
        CTFORGE_EXPECTS(detector_shape_name == "flat" || detector_shape_name == "cylindrical",
                        "detector_shape: expected 'flat' or 'cylindrical', got '" +
                            detector_shape_name + "'");
        return make_cone_geometry(cols, rows, pixel_u, pixel_v, sid, sdd, std::move(angles),
                                  std::move(offset_u), std::move(offset_v),
                                  detector_shape_name == "cylindrical"
                                      ? detector_shape::cylindrical
                                      : detector_shape::flat);
      },
      py::arg("cols"), py::arg("rows"), py::arg("pixel_u"), py::arg("pixel_v"), py::arg("sid"),
      py::arg("sdd"), py::arg("angles"), py::arg("offset_u") = std::vector<double>{},
      py::arg("offset_v") = std::vector<double>{}, py::arg("detector_shape") = "flat");
  m.def("make_parallel", &make_parallel_geometry, py::arg("cols"), py::arg("rows"),
        py::arg("pixel_u"), py::arg("pixel_v"), py::arg("angles"),
        py::arg("offset_u") = std::vector<double>{}, py::arg("offset_v") = std::vector<double>{});
  m.def(
      "make_vec",
      [](const std::string& beam, std::int64_t cols, std::int64_t rows,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& vectors) {
        CTFORGE_EXPECTS(beam == "cone" || beam == "parallel",
                        "beam: expected 'cone' or 'parallel' (got '" + beam + "')");
        return make_vec_geometry(beam == "cone" ? beam_kind::cone : beam_kind::parallel, cols,
                                 rows, views_from_array(vectors));
      },
      py::arg("beam"), py::arg("cols"), py::arg("rows"), py::arg("vectors"));
  m.def("geometry_from_json", &geometry_from_json, py::arg("text"),
        py::arg("origin") = "geometry");
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
         const py::array_t<double, py::array::c_style | py::array::forcecast>& vectors) {
        CTFORGE_EXPECTS(beam == "cone" || beam == "parallel",
                        "beam: expected 'cone' or 'parallel' (got '" + beam + "')");
        const auto views = views_from_array(vectors);
        std::vector<io::astra_vector> rows12;
        auto a = vectors.unchecked<2>();
        for (py::ssize_t i = 0; i < vectors.shape(0); ++i) {
          io::astra_vector r{};
          for (int k = 0; k < 12; ++k) r[static_cast<std::size_t>(k)] = a(i, k);
          rows12.push_back(r);
        }
        return io::geometry_from_astra(beam == "cone" ? beam_kind::cone : beam_kind::parallel,
                                       cols, rows, rows12);
      },
      py::arg("beam"), py::arg("cols"), py::arg("rows"), py::arg("vectors"));
  m.def("default_algorithm", [](const geometry& g) { return to_string(default_algorithm(g)); });

  // ---- phantoms
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

  // ---- operators
  m.def(
      "forward_project",
      [](const py::handle& vol_obj, const volume_geometry& vg, const geometry& g,
         const std::string& where, int device, int threads, std::int64_t gpu_memory_limit,
         const std::string& interpolation) {
        const farray in = require_array(vol_obj, 3, "volume");
        const volume_view v = volume_arg(in, vg, "volume");
        const projector_options po =
            projector_opts(where, device, threads, gpu_memory_limit, interpolation);
        projection_stack out;
        {
          py::gil_scoped_release nogil;
          out = forward_project(v, g, po);
        }
        return to_numpy(std::move(out));
      },
      py::arg("volume"), py::arg("grid"), py::arg("geometry"), py::arg("backend"),
      py::arg("device"), py::arg("threads"), py::arg("gpu_memory_limit"),
      py::arg("gpu_interpolation"));
  m.def(
      "back_project",
      [](const py::handle& proj_obj, const geometry& g, const volume_geometry& vg,
         const std::string& where, int device, int threads, std::int64_t gpu_memory_limit,
         const std::string& interpolation, bool reference, bool matched) {
        const farray in = require_array(proj_obj, 3, "projections");
        const projection_view p = projection_arg(in);
        const projector_options po =
            projector_opts(where, device, threads, gpu_memory_limit, interpolation);
        CTFORGE_EXPECTS(!matched || po.where != backend::cuda,
                        "matched: the matched back-projector runs on the CPU; use backend='cpu' "
                        "or 'auto'");
        volume out;
        {
          py::gil_scoped_release nogil;
          out = matched     ? back_project_matched(p, g, vg, threads)
                : reference ? back_project(p, g, vg, threads, true)
                            : back_project(p, g, vg, po);
        }
        return to_numpy(std::move(out));
      },
      py::arg("projections"), py::arg("geometry"), py::arg("grid"), py::arg("backend"),
      py::arg("device"), py::arg("threads"), py::arg("gpu_memory_limit"),
      py::arg("gpu_interpolation"), py::arg("reference"), py::arg("matched") = false);
  m.def(
      "reconstruct",
      [](const py::handle& proj_obj, const geometry& g, const volume_geometry& vg,
         const std::string& algo, const std::string& filter, double cutoff, int iterations,
         double relaxation, bool nonnegative, const std::string& where, int device, int threads,
         std::int64_t gpu_memory_limit, const std::string& interpolation, bool reference,
         py::object progress, bool out_device, const std::string& checkpoint_dir,
         std::int64_t unit_planes, int checkpoint_every, double checkpoint_seconds,
         const std::string& run_record, int subsets, double tv_weight, int tv_iterations,
         const std::string& backprojector_name, double tolerance, const py::object& initial,
         bool return_log, const std::string& displaced_detector,
         double offset_transition) -> py::object {
        // A NumPy array, or the DLPack capsule of an array on a CUDA device (or on the host).
        farray in;
        projection_view p;
        if (PyCapsule_CheckExact(proj_obj.ptr())) {
          p = dlpack_projections(py::reinterpret_borrow<py::capsule>(proj_obj));
          if (p.space == memory_space::cuda_device) {
            const int on = dlpack_device_id(py::reinterpret_borrow<py::capsule>(proj_obj));
            CTFORGE_EXPECTS(on == device, "projections: the array is on CUDA device " +
                                              std::to_string(on) + " but device=" +
                                              std::to_string(device));
          }
        } else {
          in = require_array(proj_obj, 3, "projections");
          p = projection_arg(in);
        }
        recon_options opt =
            make_recon_options(algo, filter, cutoff, iterations, relaxation, nonnegative, where,
                               device, threads, gpu_memory_limit, interpolation, reference);
        opt.subsets = subsets;
        opt.tv_weight = tv_weight;
        opt.tv_iterations = tv_iterations;
        opt.backprojector = parse_backprojector(backprojector_name);
        opt.tolerance = tolerance;
        opt.displaced_detector = parse_displaced_detector(displaced_detector);
        opt.offset_transition_px = offset_transition;
        farray init;
        if (!initial.is_none()) {
          init = require_array(initial, 3, "initial");
          CTFORGE_EXPECTS(init.shape(0) == vg.nz && init.shape(1) == vg.ny &&
                              init.shape(2) == vg.nx,
                          "initial: shape (" + std::to_string(init.shape(0)) + ", " +
                              std::to_string(init.shape(1)) + ", " +
                              std::to_string(init.shape(2)) + ") but the grid is (" +
                              std::to_string(vg.nz) + ", " + std::to_string(vg.ny) + ", " +
                              std::to_string(vg.nx) + ")");
          opt.initial = span_of(init);
        }
        // The per-iteration figures, collected without the GIL and returned as dicts.
        std::vector<iteration_info> log;
        if (return_log) opt.on_iteration = [&log](const iteration_info& i) { log.push_back(i); };
        auto hook = std::make_shared<python_progress>();
        hook->callback = std::move(progress);
        opt.cancel = hook->token;
        opt.progress = [hook](double f) { (*hook)(f); };
        volume out;
        auto on_gpu = std::make_shared<device_array>();
        bool was_cancelled = false;
        {
          py::gil_scoped_release nogil;
          try {
            if (!checkpoint_dir.empty()) {
              CTFORGE_EXPECTS(!out_device, "checkpoint_dir: the result is assembled on the host");
              checkpoint_options co;
              co.dir = checkpoint_dir;
              co.planes_per_unit = unit_planes;
              co.every_iterations = checkpoint_every;
              co.every_seconds = checkpoint_seconds;
              out = reconstruct_resumable(p, g, vg, opt, co, run_record);
              remove_checkpoint(co);
            } else if (out_device) {
              *on_gpu = reconstruct_to_device(p, g, vg, opt);
            } else {
              out = reconstruct(p, g, vg, opt);
            }
          } catch (const cancelled&) {
            was_cancelled = true;
          }
        }
        opt.progress = nullptr;  // drops the last reference to `hook` outside it
        if (hook->pending) {
          py::error_already_set e = std::move(*hook->pending);
          hook->pending.reset();
          throw e;  // KeyboardInterrupt, or what the progress callback raised
        }
        if (was_cancelled) throw ctforge::error("reconstruction: cancelled");
        py::object result = out_device ? py::cast(py_device_array{on_gpu})
                                       : py::object(to_numpy(std::move(out)));
        if (!return_log) return result;
        py::list rows;
        for (const iteration_info& i : log) {
          py::dict d;
          d["iteration"] = i.iteration;
          d["residual"] = i.residual;
          d["objective"] = i.objective;
          d["relative_update"] = i.relative_update;
          d["stop_criterion"] = i.stop_criterion;
          d["seconds"] = i.seconds;
          rows.append(d);
        }
        return py::make_tuple(result, rows);
      },
      py::arg("projections"), py::arg("geometry"), py::arg("grid"), py::arg("algorithm"),
      py::arg("filter"), py::arg("cutoff"), py::arg("iterations"), py::arg("relaxation"),
      py::arg("nonnegative"), py::arg("backend"), py::arg("device"), py::arg("threads"),
      py::arg("gpu_memory_limit"), py::arg("gpu_interpolation"), py::arg("reference"),
      py::arg("progress"), py::arg("out_device") = false, py::arg("checkpoint_dir") = "",
      py::arg("unit_planes") = 0, py::arg("checkpoint_every") = 0,
      py::arg("checkpoint_seconds") = 30.0, py::arg("run_record") = "{}",
      py::arg("subsets") = 10, py::arg("tv_weight") = 0.0, py::arg("tv_iterations") = 20,
      py::arg("backprojector") = "auto", py::arg("tolerance") = 0.0,
      py::arg("initial") = py::none(), py::arg("return_log") = false,
      py::arg("displaced_detector") = "auto",
      py::arg("offset_transition") = k_default_offset_transition_px);
  m.def("detector_is_displaced", &detector_is_displaced, py::arg("geometry"));
  m.def(
      "displaced_short_scan_warning",
      [](const geometry& g, const std::string& algo, const std::string& displaced_detector,
         double offset_transition) {
        recon_options opt;
        opt.algo = parse_algorithm(algo);
        opt.displaced_detector = parse_displaced_detector(displaced_detector);
        opt.offset_transition_px = offset_transition;
        return displaced_short_scan_warning(g, opt);
      },
      py::arg("geometry"), py::arg("algorithm"), py::arg("displaced_detector"),
      py::arg("offset_transition"));
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
  m.def(
      "resolve_backend",
      [](const std::string& where, int device) {
        std::string notice;
        const backend b = resolve_backend(parse_backend(where), &notice, device);
        return py::make_tuple(b == backend::cuda ? "cuda" : "cpu", notice);
      },
      py::arg("backend"), py::arg("device"));
  m.def("describe_last_gpu_call", [](const std::string& kind) {
    CTFORGE_EXPECTS(kind == "reconstruction" || kind == "forward_projection",
                    "kind: expected 'reconstruction' or 'forward_projection'");
    return describe_last_gpu_call(kind == "reconstruction" ? gpu_call::reconstruction
                                                           : gpu_call::forward_projection);
  });

  // ---- files
  m.def(
      "read_projections",
      [](const std::string& path, const std::string& flat, const std::string& dark,
         const std::string& geometry_path, std::array<std::int64_t, 2> views,
         std::array<std::int64_t, 2> rows, std::array<std::int64_t, 2> cols,
         std::int64_t bin_rows, std::int64_t bin_cols, double pixel_size,
         const std::string& mode, double min_transmission, bool transpose, bool flip_u,
         bool flip_v, const std::string& angles, const std::string& angle_unit, bool sinogram,
         const std::vector<std::array<std::int64_t, 2>>& open_beam_cols,
         std::optional<std::array<std::int64_t, 2>> band, bool geometry_only,
         const std::string& data_path, const std::string& flat_path,
         const std::string& dark_path, const std::string& angles_path) -> py::tuple {
        io::projection_read_options o =
            read_options(flat, dark, geometry_path, views, rows, cols, bin_rows, bin_cols,
                         pixel_size, mode, min_transmission, transpose, flip_u, flip_v, angles,
                         angle_unit, sinogram, open_beam_cols);
        o.datasets = {data_path, flat_path, dark_path, angles_path};
        io::loaded_projections lp;
        {
          py::gil_scoped_release nogil;
          if (geometry_only || band) {
            const geometry whole = io::read_projection_geometry(path, o);
            if (geometry_only) {
              lp.geom = whole;
              lp.format = o.datasets.data.empty() ? io::projection_format(path) : "hdf5";
            } else {
              o = io::row_band_options(o, whole.rows, (*band)[0], (*band)[1]);
            }
          }
          if (!geometry_only) lp = io::read_projections_any(path, o);
        }
        geometry g = *lp.geom;
        py::dict d = info_dict(lp);
        if (geometry_only) return py::make_tuple(py::none(), g, d);
        return py::make_tuple(to_numpy(std::move(lp.projections)), g, d);
      },
      py::arg("path"), py::arg("flat"), py::arg("dark"), py::arg("geometry"), py::arg("views"),
      py::arg("rows"), py::arg("cols"), py::arg("bin_rows"), py::arg("bin_cols"),
      py::arg("pixel_size"), py::arg("mode"), py::arg("min_transmission"), py::arg("transpose"),
      py::arg("flip_u"), py::arg("flip_v"), py::arg("angles") = "", py::arg("angle_unit") = "deg",
      py::arg("sinogram") = false,
      py::arg("open_beam_cols") = std::vector<std::array<std::int64_t, 2>>{},
      py::arg("band") = py::none(), py::arg("geometry_only") = false, py::arg("data_path") = "",
      py::arg("flat_path") = "", py::arg("dark_path") = "", py::arg("angles_path") = "");

  // ---- persistent projector pair (ctforge.ProjectorPair, ctforge.linear_operator)
  py::class_<projector_pair>(m, "ProjectorPair")
      .def(py::init([](const geometry& g, const volume_geometry& vg, const std::string& where,
                       int device, int threads, std::int64_t gpu_memory_limit,
                       const std::string& interpolation, bool matched) {
             const projector_options po =
                 projector_opts(where, device, threads, gpu_memory_limit, interpolation);
             py::gil_scoped_release nogil;
             return std::make_unique<projector_pair>(
                 g, vg, po, matched ? backprojector::matched : backprojector::voxel);
           }),
           py::arg("geometry"), py::arg("grid"), py::arg("backend"), py::arg("device"),
           py::arg("threads"), py::arg("gpu_memory_limit"), py::arg("gpu_interpolation"),
           py::arg("matched"))
      .def(
          "apply",
          [](projector_pair& A, const py::handle& vol_obj) {
            const farray in = require_array(vol_obj, 3, "volume");
            const volume_view v = volume_arg(in, A.grid(), "volume");
            const geometry& g = A.geom();
            farray out(std::vector<py::ssize_t>{g.view_count(), g.rows, g.cols});
            const std::span<float> dst(out.mutable_data(), static_cast<std::size_t>(out.size()));
            {
              py::gil_scoped_release nogil;
              A.apply(v.data, dst);
            }
            return out;
          },
          py::arg("volume"))
      .def(
          "apply_adjoint",
          [](projector_pair& A, const py::handle& proj_obj) {
            const farray in = require_array(proj_obj, 3, "projections");
            const geometry& g = A.geom();
            if (in.shape(0) != g.view_count() || in.shape(1) != g.rows || in.shape(2) != g.cols)
              throw usage_error("projections: array shape (" + std::to_string(in.shape(0)) +
                                ", " + std::to_string(in.shape(1)) + ", " +
                                std::to_string(in.shape(2)) +
                                ") does not match the geometry (views, rows, cols) = (" +
                                std::to_string(g.view_count()) + ", " + std::to_string(g.rows) +
                                ", " + std::to_string(g.cols) + ")");
            const volume_geometry& vg = A.grid();
            farray out(std::vector<py::ssize_t>{vg.nz, vg.ny, vg.nx});
            const std::span<float> dst(out.mutable_data(), static_cast<std::size_t>(out.size()));
            {
              py::gil_scoped_release nogil;
              A.apply_adjoint(span_of(in), dst);
            }
            return out;
          },
          py::arg("projections"))
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

  // ---- work units (ctforge.distributed)
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
                                 out.append(py::make_tuple(u.k0, u.k1, u.r0, u.r1));
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
             const std::string& algo, const std::string& filter, double cutoff,
             const std::string& where, int device, int threads, std::int64_t gpu_memory_limit,
             const std::string& interpolation, bool reference,
             const std::string& displaced_detector, double offset_transition) {
            CTFORGE_EXPECTS(i < r.units().size(), "unit index out of range");
            const farray band = require_array(band_obj, 3, "band");
            const projection_view p = projection_arg(band);
            recon_options opt =
                make_recon_options(algo, filter, cutoff, 1, 1.0, false, where, device, threads,
                                   gpu_memory_limit, interpolation, reference);
            opt.displaced_detector = parse_displaced_detector(displaced_detector);
            opt.offset_transition_px = offset_transition;
            py::gil_scoped_release nogil;
            r.compute_unit(i, p, opt);
          },
          py::arg("unit"), py::arg("band"), py::arg("algorithm"), py::arg("filter"),
          py::arg("cutoff"), py::arg("backend"), py::arg("device"), py::arg("threads"),
          py::arg("gpu_memory_limit"), py::arg("gpu_interpolation"), py::arg("reference"),
          py::arg("displaced_detector") = "auto",
          py::arg("offset_transition") = k_default_offset_transition_px);
  m.def("default_unit_planes", &default_unit_planes, py::arg("grid"));

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
      .def("close", [](py_volume_writer& w) { w.w.reset(); });
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
  m.def("describe", &io::describe_any, py::arg("path"));
  m.def("content_kind", &io::content_kind, py::arg("path"));
  m.def("projection_format", &io::projection_format, py::arg("path"));
  m.def("volume_format", [](const std::string& path) {
    return io::to_string(io::volume_format_of(path));
  });

  // ---- arrays in GPU memory (DLPack producers)
  py::class_<py_device_array>(m, "DeviceArray")
      .def_property_readonly("shape",
                             [](const py_device_array& a) {
                               py::tuple t(a.array->shape().size());
                               for (std::size_t i = 0; i < a.array->shape().size(); ++i)
                                 t[i] = a.array->shape()[i];
                               return t;
                             })
      .def_property_readonly("dtype", [](const py_device_array&) { return "float32"; })
      .def_property_readonly("device", [](const py_device_array& a) { return a.array->device(); })
      .def(
          "__dlpack__",
          [](const py_device_array& a, py::object stream, py::kwargs kw) {
            (void)stream;  // the data is complete: every call synchronises before returning
            if (kw.contains("dl_device") && !kw["dl_device"].is_none()) {
              const auto want = kw["dl_device"].cast<std::pair<int, int>>();
              if (want.first != kDLCUDA || want.second != a.array->device())
                throw py::buffer_error("DeviceArray: lives on CUDA device " +
                                       std::to_string(a.array->device()) +
                                       "; copy it with to_numpy() for the host");
            }
            if (kw.contains("copy") && !kw["copy"].is_none() && kw["copy"].cast<bool>())
              throw py::buffer_error("DeviceArray: copy=True is not supported (no copy is made)");
            return to_dlpack(a.array);
          },
          py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const py_device_array& a) { return py::make_tuple(int{kDLCUDA}, a.array->device()); })
      .def("to_numpy",
           [](const py_device_array& a) {
             std::vector<float> host;
             {
               py::gil_scoped_release nogil;
               host = a.array->download();
             }
             std::vector<py::ssize_t> shape(a.array->shape().begin(), a.array->shape().end());
             return owning_array(std::move(host), shape);
           })
      .def("__repr__", [](const py_device_array& a) {
        std::string s = "DeviceArray(shape=(";
        for (std::size_t i = 0; i < a.array->shape().size(); ++i)
          s += (i ? ", " : "") + std::to_string(a.array->shape()[i]);
        return s + "), dtype=float32, device=cuda:" + std::to_string(a.array->device()) + ")";
      });
  m.def(
      "to_device",
      [](const py::handle& obj, int device) {
        if (!farray::check_(obj)) throw usage_error("to_device: expected a C-contiguous float32 array");
        const farray a = py::reinterpret_borrow<farray>(obj);
        std::vector<std::int64_t> shape(a.shape(), a.shape() + a.ndim());
        auto d = std::make_shared<device_array>();
        {
          py::gil_scoped_release nogil;
          *d = device_array::upload(span_of(a), shape, device);
        }
        return py_device_array{d};
      },
      py::arg("array"), py::arg("device") = 0);
  // A DLPack capsule claiming CUDA memory at a bogus address (tests of the checks that run
  // before any device access; never dereferenced).
  m.def("_fake_cuda_capsule", [](std::int64_t views, std::int64_t rows, std::int64_t cols) {
    auto* shape = new std::int64_t[3]{views, rows, cols};
    auto* t = new DLManagedTensor{};
    // An unmapped low address: a host read of it would crash the test.
    t->dl_tensor.data = reinterpret_cast<void*>(std::uintptr_t{4096});
    t->dl_tensor.device = DLDevice{kDLCUDA, 0};
    t->dl_tensor.ndim = 3;
    t->dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
    t->dl_tensor.shape = shape;
    t->manager_ctx = shape;
    t->deleter = [](DLManagedTensor* self) {
      delete[] static_cast<std::int64_t*>(self->manager_ctx);
      delete self;
    };
    return py::capsule(t, "dltensor", [](PyObject* o) {
      if (!PyCapsule_IsValid(o, "dltensor")) return;
      auto* d = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(o, "dltensor"));
      d->deleter(d);
    });
  });

  // ---- metrics (same definitions as `ctforge compare`)
  m.def(
      "compare",
      [](const py::handle& a_obj, const py::handle& b_obj, std::optional<double> peak) {
        if (!farray::check_(a_obj) || !farray::check_(b_obj))
          throw usage_error("compare: expected C-contiguous float32 arrays");
        const farray a = py::reinterpret_borrow<farray>(a_obj);
        const farray b = py::reinterpret_borrow<farray>(b_obj);
        std::vector<py::ssize_t> sa(a.shape(), a.shape() + a.ndim()),
            sb(b.shape(), b.shape() + b.ndim());
        CTFORGE_EXPECTS(sa == sb, "compare: the arrays have different shapes");
        CTFORGE_EXPECTS(a.size() > 0, "compare: the arrays are empty");
        const auto x = span_of(a), y = span_of(b);
        py::dict d;
        double p = 0;
        {
          py::gil_scoped_release nogil;
          if (peak) {
            CTFORGE_EXPECTS(std::isfinite(*peak) && *peak > 0, "peak: must be positive");
            p = *peak;
          } else {
            const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
            p = static_cast<double>(*hi) - static_cast<double>(*lo);
          }
        }
        d["mae"] = mean_abs_error(x, y);
        d["rmse"] = rms_error(x, y);
        d["psnr"] = p > 0 ? py::object(py::float_(psnr_db(x, y, p))) : py::object(py::none());
        d["peak"] = p;
        d["correlation"] = correlation(x, y);
        return d;
      },
      py::arg("a"), py::arg("b"), py::arg("peak") = py::none());

  // Buffer address of an array (tests of zero copy).
  m.def("_data_address", [](const py::array& a) {
    return reinterpret_cast<std::uintptr_t>(a.data());
  });
}
