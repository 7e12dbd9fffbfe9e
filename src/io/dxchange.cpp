// DataExchange HDF5 (APS / tomopy): /exchange/data [views][rows][cols], /exchange/data_white and
// /exchange/data_dark [n][rows][cols] (optional), /exchange/theta (degrees unless its "units"
// attribute says radians; optional only when a geometry is given). Any other HDF5 layout is
// read the same way from the datasets the user names (hdf5_scan_paths): frames, flats, darks
// and angles; a DataExchange file's own datasets fill in what is not named. Only the selected
// views, rows and columns are read (hyperslabs).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"

namespace ctforge::io {
namespace {

namespace h5 = ctforge::detail::h5;

/// Reads frames [v0, v0+nv) x rows x cols of a rank-3 dataset whose detector matches the data.
projection_stack read_frames(const h5::dataset& d, std::int64_t v0, std::int64_t nv,
                             std::int64_t r0, std::int64_t nr, std::int64_t c0, std::int64_t nc) {
  detail::require_memory_to_read(
      static_cast<std::uint64_t>(nv) * static_cast<std::uint64_t>(nr) *
          static_cast<std::uint64_t>(nc),
      sizeof(float),
      fmt::format("{}: reading {} frames of {} x {} pixels", d.context(), nv, nc, nr),
      "read a part with --views / --rows / --cols");
  projection_stack s(nv, nr, nc);
  d.read_slab<float>({hsize_t(v0), hsize_t(r0), hsize_t(c0)},
                     {hsize_t(nv), hsize_t(nr), hsize_t(nc)}, std::span<float>(s.data));
  return s;
}

bool says_radians(const h5::dataset& d) {
  if (!d.has_attribute("units")) return false;
  std::string u = d.read_string_attribute("units");
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return std::tolower(c); });
  return u.starts_with("rad");
}

}  // namespace

raw_scan read_dxchange(const std::string& path, const detector_selection& sel,
                       const hdf5_scan_paths& paths) {
  auto f = h5::file::open(path);
  const bool exchange = f.has_dataset("/exchange/data");
  // A name given by the user, else the DataExchange one (only in a DataExchange file).
  const auto named = [&](const std::string& given, const char* option, const char* own) {
    if (!given.empty()) {
      const std::string n = h5::file::absolute(given);
      CTFORGE_EXPECTS(f.has_dataset(n), fmt::format("{}: {} has no dataset {}", option, path, n));
      return n;
    }
    return exchange && f.has_dataset(own) ? std::string(own) : std::string();
  };
  const std::string data_name = named(paths.data, "--data-path", "/exchange/data");
  CTFORGE_EXPECTS(!data_name.empty(),
                  fmt::format("{}: no /exchange/data; --data-path names the frames", path));
  auto data = f.open_dataset(data_name);
  const auto shape = data.shape();
  CTFORGE_CHECK(shape.size() == 3,
                fmt::format("{}: dataset {} has shape {}, expected [views][rows][cols]", path,
                            data_name, h5::shape_string(shape)));
  CTFORGE_CHECK(data.is_numeric(), fmt::format("{}: dataset {} holds {}, expected numbers", path,
                                               data_name, data.type_name()));
  CTFORGE_CHECK(h5::element_count(shape) > 0,
                fmt::format("{}: dataset {} has shape {}: no {} stored", path, data_name,
                            h5::shape_string(shape), shape[0] == 0 ? "views" : "pixels"));
  raw_scan s;
  s.full_views = static_cast<std::int64_t>(shape[0]);
  s.full_rows = static_cast<std::int64_t>(shape[1]);
  s.full_cols = static_cast<std::int64_t>(shape[2]);
  s.integer_data = data.type_class() == H5T_INTEGER;
  const auto [v0, nv] = resolve_range(sel.views, s.full_views, "views", path);
  const auto [r0, nr] = resolve_range(sel.rows, s.full_rows, "rows", path);
  const auto [c0, nc] = resolve_range(sel.cols, s.full_cols, "cols", path);
  s.frames = read_frames(data, v0, nv, r0, nr, c0, nc);

  const std::pair<std::string, bool> fields[] = {
      {named(paths.flats, "--flat-path", "/exchange/data_white"), true},
      {named(paths.darks, "--dark-path", "/exchange/data_dark"), false}};
  for (const auto& [name, white] : fields) {
    if (name.empty()) continue;
    auto d = f.open_dataset(name);
    auto sh = d.shape();
    const bool one = sh.size() == 2;  // a single image
    if (one) sh.insert(sh.begin(), 1);
    CTFORGE_CHECK(
        sh.size() == 3 && sh[1] == shape[1] && sh[2] == shape[2],
        fmt::format("{}: dataset {} has shape {}, expected [n][{}][{}] like {}", path, name,
                    h5::shape_string(d.shape()), shape[1], shape[2], data_name));
    // read_frames checks the memory before allocating the frames a file declares.
    projection_stack frames =
        one ? projection_stack(1, nr, nc)
            : read_frames(d, 0, static_cast<std::int64_t>(sh[0]), r0, nr, c0, nc);
    if (one)
      d.read_slab<float>({hsize_t(r0), hsize_t(c0)}, {hsize_t(nr), hsize_t(nc)},
                         std::span<float>(frames.data));
    (white ? s.flats : s.darks) = std::move(frames);
  }

  const std::string theta_name = named(paths.angles, "--angles-path", "/exchange/theta");
  if (!theta_name.empty()) {
    auto t = f.open_dataset(theta_name);
    auto theta = t.read<double>();
    CTFORGE_CHECK(static_cast<std::int64_t>(theta.size()) == s.full_views,
                  fmt::format("{}: dataset {} holds {} angles for {} projections", path,
                              theta_name, theta.size(), s.full_views));
    const bool rad = says_radians(t);
    for (double a : theta) {
      CTFORGE_CHECK(std::isfinite(a),
                    fmt::format("{}: dataset {} holds a non-finite angle", path, theta_name));
      s.angles_rad.push_back(rad ? a : deg_to_rad(a));
    }
  }
  return s;
}

}  // namespace ctforge::io
