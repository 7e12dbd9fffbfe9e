// PNG previews of volumes: three central orthogonal slices side by side.
#include <fmt/format.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ctforge/error.hpp"
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

}  // namespace ctforge::io
