// Keyword options across the Python boundary: each option of a call is read by its name and
// converted here, once; a keyword the call does not know, or a value of the wrong type, is a
// UsageError naming it.
#include <limits>

#include "common.hpp"

namespace ctforge::python {
namespace {

std::string shown(const py::handle& value) {
  return py::repr(value).cast<std::string>();
}

}  // namespace

keyword_options::keyword_options(const py::kwargs& kw, std::string call)
    : left_(py::dict(kw)), call_(std::move(call)) {}

bool keyword_options::has(const char* key) const {
  return left_.contains(key);
}

py::object keyword_options::object(const char* key) {
  if (!left_.contains(key)) return py::none();
  py::object value = left_[key];
  PyDict_DelItemString(left_.ptr(), key);
  return value;
}

std::string keyword_options::text(const char* key, const std::string& fallback) {
  const py::object v = object(key);
  if (v.is_none()) return fallback;
  if (!py::isinstance<py::str>(v))
    throw usage_error(std::string(key) + ": expected a string (got " + shown(v) + ")");
  return v.cast<std::string>();
}

std::int64_t keyword_options::integer(const char* key, std::int64_t fallback) {
  const py::object v = object(key);
  if (v.is_none()) return fallback;
  if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
    throw usage_error(std::string(key) + ": expected an integer (got " + shown(v) + ")");
  const long long n =
      PyLong_AsLongLong(py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr())).ptr());
  if (n == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw usage_error(std::string(key) + ": " + shown(v) + " is out of range");
  }
  return n;
}

int keyword_options::count(const char* key, int fallback) {
  const std::int64_t n = integer(key, fallback);
  if (n < std::numeric_limits<int>::min() || n > std::numeric_limits<int>::max())
    throw usage_error(std::string(key) + ": " + std::to_string(n) + " is out of range");
  return static_cast<int>(n);
}

double keyword_options::number(const char* key, double fallback) {
  const py::object v = object(key);
  if (v.is_none()) return fallback;
  if (py::isinstance<py::str>(v) || !PyNumber_Check(v.ptr()))
    throw usage_error(std::string(key) + ": expected a number (got " + shown(v) + ")");
  const double x = PyFloat_AsDouble(v.ptr());
  if (x == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw usage_error(std::string(key) + ": expected a number (got " + shown(v) + ")");
  }
  return x;
}

bool keyword_options::flag(const char* key, bool fallback) {
  const py::object v = object(key);
  if (v.is_none()) return fallback;
  if (PyBool_Check(v.ptr())) return v.ptr() == Py_True;
  // numpy.bool_ and the integers 0 and 1
  const int truth = PyObject_IsTrue(v.ptr());
  const bool boolean_like = std::string(Py_TYPE(v.ptr())->tp_name) == "numpy.bool_" ||
                            std::string(Py_TYPE(v.ptr())->tp_name) == "numpy.bool" ||
                            (PyLong_Check(v.ptr()) && (truth == 0 || PyLong_AsLong(v.ptr()) == 1));
  if (truth < 0) PyErr_Clear();
  if (truth < 0 || !boolean_like)
    throw usage_error(std::string(key) + ": expected True or False (got " + shown(v) + ")");
  return truth == 1;
}

std::int64_t keyword_options::bytes(const char* key) {
  const std::int64_t n = integer(key, 0);
  CTFORGE_EXPECTS(n >= 0, std::string(key) + ": must be >= 0 bytes");
  return n;
}

void keyword_options::finish() const {
  for (const auto& item : left_)
    throw usage_error(call_ + ": unknown option '" + item.first.cast<std::string>() + "'");
}

execution_context read_execution_context(keyword_options& kw, bool host_memory) {
  execution_context c;
  c.where = parse_backend(kw.text("backend", "auto"));
  c.device = kw.count("device", 0);
  c.threads = kw.count("threads", 0);
  c.gpu_memory_limit_bytes = kw.bytes("gpu_memory_limit");
  if (host_memory) c.memory_limit_bytes = kw.bytes("memory_limit");
  const std::string interpolation = kw.text("gpu_interpolation", "exact");
  CTFORGE_EXPECTS(
      interpolation == "exact" || interpolation == "hardware",
      "gpu_interpolation: expected 'exact' or 'hardware' (got '" + interpolation + "')");
  c.gpu_hardware_interpolation = interpolation == "hardware";
  return c;
}

projector_options read_projector_options(keyword_options& kw) {
  projector_options po;
  static_cast<execution_context&>(po) = read_execution_context(kw, false);
  return po;
}

recon_options read_recon_options(keyword_options& kw, const geometry* g) {
  recon_options opt;
  const std::string algorithm_name = kw.text("algorithm", "");
  CTFORGE_EXPECTS(!algorithm_name.empty() || g != nullptr, "algorithm: required");
  opt.algo = algorithm_name.empty() ? default_algorithm(*g) : parse_algorithm(algorithm_name);
  opt.filter = parse_filter(kw.text("filter", "ram-lak"));
  opt.cutoff = kw.number("cutoff", opt.cutoff);
  opt.iterations = kw.count("iterations", opt.iterations);
  opt.relaxation = kw.number("relaxation", opt.relaxation);
  opt.nonnegative = kw.flag("nonnegative", opt.nonnegative);
  static_cast<execution_context&>(opt) = read_execution_context(kw, true);
  opt.reference = kw.flag("reference", opt.reference);
  opt.subsets = kw.count("subsets", opt.subsets);
  opt.tv_weight = kw.number("tv_weight", opt.tv_weight);
  opt.tv_iterations = kw.count("tv_iterations", opt.tv_iterations);
  opt.backprojector = parse_backprojector(kw.text("backprojector", "auto"));
  opt.tolerance = kw.number("tolerance", opt.tolerance);
  opt.displaced_detector = parse_displaced_detector(kw.text("displaced_detector", "auto"));
  opt.offset_transition_px = kw.number("offset_transition", opt.offset_transition_px);
  opt.helical_q = kw.number("helical_q", opt.helical_q);
  return opt;
}

}  // namespace ctforge::python
