// Reconstruction: reconstruct (keyword options, read by read_recon_options), the displaced-
// detector queries, and the table of algorithm-specific options that the Python package asks
// which option applies to which algorithm.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "ctforge/checkpoint.hpp"
#include "ctforge/options.hpp"

namespace ctforge::python {
namespace {

/// Projections given to reconstruct: a NumPy array, or the DLPack capsule of an array on a
/// CUDA device (or on the host). `keep` holds the array while `view` is in use.
struct projections_input {
  std::optional<farray> keep;
  projection_view view;
};

projections_input projections_of(const py::handle& obj, int device) {
  projections_input in;
  if (PyCapsule_CheckExact(obj.ptr())) {
    const auto cap = py::reinterpret_borrow<py::capsule>(obj);
    in.view = dlpack_projections(cap);
    if (in.view.space == memory_space::cuda_device) {
      const int on = dlpack_device_id(cap);
      CTFORGE_EXPECTS(on == device, "projections: the array is on CUDA device " +
                                        std::to_string(on) +
                                        " but device=" + std::to_string(device));
    }
  } else {
    in.keep = require_array(obj, 3, "projections");
    in.view = projection_arg(*in.keep);
  }
  return in;
}

/// The warm-start volume (None: none), checked against the grid.
std::optional<farray> initial_of(const py::object& initial, const volume_geometry& vg) {
  if (initial.is_none()) return std::nullopt;
  farray init = require_array(initial, 3, "initial");
  CTFORGE_EXPECTS(init.shape(0) == vg.nz && init.shape(1) == vg.ny && init.shape(2) == vg.nx,
                  "initial: shape (" + std::to_string(init.shape(0)) + ", " +
                      std::to_string(init.shape(1)) + ", " + std::to_string(init.shape(2)) +
                      ") but the grid is (" + std::to_string(vg.nz) + ", " + std::to_string(vg.ny) +
                      ", " + std::to_string(vg.nx) + ")");
  return init;
}

/// What a reconstruct call does besides the options of the reconstruction itself.
struct run_request {
  bool out_device = false;
  checkpoint_options checkpoint;  // dir empty: not resumable
  std::string run_record = "{}";
  bool return_log = false;
};

run_request read_run_request(keyword_options& kw) {
  run_request r;
  r.out_device = kw.flag("out_device", false);
  r.checkpoint.dir = kw.text("checkpoint_dir", "");
  r.checkpoint.planes_per_unit = kw.integer("unit_planes", 0);
  r.checkpoint.every_iterations = kw.count("checkpoint_every", 0);
  r.checkpoint.every_seconds = kw.number("checkpoint_seconds", 30.0);
  r.run_record = kw.text("run_record", "{}");
  r.return_log = kw.flag("return_log", false);
  return r;
}

/// Runs the reconstruction (without the GIL); false when it was cancelled.
bool run_reconstruction(const projection_view& p, const geometry& g, const volume_geometry& vg,
                        const recon_options& opt, const run_request& r, volume& out,
                        device_array& on_gpu) {
  try {
    if (!r.checkpoint.dir.empty()) {
      CTFORGE_EXPECTS(!r.out_device, "checkpoint_dir: the result is assembled on the host");
      out = reconstruct_resumable(p, g, vg, opt, r.checkpoint, r.run_record);
      remove_checkpoint(r.checkpoint);
    } else if (r.out_device) {
      on_gpu = reconstruct_to_device(p, g, vg, opt);
    } else {
      out = reconstruct(p, g, vg, opt);
    }
  } catch (const cancelled&) {
    return false;
  }
  return true;
}


py::object reconstruct_call(const py::handle& proj_obj, const geometry& g,
                            const volume_geometry& vg, const py::kwargs& options) {
  keyword_options kw(options, "reconstruct");
  recon_options opt = read_recon_options(kw, &g);
  const run_request run = read_run_request(kw);
  auto hook = std::make_shared<python_progress>();
  hook->callback = kw.object("progress");
  const py::object initial = kw.object("initial");
  kw.finish();
  const projections_input in = projections_of(proj_obj, opt.device);
  const std::optional<farray> init = initial_of(initial, vg);
  if (init) opt.initial = span_of(*init);
  // The per-iteration figures, collected without the GIL and returned as dicts.
  std::vector<iteration_info> log;
  if (run.return_log) opt.on_iteration = [&log](const iteration_info& i) { log.push_back(i); };
  opt.cancel = hook->token;
  opt.progress = [hook](double f) { (*hook)(f); };
  volume out;
  auto on_gpu = std::make_shared<device_array>();
  bool done = false;
  {
    py::gil_scoped_release nogil;
    done = run_reconstruction(in.view, g, vg, opt, run, out, *on_gpu);
  }
  opt.progress = nullptr;  // drops the last reference to `hook` outside it
  hook->rethrow_pending();
  if (!done) throw ctforge::error("reconstruction: cancelled");
  py::object result =
      run.out_device ? py::cast(py_device_array{on_gpu}) : py::object(to_numpy(std::move(out)));
  if (!run.return_log) return result;
  return py::make_tuple(result, log_rows(log));
}

py::dict option_entry(const recon_option& o) {
  py::dict d;
  d["name"] = std::string(o.name);
  d["flag"] = std::string(o.flag);
  py::list algorithms;
  const std::string all = algorithms_of(o.scope);
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = std::min(all.find(", ", at), all.size());
    algorithms.append(all.substr(at, end - at));
    at = end + 2;
  }
  d["algorithms"] = algorithms;
  d["needs"] = std::string(o.needs);
  d["help"] = std::string(o.help);
  return d;
}

}  // namespace

py::list log_rows(const std::vector<iteration_info>& log) {
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
  return rows;
}

void register_reconstruction(py::module_& m) {
  m.def("reconstruct", &reconstruct_call, py::arg("projections"), py::arg("geometry"),
        py::arg("grid"));
  // FDK / FBP as a linear operator and its adjoint (CPU): the keyword options of reconstruct
  // that apply (algorithm, filter, cutoff, displaced_detector, offset_transition, threads).
  m.def(
      "fbp_apply",
      [](const py::handle& proj_obj, const geometry& g, const volume_geometry& vg,
         const py::kwargs& options) {
        keyword_options kw(options, "fbp_apply");
        const recon_options opt = read_recon_options(kw, &g);
        kw.finish();
        const farray in = require_array(proj_obj, 3, "projections");
        const projection_view p = projection_arg(in);
        volume out;
        {
          py::gil_scoped_release nogil;
          out = fbp_apply(p, g, vg, opt);
        }
        return to_numpy(std::move(out));
      },
      py::arg("projections"), py::arg("geometry"), py::arg("grid"));
  m.def(
      "fbp_adjoint",
      [](const py::handle& vol_obj, const geometry& g, const volume_geometry& vg,
         const py::kwargs& options) {
        keyword_options kw(options, "fbp_adjoint");
        const recon_options opt = read_recon_options(kw, &g);
        kw.finish();
        const farray in = require_array(vol_obj, 3, "volume");
        const volume_view v = volume_arg(in, vg, "volume");
        projection_stack out;
        {
          py::gil_scoped_release nogil;
          out = fbp_adjoint(v, g, opt);
        }
        return to_numpy(std::move(out));
      },
      py::arg("volume"), py::arg("geometry"), py::arg("grid"));
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
}

void register_recon_option_table(py::module_& m) {
  m.def(
      "recon_option_table",
      [] {
        py::list out;
        for (const recon_option& o : recon_option_table()) out.append(option_entry(o));
        return out;
      },
      "The algorithm-specific options of reconstruct, in the order `ctforge recon --help` lists "
      "them: dicts of name (the keyword), flag (the command line's), algorithms (those it "
      "applies to), needs (another option it needs, or '') and help.");
  m.def(
      "require_option_applies",
      [](const std::string& name, const std::string& algo) {
        require_option_applies(name, parse_algorithm(algo), name);
      },
      py::arg("name"), py::arg("algorithm"),
      "UsageError '<name>: does not apply to algorithm <a> (only to <algorithms>)' when the "
      "option does not apply to the algorithm; UsageError for a name the table does not hold.");
}

}  // namespace ctforge::python
