// Native HDF5 projection and volume files (schema in include/ctforge/io.hpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/io.hpp"
#include "io/h5.hpp"

#ifndef CTFORGE_VERSION
#define CTFORGE_VERSION "unknown"
#endif

namespace ctforge::io {
namespace {

namespace h5 = ctforge::detail::h5;

constexpr const char* k_projections = "/projections";
constexpr const char* k_geometry = "/geometry";
constexpr const char* k_volume = "/volume";
constexpr const char* k_spacing = "spacing_mm";
constexpr const char* k_origin = "origin_mm";
/// gzip level for every dataset: 1 is several times faster than 6 for float data and compresses
/// almost as well once the bytes are shuffled.
constexpr int k_deflate = 1;
/// Detector rows per chunk of /projections (whole views of fewer rows are one chunk).
constexpr hsize_t k_projection_chunk_rows = 16;

/// Throws naming the file, dataset and the first non-finite element ([i][j][k] index).
void check_finite(const std::vector<float>& data, const h5::dims_t& shape, const std::string& path,
                  const char* name) {
  const std::int64_t first =
      detail::first_non_finite(data.data(), static_cast<std::int64_t>(data.size()));
  if (first < 0) return;
  const float bad = data[static_cast<std::size_t>(first)];
  std::uint64_t flat = static_cast<std::uint64_t>(first);
  std::vector<std::uint64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string where;
  for (auto i : idx) where += fmt::format("[{}]", i);
  CTFORGE_FAIL(fmt::format("{}: dataset {} holds a non-finite value ({}) at index {}", path, name,
                           bad, where));
}

/// Opens `name`, requiring a numeric dataset of rank 3 with no empty dimension.
h5::dataset open_rank3(const h5::file& f, const char* name, const char* axes) {
  h5::dataset ds = f.open_dataset(name);
  const h5::dims_t shape = ds.shape();
  CTFORGE_CHECK(shape.size() == 3,
                fmt::format("{}: dataset {} has rank {} {} (expected rank 3: {})", f.path(), name,
                            shape.size(), h5::shape_string(shape), axes));
  CTFORGE_CHECK(ds.is_numeric(), fmt::format("{}: dataset {} has type {} (expected numbers)",
                                             f.path(), name, ds.type_name()));
  CTFORGE_CHECK(shape[0] > 0 && shape[1] > 0 && shape[2] > 0,
                fmt::format("{}: dataset {} is empty {}", f.path(), name, h5::shape_string(shape)));
  return ds;
}

std::array<double, 3> read_triplet(const h5::dataset& ds, const char* attr) {
  const auto v = ds.read_double_attribute(attr);
  CTFORGE_CHECK(v.size() == 3, fmt::format("{}: attribute {} has {} values (expected 3: x, y, z)",
                                           ds.context(), attr, v.size()));
  for (double x : v)
    CTFORGE_CHECK(std::isfinite(x),
                  fmt::format("{}: attribute {} is not finite", ds.context(), attr));
  return {v[0], v[1], v[2]};
}

/// Z slices per volume chunk: "a few" slices, about 1 MiB per chunk, between 1 and 8.
hsize_t volume_chunk_slices(const volume_geometry& g) {
  const double slice_bytes = 4.0 * static_cast<double>(g.nx * g.ny);
  const auto n = static_cast<hsize_t>(std::ceil((1 << 20) / slice_bytes));
  return std::clamp<hsize_t>(n, 1, 8);
}

std::string human_bytes(std::uintmax_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

/// min / max / mean / non-finite count of a numeric dataset, read one slab of the first axis
/// at a time (bounded memory).
struct value_stats {
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  std::uint64_t finite = 0, non_finite = 0;
};
value_stats dataset_stats(const h5::dataset& ds) {
  value_stats s;
  const h5::dims_t shape = ds.shape();
  const std::uint64_t n = h5::element_count(shape);
  if (n == 0) return s;
  auto add = [&](const std::vector<double>& v) {
    for (double x : v) {
      if (!std::isfinite(x)) {
        ++s.non_finite;
        continue;
      }
      s.min = std::min(s.min, x);
      s.max = std::max(s.max, x);
      s.sum += x;
      ++s.finite;
    }
  };
  if (shape.empty()) {
    add(ds.read<double>());
    return s;
  }
  const std::uint64_t per_row = n / shape[0];
  const hsize_t rows_per_block =
      std::max<hsize_t>(1, (8u << 20) / std::max<std::uint64_t>(per_row, 1));
  std::vector<double> buf;
  for (hsize_t r = 0; r < shape[0]; r += rows_per_block) {
    h5::dims_t start(shape.size(), 0), count = shape;
    start[0] = r;
    count[0] = std::min<hsize_t>(rows_per_block, shape[0] - r);
    buf.resize(static_cast<std::size_t>(count[0] * per_row));
    ds.read_slab<double>(start, count, std::span<double>(buf));
    add(buf);
  }
  return s;
}

std::string stats_string(const value_stats& s) {
  if (s.finite == 0 && s.non_finite == 0) return "empty";
  std::string out = s.finite ? fmt::format("min {:.6g}, max {:.6g}, mean {:.6g}", s.min, s.max,
                                           s.sum / static_cast<double>(s.finite))
                             : std::string("no finite values");
  if (s.non_finite) out += fmt::format(", {} non-finite", s.non_finite);
  return out;
}

std::string geometry_summary(const geometry& g) {
  std::string s = fmt::format("{}, {} views, {}detector {} cols x {} rows", g.type_name(),
                              g.view_count(), g.curved() ? "cylindrical " : "", g.cols, g.rows);
  if (g.orbit) {
    const auto& o = *g.orbit;
    s += fmt::format(" of {:g} x {:g} mm", g.pixel_u_mm, g.pixel_v_mm);
    const auto [lo, hi] = std::minmax_element(o.angles_rad.begin(), o.angles_rad.end());
    s += fmt::format(", angles {:g} .. {:g} deg", rad_to_deg(*lo), rad_to_deg(*hi));
    if (g.beam == beam_kind::cone)
      s += fmt::format(", SID {:g} mm, SDD {:g} mm", o.source_to_isocenter_mm,
                       o.source_to_detector_mm);
  }
  if (g.helix) {
    const auto& h = *g.helix;
    const helical_coverage c = helical_coverage_of(g);
    s += fmt::format(
        " of {:g} x {:g} mm, SID {:g} mm, SDD {:g} mm, {:.4g} turns; feed {:g} mm "
        "per turn (pitch factor {:.3g}); source z {:g} .. {:g} mm; ",
        g.pixel_u_mm, g.pixel_v_mm, h.source_to_isocenter_mm, h.source_to_detector_mm,
        std::abs(h.angles_rad.back() - h.angles_rad.front()) / (2 * 3.14159265358979),
        h.pitch_mm_per_turn, c.pitch_factor, c.source_z_min_mm, c.source_z_max_mm);
    s += c.full_z_max_mm >= c.full_z_min_mm
             ? fmt::format(
                   "reconstructable z {:g} .. {:g} mm (seen on the axis for half a "
                   "turn or more)",
                   c.full_z_min_mm, c.full_z_max_mm)
             : std::string(
                   "no height is seen for half a turn (pitch too large or scan too "
                   "short)");
  }
  return s;
}

std::string attribute_line(const h5::location& loc, const std::string& name) {
  try {
    auto [type, dims] = loc.attribute_info(name);
    if (type.starts_with("string")) {
      std::string v = loc.read_string_attribute(name);
      if (v.size() > 100) v = v.substr(0, 97) + "...";
      std::replace(v.begin(), v.end(), '\n', ' ');
      return fmt::format("@{} = \"{}\"", name, v);
    }
    if (type.starts_with("int") || type.starts_with("uint") || type.starts_with("float")) {
      const auto v = loc.read_double_attribute(name);
      std::string vals;
      for (std::size_t i = 0; i < v.size() && i < 8; ++i)
        vals += fmt::format("{}{:g}", i ? ", " : "", v[i]);
      if (v.size() > 8) vals += ", ...";
      return fmt::format("@{} = [{}]", name, vals);
    }
    return fmt::format("@{}: {} {}", name, type, h5::shape_string(dims));
  } catch (const error&) {
    return fmt::format("@{}: (unreadable)", name);
  }
}

}  // namespace

projection_file read_projections(const std::string& path) {
  const h5::file f = h5::file::open(path);
  projection_file out;
  {
    const h5::dataset ds = open_rank3(f, k_projections, "[views][rows][cols]");
    const h5::dims_t shape = ds.shape();
    detail::require_memory_to_read(
        h5::element_count(shape), sizeof(float),
        fmt::format("{}: a {} dataset", ds.context(), h5::shape_string(shape)),
        "read a part with `ctforge convert --views / --rows / --cols`");
    out.projections =
        projection_stack(static_cast<std::int64_t>(shape[0]), static_cast<std::int64_t>(shape[1]),
                         static_cast<std::int64_t>(shape[2]));
    ds.read<float>(std::span<float>(out.projections.data));
    check_finite(out.projections.data, shape, path, k_projections);
  }
  if (f.has(k_geometry)) {
    const h5::dataset gd = f.open_dataset(k_geometry);
    out.geometry_json = gd.read_string();
    const std::string origin = path + ":" + k_geometry;
    try {
      out.geom = geometry_from_json(out.geometry_json, origin);
    } catch (const usage_error& e) {
      // An invalid geometry stored in a file is a defect of the file, not of the request.
      throw error(e.what());
    }
    const geometry& g = *out.geom;
    const projection_view& p = out.projections;
    CTFORGE_CHECK(g.view_count() == p.views && g.rows == p.rows && g.cols == p.cols,
                  fmt::format("{}: geometry has {} views of {} rows x {} cols but dataset {} is "
                              "[{}][{}][{}] (views, rows, cols)",
                              origin, g.view_count(), g.rows, g.cols, k_projections, p.views,
                              p.rows, p.cols));
  }
  return out;
}

void write_projections(const std::string& path, const projection_view& p, const geometry& g) {
  require_host(p, "write_projections");
  CTFORGE_EXPECTS(p.views >= 1 && p.rows >= 1 && p.cols >= 1 &&
                      p.data.size() == static_cast<std::size_t>(p.size()),
                  fmt::format("{}: projection stack [{}][{}][{}] holds {} values", path, p.views,
                              p.rows, p.cols, p.data.size()));
  CTFORGE_EXPECTS(g.view_count() == p.views && g.rows == p.rows && g.cols == p.cols,
                  fmt::format("{}: geometry has {} views of {} rows x {} cols but the projections "
                              "are [{}][{}][{}] (views, rows, cols)",
                              path, g.view_count(), g.rows, g.cols, p.views, p.rows, p.cols));
  detail::refuse_non_finite(p.data.data(), p.views, p.rows, p.cols, path, "view, row, col");
  const std::string geometry_json = geometry_to_json(g);
  write_atomically(path, [&](const std::string& tmp) {
    h5::file f = h5::file::create_in_memory(tmp);
    {
      h5::create_options opt;
      // One view, in bands of k_projection_chunk_rows rows: a slab-wise or distributed
      // reconstruction reads (and decompresses) only the bands of rows its slab needs.
      opt.chunk = {1, std::min<hsize_t>(static_cast<hsize_t>(p.rows), k_projection_chunk_rows),
                   static_cast<hsize_t>(p.cols)};
      opt.deflate = k_deflate;
      opt.shuffle = true;
      const h5::dims_t dims{static_cast<hsize_t>(p.views), static_cast<hsize_t>(p.rows),
                            static_cast<hsize_t>(p.cols)};
      h5::dataset ds =
          f.write_dataset<float>(k_projections, dims, std::span<const float>(p.data), opt);
      ds.write_string_attribute("units", "line integrals (dimensionless)");
      ds.write_string_attribute("axes", "views:rows:cols");
      ds.close();
      f.write_string_dataset(k_geometry, geometry_json).close();
      f.write_string_attribute("creator", "ctforge " CTFORGE_VERSION);
    }
    // Built in memory, written with checked writes (a full disk is an error naming the file).
    const std::vector<char> bytes = f.image();
    f.close();
    write_file_bytes(tmp, bytes.data(), bytes.size(), path);
  });
}

volume read_volume(const std::string& path) {
  const h5::file f = h5::file::open(path);
  const h5::dataset ds = open_rank3(f, k_volume, "[z][y][x]");
  const h5::dims_t shape = ds.shape();
  volume_geometry g;
  g.nz = static_cast<std::int64_t>(shape[0]);
  g.ny = static_cast<std::int64_t>(shape[1]);
  g.nx = static_cast<std::int64_t>(shape[2]);
  // Files written by other tools may lack the attributes: spacing 1 mm, grid centred.
  g.spacing_mm =
      ds.has_attribute(k_spacing) ? read_triplet(ds, k_spacing) : std::array<double, 3>{1, 1, 1};
  for (double s : g.spacing_mm)
    CTFORGE_CHECK(s > 0, fmt::format("{}: attribute {} must be positive", ds.context(), k_spacing));
  if (ds.has_attribute(k_origin)) {
    g.origin_mm = read_triplet(ds, k_origin);
  } else {
    g.origin_mm = volume_geometry::centered(g.nx, g.ny, g.nz, g.spacing_mm).origin_mm;
  }
  detail::require_memory(
      static_cast<std::uint64_t>(g.nx) * static_cast<std::uint64_t>(g.ny) *
          static_cast<std::uint64_t>(g.nz),
      sizeof(float), fmt::format("{}: a {} volume", ds.context(), detail::h5::shape_string(shape)),
      "the file declares more voxels than this machine can hold");
  volume v(g);
  ds.read<float>(std::span<float>(v.data));
  check_finite(v.data, shape, path, k_volume);
  return v;
}

void write_volume(const std::string& path, const volume_view& v) {
  v.geom.validate();
  CTFORGE_EXPECTS(v.data.size() == static_cast<std::size_t>(v.geom.voxel_count()),
                  fmt::format("{}: volume of {}x{}x{} voxels holds {} values", path, v.geom.nx,
                              v.geom.ny, v.geom.nz, v.data.size()));
  // The file is built in memory next to the caller's volume: compressed chunks of noisy data
  // can take as much as the volume, plus the chunk index and the driver's 16 MiB growth step.
  const auto voxels = static_cast<std::uint64_t>(v.geom.voxel_count());
  detail::require_memory(2 * voxels + (std::uint64_t{32} << 20) / sizeof(float), sizeof(float),
                         fmt::format("{}: writing a {}x{}x{} volume (the volume and its file "
                                     "image in memory)",
                                     path, v.geom.nx, v.geom.ny, v.geom.nz),
                         "write it slab by slab (ctforge recon --memory-limit writes .h5 "
                         "volumes plane by plane)");
  write_atomically(path, [&](const std::string& tmp) {
    h5::file f = h5::file::create_in_memory(tmp);
    {
      const auto& g = v.geom;
      h5::create_options opt;
      opt.chunk = {volume_chunk_slices(g), static_cast<hsize_t>(g.ny), static_cast<hsize_t>(g.nx)};
      opt.deflate = k_deflate;
      opt.shuffle = true;
      const h5::dims_t dims{static_cast<hsize_t>(g.nz), static_cast<hsize_t>(g.ny),
                            static_cast<hsize_t>(g.nx)};
      h5::dataset ds = f.write_dataset<float>(k_volume, dims, std::span<const float>(v.data), opt);
      ds.write_double_attribute(k_spacing, g.spacing_mm);
      ds.write_double_attribute(k_origin, g.origin_mm);
      ds.write_string_attribute("axes", "z:y:x");
      ds.close();
      f.write_string_attribute("creator", "ctforge " CTFORGE_VERSION);
    }
    // Built in memory, written with checked writes (a full disk is an error naming the file)
    // straight from the driver's buffer: no second copy of the file.
    const std::span<const char> bytes = f.image_view();
    write_file_bytes(tmp, bytes.data(), bytes.size(), path);
    f.close();
  });
}

struct volume_file_writer::impl {
  std::string path;
  volume_geometry g;
  std::unique_ptr<temporary_output> out;
  std::uint64_t offset = 0;
  int fd = -1;
  std::vector<bool> written;
  ~impl() {
    if (fd >= 0) ::close(fd);
  }
  [[noreturn]] void fail(const std::string& action, int err) const {
    CTFORGE_FAIL(fmt::format("{}: {}: {}", path, action, std::strerror(err)));
  }
};

volume_file_writer::volume_file_writer(const std::string& path, const volume_geometry& g)
    : impl_(std::make_unique<impl>()) {
  static_assert(std::endian::native == std::endian::little,
                "volume_file_writer writes the host's floats as little-endian float32");
  g.validate();
  impl& m = *impl_;
  m.path = path;
  m.g = g;
  m.written.assign(static_cast<std::size_t>(g.nz), false);
  m.out = std::make_unique<temporary_output>(path);
  {
    // The skeleton (metadata and the reserved data space) through HDF5; the data afterwards
    // with checked writes at the data's offset.
    h5::file f = h5::file::create(m.out->path());
    h5::create_options opt;
    opt.preallocate = true;
    const h5::dims_t dims{static_cast<hsize_t>(g.nz), static_cast<hsize_t>(g.ny),
                          static_cast<hsize_t>(g.nx)};
    h5::dataset ds = f.create_dataset<float>(k_volume, dims, opt);
    ds.write_double_attribute(k_spacing, g.spacing_mm);
    ds.write_double_attribute(k_origin, g.origin_mm);
    ds.write_string_attribute("axes", "z:y:x");
    m.offset = ds.data_offset();
    ds.close();
    f.write_string_attribute("creator", "ctforge " CTFORGE_VERSION);
    f.close();
  }
  m.fd = ::open(m.out->path().c_str(), O_WRONLY | O_CLOEXEC);
  if (m.fd < 0) m.fail("cannot open the temporary " + m.out->path(), errno);
  const auto bytes = static_cast<off_t>(g.voxel_count() * static_cast<std::int64_t>(sizeof(float)));
  const int err = ::posix_fallocate(m.fd, static_cast<off_t>(m.offset), bytes);
  if (err != 0 && err != EOPNOTSUPP && err != EINVAL)
    m.fail(fmt::format("cannot reserve {} bytes for the volume", bytes), err);
}

volume_file_writer::~volume_file_writer() = default;

const std::string& volume_file_writer::path() const noexcept {
  return impl_->path;
}

namespace {

/// `planes` (whole planes of g, from plane k0) checked and written at `offset` of `fd`.
void pwrite_planes(int fd, std::uint64_t offset, const volume_geometry& g, std::int64_t k0,
                   std::span<const float> planes, const std::string& what) {
  const std::int64_t plane = g.nx * g.ny;
  const auto n = static_cast<std::int64_t>(planes.size()) / plane;
  CTFORGE_EXPECTS(n >= 1 && n * plane == static_cast<std::int64_t>(planes.size()) && k0 >= 0 &&
                      k0 + n <= g.nz,
                  fmt::format("{}: {} values are not whole planes of {} x {} voxels at z {} of {}",
                              what, planes.size(), g.nx, g.ny, k0, g.nz));
  const std::string axes = fmt::format("z - {}, y, x", k0);
  detail::refuse_non_finite(planes.data(), n, g.ny, g.nx, what, axes.c_str());
  const auto* p = reinterpret_cast<const char*>(planes.data());
  const std::size_t total = planes.size() * sizeof(float);
  const std::uint64_t at = offset + static_cast<std::uint64_t>(k0 * plane) * sizeof(float);
  std::size_t done = 0;
  while (done < total) {
    const ssize_t w = ::pwrite(fd, p + done, std::min<std::size_t>(total - done, 1u << 30),
                               static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      CTFORGE_FAIL(fmt::format("{}: write of planes {}..{} failed: {}", what, k0, k0 + n - 1,
                               std::strerror(w < 0 ? errno : ENOSPC)));
    done += static_cast<std::size_t>(w);
  }
}

}  // namespace

void volume_file_writer::write_planes(std::int64_t k0, std::span<const float> planes) {
  impl& m = *impl_;
  CTFORGE_EXPECTS(m.fd >= 0, m.path + ": volume_file_writer: already committed");
  pwrite_planes(m.fd, m.offset, m.g, k0, planes, m.path);
  mark_written(k0, static_cast<std::int64_t>(planes.size()) / (m.g.nx * m.g.ny));
}

const std::string& volume_file_writer::temporary_path() const noexcept {
  return impl_->out->path();
}

std::uint64_t volume_file_writer::data_offset() const noexcept {
  return impl_->offset;
}

void volume_file_writer::mark_written(std::int64_t k0, std::int64_t n) {
  impl& m = *impl_;
  CTFORGE_EXPECTS(k0 >= 0 && n >= 1 && k0 + n <= m.g.nz,
                  fmt::format("{}: planes {}..{} are not planes of a volume of {}", m.path, k0,
                              k0 + n - 1, m.g.nz));
  for (std::int64_t k = k0; k < k0 + n; ++k) m.written[static_cast<std::size_t>(k)] = true;
}

void write_volume_part(const std::string& temporary, std::uint64_t data_offset,
                       const volume_geometry& g, std::int64_t k0, std::span<const float> planes) {
  g.validate();
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    CTFORGE_FAIL(fmt::format("{}: cannot open the volume being written: {}", temporary,
                             std::strerror(errno)));
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  const std::uint64_t end =
      data_offset + static_cast<std::uint64_t>(g.voxel_count()) * sizeof(float);
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < end)
    CTFORGE_FAIL(fmt::format("{}: not the volume being written: {} bytes, where its data ends at "
                             "byte {}",
                             temporary, static_cast<long long>(st.st_size), end));
  pwrite_planes(fd, data_offset, g, k0, planes, temporary);
  if (::fsync(fd) != 0)
    CTFORGE_FAIL(fmt::format("{}: cannot flush planes from {} to the device: {}", temporary, k0,
                             std::strerror(errno)));
}

void volume_file_writer::commit() {
  impl& m = *impl_;
  CTFORGE_EXPECTS(m.fd >= 0, m.path + ": volume_file_writer: already committed");
  const auto missing = std::find(m.written.begin(), m.written.end(), false);
  CTFORGE_CHECK(missing == m.written.end(),
                fmt::format("{}: plane {} of {} was never written; the file is not complete",
                            m.path, missing - m.written.begin(), m.g.nz));
  const int fd = m.fd;
  m.fd = -1;
  if (::close(fd) != 0) m.fail("closing failed", errno);
  m.out->commit();
}

std::string describe_file(const std::string& path) {
  const h5::file f = h5::file::open(path);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  std::string out = fmt::format("{}: HDF5 file, {}\n", path,
                                ec ? std::string("size unknown") : human_bytes(size));
  for (const auto& a : f.attribute_names()) out += fmt::format("  {}\n", attribute_line(f, a));

  for (const auto& name : f.dataset_names()) {
    const h5::dataset ds = f.open_dataset(name);
    const h5::dims_t shape = ds.shape();
    out += fmt::format("{}: {} {}", name, ds.type_name(), h5::shape_string(shape));
    if (name == k_projections && shape.size() == 3) out += " (views, rows, cols)";
    if (name == k_volume && shape.size() == 3) out += " (z, y, x)";
    if (ds.is_numeric()) {
      // Values are scanned in blocks of whole rows: a dataset larger than this machine's
      // memory (a huge sparse one, say) would take as long to scan as it could not be read.
      const std::uint64_t n = h5::element_count(shape), mem = detail::physical_memory_bytes();
      if (n > mem / sizeof(float))
        out += fmt::format(
            "\n  values: not scanned ({} values, {:.1f} GiB as float32, more than the {:.1f} GiB "
            "of memory here)",
            n, static_cast<double>(n) * sizeof(float) / (1 << 30),
            static_cast<double>(mem) / (1 << 30));
      else
        out += "\n  values: " + stats_string(dataset_stats(ds));
    } else if (ds.type_class() == H5T_STRING && h5::element_count(shape) == 1) {
      const std::string text = ds.read_string();
      if (name == k_geometry) {
        try {
          out += "\n  geometry: " + geometry_summary(geometry_from_json(text, path + ":/geometry"));
        } catch (const error& e) {
          out += fmt::format("\n  geometry: invalid ({})", e.what());
        }
      } else {
        if (text.size() <= 80 && text.find('\n') == std::string::npos)
          out += fmt::format("\n  text: \"{}\"", text);
        else
          out += fmt::format("\n  text: {} characters", text.size());
      }
    }
    out += "\n";
    for (const auto& a : ds.attribute_names()) out += fmt::format("  {}\n", attribute_line(ds, a));
    if (name == k_volume && shape.size() == 3) {
      try {
        const auto sp = ds.has_attribute(k_spacing) ? read_triplet(ds, k_spacing)
                                                    : std::array<double, 3>{1, 1, 1};
        out += fmt::format(
            "  extent: {:g} x {:g} x {:g} mm (x, y, z){}\n", sp[0] * static_cast<double>(shape[2]),
            sp[1] * static_cast<double>(shape[1]), sp[2] * static_cast<double>(shape[0]),
            ds.has_attribute(k_spacing) ? "" : " assuming 1 mm voxels (no spacing_mm)");
      } catch (const error& e) {
        out += fmt::format("  extent: unknown ({})\n", e.what());
      }
    }
  }
  return out;
}

}  // namespace ctforge::io
