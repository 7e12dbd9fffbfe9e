// NeXus NXtomo (HDF5): the first /entry* group holding detector frames at <entry>/data/data or
// <entry>/instrument/detector/data [frames][rows][cols]; image_key (0 projection, 1 flat,
// 2 dark, 3 invalid; all projections when absent) at <entry>/data/image_key or
// <entry>/instrument/detector/image_key; rotation_angle at <entry>/data/rotation_angle or
// <entry>/sample/rotation_angle (degrees unless its "units" attribute says rad); pixel pitch
// from <entry>/instrument/detector/x_pixel_size and y_pixel_size (units attribute m, mm, um;
// metres when absent, the NeXus default). Parallel beam. Only the selected projections, rows
// and columns are read (one hyperslab per run of consecutive frames).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"

namespace ctforge::io {
namespace {

namespace h5 = ctforge::detail::h5;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string units_of(const h5::dataset& d) {
  return d.has_attribute("units") ? lower(d.read_string_attribute("units")) : std::string();
}

/// First candidate that exists as a dataset, or "".
std::string first_dataset(const h5::file& f, const std::string& entry,
                          std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const std::string p = entry + "/" + n;
    if (f.has_dataset(p)) return p;
  }
  return {};
}

/// Reads frames `idx` (sorted, of the frame axis) restricted to rows/cols into a stack.
projection_stack read_frames(const h5::dataset& d, const std::vector<std::int64_t>& idx,
                             std::int64_t r0, std::int64_t nr, std::int64_t c0, std::int64_t nc) {
  projection_stack s(static_cast<std::int64_t>(idx.size()), nr, nc);
  std::size_t i = 0;
  while (i < idx.size()) {
    std::size_t j = i + 1;
    while (j < idx.size() && idx[j] == idx[j - 1] + 1) ++j;  // run of consecutive frames
    const auto n = static_cast<std::int64_t>(j - i);
    d.read_slab<float>({hsize_t(idx[i]), hsize_t(r0), hsize_t(c0)},
                       {hsize_t(n), hsize_t(nr), hsize_t(nc)},
                       std::span<float>(s.view(static_cast<std::int64_t>(i)),
                                        static_cast<std::size_t>(n * nr * nc)));
    i = j;
  }
  return s;
}

double pixel_mm(const h5::file& f, const std::string& name, const std::string& path) {
  if (!f.has_dataset(name)) return 0;
  auto d = f.open_dataset(name);
  const auto v = d.read<double>();
  CTFORGE_CHECK(!v.empty() && std::isfinite(v[0]) && v[0] > 0,
                fmt::format("{}: dataset {} must hold a positive pixel size", path, name));
  const std::string u = units_of(d);
  if (u.empty() || u == "m" || u == "meter" || u == "metre" || u == "meters" || u == "metres")
    return v[0] * 1e3;
  if (u == "mm" || u == "millimeter" || u == "millimetre") return v[0];
  if (u == "um" || u == "micron" || u == "microns" || u == "micrometer" || u == "micrometre" ||
      u == "\xC2\xB5m" || u == "\xCE\xBCm")
    return v[0] * 1e-3;
  if (u == "nm") return v[0] * 1e-6;
  CTFORGE_FAIL(fmt::format("{}: dataset {}: unknown length unit '{}'", path, name, u));
}

}  // namespace

raw_scan read_nxtomo(const std::string& path, const detector_selection& sel) {
  auto f = h5::file::open(path);
  std::set<std::string> entries;
  for (const auto& n : f.dataset_names()) {
    if (!n.starts_with("/entry")) continue;
    entries.insert(n.substr(0, n.find('/', 1)));
  }
  std::string entry, data_name;
  for (const auto& e : entries) {
    data_name = first_dataset(f, e, {"data/data", "instrument/detector/data"});
    if (!data_name.empty()) {
      entry = e;
      break;
    }
  }
  CTFORGE_CHECK(!entry.empty(),
                fmt::format("{}: no NXtomo entry with detector frames (looked for "
                            "/entry*/data/data and /entry*/instrument/detector/data)",
                            path));
  auto data = f.open_dataset(data_name);
  const auto shape = data.shape();
  CTFORGE_CHECK(shape.size() == 3,
                fmt::format("{}: dataset {} has shape {}, expected [frames][rows][cols]", path,
                            data_name, h5::shape_string(shape)));
  CTFORGE_CHECK(data.is_numeric(), fmt::format("{}: dataset {} holds {}, expected numbers", path,
                                               data_name, data.type_name()));
  const auto frames = static_cast<std::int64_t>(shape[0]);

  std::vector<std::int64_t> keys(static_cast<std::size_t>(frames), 0);
  const std::string key_name =
      first_dataset(f, entry, {"data/image_key", "instrument/detector/image_key"});
  if (!key_name.empty()) {
    auto k = f.open_dataset(key_name).read<std::int64_t>();
    CTFORGE_CHECK(static_cast<std::int64_t>(k.size()) == frames,
                  fmt::format("{}: dataset {} holds {} keys for {} frames", path, key_name,
                              k.size(), frames));
    keys = std::move(k);
  }
  std::vector<std::int64_t> proj, flat, dark;
  for (std::int64_t i = 0; i < frames; ++i) {
    const auto k = keys[static_cast<std::size_t>(i)];
    CTFORGE_CHECK(k >= 0 && k <= 3,
                  fmt::format("{}: dataset {}: image_key {} at frame {} (expected 0..3)", path,
                              key_name, k, i));
    if (k == 0)
      proj.push_back(i);
    else if (k == 1)
      flat.push_back(i);
    else if (k == 2)
      dark.push_back(i);
  }
  CTFORGE_CHECK(!proj.empty(),
                fmt::format("{}: {} has no projection frames (image_key 0)", path, data_name));

  raw_scan s;
  s.full_views = static_cast<std::int64_t>(proj.size());
  s.full_rows = static_cast<std::int64_t>(shape[1]);
  s.full_cols = static_cast<std::int64_t>(shape[2]);
  s.integer_data = data.type_class() == H5T_INTEGER;
  const auto [v0, nv] = resolve_range(sel.views, s.full_views, "views", path);
  const auto [r0, nr] = resolve_range(sel.rows, s.full_rows, "rows", path);
  const auto [c0, nc] = resolve_range(sel.cols, s.full_cols, "cols", path);
  const std::vector<std::int64_t> chosen(proj.begin() + v0, proj.begin() + v0 + nv);
  s.frames = read_frames(data, chosen, r0, nr, c0, nc);
  if (!flat.empty()) s.flats = read_frames(data, flat, r0, nr, c0, nc);
  if (!dark.empty()) s.darks = read_frames(data, dark, r0, nr, c0, nc);

  const std::string angle_name =
      first_dataset(f, entry, {"data/rotation_angle", "sample/rotation_angle"});
  if (!angle_name.empty()) {
    auto d = f.open_dataset(angle_name);
    const auto a = d.read<double>();
    CTFORGE_CHECK(static_cast<std::int64_t>(a.size()) == frames,
                  fmt::format("{}: dataset {} holds {} angles for {} frames", path, angle_name,
                              a.size(), frames));
    const bool rad = units_of(d).starts_with("rad");
    for (std::int64_t i : proj) {
      const double v = a[static_cast<std::size_t>(i)];
      CTFORGE_CHECK(std::isfinite(v), fmt::format("{}: dataset {}: non-finite angle at frame {}",
                                                  path, angle_name, i));
      s.angles_rad.push_back(rad ? v : deg_to_rad(v));
    }
  }
  s.pixel_u_mm = pixel_mm(f, entry + "/instrument/detector/x_pixel_size", path);
  s.pixel_v_mm = pixel_mm(f, entry + "/instrument/detector/y_pixel_size", path);
  if (s.pixel_v_mm <= 0) s.pixel_v_mm = s.pixel_u_mm;
  if (s.pixel_u_mm <= 0) s.pixel_u_mm = s.pixel_v_mm;
  return s;
}

}  // namespace ctforge::io
