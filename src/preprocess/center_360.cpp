// The rotation axis of a 360-degree offset-axis scan from its data: find_center_360
// (include/ctforge/preprocess.hpp).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/preprocess.hpp"
#include "preprocess/common.hpp"
#include "preprocess/stitch_360.hpp"

namespace ctforge {

namespace {

/// The two half-turns' rows to compare: first[r][i] (the view at t) and second[r][i] (the view
/// at t + 180 deg, not mirrored), r over the chosen view pairs and detector rows, columns
/// binned by `bin` (a remainder of fewer than `bin` columns dropped).
struct halves {
  std::int64_t rows = 0, cols = 0, bin = 1;
  std::vector<double> first, second;
};

/// Each half's mean over its view pairs, per detector row and column, subtracted: a stripe (a
/// column offset constant over the views, a ring) then weighs nothing, where it would otherwise
/// pull the axis onto itself (its column mirrored onto itself matches perfectly). At the true
/// axis the relation second(2c - col) = first(col) holds view by view, so for the means too.
/// Fewer than 4 pairs are left as they are: their means would take most of the object along.
void remove_column_means(halves& h, std::int64_t det_rows) {
  const std::int64_t pairs = h.rows / det_rows;
  if (pairs < 4) return;
  for (std::vector<double>* half : {&h.first, &h.second})
    for (std::int64_t d = 0; d < det_rows; ++d)
      for (std::int64_t i = 0; i < h.cols; ++i) {
        double sum = 0;
        for (std::int64_t q = 0; q < pairs; ++q)
          sum += (*half)[static_cast<std::size_t>((q * det_rows + d) * h.cols + i)];
        const double mean = sum / static_cast<double>(pairs);
        for (std::int64_t q = 0; q < pairs; ++q)
          (*half)[static_cast<std::size_t>((q * det_rows + d) * h.cols + i)] -= mean;
      }
}

halves gather(const projection_view& p, const std::vector<std::int64_t>& det_rows,
              std::int64_t max_pairs, std::int64_t bin) {
  const std::int64_t m = p.views / 2;
  const std::int64_t stride = (m + max_pairs - 1) / max_pairs;
  halves h;
  h.bin = bin;
  h.cols = p.cols / bin;
  const std::int64_t pairs = (m + stride - 1) / stride;
  h.rows = pairs * static_cast<std::int64_t>(det_rows.size());
  h.first.assign(static_cast<std::size_t>(h.rows * h.cols), 0.0);
  h.second.assign(h.first.size(), 0.0);
  std::int64_t r = 0;
  for (std::int64_t v = 0; v < m; v += stride)
    for (std::int64_t row : det_rows) {
      for (std::int64_t i = 0; i < h.cols * bin; ++i) {
        const auto k = static_cast<std::size_t>(r * h.cols + i / bin);
        h.first[k] += p.at(v, row, i) / static_cast<double>(bin);
        h.second[k] += p.at(v + m, row, i) / static_cast<double>(bin);
      }
      ++r;
    }
  remove_column_means(h, static_cast<std::int64_t>(det_rows.size()));
  return h;
}

/// 1 - the Pearson correlation of first(i) and second(k - i) over the columns i both cover and
/// every row: 0 for a perfect match, 1 when uncorrelated (or either side constant).
double mismatch(const halves& h, std::int64_t k) {
  const std::int64_t lo = std::max<std::int64_t>(0, k - (h.cols - 1));
  const std::int64_t hi = std::min<std::int64_t>(h.cols - 1, k);
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
  for (std::int64_t r = 0; r < h.rows; ++r) {
    const double* a = h.first.data() + r * h.cols;
    const double* b = h.second.data() + r * h.cols;
    for (std::int64_t i = lo; i <= hi; ++i) {
      const double x = a[i], y = b[k - i];
      sa += x;
      sb += y;
      saa += x * x;
      sbb += y * y;
      sab += x * y;
    }
  }
  const double n = static_cast<double>(h.rows * (hi - lo + 1));
  const double va = saa - sa * sa / n, vb = sbb - sb * sb / n;
  if (!(va > 0) || !(vb > 0)) return 1.0;
  return 1.0 - (sab - sa * sb / n) / std::sqrt(va * vb);
}

/// The axis column (full-resolution pixels) of candidate k = 2c on the binned columns.
double center_of(const halves& h, double k) {
  return 0.5 * (static_cast<double>(h.bin) * k + static_cast<double>(h.bin - 1));
}

/// Metrics of every candidate k in [k_lo, k_hi].
std::vector<double> metrics(const halves& h, std::int64_t k_lo, std::int64_t k_hi, int threads) {
  std::vector<double> m(static_cast<std::size_t>(k_hi - k_lo + 1));
#pragma omp parallel for num_threads(threads) schedule(dynamic)
  for (std::int64_t k = k_lo; k <= k_hi; ++k)
    m[static_cast<std::size_t>(k - k_lo)] = mismatch(h, k);
  return m;
}

/// Candidates k whose overlap (columns both halves cover) is at least `min_overlap` pixels.
std::pair<std::int64_t, std::int64_t> k_range(const halves& h, std::int64_t min_overlap) {
  const std::int64_t need = std::max<std::int64_t>(3, (min_overlap + h.bin - 1) / h.bin);
  const std::int64_t lo = need - 1, hi = 2 * (h.cols - 1) - (need - 1);
  CTFORGE_EXPECTS(lo <= hi, fmt::format("min_overlap: {} pixels is more than the detector's {} "
                                        "columns allow",
                                        min_overlap, h.cols * h.bin));
  return {lo, hi};
}

/// 1 - m1 / m2 (see find_center_360), from the coarse search: m1 the lowest metric within 3
/// pixels of `best`, m2 the lowest local minimum (the ends of the range included) farther away.
double confidence_of(const std::vector<double>& c, const std::vector<double>& m, double best) {
  double m1 = std::numeric_limits<double>::infinity(), m2 = m1;
  for (std::size_t j = 0; j < m.size(); ++j) {
    const bool local = (j == 0 || m[j] <= m[j - 1]) && (j + 1 == m.size() || m[j] <= m[j + 1]);
    if (std::abs(c[j] - best) < 3)
      m1 = std::min(m1, m[j]);
    else if (local)
      m2 = std::min(m2, m[j]);
  }
  if (!std::isfinite(m2)) return 1.0;
  if (!(m2 > 0)) return 0.0;
  return std::clamp(1.0 - m1 / m2, 0.0, 1.0);
}

std::vector<std::int64_t> rows_to_compare(std::int64_t rows, std::int64_t row) {
  if (row >= 0) {
    CTFORGE_EXPECTS(row < rows,
                    fmt::format("row: {} is off the detector (rows 0 .. {})", row, rows - 1));
    return {row};
  }
  CTFORGE_EXPECTS(row == -1, fmt::format("row: a detector row or -1 (got {})", row));
  const std::int64_t n = std::min<std::int64_t>(4, rows);
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back((2 * i + 1) * rows / (2 * n));
  return out;
}

}  // namespace

center_360_estimate find_center_360(const projection_view& p, const center_360_options& opt) {
  require_host(p, "find_center_360");
  const int threads = detail::thread_count(opt.threads);
  CTFORGE_EXPECTS(p.views >= 2, fmt::format("find_center_360: needs at least 2 views over 360 "
                                            "deg (got {})",
                                            p.views));
  CTFORGE_EXPECTS(opt.min_overlap >= 3 && opt.min_overlap <= p.cols,
                  fmt::format("min_overlap: must be 3 .. {} pixels, the detector's width (got {})",
                              p.cols, opt.min_overlap));
  const std::vector<std::int64_t> det_rows = rows_to_compare(p.rows, opt.row);
  detail::require_finite(p, "find_center_360", threads);
  // Coarse: binned columns, every integer 2c.
  const std::int64_t bin = std::max<std::int64_t>(1, (p.cols + 511) / 512);
  const halves coarse = gather(p, det_rows, 256, bin);
  const auto [c_lo, c_hi] = k_range(coarse, opt.min_overlap);
  center_360_estimate e;
  e.metric = metrics(coarse, c_lo, c_hi, threads);
  for (std::int64_t k = c_lo; k <= c_hi; ++k)
    e.candidates.push_back(center_of(coarse, static_cast<double>(k)));
  const auto best = std::min_element(e.metric.begin(), e.metric.end()) - e.metric.begin();
  const double c0 = e.candidates[static_cast<std::size_t>(best)];
  // Fine: full resolution within two binned pixels of the coarse minimum.
  const halves fine = gather(p, det_rows, 1024, 1);
  const auto [f_lo, f_hi] = k_range(fine, opt.min_overlap);
  const auto k0 = static_cast<std::int64_t>(std::llround(2 * c0));
  const std::int64_t lo = std::max(f_lo, k0 - 4 * bin), hi = std::min(f_hi, k0 + 4 * bin);
  const std::vector<double> m = metrics(fine, lo, hi, threads);
  const auto j = std::min_element(m.begin(), m.end()) - m.begin();
  double k = static_cast<double>(lo + j);
  if (j > 0 && j + 1 < static_cast<std::ptrdiff_t>(m.size())) {
    const double a = m[static_cast<std::size_t>(j - 1)], b = m[static_cast<std::size_t>(j)],
                 c = m[static_cast<std::size_t>(j + 1)];
    const double den = a - 2 * b + c;
    if (den > 0) k += std::clamp(0.5 * (a - c) / den, -0.5, 0.5);
  }
  e.center = 0.5 * k;
  e.side = e.center < 0.5 * static_cast<double>(p.cols) ? stitch_side::left : stitch_side::right;
  const double near =
      e.side == stitch_side::left ? e.center : static_cast<double>(p.cols - 1) - e.center;
  e.overlap = 2 * near + 1;
  e.confidence = confidence_of(e.candidates, e.metric, c0);
  return e;
}

}  // namespace ctforge
