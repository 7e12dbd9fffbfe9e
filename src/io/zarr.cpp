// Zarr volumes and projections in local directories (formats.hpp): ctforge's own layout, as
// python/ctforge/zarr_volumes.py writes it, and arrays other tools wrote (io/zarr_store.hpp says
// which). Object storage URLs are the Python package's (ctforge.read_volume, the distributed
// runs); the command line names it in its refusal.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/finite_scan.hpp"
#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/object_store.hpp"
#include "io/zarr_store.hpp"

#ifndef CTFORGE_VERSION
#define CTFORGE_VERSION "unknown"
#endif

namespace ctforge::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* k_complete = "ctforge_complete";
constexpr const char* k_geometry = "ctforge_geometry";

void refuse_object_url(const std::string& path) {
  if (is_object_url(path))
    throw usage_error(fmt::format(
        "{}: the library reads and writes Zarr in local directories; the command line copies "
        "s3:// arrays (ctforge recon / convert / info with s3:// URLs), and the Python package "
        "reads and writes them in place (ctforge.read_volume / ctforge.write_volume, python -m "
        "ctforge.distributed recon -o s3://...)",
        path));
}

zarr::array open_checked(const std::string& path) {
  refuse_object_url(path);
  zarr::array a = zarr::open_array(path);
  const json done = a.attributes.value(k_complete, json());
  CTFORGE_CHECK(done.is_null() || done == true,
                fmt::format("{}: incomplete: written by a run that did not finish ({} is not "
                            "true)",
                            path, k_complete));
  a.require_chunks = done == true;
  return a;
}

/// Attribute `name` as three finite numbers (x, y, z), or `fallback` when absent.
std::array<double, 3> triplet(const zarr::array& a, const char* name,
                              std::array<double, 3> fallback) {
  const json v = a.attributes.value(name, json());
  if (v.is_null()) return fallback;
  std::array<double, 3> t{};
  bool ok = v.is_array() && v.size() == 3;
  for (std::size_t k = 0; ok && k < 3; ++k) {
    ok = v[k].is_number() && std::isfinite(v[k].get<double>());
    if (ok) t[k] = v[k].get<double>();
  }
  CTFORGE_CHECK(ok, fmt::format("{}: attribute {} must be three finite numbers (x, y, z), got {}",
                                a.path, name, v.dump()));
  return t;
}

std::string without_trailing_slash(std::string p) {
  while (p.size() > 1 && p.ends_with('/')) p.pop_back();
  return p;
}

/// Where a new directory output is built; refuses to replace what is not a Zarr node.
void check_replaceable(const std::string& path) {
  refuse_object_url(path);
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(fs::symlink_status(p, ec))) return;
  CTFORGE_EXPECTS(fs::is_directory(p, ec),
                  fmt::format("{}: exists and is not a Zarr array; not replaced", path));
  if (fs::is_empty(p, ec) || fs::exists(p / ".zarray", ec)) return;
  bool array = false, group = fs::exists(p / ".zgroup", ec);
  if (fs::exists(p / "zarr.json", ec)) {
    std::ifstream in(p / "zarr.json");
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    const std::string node = j.is_object() && j.contains("node_type") && j["node_type"].is_string()
                                 ? j["node_type"].get<std::string>()
                                 : "";
    array = node == "array";
    group = group || node == "group";
  }
  CTFORGE_EXPECTS(!group, fmt::format("{}: a Zarr group (the arrays in it would be lost); not "
                                      "replaced: name an array inside it ({}/NAME)",
                                      path, path));
  CTFORGE_EXPECTS(array,
                  fmt::format("{}: exists and is not a Zarr array; not replaced", path));
}

/// Planes per shard: about 64 MiB of float32 planes (what zarr_volumes.py chooses).
std::int64_t planes_per_shard(std::int64_t n0, std::int64_t n1, std::int64_t n2) {
  return std::clamp<std::int64_t>((std::int64_t{64} << 20) / std::max<std::int64_t>(1, 4 * n1 * n2),
                                  1, std::max<std::int64_t>(n0, 1));
}

void write_staged(const std::string& path, std::array<std::int64_t, 3> shape, const float* data,
                  bool compress, const json& attributes,
                  const std::vector<std::string>& names) {
  check_replaceable(path);
  temporary_output out(without_trailing_slash(path), /*directory=*/true);
  zarr::write_planes_array(out.path(), shape, data, planes_per_shard(shape[0], shape[1], shape[2]),
                           compress, attributes, names);
  out.commit_directory();
}

/// "projections" for an array with a geometry or projection axes, else "volume".
std::string kind_name(const zarr::array& a) {
  const json axes = a.attributes.value("axes", json());
  const bool views = axes.is_string() && axes.get<std::string>().starts_with("view");
  // (A 2-d array is a sinogram: [view][col] of one detector row.)
  return a.attributes.contains(k_geometry) || views || a.rank == 2 ? "projections" : "volume";
}

/// What the axes of `a` are, for ctforge info.
std::string axes_name(const zarr::array& a) {
  if (a.rank == 1) return "1-d: neither a volume nor projections";
  if (a.rank == 2) return "views, cols: a sinogram";
  return kind_name(a) == "volume" ? "z, y, x" : "views, rows, cols";
}

}  // namespace

bool is_zarr_path(const std::string& path) { return zarr::looks_like_zarr(path); }

volume read_zarr_volume(const std::string& path) {
  const zarr::array a = open_checked(path);
  CTFORGE_CHECK(a.rank == 3, fmt::format("{}: a volume has 3 dimensions [z][y][x], this array "
                                         "has {}",
                                         path, a.rank));
  CTFORGE_CHECK(kind_name(a) == "volume",
                fmt::format("{}: holds projections (attribute {} or axes), not a volume", path,
                            k_geometry));
  volume_geometry g;
  g.nz = a.shape[0];
  g.ny = a.shape[1];
  g.nx = a.shape[2];
  g.spacing_mm = triplet(a, "spacing_mm", {1, 1, 1});
  for (int k = 0; k < 3; ++k)
    CTFORGE_CHECK(g.spacing_mm[k] > 0, fmt::format("{}: attribute spacing_mm must be positive",
                                                   path));
  const std::array<std::int64_t, 3> n{g.nx, g.ny, g.nz};
  std::array<double, 3> centred{};
  for (int k = 0; k < 3; ++k) centred[k] = -0.5 * static_cast<double>(n[k] - 1) * g.spacing_mm[k];
  g.origin_mm = triplet(a, "origin_mm", centred);
  try {
    g.validate();
  } catch (const usage_error& e) {
    CTFORGE_FAIL(fmt::format("{}: {}", path, e.what()));
  }
  volume v;  // (read_box allocates the data, after its memory check)
  v.geom = g;
  const std::array<std::int64_t, 3> first{0, 0, 0}, count{g.nz, g.ny, g.nx};
  v.data = zarr::read_box(a, first, count);
  ctforge::detail::refuse_non_finite_input(v.data.data(), g.nz, g.ny, g.nx, path, "the array",
                                           "z, y, x");
  return v;
}

namespace {

json volume_attributes(const volume_geometry& g) {
  return {{"spacing_mm", g.spacing_mm},
          {"origin_mm", g.origin_mm},
          {"axes", "z:y:x"},
          {"creator", "ctforge " CTFORGE_VERSION},
          {k_complete, true}};
}

}  // namespace

void write_zarr_volume(const std::string& path, const volume_view& v, bool compress) {
  v.geom.validate();
  CTFORGE_EXPECTS(static_cast<std::int64_t>(v.data.size()) == v.geom.voxel_count(),
                  fmt::format("{}: volume holds {} values for {} voxels", path, v.data.size(),
                              v.geom.voxel_count()));
  write_staged(path, {v.geom.nz, v.geom.ny, v.geom.nx}, v.data.data(), compress,
               volume_attributes(v.geom), {"z", "y", "x"});
}

// ---- zarr_volume_writer ------------------------------------------------------------------------

struct zarr_volume_writer::impl {
  std::string path;
  volume_geometry g;
  std::array<std::int64_t, 3> shape{};
  std::int64_t p = 1;
  bool compress = true;
  std::unique_ptr<temporary_output> out;
  std::vector<char> written;  // per shard
  /// A shard waiting for planes: its buffer and which of its planes arrived (each counted once).
  struct waiting {
    std::vector<float> data;
    std::vector<char> have;
    std::int64_t count = 0;
  };
  std::map<std::int64_t, waiting> pending;

  std::int64_t shard_planes(std::int64_t s) const { return std::min(p, shape[0] - s * p); }
  std::size_t plane() const { return static_cast<std::size_t>(shape[1] * shape[2]); }
  void write(std::int64_t s, const float* planes) {
    zarr::write_shard(out->path(), shape, p, s, planes, compress);
    written[static_cast<std::size_t>(s)] = 1;
  }
  /// Planes [k0, k0 + n) all inside shard s. A shard already written is written again whole
  /// only from a complete set of planes (a repeated unit); planes repeated while a shard waits
  /// replace the earlier copy.
  void add(std::int64_t s, std::int64_t k0, std::int64_t n, const float* planes) {
    const std::int64_t first = s * p, m = shard_planes(s);
    if (k0 == first && n == m) {
      pending.erase(s);
      return write(s, planes);
    }
    if (written[static_cast<std::size_t>(s)]) return;  // part of a shard already complete
    waiting& w = pending[s];
    if (w.data.empty()) {
      w.data.assign(static_cast<std::size_t>(m) * plane(), 0.0f);
      w.have.assign(static_cast<std::size_t>(m), 0);
    }
    std::copy_n(planes, static_cast<std::size_t>(n) * plane(),
                w.data.begin() + static_cast<std::ptrdiff_t>((k0 - first) * shape[1] * shape[2]));
    for (std::int64_t k = k0 - first; k < k0 - first + n; ++k)
      w.count += w.have[static_cast<std::size_t>(k)] ? 0 : 1, w.have[static_cast<std::size_t>(k)] = 1;
    if (w.count < m) return;
    write(s, w.data.data());
    pending.erase(s);
  }
};

zarr_volume_writer::zarr_volume_writer(const std::string& path, const volume_geometry& g,
                                       std::int64_t planes_per_shard, bool compress)
    : impl_(std::make_unique<impl>()) {
  g.validate();
  check_replaceable(path);
  impl_->path = without_trailing_slash(path);
  impl_->g = g;
  impl_->shape = {g.nz, g.ny, g.nx};
  impl_->p = std::clamp<std::int64_t>(planes_per_shard, 1, g.nz);
  impl_->compress = compress;
  impl_->written.assign(static_cast<std::size_t>((g.nz + impl_->p - 1) / impl_->p), 0);
  impl_->out = std::make_unique<temporary_output>(impl_->path, /*directory=*/true);
}

zarr_volume_writer::~zarr_volume_writer() = default;

void zarr_volume_writer::write_planes(std::int64_t k0, std::span<const float> planes) {
  impl& w = *impl_;
  const auto plane = static_cast<std::int64_t>(w.plane());
  const auto n = static_cast<std::int64_t>(planes.size()) / plane;
  CTFORGE_EXPECTS(n >= 1 && n * plane == static_cast<std::int64_t>(planes.size()) && k0 >= 0 &&
                      k0 <= w.shape[0] - n,
                  fmt::format("{}: planes [{}, {}) of {} values do not fit the volume's {} planes "
                              "of {} x {}",
                              w.path, k0, k0 + n, planes.size(), w.shape[0], w.shape[1],
                              w.shape[2]));
  ctforge::detail::refuse_non_finite(planes.data(), n, w.shape[1], w.shape[2], w.path, "z, y, x");
  for (std::int64_t k = k0; k < k0 + n;) {
    const std::int64_t s = k / w.p, end = std::min(k0 + n, (s + 1) * w.p);
    w.add(s, k, end - k, planes.data() + (k - k0) * plane);
    k = end;
  }
}

void zarr_volume_writer::commit() {
  impl& w = *impl_;
  const auto missing = std::find(w.written.begin(), w.written.end(), 0);
  CTFORGE_CHECK(missing == w.written.end(),
                fmt::format("{}: planes from {} were never written; nothing was published", w.path,
                            (missing - w.written.begin()) * w.p));
  zarr::write_metadata(w.out->path(), w.shape, w.p, w.compress, volume_attributes(w.g),
                       {"z", "y", "x"});
  w.out->commit_directory();
}

std::unique_ptr<plane_writer> open_plane_writer(const std::string& path, const volume_geometry& g,
                                                std::int64_t planes_per_unit) {
  switch (volume_format_of(path)) {
    case volume_format::hdf5:
      return std::make_unique<volume_file_writer>(path, g);
    case volume_format::zarr:
      return std::make_unique<zarr_volume_writer>(path, g, planes_per_unit);
    default:
      throw usage_error(fmt::format("{}: volumes are written plane by plane into .h5 and .zarr "
                                    "outputs only",
                                    path));
  }
}

raw_scan read_zarr_frames(const std::string& path, const detector_selection& sel,
                          std::optional<geometry>& stored) {
  const zarr::array a = open_checked(path);
  CTFORGE_CHECK(a.rank == 2 || a.rank == 3,
                fmt::format("{}: array of {} dimension(s): expected 2 (a sinogram, views x cols) "
                            "or 3 (projections, views x rows x cols)",
                            path, a.rank));
  raw_scan s;
  s.full_views = a.rank == 3 ? a.shape[0] : a.shape[1];
  s.full_rows = a.rank == 3 ? a.shape[1] : 1;
  s.full_cols = a.shape[2];
  s.integer_data = a.dtype.kind != 'f';
  const auto [v0, nv] = resolve_range(sel.views, s.full_views, "views", path);
  const auto [r0, nr] = resolve_range(sel.rows, s.full_rows, "rows", path);
  const auto [c0, nc] = resolve_range(sel.cols, s.full_cols, "cols", path);
  // A 2D array [views][cols] is stored padded as [1][views][cols].
  const std::array<std::int64_t, 3> first =
      a.rank == 3 ? std::array<std::int64_t, 3>{v0, r0, c0} : std::array<std::int64_t, 3>{0, v0, c0};
  const std::array<std::int64_t, 3> count =
      a.rank == 3 ? std::array<std::int64_t, 3>{nv, nr, nc} : std::array<std::int64_t, 3>{1, nv, nc};
  s.frames.data = zarr::read_box(a, first, count);  // (allocated after its memory check)
  s.frames.views = nv;
  s.frames.rows = nr;
  s.frames.cols = nc;
  if (a.attributes.contains(k_geometry)) {
    try {
      stored = geometry_from_json(a.attributes[k_geometry].dump(),
                                  path + " (attribute " + k_geometry + ")");
    } catch (const usage_error& e) {
      CTFORGE_FAIL(e.what());  // the file is at fault: a runtime error
    }
  }
  return s;
}

void write_zarr_projections(const std::string& path, const projection_view& p, const geometry& g,
                            bool compress) {
  CTFORGE_EXPECTS(g.view_count() == p.views && g.rows == p.rows && g.cols == p.cols,
                  fmt::format("{}: geometry of {} views x {} x {} for projections {} x {} x {}",
                              path, g.view_count(), g.rows, g.cols, p.views, p.rows, p.cols));
  ctforge::detail::refuse_non_finite(p.data.data(), p.views, p.rows, p.cols, path,
                                     "view, row, col");
  const json attributes = {{"axes", "view:row:col"},
                           {"values", "line integrals"},
                           {k_geometry, json::parse(geometry_to_json(g))},
                           {"creator", "ctforge " CTFORGE_VERSION},
                           {k_complete, true}};
  write_staged(path, {p.views, p.rows, p.cols}, p.data.data(), compress, attributes,
               {"view", "row", "col"});
}

std::vector<float> read_zarr_array(const std::string& path, std::vector<std::int64_t>& shape) {
  const zarr::array a = open_checked(path);
  shape.assign(a.shape.end() - a.rank, a.shape.end());
  const std::array<std::int64_t, 3> first{0, 0, 0};
  const std::array<std::int64_t, 3> count{a.shape[0], a.shape[1], a.shape[2]};
  return zarr::read_box(a, first, count);
}

std::string zarr_content_kind(const std::string& path) { return kind_name(open_checked(path)); }

std::string describe_zarr(const std::string& path) {
  const zarr::array a = open_checked(path);
  std::string shape, chunk;
  for (int k = 3 - a.rank; k < 3; ++k) {
    shape += (shape.empty() ? "" : " x ") + std::to_string(a.shape[k]);
    chunk += (chunk.empty() ? "" : " x ") + std::to_string(a.chunk[k]);
  }
  std::string codecs = a.codecs.shard ? "sharding_indexed (inner chunks " : "";
  if (a.codecs.shard) {
    for (int k = 3 - a.rank; k < 3; ++k)
      codecs += std::to_string(a.codecs.shard->inner_chunk[k]) + (k < 2 ? " x " : ")");
    for (const auto& c : a.codecs.shard->inner.post) codecs += " + " + c.name;
  }
  for (const auto& c : a.codecs.post) codecs += (codecs.empty() ? "" : " + ") + c.name;
  std::string d = fmt::format("{}: Zarr v{} array{}\n  shape {} ({}), {}\n  chunks {}{}{}\n",
                              path, a.format, a.rank == 1 ? "" : ", ctforge " + kind_name(a),
                              shape, axes_name(a), a.dtype.name, chunk,
                              codecs.empty() ? "" : ", ", codecs.empty() ? "uncompressed" : codecs);
  for (const char* name : {"spacing_mm", "origin_mm", "axes", "creator"})
    if (a.attributes.contains(name)) d += fmt::format("  {} {}\n", name, a.attributes[name].dump());
  const json geo = a.attributes.value(k_geometry, json());
  if (geo.is_object() && geo.contains("type") && geo["type"].is_string())
    d += fmt::format("  geometry {}\n", geo["type"].get<std::string>());
  return d;
}

}  // namespace ctforge::io
