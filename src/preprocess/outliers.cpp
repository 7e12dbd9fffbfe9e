// Zinger (outlier) removal: include/ctforge/preprocess.hpp.
#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "math/select.hpp"
#include "preprocess/common.hpp"
#include "preprocess/steps.hpp"

namespace ctforge {

projections_ref::projections_ref(std::int64_t v, std::int64_t r, std::int64_t c, std::span<float> d)
    : views(v), rows(r), cols(c), data(d) {
  CTFORGE_EXPECTS(
      v >= 0 && r >= 0 && c >= 0 && static_cast<std::int64_t>(d.size()) == v * r * c,
      fmt::format("projections: {} values for {} views x {} rows x {} cols", d.size(), v, r, c));
}

namespace detail {

void check_outlier_options(const outlier_options& o) {
  CTFORGE_EXPECTS(std::isfinite(o.threshold) && o.threshold > 0,
                  fmt::format("zinger threshold: must be positive (got {})", o.threshold));
  CTFORGE_EXPECTS(o.size >= 3 && o.size % 2 == 1 && o.size <= 99,
                  fmt::format("zinger size: an odd window of 3 to 99 pixels (got {})", o.size));
  CTFORGE_EXPECTS(o.views >= 1 && o.views % 2 == 1 && o.views <= 99,
                  fmt::format("zinger views: an odd window of 1 to 99 views (got {})", o.views));
}

}  // namespace detail

std::int64_t remove_outliers(projections_ref p, const outlier_options& opt) {
  detail::check_outlier_options(opt);
  const int threads = detail::thread_count(opt.threads);
  detail::require_finite(p, "zinger removal", threads);
  if (p.data.empty()) return 0;
  // The medians are taken on the input: the replacements go into a copy of each view only
  // where a pixel is flagged, so later pixels see the original neighbours.
  const std::vector<float> in(p.data.begin(), p.data.end());
  const auto src = [&](std::int64_t v, std::int64_t r, std::int64_t c) {
    return in[static_cast<std::size_t>((v * p.rows + r) * p.cols + c)];
  };
  const std::int64_t hs = opt.size / 2, hv = opt.views / 2;
  const std::int64_t window = static_cast<std::int64_t>(opt.size) * opt.size * opt.views;
  std::int64_t replaced = 0;
#pragma omp parallel num_threads(threads) reduction(+ : replaced)
  {
    std::vector<float> buf(static_cast<std::size_t>(window));
#pragma omp for schedule(static) collapse(2)
    for (std::int64_t v = 0; v < p.views; ++v)
      for (std::int64_t r = 0; r < p.rows; ++r)
        for (std::int64_t c = 0; c < p.cols; ++c) {
          std::size_t k = 0;
          for (std::int64_t dv = -hv; dv <= hv; ++dv) {
            const std::int64_t vv = kernels::reflect_index(v + dv, p.views);
            for (std::int64_t dr = -hs; dr <= hs; ++dr) {
              const std::int64_t rr = kernels::reflect_index(r + dr, p.rows);
              for (std::int64_t dc = -hs; dc <= hs; ++dc)
                buf[k++] = src(vv, rr, kernels::reflect_index(c + dc, p.cols));
            }
          }
          const float med = kernels::select_rank(buf.data(), static_cast<int>(window),
                                                 static_cast<int>(window / 2));
          const float x = src(v, r, c);
          if (kernels::is_zinger(x, med, opt.threshold)) {
            p.at(v, r, c) = med;
            ++replaced;
          }
        }
  }
  return replaced;
}

}  // namespace ctforge
