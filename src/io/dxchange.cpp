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

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"
#include "io/h5_scan.hpp"

namespace ctforge::io {
namespace {

namespace h5 = ctforge::detail::h5;

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
  const auto data = open_frames_dataset(f, path, data_name, "views");
  raw_scan s;
  const frame_window w = start_scan(s, data, static_cast<std::int64_t>(data.shape()[0]), sel, path);
  s.frames = read_frames(data, w.v0, w.nv, w);
  const std::string flats = named(paths.flats, "--flat-path", "/exchange/data_white");
  const std::string darks = named(paths.darks, "--dark-path", "/exchange/data_dark");
  if (!flats.empty()) s.flats = read_field_frames(f, path, flats, s, w, data_name);
  if (!darks.empty()) s.darks = read_field_frames(f, path, darks, s, w, data_name);

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
