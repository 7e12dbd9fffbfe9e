// Metrics: the same definitions as `ctforge compare`.
#include "ctforge/metrics.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "common.hpp"

namespace ctforge::python {

void register_metrics(py::module_& m) {
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
  m.def("_data_address",
        [](const py::array& a) { return reinterpret_cast<std::uintptr_t>(a.data()); });
}

}  // namespace ctforge::python
