// ctforge._core: the C++ library for Python (pybind11). The pure-Python package `ctforge`
// (python/ctforge/__init__.py) wraps these functions with keyword defaults, array conversion
// and DLPack; everything numerical happens here, with the GIL released. Each area registers
// its classes and functions from its own file; common.hpp holds what they share.
#include "common.hpp"

PYBIND11_MODULE(_core, m) {
  namespace cp = ctforge::python;
  m.doc() = "ctforge C++ core (use the `ctforge` package)";
  m.attr("__version__") = CTFORGE_VERSION;
#if defined(CTFORGE_WITH_CUDA)
  m.attr("cuda_compiled") = true;
#else
  m.attr("cuda_compiled") = false;
#endif
  cp::register_errors(m);
  cp::register_volume_geometry(m);
  cp::register_geometry(m);
  cp::register_geometry_makers(m);
  cp::register_phantoms(m);
  cp::register_projectors(m);
  cp::register_reconstruction(m);
  cp::register_recon_option_table(m);
  cp::register_center(m);
  cp::register_backend_queries(m);
  cp::register_projection_files(m);
  cp::register_projector_pair(m);
  cp::register_slab_run(m);
  cp::register_view_parts(m);
  cp::register_volume_files(m);
  cp::register_device_arrays(m);
  cp::register_metrics(m);
  cp::register_preprocessing(m);
}
