#include "ctforge/error.hpp"

namespace ctforge::detail {

// Keeps src/core/openmp_runtime.cpp (a start-up guard, nothing calls it) in static links.
// (An external definition, so that the reference is emitted even though nothing reads it.)
extern const int openmp_runtime_guard;
extern const int* const keep_openmp_runtime_guard;
const int* const keep_openmp_runtime_guard = &openmp_runtime_guard;

void throw_usage(const std::string& what) {
  throw usage_error(what);
}
void throw_runtime(const std::string& what) {
  throw error(what);
}
}  // namespace ctforge::detail
