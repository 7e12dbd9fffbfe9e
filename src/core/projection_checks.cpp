#include "core/projection_checks.hpp"

#include <fmt/format.h>

#include <cstddef>

#include "core/finite_scan.hpp"
#include "ctforge/error.hpp"

namespace ctforge::detail {

void throw_non_finite(const projection_view& p, std::int64_t index) {
  throw_non_finite(p, index, p.data[static_cast<std::size_t>(index)]);
}

void throw_non_finite(const projection_view& p, std::int64_t index, float value) {
  const std::int64_t per_view = p.rows * p.cols;
  const std::int64_t view = index / per_view, rem = index % per_view;
  throw usage_error(fmt::format(
      "projections: non-finite value ({}) at view {}, row {}, col {}; reconstruction and "
      "back-projection need finite values",
      value, view, rem / p.cols, rem % p.cols));
}

void check_finite_values(const projection_view& p, int threads) {
  require_host(p, "checking projection values");
  const std::int64_t i = first_non_finite(p.data.data(), p.size(), threads);
  if (i >= 0) throw_non_finite(p, i);
}

}  // namespace ctforge::detail
