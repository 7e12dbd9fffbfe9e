// DataExchange HDF5 (APS / tomopy): /exchange/data [views][rows][cols], /exchange/data_white and
// /exchange/data_dark [n][rows][cols] (optional), /exchange/theta (degrees unless its "units"
// attribute says radians; optional only when a geometry is given). Only the selected views,
// rows and columns are read (hyperslabs).
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
  detail::require_memory(
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

raw_scan read_dxchange(const std::string& path, const detector_selection& sel) {
  auto f = h5::file::open(path);
  auto data = f.open_dataset("/exchange/data");
  const auto shape = data.shape();
  CTFORGE_CHECK(shape.size() == 3,
                fmt::format("{}: dataset /exchange/data has shape {}, expected [views][rows][cols]",
                            path, h5::shape_string(shape)));
  CTFORGE_CHECK(
      data.is_numeric(),
      fmt::format("{}: dataset /exchange/data holds {}, expected numbers", path, data.type_name()));
  raw_scan s;
  s.full_views = static_cast<std::int64_t>(shape[0]);
  s.full_rows = static_cast<std::int64_t>(shape[1]);
  s.full_cols = static_cast<std::int64_t>(shape[2]);
  s.integer_data = data.type_class() == H5T_INTEGER;
  const auto [v0, nv] = resolve_range(sel.views, s.full_views, "views", path);
  const auto [r0, nr] = resolve_range(sel.rows, s.full_rows, "rows", path);
  const auto [c0, nc] = resolve_range(sel.cols, s.full_cols, "cols", path);
  s.frames = read_frames(data, v0, nv, r0, nr, c0, nc);

  for (const char* name : {"/exchange/data_white", "/exchange/data_dark"}) {
    if (!f.has_dataset(name)) continue;
    auto d = f.open_dataset(name);
    const auto sh = d.shape();
    CTFORGE_CHECK(
        sh.size() == 3 && sh[1] == shape[1] && sh[2] == shape[2],
        fmt::format("{}: dataset {} has shape {}, expected [n][{}][{}] like /exchange/data", path,
                    name, h5::shape_string(sh), shape[1], shape[2]));
    auto frames = read_frames(d, 0, static_cast<std::int64_t>(sh[0]), r0, nr, c0, nc);
    (std::string_view(name).ends_with("white") ? s.flats : s.darks) = std::move(frames);
  }

  if (f.has_dataset("/exchange/theta")) {
    auto t = f.open_dataset("/exchange/theta");
    auto theta = t.read<double>();
    CTFORGE_CHECK(static_cast<std::int64_t>(theta.size()) == s.full_views,
                  fmt::format("{}: dataset /exchange/theta holds {} angles for {} projections",
                              path, theta.size(), s.full_views));
    const bool rad = says_radians(t);
    for (double a : theta) {
      CTFORGE_CHECK(std::isfinite(a),
                    fmt::format("{}: dataset /exchange/theta holds a non-finite angle", path));
      s.angles_rad.push_back(rad ? a : deg_to_rad(a));
    }
  }
  return s;
}

}  // namespace ctforge::io
