// Voxel volumes and projection stacks held in host memory.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/vec3.hpp"

namespace ctforge {

/// Sampling grid of a volume. Storage order [z][y][x] (x fastest).
/// spacing_mm and origin_mm are in x, y, z order; origin = centre of voxel (0, 0, 0) in mm.
struct volume_geometry {
  std::int64_t nx = 0, ny = 0, nz = 0;
  std::array<double, 3> spacing_mm{1, 1, 1};
  std::array<double, 3> origin_mm{0, 0, 0};

  std::int64_t voxel_count() const { return nx * ny * nz; }
  /// Centre of voxel (i, j, k) = (x, y, z index) in mm.
  vec3 voxel_center(double i, double j, double k) const {
    return {origin_mm[0] + i * spacing_mm[0], origin_mm[1] + j * spacing_mm[1],
            origin_mm[2] + k * spacing_mm[2]};
  }
  /// Grid of nx*ny*nz voxels of the given spacing centred on the isocentre (0, 0, 0).
  static volume_geometry centered(std::int64_t nx, std::int64_t ny, std::int64_t nz,
                                  std::array<double, 3> spacing_mm);
  /// Throws usage_error when sizes are < 1 or spacing is not positive and finite.
  void validate() const;
};

struct volume {
  volume_geometry geom;
  std::vector<float> data;  ///< [z][y][x], size geom.voxel_count()

  volume() = default;
  explicit volume(const volume_geometry& g)
      : geom(g), data(static_cast<std::size_t>(g.voxel_count()), 0.0f) {}
  float& at(std::int64_t k, std::int64_t j, std::int64_t i) {
    return data[static_cast<std::size_t>((k * geom.ny + j) * geom.nx + i)];
  }
  float at(std::int64_t k, std::int64_t j, std::int64_t i) const {
    return data[static_cast<std::size_t>((k * geom.ny + j) * geom.nx + i)];
  }
};

/// Projections (line integrals unless stated otherwise), storage [view][row][col].
struct projection_stack {
  std::int64_t views = 0, rows = 0, cols = 0;
  std::vector<float> data;

  projection_stack() = default;
  projection_stack(std::int64_t n_views, std::int64_t n_rows, std::int64_t n_cols)
      : views(n_views),
        rows(n_rows),
        cols(n_cols),
        data(static_cast<std::size_t>(n_views * n_rows * n_cols), 0.0f) {}
  std::int64_t size() const { return views * rows * cols; }
  float* view(std::int64_t i) { return data.data() + i * rows * cols; }
  const float* view(std::int64_t i) const { return data.data() + i * rows * cols; }
  float& at(std::int64_t v, std::int64_t r, std::int64_t c) {
    return data[static_cast<std::size_t>((v * rows + r) * cols + c)];
  }
  float at(std::int64_t v, std::int64_t r, std::int64_t c) const {
    return data[static_cast<std::size_t>((v * rows + r) * cols + c)];
  }
};

/// Non-owning read-only view of a volume held by the caller (a ctforge::volume, a numpy array,
/// another library's buffer): the grid plus `voxel_count()` floats in [z][y][x] order. Every
/// call taking a volume_view reads the caller's memory in place; the memory must stay valid and
/// unchanged for the duration of the call. A ctforge::volume converts implicitly.
struct volume_view {
  volume_geometry geom;
  std::span<const float> data;

  volume_view() = default;
  /// Throws usage_error when data holds other than g.voxel_count() values.
  volume_view(const volume_geometry& g, std::span<const float> d) : geom(g), data(d) {
    CTFORGE_EXPECTS(static_cast<std::int64_t>(d.size()) == g.voxel_count(),
                    "volume: the data holds " + std::to_string(d.size()) +
                        " values but the grid has " + std::to_string(g.voxel_count()) +
                        " voxels");
  }
  volume_view(const volume& v) : geom(v.geom), data(v.data) {}  // NOLINT: implicit on purpose
  float at(std::int64_t k, std::int64_t j, std::int64_t i) const {
    return data[static_cast<std::size_t>((k * geom.ny + j) * geom.nx + i)];
  }
};

/// Where the data of a projection_view lives.
enum class memory_space {
  host,        ///< host memory (the default)
  cuda_device  ///< CUDA device memory (or managed memory): the host never reads it
};

/// Non-owning read-only view of projections held by the caller, [view][row][col] order, with
/// the same accessors as projection_stack. The memory must stay valid and unchanged for the
/// duration of a call. A projection_stack converts implicitly. With space = cuda_device, `data`
/// points into GPU memory (e.g. a CuPy / PyTorch CUDA tensor): only reconstruct's FDK/FBP on the
/// CUDA backend takes it (uploading nothing), and the host-side accessors must not be used.
struct projection_view {
  std::int64_t views = 0, rows = 0, cols = 0;
  std::span<const float> data;
  memory_space space = memory_space::host;

  projection_view() = default;
  /// Throws usage_error when data holds other than n_views * n_rows * n_cols values.
  projection_view(std::int64_t n_views, std::int64_t n_rows, std::int64_t n_cols,
                  std::span<const float> d)
      : views(n_views), rows(n_rows), cols(n_cols), data(d) {
    CTFORGE_EXPECTS(static_cast<std::int64_t>(d.size()) == size(),
                    "projections: the data holds " + std::to_string(d.size()) +
                        " values but the shape has " + std::to_string(size()));
  }
  projection_view(const projection_stack& p)  // NOLINT: implicit on purpose
      : views(p.views), rows(p.rows), cols(p.cols), data(p.data) {}
  std::int64_t size() const { return views * rows * cols; }
  const float* view(std::int64_t i) const { return data.data() + i * rows * cols; }
  float at(std::int64_t v, std::int64_t r, std::int64_t c) const {
    return data[static_cast<std::size_t>((v * rows + r) * cols + c)];
  }
};

/// usage_error unless `p` lies in host memory: every host-side use of projections checks this.
inline void require_host(const projection_view& p, const char* what) {
  CTFORGE_EXPECTS(p.space == memory_space::host,
                  std::string(what) + ": the projections are in GPU memory; only reconstruct's "
                                      "FDK / FBP on the CUDA backend takes them there");
}

/// Owning copies of views.
inline volume to_volume(const volume_view& v) {
  volume out;
  out.geom = v.geom;
  out.data.assign(v.data.begin(), v.data.end());
  return out;
}
inline projection_stack to_stack(const projection_view& p) {
  require_host(p, "copying projections");
  projection_stack out;
  out.views = p.views;
  out.rows = p.rows;
  out.cols = p.cols;
  out.data.assign(p.data.begin(), p.data.end());
  return out;
}

}  // namespace ctforge
