// Iterative methods over view partitions (include/ctforge/partitioned.hpp) for
// ctforge.distributed: ViewPart (what a worker keeps: its views and its share of every buffer)
// and reconstruct_partitioned, which runs the library's method with a Python object as its
// view_parts (the Dask implementation in python/ctforge/distributed.py).
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "ctforge/partitioned.hpp"

namespace ctforge::python {
namespace {

/// A C-contiguous float32 array of any shape (usage_error naming `what` otherwise).
farray float_array(const py::handle& obj, const char* what) {
  if (!farray::check_(obj))
    throw usage_error(std::string(what) + ": expected a C-contiguous float32 array");
  return py::reinterpret_borrow<farray>(obj);
}

/// A read-only (or writable) 1-d float32 view of `x`, valid while the call that gets it runs.
farray view_of(std::span<const float> x, bool writable) {
  farray v({static_cast<py::ssize_t>(x.size())}, {static_cast<py::ssize_t>(sizeof(float))},
           x.data(), py::none());
  if (!writable) v.attr("setflags")(py::arg("write") = false);
  return v;
}

/// view_parts whose every call goes to the methods of a Python object (with the GIL):
/// create(id, subset), release(id), load_data(id, subset, clamp), data_norm2(),
/// forward(x, id, subset), back(id, subset, matched) -> volume, apply(op, ids, scalars),
/// download(id, out) (fills the 1-d array out), upload(array, id) (the array is valid during the
/// call); when its attribute holds_volumes is true, also forward_volume(x, y, subset),
/// back_volume(y, x, subset, matched), tv_prox_volume(x, weight, iterations, nonnegative),
/// total_variation_volume(x) and keep_result(x) -> bool (the parts wrote the result: the call
/// then returns None for the volume). An exception there ends the run (its state saved so far kept) and
/// reaches the caller as it was raised.
class python_view_parts final : public view_parts {
 public:
  explicit python_view_parts(py::object obj) : obj_(std::move(obj)) {
    holds_ = py::hasattr(obj_, "holds_volumes") && obj_.attr("holds_volumes").cast<bool>();
  }
  bool holds_volumes() const override { return holds_; }
  void forward_volume(std::int64_t x, std::int64_t y, int subset) override {
    py::gil_scoped_acquire gil;
    obj_.attr("forward_volume")(x, y, subset);
  }
  void back_volume(std::int64_t y, std::int64_t x, int subset, bool matched) override {
    py::gil_scoped_acquire gil;
    obj_.attr("back_volume")(y, x, subset, matched);
  }
  void tv_prox_volume(std::int64_t x, float weight, int iterations, bool nonnegative) override {
    py::gil_scoped_acquire gil;
    obj_.attr("tv_prox_volume")(x, weight, iterations, nonnegative);
  }
  double total_variation_volume(std::int64_t x) override {
    py::gil_scoped_acquire gil;
    return obj_.attr("total_variation_volume")(x).cast<double>();
  }
  bool keep_result(std::int64_t x) override {
    py::gil_scoped_acquire gil;
    return py::hasattr(obj_, "keep_result") && obj_.attr("keep_result")(x).cast<bool>();
  }
  ~python_view_parts() override {
    py::gil_scoped_acquire gil;
    obj_ = py::object();
  }

  void create(std::int64_t id, int subset) override {
    py::gil_scoped_acquire gil;
    obj_.attr("create")(id, subset);
  }
  void release(std::int64_t id) noexcept override {
    py::gil_scoped_acquire gil;
    try {
      obj_.attr("release")(id);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("ctforge: releasing a partitioned buffer");
    } catch (...) {
    }
  }
  void load_data(std::int64_t id, int subset, bool clamp_negative) override {
    py::gil_scoped_acquire gil;
    obj_.attr("load_data")(id, subset, clamp_negative);
  }
  double data_norm2() override {
    py::gil_scoped_acquire gil;
    return obj_.attr("data_norm2")().cast<double>();
  }
  void forward(std::span<const float> x, std::int64_t y, int subset) override {
    py::gil_scoped_acquire gil;
    obj_.attr("forward")(view_of(x, false), y, subset);
  }
  void back(std::int64_t y, std::span<float> x, int subset, bool matched) override {
    py::gil_scoped_acquire gil;
    const farray sum = float_array(obj_.attr("back")(y, subset, matched), "back");
    CTFORGE_CHECK(sum.size() == static_cast<py::ssize_t>(x.size()),
                  "partitioned back-projection: " + std::to_string(sum.size()) +
                      " values returned for a volume of " + std::to_string(x.size()));
    std::copy_n(sum.data(), x.size(), x.data());
  }
  double apply(const part_call& call) override {
    py::gil_scoped_acquire gil;
    return obj_.attr("apply")(to_string(call.op), call.ids, call.scalars).cast<double>();
  }
  // (In place: a volume held by the parts crosses here without a second copy.)
  void download(std::int64_t id, std::span<float> host) override {
    py::gil_scoped_acquire gil;
    obj_.attr("download")(id, view_of(host, true));
  }
  void upload(std::span<const float> host, std::int64_t id) override {
    py::gil_scoped_acquire gil;
    obj_.attr("upload")(view_of(host, false), id);
  }

 private:
  py::object obj_;
  bool holds_ = false;
};

py::object reconstruct_partitioned_call(const py::object& parts_obj, const geometry& g,
                                        const volume_geometry& vg, const py::kwargs& options) {
  keyword_options kw(options, "reconstruct_partitioned");
  recon_options opt = read_recon_options(kw, &g);
  checkpoint_options co;
  co.dir = kw.text("checkpoint_dir", "");
  co.every_iterations = kw.count("checkpoint_every", 0);
  co.every_seconds = kw.number("checkpoint_seconds", 0.0);
  const std::string record = kw.text("run_record", "{}");
  auto hook = std::make_shared<python_progress>();
  hook->callback = kw.object("progress");
  const py::object note_obj = kw.object("note");
  kw.finish();
  std::vector<iteration_info> log;
  opt.on_iteration = [&log](const iteration_info& i) { log.push_back(i); };
  opt.cancel = hook->token;
  opt.progress = [hook](double f) { (*hook)(f); };
  const auto note = [&note_obj](const std::string& text) {
    py::gil_scoped_acquire gil;
    if (!note_obj.is_none()) note_obj(text);
  };
  python_view_parts parts(parts_obj);
  volume out;
  bool done = true;
  {
    py::gil_scoped_release nogil;
    try {
      out = co.dir.empty() ? reconstruct_partitioned(parts, g, vg, opt)
                           : reconstruct_partitioned_resumable(parts, g, vg, opt, co, record, note);
    } catch (const checkpoint_stopped&) {
      if (!hook->pending) throw;
      done = false;
    }
  }
  opt.progress = nullptr;
  hook->rethrow_pending();
  if (!done) throw ctforge::error("reconstruction: cancelled");
  if (out.data.empty())  // the parts kept it (keep_result)
    return py::make_tuple(py::none(), log_rows(log));
  return py::make_tuple(to_numpy(std::move(out)), log_rows(log));
}

}  // namespace

void register_view_parts(py::module_& m) {
  py::class_<view_part>(m, "ViewPart")
      .def(py::init([](const geometry& g, const volume_geometry& vg, std::int64_t v0,
                       std::int64_t v1, const py::handle& data_obj, int subsets,
                       const py::kwargs& options) {
             keyword_options kw(options, "ViewPart");
             const execution_context ctx = read_execution_context(kw, false);
             const py::object planes_obj = kw.object("planes");
             kw.finish();
             std::pair<std::int64_t, std::int64_t> planes{0, 0};
             if (!planes_obj.is_none())
               planes = planes_obj.cast<std::pair<std::int64_t, std::int64_t>>();
             const farray data = require_array(data_obj, 3, "projections");
             std::vector<float> copy(data.data(), data.data() + data.size());
             py::gil_scoped_release nogil;
             return std::make_unique<view_part>(g, vg, v0, v1, std::move(copy), ctx, subsets,
                                                planes);
           }),
           py::arg("geometry"), py::arg("grid"), py::arg("first_view"), py::arg("end_view"),
           py::arg("projections"), py::arg("subsets"))
      .def_property_readonly("first_view", &view_part::first_view)
      .def_property_readonly("end_view", &view_part::end_view)
      .def_property_readonly("planes", &view_part::planes)
      .def("size_of", &view_part::size_of, py::arg("id"))
      .def("create", &view_part::create, py::arg("id"), py::arg("subset"),
           py::call_guard<py::gil_scoped_release>())
      .def("release", &view_part::release, py::arg("id"))
      .def("load_data", &view_part::load_data, py::arg("id"), py::arg("subset"),
           py::arg("clamp_negative"), py::call_guard<py::gil_scoped_release>())
      .def("data_norm2", &view_part::data_norm2, py::call_guard<py::gil_scoped_release>())
      .def(
          "forward",
          [](view_part& p, const py::handle& x_obj, std::int64_t id, int subset) {
            const farray x = float_array(x_obj, "volume");
            py::gil_scoped_release nogil;
            p.forward({x.data(), static_cast<std::size_t>(x.size())}, id, subset);
          },
          py::arg("volume"), py::arg("id"), py::arg("subset"))
      .def(
          "back",
          [](view_part& p, std::int64_t id, int subset, bool matched, const volume_geometry& vg) {
            std::vector<float> x(static_cast<std::size_t>(vg.voxel_count()));
            {
              py::gil_scoped_release nogil;
              p.back(id, x, subset, matched);
            }
            return owning_array(std::move(x), {vg.nz, vg.ny, vg.nx});
          },
          py::arg("id"), py::arg("subset"), py::arg("matched"), py::arg("grid"))
      .def(
          "apply",
          [](view_part& p, const std::string& op, std::vector<std::int64_t> ids,
             std::vector<double> scalars) {
            const part_call c{part_op_from_string(op), std::move(ids), std::move(scalars)};
            py::gil_scoped_release nogil;
            return p.apply(c);
          },
          py::arg("op"), py::arg("ids"), py::arg("scalars"))
      .def(
          "download",
          [](const view_part& p, std::int64_t id) {
            std::vector<float> out(static_cast<std::size_t>(p.size_of(id)));
            p.download(id, out);
            const auto n = static_cast<py::ssize_t>(out.size());
            return owning_array(std::move(out), {n});
          },
          py::arg("id"))
      .def(
          "upload",
          [](view_part& p, const py::handle& a_obj, std::int64_t id) {
            const farray a = float_array(a_obj, "share");
            p.upload({a.data(), static_cast<std::size_t>(a.size())}, id);
          },
          py::arg("share"), py::arg("id"))
      .def(
          "tv_prox",
          [](view_part& p, const py::handle& x_obj, float weight, int iterations,
             bool nonnegative) {
            const farray x = float_array(x_obj, "volume");
            std::vector<float> out(x.data(), x.data() + x.size());
            {
              py::gil_scoped_release nogil;
              p.tv_prox(out, weight, iterations, nonnegative);
            }
            const auto n = static_cast<py::ssize_t>(out.size());
            return owning_array(std::move(out), {n});
          },
          py::arg("volume"), py::arg("weight"), py::arg("iterations"), py::arg("nonnegative"))
      .def(
          "total_variation",
          [](view_part& p, const py::handle& x_obj) {
            const farray x = float_array(x_obj, "volume");
            py::gil_scoped_release nogil;
            return p.total_variation({x.data(), static_cast<std::size_t>(x.size())});
          },
          py::arg("volume"));
  m.def(
      "part_planes",
      [](std::int64_t nz, int count, int k) { return part_planes(nz, count, k); },
      py::arg("nz"), py::arg("count"), py::arg("part"));
  m.def(
      "part_views",
      [](std::int64_t views, int count, int k) { return part_views(views, count, k); },
      py::arg("views"), py::arg("count"), py::arg("part"));
  m.def(
      "method_subsets",
      [](const geometry& g, const py::kwargs& options) {
        keyword_options kw(options, "method_subsets");
        const recon_options opt = read_recon_options(kw, &g);
        kw.finish();
        return method_subsets(opt, g);
      },
      py::arg("geometry"));
  m.def("reconstruct_partitioned", &reconstruct_partitioned_call, py::arg("parts"),
        py::arg("geometry"), py::arg("grid"));
}

}  // namespace ctforge::python
