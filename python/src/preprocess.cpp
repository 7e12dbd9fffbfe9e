// Cleaning raw scans: zinger and stripe removal, phase retrieval and the beam-hardening
// correction (include/ctforge/preprocess.hpp), in place on an array the Python layer has
// copied; the beam-hardening fits (preprocess.hpp, beam_hardening.hpp); stitching 360-degree
// offset-axis scans (a new array) and finding their axis.
#include "ctforge/preprocess.hpp"

#include <pybind11/stl.h>

#include <vector>

#include "common.hpp"
#include "ctforge/beam_hardening.hpp"

namespace ctforge::python {
namespace {

/// A float32 C-contiguous array of 3 dimensions (views, rows, cols) or 2, as the projections it
/// holds, changed in place. Two dimensions are one sinogram (views, cols) when `sinogram`, else
/// one image (rows, cols).
projections_ref writable_projections(const py::handle& obj, const char* call, bool sinogram) {
  if (!farray::check_(obj)) throw usage_error(std::string(call) + ": expected a float32 array");
  farray a = py::reinterpret_borrow<farray>(obj);
  CTFORGE_EXPECTS(a.ndim() == 2 || a.ndim() == 3,
                  std::string(call) + ": expected 2 or 3 dimensions");
  CTFORGE_EXPECTS(a.writeable(), std::string(call) + ": the array is read-only");
  const std::span<float> data(a.mutable_data(), static_cast<std::size_t>(a.size()));
  if (a.ndim() == 3) return projections_ref(a.shape(0), a.shape(1), a.shape(2), data);
  return sinogram ? projections_ref(a.shape(0), 1, a.shape(1), data)
                  : projections_ref(1, a.shape(0), a.shape(1), data);
}

/// The phase_options that the keywords name (retrieve_phase, phase_row_margin).
phase_options read_phase_options(keyword_options& kw) {
  phase_options o;
  o.method = parse_phase_method(kw.text("method", to_string(o.method)));
  o.energy_kev = kw.number("energy_kev", o.energy_kev);
  o.distance_mm = kw.number("distance_mm", o.distance_mm);
  o.pixel_size_mm = kw.number("pixel_size_mm", o.pixel_size_mm);
  o.pixel_u_mm = kw.number("pixel_u_mm", o.pixel_u_mm);
  o.pixel_v_mm = kw.number("pixel_v_mm", o.pixel_v_mm);
  o.delta_beta = kw.number("delta_beta", o.delta_beta);
  o.pad_rows = kw.integer("pad_rows", o.pad_rows);
  o.pad_cols = kw.integer("pad_cols", o.pad_cols);
  o.threads = kw.count("threads", o.threads);
  return o;
}

void register_stitching(py::module_& m);

}  // namespace

void register_preprocessing(py::module_& m) {
  m.def("preprocess_option_table", [] {
    py::list out;
    for (const preprocess_option& e : preprocess_option_table()) {
      py::dict d;
      d["name"] = std::string(e.name);
      d["flag"] = std::string(e.flag);
      d["type"] = std::string(e.type);
      d["step"] = std::string(e.step);
      d["methods"] = std::string(e.methods);
      d["help"] = std::string(e.help);
      out.append(d);
    }
    return out;
  });
  m.def(
      "remove_stripes",
      [](const py::handle& arr, const py::kwargs& kwargs) {
        const projections_ref p = writable_projections(arr, "remove_stripes", true);
        keyword_options kw(kwargs, "remove_stripes");
        stripe_options o;
        o.method = parse_stripe_method(kw.text("method", to_string(o.method)));
        o.size = kw.count("size", o.size);
        o.sigma = kw.number("sigma", o.sigma);
        o.la_size = kw.count("la_size", o.la_size);
        o.snr = kw.number("snr", o.snr);
        o.drop_ratio = kw.number("drop_ratio", o.drop_ratio);
        o.norm = kw.flag("norm", o.norm);
        o.level = kw.count("level", o.level);
        o.wname = kw.text("wname", o.wname);
        o.fw_sigma = kw.number("fw_sigma", o.fw_sigma);
        o.pad = kw.flag("pad", o.pad);
        o.alpha = kw.number("alpha", o.alpha);
        o.nblock = kw.count("nblock", o.nblock);
        o.threads = kw.count("threads", o.threads);
        kw.finish();
        py::gil_scoped_release nogil;
        remove_stripes(p, o);
      },
      py::arg("array"));
  m.def(
      "remove_zingers",
      [](const py::handle& arr, const py::kwargs& kwargs) {
        const projections_ref p = writable_projections(arr, "remove_zingers", false);
        keyword_options kw(kwargs, "remove_zingers");
        outlier_options o;
        o.threshold = kw.number("threshold", o.threshold);
        o.size = kw.count("size", o.size);
        o.views = kw.count("views", o.views);
        o.threads = kw.count("threads", o.threads);
        kw.finish();
        py::gil_scoped_release nogil;
        return remove_outliers(p, o);
      },
      py::arg("array"));
  m.def(
      "retrieve_phase",
      [](const py::handle& arr, const py::kwargs& kwargs) {
        const projections_ref p = writable_projections(arr, "retrieve_phase", false);
        keyword_options kw(kwargs, "retrieve_phase");
        const phase_options o = read_phase_options(kw);
        kw.finish();
        py::gil_scoped_release nogil;
        retrieve_phase(p, o);
      },
      py::arg("array"));
  m.def("phase_row_margin", [](const py::kwargs& kwargs) {
    keyword_options kw(kwargs, "phase_row_margin");
    const phase_options o = read_phase_options(kw);
    const double tolerance = kw.number("tolerance", 0.0);
    kw.finish();
    return phase_row_margin(o, tolerance);
  });
  m.def(
      "correct_beam_hardening",
      [](const py::handle& arr, const std::vector<double>& coefficients, int threads) {
        const projections_ref p = writable_projections(arr, "correct_beam_hardening", false);
        py::gil_scoped_release nogil;
        correct_beam_hardening(p, coefficients, threads);
      },
      py::arg("array"), py::arg("coefficients"), py::arg("threads"));
  m.def(
      "fit_linearisation",
      [](const std::vector<double>& weights, const std::vector<double>& mu_per_mm,
         const py::kwargs& kwargs) {
        keyword_options kw(kwargs, "fit_linearisation");
        linearisation_options o;
        o.degree = kw.count("degree", o.degree);
        o.max_thickness_mm = kw.number("max_thickness_mm", o.max_thickness_mm);
        o.samples = kw.count("samples", o.samples);
        kw.finish();
        return fit_linearisation(weights, mu_per_mm, o);
      },
      py::arg("weights"), py::arg("mu_per_mm"));
  m.def(
      "fit_water_precorrection",
      [](const py::handle& proj, const geometry& g, const volume_geometry& vg,
         const py::kwargs& kwargs) {
        const farray a = require_array(proj, 3, "projections");
        keyword_options kw(kwargs, "fit_water_precorrection");
        water_precorrection_options o;
        o.degree = kw.count("degree", o.degree);
        o.threshold = kw.number("threshold", o.threshold);
        o.margin = kw.count("margin", o.margin);
        o.recon = read_recon_options(kw, &g);
        kw.finish();
        py::gil_scoped_release nogil;
        return fit_water_precorrection(projection_arg(a), g, vg, o);
      },
      py::arg("projections"), py::arg("geometry"), py::arg("grid"));
  register_stitching(m);
}

namespace {

stitch_options stitch_options_of(const py::kwargs& kwargs) {
  keyword_options kw(kwargs, "stitch_360");
  stitch_options o;
  o.center = kw.number("center", o.center);
  o.blend = kw.number("blend", o.blend);
  const py::object angles = kw.object("angles");
  if (!angles.is_none())
    for (const py::handle x : angles) o.angles_rad.push_back(x.cast<double>());
  o.threads = kw.count("threads", o.threads);
  kw.finish();
  return o;
}

center_360_options center_360_options_of(const py::kwargs& kwargs) {
  keyword_options kw(kwargs, "find_center_360");
  center_360_options o;
  o.row = kw.integer("row", o.row);
  o.min_overlap = kw.integer("min_overlap", o.min_overlap);
  o.threads = kw.count("threads", o.threads);
  kw.finish();
  return o;
}

/// stitch_360 and find_center_360: 360-degree scans with an offset axis.
void register_stitching(py::module_& m) {
  m.def(
      "stitch_360",
      [](const py::handle& obj, const py::kwargs& kwargs) {
        const farray arr = require_array(obj, 3, "projections");
        const projection_view p = projection_arg(arr);
        const stitch_options o = stitch_options_of(kwargs);
        projection_stack out;
        {
          py::gil_scoped_release nogil;
          out = stitch_360(p, o);
        }
        return to_numpy(std::move(out));
      },
      py::arg("array"));
  m.def(
      "find_center_360",
      [](const py::handle& obj, const py::kwargs& kwargs) {
        const farray arr = require_array(obj, 3, "projections");
        const center_360_options o = center_360_options_of(kwargs);
        center_360_estimate e;
        {
          py::gil_scoped_release nogil;
          e = find_center_360(projection_arg(arr), o);
        }
        const auto list = [](const std::vector<double>& v) {
          return py::array_t<double>(static_cast<py::ssize_t>(v.size()), v.data());
        };
        return py::make_tuple(e.center, to_string(e.side), e.overlap, e.confidence,
                              list(e.candidates), list(e.metric));
      },
      py::arg("array"));
}
}  // namespace

}  // namespace ctforge::python
