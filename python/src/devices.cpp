// Devices: which backend runs, how the last GPU call ran, arrays in GPU memory (DeviceArray)
// and DLPack in both directions.
#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "ctforge/backend.hpp"

namespace ctforge::python {
namespace {

struct dlpack_context {
  std::shared_ptr<device_array> keep;
  std::vector<std::int64_t> shape;
  DLManagedTensor tensor{};
};

}  // namespace

// ---- DLPack (dlpack.h from libdlpack-dev) -------------------------------------------------
// The Python layer hands over the capsule of an object's __dlpack__() for arrays that live on a
// CUDA device; the capsule stays owned by Python (its destructor calls the producer's deleter)
// and is only borrowed for the duration of a call.

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
  const auto* data =
      reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset);
  projection_view p(v, r, c, std::span<const float>(data, static_cast<std::size_t>(v * r * c)));
  if (device) p.space = memory_space::cuda_device;
  return p;
}

int dlpack_device_id(const py::capsule& cap) {
  return static_cast<const DLManagedTensor*>(cap.get_pointer())->dl_tensor.device.device_id;
}

namespace {

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

}  // namespace

void register_backend_queries(py::module_& m) {
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
}

void register_device_arrays(py::module_& m) {
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
        if (!farray::check_(obj))
          throw usage_error("to_device: expected a C-contiguous float32 array");
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
}

}  // namespace ctforge::python
