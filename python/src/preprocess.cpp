// Cleaning raw scans: zinger and stripe removal (include/ctforge/preprocess.hpp), in place on
// an array the Python layer has copied; stitching 360-degree offset-axis scans (a new array) and
// finding their axis.
#include "ctforge/preprocess.hpp"

#include "common.hpp"

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

}  // namespace

void register_preprocessing(py::module_& m) {
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
      "stitch_360",
      [](const py::handle& obj, const py::kwargs& kwargs) {
        const farray arr = require_array(obj, 3, "projections");
        const projection_view p = projection_arg(arr);
        keyword_options kw(kwargs, "stitch_360");
        stitch_options o;
        o.center = kw.number("center", o.center);
        o.blend = kw.number("blend", o.blend);
        const py::object angles = kw.object("angles");
        if (!angles.is_none())
          for (const py::handle x : angles) o.angles_rad.push_back(x.cast<double>());
        o.threads = kw.count("threads", o.threads);
        kw.finish();
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
        const projection_view p = projection_arg(arr);
        keyword_options kw(kwargs, "find_center_360");
        center_360_options o;
        o.row = kw.integer("row", o.row);
        o.min_overlap = kw.integer("min_overlap", o.min_overlap);
        o.threads = kw.count("threads", o.threads);
        kw.finish();
        center_360_estimate e;
        {
          py::gil_scoped_release nogil;
          e = find_center_360(p, o);
        }
        const auto list = [](const std::vector<double>& v) {
          return py::array_t<double>(static_cast<py::ssize_t>(v.size()), v.data());
        };
        return py::make_tuple(e.center, to_string(e.side), e.overlap, e.confidence,
                              list(e.candidates), list(e.metric));
      },
      py::arg("array"));
}

}  // namespace ctforge::python
