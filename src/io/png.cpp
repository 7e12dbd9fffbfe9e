// PNG previews of volumes (three central orthogonal slices side by side) and the labelled
// montage of candidate rotation centres.
#include <fmt/format.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"

namespace ctforge::io {
namespace {

constexpr std::int64_t k_gap = 3;  ///< black pixels between panels

/// Value at quantile q in [0, 1] of the finite values of `v` (at most ~4M samples, taken with a
/// regular stride, so large volumes stay cheap). Returns 0 for an all-non-finite volume.
float quantile(std::vector<float>& sample, double q) {
  if (sample.empty()) return 0.0f;
  const auto k = static_cast<std::size_t>(std::llround(q * static_cast<double>(sample.size() - 1)));
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(k), sample.end());
  return sample[k];
}

std::pair<float, float> auto_window(const volume_view& v) {
  const std::size_t n = v.data.size();
  const std::size_t stride = std::max<std::size_t>(1, n / (std::size_t{1} << 22));
  std::vector<float> sample;
  sample.reserve(n / stride + 1);
  for (std::size_t i = 0; i < n; i += stride)
    if (std::isfinite(v.data[i])) sample.push_back(v.data[i]);
  const float lo = quantile(sample, 0.005);
  const float hi = quantile(sample, 0.995);
  return {lo, hi};
}

/// An 8-bit grey PNG of width x height pixels (row-major), written atomically.
void write_grey_png(const std::string& path, std::int64_t width, std::int64_t height,
                    const std::vector<std::uint8_t>& img) {
  write_atomically(path, [&](const std::string& tmp) {
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    image.width = static_cast<png_uint_32>(width);
    image.height = static_cast<png_uint_32>(height);
    image.format = PNG_FORMAT_GRAY;
    const int ok = png_image_write_to_file(&image, tmp.c_str(), 0, img.data(),
                                           static_cast<png_int_32>(width), nullptr);
    const std::string msg = image.message;
    png_image_free(&image);
    CTFORGE_CHECK(ok != 0, fmt::format("{}: cannot write PNG: {}", path, msg));
  });
}

}  // namespace

// Layout, left to right, panels top-aligned on a black background with k_gap pixels between them:
//   axial    z = nz/2: nx wide, ny high; x to the right, +y up (image row 0 = largest y),
//   coronal  y = ny/2: nx wide, nz high; x to the right, +z up,
//   sagittal x = nx/2: ny wide, nz high; y to the right, +z up.
// A single-slice volume (nz == 1, e.g. a fan-beam reconstruction) gets the axial panel only: its
// coronal and sagittal slices would be one pixel high.
// "+y up" shows the phantom as in the usual textbook pictures (the Shepp-Logan's small ellipses
// at the bottom). Values are mapped linearly from [lo, hi] to 0..255 and clipped; NaN maps to 0.
void write_preview_png(const std::string& path, const volume_view& v, float lo, float hi) {
  v.geom.validate();
  CTFORGE_EXPECTS(v.data.size() == static_cast<std::size_t>(v.geom.voxel_count()),
                  fmt::format("{}: volume holds {} values for {} voxels", path, v.data.size(),
                              v.geom.voxel_count()));
  CTFORGE_EXPECTS(
      std::isfinite(lo) && std::isfinite(hi) && lo <= hi,
      fmt::format("{}: preview window [{}, {}] must be finite with lo <= hi", path, lo, hi));
  if (lo == hi) std::tie(lo, hi) = auto_window(v);
  if (!(hi > lo)) {  // constant volume: show mid grey
    lo -= 0.5f;
    hi += 0.5f;
  }
  const std::int64_t nx = v.geom.nx, ny = v.geom.ny, nz = v.geom.nz;
  const bool axial_only = nz == 1;
  const std::int64_t width = axial_only ? nx : nx + k_gap + nx + k_gap + ny;
  const std::int64_t height = std::max(ny, nz);
  CTFORGE_EXPECTS(width <= (1 << 24) && height <= (1 << 24),
                  fmt::format("{}: preview of {} x {} pixels is too large", path, width, height));
  std::vector<std::uint8_t> img(static_cast<std::size_t>(width * height), 0);
  const double scale = 255.0 / (static_cast<double>(hi) - static_cast<double>(lo));
  auto grey = [&](float x) -> std::uint8_t {
    if (!std::isfinite(x)) return 0;
    const double g = (static_cast<double>(x) - lo) * scale;
    return static_cast<std::uint8_t>(std::clamp(std::lround(g), 0L, 255L));
  };
  auto put = [&](std::int64_t col, std::int64_t row, float x) {
    img[static_cast<std::size_t>(row * width + col)] = grey(x);
  };
  const std::int64_t kc = nz / 2, jc = ny / 2, ic = nx / 2;
  const std::int64_t x0_axial = 0, x0_coronal = nx + k_gap, x0_sagittal = 2 * (nx + k_gap);
  for (std::int64_t r = 0; r < ny; ++r)
    for (std::int64_t i = 0; i < nx; ++i) put(x0_axial + i, r, v.at(kc, ny - 1 - r, i));
  if (!axial_only) {
    for (std::int64_t r = 0; r < nz; ++r)
      for (std::int64_t i = 0; i < nx; ++i) put(x0_coronal + i, r, v.at(nz - 1 - r, jc, i));
    for (std::int64_t r = 0; r < nz; ++r)
      for (std::int64_t j = 0; j < ny; ++j) put(x0_sagittal + j, r, v.at(nz - 1 - r, j, ic));
  }

  write_grey_png(path, width, height, img);
}

namespace {

/// 5 x 7 glyphs of the characters a centre label needs, one byte per row (bit 4 = left).
const std::uint8_t* glyph(char c) {
  static const std::uint8_t digits[10][7] = {
      {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
      {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
      {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
      {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
      {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}};
  static const std::uint8_t dot[7] = {0, 0, 0, 0, 0, 0x0C, 0x0C};
  static const std::uint8_t minus[7] = {0, 0, 0, 0x1F, 0, 0, 0};
  if (c >= '0' && c <= '9') return digits[c - '0'];
  if (c == '.') return dot;
  if (c == '-') return minus;
  return nullptr;
}

/// Draws `text` in white with its top left corner at (x0, y0), clipped to [x0, x_end).
void draw_text(std::vector<std::uint8_t>& img, std::int64_t width, std::int64_t x0, std::int64_t y0,
               std::int64_t x_end, const std::string& text) {
  std::int64_t x = x0;
  for (const char c : text) {
    const std::uint8_t* g = glyph(c);
    for (std::int64_t r = 0; g && r < 7; ++r)
      for (std::int64_t b = 0; b < 5; ++b)
        if ((g[r] >> (4 - b)) & 1 && x + b < x_end)
          img[static_cast<std::size_t>((y0 + r) * width + x + b)] = 255;
    x += 6;
  }
}

}  // namespace

std::pair<std::int64_t, std::int64_t> montage_grid(std::int64_t count) {
  auto across = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(count))));
  across = std::max<std::int64_t>(1, across);
  return {across, (count + across - 1) / across};
}

void write_center_montage(const std::string& path, const volume_view& slices,
                          std::span<const double> columns) {
  slices.geom.validate();
  CTFORGE_EXPECTS(static_cast<std::int64_t>(columns.size()) == slices.geom.nz,
                  fmt::format("{}: {} labels for {} slices", path, columns.size(), slices.geom.nz));
  const std::int64_t nx = slices.geom.nx, ny = slices.geom.ny, count = slices.geom.nz;
  const auto [across, down] = montage_grid(count);
  const std::int64_t g = montage_gap, lab = montage_label_height;
  const std::int64_t width = g + across * (nx + g), height = g + down * (lab + ny + g);
  CTFORGE_EXPECTS(width <= (1 << 16) && height <= (1 << 16),
                  fmt::format("{}: montage of {} x {} pixels is too large", path, width, height));
  auto [lo, hi] = auto_window(slices);
  if (!(hi > lo)) {
    lo -= 0.5f;
    hi += 0.5f;
  }
  const double scale = 255.0 / (static_cast<double>(hi) - static_cast<double>(lo));
  std::vector<std::uint8_t> img(static_cast<std::size_t>(width * height), 0);
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t x0 = g + (k % across) * (nx + g), y0 = g + (k / across) * (lab + ny + g);
    draw_text(img, width, x0 + 1, y0 + 2, x0 + nx,
              fmt::format("{:.2f}", columns[static_cast<std::size_t>(k)]));
    for (std::int64_t r = 0; r < ny; ++r)
      for (std::int64_t i = 0; i < nx; ++i) {
        const float v = slices.at(k, ny - 1 - r, i);  // +y up
        const double t = std::isfinite(v) ? (static_cast<double>(v) - lo) * scale : 0.0;
        img[static_cast<std::size_t>((y0 + lab + r) * width + x0 + i)] =
            static_cast<std::uint8_t>(std::clamp(std::lround(t), 0L, 255L));
      }
  }
  write_grey_png(path, width, height, img);
}

}  // namespace ctforge::io
