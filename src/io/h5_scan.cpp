// The shared part of the HDF5 projection readers (src/io/h5_scan.hpp).
#include "io/h5_scan.hpp"

#include <fmt/format.h>

#include <tuple>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"

namespace ctforge::io {

namespace h5 = ctforge::detail::h5;

namespace {
/// usage_error (or error) before `frames` frames of the window are allocated when they do not
/// fit in memory.
void require_frames_memory(const h5::dataset& d, std::uint64_t frames, const frame_window& w) {
  detail::require_memory_to_read(
      frames * static_cast<std::uint64_t>(w.nr) * static_cast<std::uint64_t>(w.nc), sizeof(float),
      fmt::format("{}: reading {} frames of {} x {} pixels", d.context(), frames, w.nc, w.nr),
      "read a part with --views / --rows / --cols");
}
}  // namespace

h5::dataset open_frames_dataset(const h5::file& f, const std::string& path, const std::string& name,
                                const char* axis) {
  auto data = f.open_dataset(name);
  const auto shape = data.shape();
  CTFORGE_CHECK(shape.size() == 3,
                fmt::format("{}: dataset {} has shape {}, expected [{}][rows][cols]", path, name,
                            h5::shape_string(shape), axis));
  CTFORGE_CHECK(data.is_numeric(), fmt::format("{}: dataset {} holds {}, expected numbers", path,
                                               name, data.type_name()));
  CTFORGE_CHECK(h5::element_count(shape) > 0,
                fmt::format("{}: dataset {} has shape {}: no {} stored", path, name,
                            h5::shape_string(shape), shape[0] == 0 ? axis : "pixels"));
  return data;
}

frame_window start_scan(raw_scan& s, const h5::dataset& data, std::int64_t views,
                        const detector_selection& sel, const std::string& path) {
  const auto shape = data.shape();
  s.full_views = views;
  s.full_rows = static_cast<std::int64_t>(shape[1]);
  s.full_cols = static_cast<std::int64_t>(shape[2]);
  s.integer_data = data.type_class() == H5T_INTEGER;
  frame_window w;
  std::tie(w.v0, w.nv) = resolve_range(sel.views, s.full_views, "views", path);
  std::tie(w.r0, w.nr) = resolve_range(sel.rows, s.full_rows, "rows", path);
  std::tie(w.c0, w.nc) = resolve_range(sel.cols, s.full_cols, "cols", path);
  return w;
}

projection_stack read_frames(const h5::dataset& d, std::int64_t first, std::int64_t count,
                             const frame_window& w) {
  require_frames_memory(d, static_cast<std::uint64_t>(count), w);
  projection_stack s(count, w.nr, w.nc);
  d.read_slab<float>({hsize_t(first), hsize_t(w.r0), hsize_t(w.c0)},
                     {hsize_t(count), hsize_t(w.nr), hsize_t(w.nc)}, std::span<float>(s.data));
  return s;
}

projection_stack read_frames(const h5::dataset& d, const std::vector<std::int64_t>& idx,
                             const frame_window& w) {
  const std::int64_t nr = w.nr, nc = w.nc;
  require_frames_memory(d, idx.size(), w);
  projection_stack s(static_cast<std::int64_t>(idx.size()), nr, nc);
  std::size_t i = 0;
  while (i < idx.size()) {
    std::size_t j = i + 1;
    while (j < idx.size() && idx[j] == idx[j - 1] + 1) ++j;  // run of consecutive frames
    const auto n = static_cast<std::int64_t>(j - i);
    d.read_slab<float>({hsize_t(idx[i]), hsize_t(w.r0), hsize_t(w.c0)},
                       {hsize_t(n), hsize_t(nr), hsize_t(nc)},
                       std::span<float>(s.view(static_cast<std::int64_t>(i)),
                                        static_cast<std::size_t>(n * nr * nc)));
    i = j;
  }
  return s;
}

projection_stack read_field_frames(const h5::file& f, const std::string& path,
                                   const std::string& name, const raw_scan& s,
                                   const frame_window& w, const std::string& like) {
  auto d = f.open_dataset(name);
  auto sh = d.shape();
  const bool one = sh.size() == 2;  // a single image
  if (one) sh.insert(sh.begin(), 1);
  CTFORGE_CHECK(sh.size() == 3 && sh[1] == hsize_t(s.full_rows) && sh[2] == hsize_t(s.full_cols),
                fmt::format("{}: dataset {} has shape {}, expected [n][{}][{}] like {}", path, name,
                            h5::shape_string(d.shape()), s.full_rows, s.full_cols, like));
  if (one) {
    projection_stack image(1, w.nr, w.nc);
    d.read_slab<float>({hsize_t(w.r0), hsize_t(w.c0)}, {hsize_t(w.nr), hsize_t(w.nc)},
                       std::span<float>(image.data));
    return image;
  }
  // read_frames checks the memory before allocating the frames a file declares.
  return read_frames(d, 0, static_cast<std::int64_t>(sh[0]), w);
}

}  // namespace ctforge::io
