// Row bands with the preprocessing steps applied (include/ctforge/checkpoint.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "ctforge/checkpoint.hpp"
#include "ctforge/error.hpp"

namespace ctforge {

row_band_source preprocessed_rows(row_band_source rows, std::int64_t total_rows,
                                  preprocess_options opt) {
  if (opt.empty()) return rows;
  const std::int64_t margin = preprocess_row_margin(opt);
  return [rows = std::move(rows), total_rows, opt = std::move(opt), margin](std::int64_t r0,
                                                                            std::int64_t r1) {
    const std::int64_t a = std::max<std::int64_t>(0, r0 - margin);
    const std::int64_t b = std::min(total_rows, r1 + margin);
    projection_stack wide = rows(a, b);
    CTFORGE_CHECK(wide.rows == b - a,
                  fmt::format("preprocessing: rows {}..{} read as {} rows", a, b, wide.rows));
    (void)preprocess(wide, opt);
    if (a == r0 && b == r1) return wide;
    projection_stack band(wide.views, r1 - r0, wide.cols);
    const std::int64_t n = band.rows * band.cols;
    for (std::int64_t v = 0; v < wide.views; ++v)
      std::copy_n(wide.view(v) + (r0 - a) * wide.cols, n, band.view(v));
    return band;
  };
}

}  // namespace ctforge
