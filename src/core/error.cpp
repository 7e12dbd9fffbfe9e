#include "ctforge/error.hpp"

namespace ctforge::detail {
void throw_usage(const std::string& what) {
  throw usage_error(what);
}
void throw_runtime(const std::string& what) {
  throw error(what);
}
}  // namespace ctforge::detail
