// NeXus NXtomo (HDF5), found by definition rather than by path: the NeXus entries (groups whose
// NX_class is NXentry or NXsubentry, anywhere in the file) whose `definition` (a dataset or an
// attribute) is NXtomo come first, then other NeXus entries, then /entry* groups of files
// without NeXus attributes. In an entry the detector frames [frames][rows][cols] are
// <entry>/data/data, <entry>/instrument/detector/data or else the first rank-3 numeric dataset
// named "data" below the entry (links followed); image_key (0 projection, 1 flat, 2 dark,
// 3 invalid; all projections when absent) and rotation_angle (degrees unless its "units"
// attribute says rad) beside the frames, in <entry>/data, <entry>/instrument/detector or
// <entry>/sample, or else the first of that name below the entry; the pixel pitch from
// x_pixel_size / y_pixel_size found the same way (units attribute m, mm, um, nm; metres when
// absent, the NeXus default). The user may name any of these datasets instead
// (hdf5_scan_paths). Parallel beam. Only the selected projections, rows and columns are read
// (one hyperslab per run of consecutive frames).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "io/nexus.hpp"

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"
#include "io/h5_scan.hpp"

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

double pixel_mm(const h5::file& f, const std::string& name, const std::string& path) {
  if (name.empty() || !f.has_dataset(name)) return 0;
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


std::string parent_of(const std::string& p) {
  const auto k = p.find_last_of('/');
  return k == 0 || k == std::string::npos ? std::string("/") : p.substr(0, k);
}
std::string base_of(const std::string& p) {
  return p.substr(p.find_last_of('/') + 1);
}
std::string join_path(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}
bool under(const std::string& p, const std::string& dir) {
  return dir == "/" || p.starts_with(dir + "/");
}

/// The `definition` of a NeXus entry: its dataset (a string) or its attribute, lower case.
std::string definition_of(const h5::file& f, const std::string& entry) {
  const std::string d = join_path(entry, "definition");
  if (f.has_dataset(d)) {
    try {
      return lower(f.open_dataset(d).read_string());
    } catch (const error&) {
      return {};  // a definition that is not one string: not NXtomo
    }
  }
  return lower(f.string_attribute_or_empty(entry, "definition"));
}

bool is_frames(const h5::file& f, const std::string& p) {
  if (!f.has_dataset(p)) return false;
  const auto d = f.open_dataset(p);
  return d.shape().size() == 3 && d.is_numeric();
}

/// Where an entry keeps its scan.
struct nx_layout {
  std::string entry, data, image_key, angles, x_pixel, y_pixel;
};

/// The dataset `name` beside the frames, at the usual places of the entry, or else the first
/// of that name below the entry (the walk's order); "" when there is none.
std::string find_beside(const h5::file& f, const std::vector<h5::file::entry>& walk,
                        const nx_layout& l, const std::string& name) {
  for (const std::string& dir : {parent_of(l.data), join_path(l.entry, "data"),
                                 join_path(l.entry, "instrument/detector"),
                                 join_path(l.entry, "sample")}) {
    const std::string p = join_path(dir, name);
    if (f.has_dataset(p)) return p;
  }
  // Else the one nearest the frames: in a group of the frames' group's name (the detector's
  // group under /entry/instrument), then sharing the most leading path components.
  const auto score = [&](const std::string& p) {
    int s = base_of(parent_of(p)) == base_of(parent_of(l.data)) ? 1000 : 0;
    for (std::size_t i = 0; i < std::min(p.size(), l.data.size()) && p[i] == l.data[i]; ++i)
      s += p[i] == '/';
    return s;
  };
  std::string best;
  for (const auto& e : walk)
    if (under(e.path, l.entry) && base_of(e.path) == name && f.has_dataset(e.path) &&
        (best.empty() || score(e.path) > score(best)))
      best = e.path;
  return best;
}

/// The frames of an entry ("" when it holds none).
std::string find_frames(const h5::file& f, const std::vector<h5::file::entry>& walk,
                        const std::string& entry) {
  for (const char* rel : {"data/data", "instrument/detector/data"})
    if (is_frames(f, join_path(entry, rel))) return join_path(entry, rel);
  for (const auto& e : walk)
    if (under(e.path, entry) && base_of(e.path) == "data" && is_frames(f, e.path)) return e.path;
  return {};
}

/// Entries in the order they are tried: NXtomo definitions, other NeXus entries, /entry*.
std::vector<std::string> candidate_entries(const h5::file& f,
                                           const std::vector<h5::file::entry>& walk) {
  std::vector<std::string> tomo, nexus, named;
  for (const auto& e : walk) {
    if (e.kind != "group") continue;
    // A definition of NXtomo makes an entry whatever its NX_class says (files written with an
    // empty NX_class exist).
    if (definition_of(f, e.path) == "nxtomo")
      tomo.push_back(e.path);
    else if (e.nx_class == "NXentry" || e.nx_class == "NXsubentry")
      nexus.push_back(e.path);
    else if (e.path.starts_with("/entry") && e.path.find('/', 1) == std::string::npos)
      named.push_back(e.path);
  }
  tomo.insert(tomo.end(), nexus.begin(), nexus.end());
  tomo.insert(tomo.end(), named.begin(), named.end());
  return tomo;
}

/// "; the frames ... are a link that cannot be followed" for NXtomo entries whose frames are
/// a soft or external link to nothing (a raw file not copied with the NeXus file), else "".
std::string unreachable_frames(const h5::file& f, const std::vector<h5::file::entry>& walk) {
  // Links in the entries (NXtomo ones first), then anywhere.
  std::vector<std::string> dirs = candidate_entries(f, walk);
  dirs.push_back("/");
  for (const auto& dir : dirs)
    for (const auto& e : walk) {
      if (e.kind != "soft link" && e.kind != "external link") continue;
      if (!under(e.path, dir) || base_of(e.path) != "data" || f.has_dataset(e.path)) continue;
      return fmt::format("; {} is {} to {}, which cannot be opened", e.path,
                         e.kind == "soft link" ? "a soft link" : "an external link", e.target);
    }
  return {};
}

nx_layout find_layout(const h5::file& f, const std::string& path, const hdf5_scan_paths& paths) {
  const auto walk = f.walk();
  nx_layout l;
  if (!paths.data.empty()) {
    l.data = h5::file::absolute(paths.data);
    CTFORGE_EXPECTS(f.has_dataset(l.data),
                    fmt::format("--data-path: {} has no dataset {}", path, l.data));
    // The innermost entry holding it, else the frames' group.
    l.entry = parent_of(l.data);
    std::size_t best = 0;
    for (const auto& e : candidate_entries(f, walk))
      if (under(l.data, e) && e.size() > best) {
        l.entry = e;
        best = e.size();
      }
  } else {
    for (const auto& e : candidate_entries(f, walk)) {
      l.data = find_frames(f, walk, e);
      if (!l.data.empty()) {
        l.entry = e;
        break;
      }
    }
    CTFORGE_CHECK(!l.data.empty(),
                  fmt::format("{}: no NXtomo entry with detector frames (looked for NeXus "
                              "entries of definition NXtomo and for /entry* groups holding "
                              "[frames][rows][cols] data{}; --data-path names the dataset)",
                              path, unreachable_frames(f, walk)));
  }
  l.image_key = find_beside(f, walk, l, "image_key");
  l.angles = paths.angles.empty() ? find_beside(f, walk, l, "rotation_angle")
                                  : h5::file::absolute(paths.angles);
  l.x_pixel = find_beside(f, walk, l, "x_pixel_size");
  l.y_pixel = find_beside(f, walk, l, "y_pixel_size");
  return l;
}

/// Flat or dark fields from the dataset the user names (`option`: --flat-path, --dark-path).
projection_stack read_named_fields(const h5::file& f, const std::string& name, const char* option,
                                   const raw_scan& s, const frame_window& w) {
  const std::string n = h5::file::absolute(name);
  CTFORGE_EXPECTS(f.has_dataset(n), fmt::format("{}: {} has no dataset {}", option, f.path(), n));
  return read_field_frames(f, f.path(), n, s, w, "the frames");
}

/// Image keys of every frame (all 0 without a key dataset), checked.
std::vector<std::int64_t> frame_keys(const h5::file& f, const nx_layout& l, std::int64_t frames) {
  std::vector<std::int64_t> keys(static_cast<std::size_t>(frames), 0);
  if (l.image_key.empty()) return keys;
  auto k = f.open_dataset(l.image_key).read<std::int64_t>();
  CTFORGE_CHECK(static_cast<std::int64_t>(k.size()) == frames,
                fmt::format("{}: dataset {} holds {} keys for {} frames", f.path(), l.image_key,
                            k.size(), frames));
  for (std::int64_t i = 0; i < frames; ++i)
    CTFORGE_CHECK(k[std::size_t(i)] >= 0 && k[std::size_t(i)] <= 3,
                  fmt::format("{}: dataset {}: image_key {} at frame {} (expected 0..3)",
                              f.path(), l.image_key, k[std::size_t(i)], i));
  return k;
}

/// Angles of the projection frames `proj`, from a dataset of one angle per frame or per
/// projection.
std::vector<double> projection_angles(const h5::file& f, const std::string& name,
                                      const std::vector<std::int64_t>& proj,
                                      std::int64_t frames) {
  auto d = f.open_dataset(name);
  const auto a = d.read<double>();
  const bool per_frame = static_cast<std::int64_t>(a.size()) == frames;
  CTFORGE_CHECK(per_frame || a.size() == proj.size(),
                fmt::format("{}: dataset {} holds {} angles for {} frames ({} projections)",
                            f.path(), name, a.size(), frames, proj.size()));
  const bool rad = units_of(d).starts_with("rad");
  std::vector<double> out;
  for (std::size_t j = 0; j < proj.size(); ++j) {
    const auto i = per_frame ? static_cast<std::size_t>(proj[j]) : j;
    CTFORGE_CHECK(std::isfinite(a[i]), fmt::format("{}: dataset {}: non-finite angle at index {}",
                                                   f.path(), name, i));
    out.push_back(rad ? a[i] : deg_to_rad(a[i]));
  }
  return out;
}

}  // namespace

std::string describe_nxtomo_layout(const std::string& path, const hdf5_scan_paths& paths) {
  auto f = h5::file::open(path);
  const nx_layout l = find_layout(f, path, paths);
  const auto or_none = [](const std::string& s) { return s.empty() ? std::string("none") : s; };
  return fmt::format("entry: {}\nframes: {}\nimage_key: {}\nrotation_angle: {}\n"
                     "x_pixel_size: {}\n",
                     l.entry, l.data, or_none(l.image_key), or_none(l.angles),
                     or_none(l.x_pixel));
}

raw_scan read_nxtomo(const std::string& path, const detector_selection& sel,
                     const hdf5_scan_paths& paths) {
  auto f = h5::file::open(path);
  const nx_layout l = find_layout(f, path, paths);
  const auto data = open_frames_dataset(f, path, l.data, "frames");
  const auto frames = static_cast<std::int64_t>(data.shape()[0]);
  const auto keys = frame_keys(f, l, frames);
  std::vector<std::int64_t> proj, flat, dark;
  for (std::int64_t i = 0; i < frames; ++i) {
    const auto k = keys[static_cast<std::size_t>(i)];
    if (k == 0)
      proj.push_back(i);
    else if (k == 1)
      flat.push_back(i);
    else if (k == 2)
      dark.push_back(i);  // 3: an invalid frame, skipped
  }
  CTFORGE_CHECK(!proj.empty(),
                fmt::format("{}: {} has no projection frames (image_key 0)", path, l.data));

  raw_scan s;
  const frame_window w = start_scan(s, data, static_cast<std::int64_t>(proj.size()), sel, path);
  const std::vector<std::int64_t> chosen(proj.begin() + w.v0, proj.begin() + w.v0 + w.nv);
  s.frames = read_frames(data, chosen, w);
  if (!paths.flats.empty())
    s.flats = read_named_fields(f, paths.flats, "--flat-path", s, w);
  else if (!flat.empty())
    s.flats = read_frames(data, flat, w);
  if (!paths.darks.empty())
    s.darks = read_named_fields(f, paths.darks, "--dark-path", s, w);
  else if (!dark.empty())
    s.darks = read_frames(data, dark, w);
  if (!l.angles.empty()) {
    CTFORGE_EXPECTS(f.has_dataset(l.angles),
                    fmt::format("--angles-path: {} has no dataset {}", path, l.angles));
    s.angles_rad = projection_angles(f, l.angles, proj, frames);
  }
  s.pixel_u_mm = pixel_mm(f, l.x_pixel, path);
  s.pixel_v_mm = pixel_mm(f, l.y_pixel, path);
  if (s.pixel_v_mm <= 0) s.pixel_v_mm = s.pixel_u_mm;
  if (s.pixel_u_mm <= 0) s.pixel_u_mm = s.pixel_v_mm;
  return s;
}

std::string nxtomo_unreachable_frames(const detail::h5::file& f) {
  return unreachable_frames(f, f.walk());
}

bool holds_nxtomo(const detail::h5::file& f) {
  const auto walk = f.walk();
  for (const auto& e : candidate_entries(f, walk))
    if (!find_frames(f, walk, e).empty()) return true;
  return false;
}

}  // namespace ctforge::io
