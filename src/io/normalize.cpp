// Projection pipeline for foreign formats: format detection and dispatch, flat/dark
// normalisation, binning, and the matching crop/bin of the geometry (see formats.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <tuple>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"
#include "io/nexus.hpp"

namespace ctforge::io {
namespace {

namespace fs = std::filesystem;

bool has_glob_chars(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

std::string lower_extension(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

/// Mean of the frames of a stack ([rows][cols]); empty when the stack has no frames.
std::vector<double> mean_frame(const projection_view& s) {
  if (s.views == 0) return {};
  const std::size_t n = static_cast<std::size_t>(s.rows * s.cols);
  std::vector<double> m(n, 0.0);
  for (std::int64_t v = 0; v < s.views; ++v) {
    const float* f = s.view(v);
    for (std::size_t i = 0; i < n; ++i) m[i] += f[i];
  }
  for (double& x : m) x /= static_cast<double>(s.views);
  return m;
}

/// Line integrals must be finite: an error naming the first that is not (view, row, col of
/// the frames read).
void require_finite_line_integrals(const projection_stack& in, const std::string& context) {
  const std::int64_t k =
      detail::first_non_finite(in.data.data(), static_cast<std::int64_t>(in.data.size()));
  CTFORGE_CHECK(k < 0,
                fmt::format("{}: non-finite line integral at view {}, row {}, col {}", context,
                            k / (in.rows * in.cols), k / in.cols % in.rows, k % in.cols));
}

/// Reads /projections of a native file, restricted to the selection (hyperslab).
raw_scan read_native_selection(const std::string& path, const detector_selection& sel,
                               std::optional<geometry>& geom) {
  auto f = detail::h5::file::open(path);
  auto d = f.open_dataset("/projections");
  const auto shape = d.shape();
  CTFORGE_CHECK(shape.size() == 3,
                fmt::format("{}: dataset /projections has shape {}, expected [views][rows][cols]",
                            path, detail::h5::shape_string(shape)));
  CTFORGE_CHECK(detail::h5::element_count(shape) > 0,
                fmt::format("{}: dataset /projections has shape {}: no {} stored", path,
                            detail::h5::shape_string(shape), shape[0] == 0 ? "views" : "pixels"));
  raw_scan s;
  s.full_views = static_cast<std::int64_t>(shape[0]);
  s.full_rows = static_cast<std::int64_t>(shape[1]);
  s.full_cols = static_cast<std::int64_t>(shape[2]);
  const auto [v0, nv] = resolve_range(sel.views, s.full_views, "views", path);
  const auto [r0, nr] = resolve_range(sel.rows, s.full_rows, "rows", path);
  const auto [c0, nc] = resolve_range(sel.cols, s.full_cols, "cols", path);
  detail::require_memory_to_read(
      static_cast<std::uint64_t>(nv) * static_cast<std::uint64_t>(nr) *
          static_cast<std::uint64_t>(nc),
      sizeof(float),
      fmt::format("{}: dataset /projections: reading {} views of {} x {} pixels", path, nv, nc, nr),
      "read a part with --views / --rows / --cols");
  s.frames = projection_stack(nv, nr, nc);
  d.read_slab<float>({hsize_t(v0), hsize_t(r0), hsize_t(c0)},
                     {hsize_t(nv), hsize_t(nr), hsize_t(nc)}, std::span<float>(s.frames.data));
  {
    const std::int64_t idx = detail::first_non_finite(
        s.frames.data.data(), static_cast<std::int64_t>(s.frames.data.size()));
    if (idx >= 0) {
      CTFORGE_FAIL(
          fmt::format("{}: dataset /projections: non-finite value at view {}, row {}, col {}", path,
                      v0 + idx / (nr * nc), r0 + idx / nc % nr, c0 + idx % nc));
    }
  }
  if (f.has_dataset("/geometry")) {
    const std::string text = f.open_dataset("/geometry").read_string();
    geom = geometry_from_json(text, path + ": /geometry");
  }
  return s;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : "; ") + p;
  return s;
}

}  // namespace

std::pair<std::int64_t, std::int64_t> resolve_range(const index_range& r, std::int64_t size,
                                                    std::string_view what, std::string_view path) {
  // The stored size comes from the file: none stored is the file's defect (exit 1).
  CTFORGE_CHECK(size >= 1, fmt::format("{}: no {} stored", path, what));
  CTFORGE_EXPECTS(r.first >= 0 && r.first < size,
                  fmt::format("{}: first of {} is {}, outside [0, {})", path, what, r.first, size));
  const std::int64_t count = r.count < 0 ? size - r.first : r.count;
  CTFORGE_EXPECTS(count >= 1 && r.first + count <= size,
                  fmt::format("{}: {} {}..{} exceed the {} stored", path, what, r.first,
                              r.first + count - 1, size));
  return {r.first, count};
}

geometry select_geometry(const geometry& g, const detector_selection& sel, std::int64_t bin_rows,
                         std::int64_t bin_cols) {
  CTFORGE_EXPECTS(bin_rows >= 1 && bin_cols >= 1,
                  fmt::format("binning must be >= 1 (got {} rows x {} cols)", bin_rows, bin_cols));
  const auto [v0, nv] = resolve_range(sel.views, g.view_count(), "views", "geometry");
  const auto [r0, nr] = resolve_range(sel.rows, g.rows, "rows", "geometry");
  const auto [c0, nc] = resolve_range(sel.cols, g.cols, "cols", "geometry");
  const std::int64_t mr = nr / bin_rows, mc = nc / bin_cols;
  CTFORGE_EXPECTS(mr >= 1 && mc >= 1,
                  fmt::format("binning {}x{} leaves no pixel of the {}x{} selected", bin_rows,
                              bin_cols, nr, nc));
  // Shift (in stored pixels) from the old detector centre to the centre of the kept pixels.
  const double dc = static_cast<double>(c0) + 0.5 * static_cast<double>(bin_cols * mc - 1) -
                    0.5 * static_cast<double>(g.cols - 1);
  const double dr = static_cast<double>(r0) + 0.5 * static_cast<double>(bin_rows * mr - 1) -
                    0.5 * static_cast<double>(g.rows - 1);
  if (g.helix) {
    const auto& h = *g.helix;
    std::vector<double> angles(h.angles_rad.begin() + v0, h.angles_rad.begin() + v0 + nv);
    const double z0 = h.z_at(angles.front());
    return make_helical_geometry(
        mc, mr, g.pixel_u_mm * static_cast<double>(bin_cols),
        g.pixel_v_mm * static_cast<double>(bin_rows), h.source_to_isocenter_mm,
        h.source_to_detector_mm, std::move(angles), h.pitch_mm_per_turn, z0,
        h.offset_u_mm + dc * g.pixel_u_mm, h.offset_v_mm + dr * g.pixel_v_mm, g.shape);
  }
  if (g.orbit) {
    const auto& o = *g.orbit;
    std::vector<double> angles, ou, ov;
    for (std::int64_t i = v0; i < v0 + nv; ++i) {
      const auto k = static_cast<std::size_t>(i);
      angles.push_back(o.angles_rad[k]);
      ou.push_back(o.offset_u_mm[k] + dc * g.pixel_u_mm);
      ov.push_back(o.offset_v_mm[k] + dr * g.pixel_v_mm);
    }
    const double du = g.pixel_u_mm * static_cast<double>(bin_cols);
    const double dv = g.pixel_v_mm * static_cast<double>(bin_rows);
    if (g.beam == beam_kind::cone)
      return make_cone_geometry(mc, mr, du, dv, o.source_to_isocenter_mm, o.source_to_detector_mm,
                                std::move(angles), ou, ov, g.shape);
    return make_parallel_geometry(mc, mr, du, dv, std::move(angles), ou, ov);
  }
  std::vector<view_vectors> views;
  for (std::int64_t i = v0; i < v0 + nv; ++i) {
    view_vectors w = g.views[static_cast<std::size_t>(i)];
    if (g.curved()) {
      // A cylinder's new centre pixel lies on the arc, where u turns with it.
      const cylinder_frame f = cylinder_frame_of(g, i);
      const double gamma = dc * f.du / f.radius;
      w.detector_center = pixel_center(g, i, 0.5 * static_cast<double>(g.cols - 1) + dc,
                                       0.5 * static_cast<double>(g.rows - 1) + dr);
      w.u = f.du * (std::cos(gamma) * f.t - std::sin(gamma) * f.n);
    } else {
      w.detector_center = w.detector_center + dc * w.u + dr * w.v;
    }
    w.u = static_cast<double>(bin_cols) * w.u;
    w.v = static_cast<double>(bin_rows) * w.v;
    views.push_back(w);
  }
  return make_vec_geometry(g.beam, mc, mr, std::move(views), g.shape);
}

projection_stack normalize(const raw_scan& scan, intensity_mode mode, std::int64_t bin_rows,
                           std::int64_t bin_cols, double min_transmission,
                           const std::string& context, normalize_report* report) {
  CTFORGE_EXPECTS(bin_rows >= 1 && bin_cols >= 1,
                  fmt::format("binning must be >= 1 (got {} rows x {} cols)", bin_rows, bin_cols));
  CTFORGE_EXPECTS(min_transmission > 0 && min_transmission < 1,
                  fmt::format("min_transmission must be in (0, 1) (got {})", min_transmission));
  const auto& in = scan.frames;
  const std::int64_t mr = in.rows / bin_rows, mc = in.cols / bin_cols;
  CTFORGE_EXPECTS(mr >= 1 && mc >= 1,
                  fmt::format("{}: binning {}x{} leaves no pixel of the {}x{} selected", context,
                              bin_rows, bin_cols, in.rows, in.cols));
  std::vector<std::string> notes;
  if (mode == intensity_mode::automatic) {
    if (scan.flats.views > 0) {
      mode = intensity_mode::raw;
    } else {
      CTFORGE_CHECK(
          !scan.integer_data,
          fmt::format("{}: frames hold integer counts but there is no flat field: give flat "
                      "(and dark) images, or declare the data line integrals",
                      context));
      mode = intensity_mode::line_integrals;
      notes.push_back("no flat field: values taken as line integrals");
    }
  }
  const bool raw = mode == intensity_mode::raw;
  std::vector<double> flat, dark;
  if (raw) {
    CTFORGE_CHECK(
        scan.flats.views > 0,
        fmt::format("{}: raw counts need a flat field, and none was found or given", context));
    CTFORGE_CHECK(scan.flats.rows == in.rows && scan.flats.cols == in.cols,
                  fmt::format("{}: flat field is {}x{}, projections {}x{}", context,
                              scan.flats.rows, scan.flats.cols, in.rows, in.cols));
    flat = mean_frame(scan.flats);
    if (scan.darks.views > 0) {
      CTFORGE_CHECK(scan.darks.rows == in.rows && scan.darks.cols == in.cols,
                    fmt::format("{}: dark field is {}x{}, projections {}x{}", context,
                                scan.darks.rows, scan.darks.cols, in.rows, in.cols));
      dark = mean_frame(scan.darks);
    } else {
      dark.assign(flat.size(), 0.0);
      notes.push_back("no dark field: dark taken as 0");
    }
  }
  if (!raw) require_finite_line_integrals(in, context);
  if (!raw && bin_rows == 1 && bin_cols == 1) {  // nothing to compute: a parallel copy
    projection_stack out(in.views, in.rows, in.cols);
    detail::parallel_copy(out.data.data(), in.data.data(), in.data.size() * sizeof(float));
    if (report) {
      report->clamped = 0;
      report->warnings = join(notes);
    }
    return out;
  }
  projection_stack out(in.views, mr, mc);
  std::int64_t clamped = 0;
  const double inv_bin = 1.0 / static_cast<double>(bin_rows * bin_cols);
#pragma omp parallel for schedule(static) reduction(+ : clamped)
  for (std::int64_t v = 0; v < in.views; ++v) {
    const float* f = in.view(v);
    float* o = out.view(v);
    for (std::int64_t r = 0; r < mr; ++r) {
      for (std::int64_t c = 0; c < mc; ++c) {
        double acc = 0;
        for (std::int64_t br = 0; br < bin_rows; ++br) {
          for (std::int64_t bc = 0; bc < bin_cols; ++bc) {
            const std::int64_t k = (r * bin_rows + br) * in.cols + c * bin_cols + bc;
            const double value = f[k];
            if (raw) {
              double t = (value - dark[static_cast<std::size_t>(k)]) /
                         (flat[static_cast<std::size_t>(k)] - dark[static_cast<std::size_t>(k)]);
              if (!(t >= min_transmission) || !std::isfinite(t)) {
                t = min_transmission;
                ++clamped;
              }
              acc += t;
            } else {
              acc += value;  // finite: checked above
            }
          }
        }
        const double mean = acc * inv_bin;
        o[r * mc + c] = static_cast<float>(raw ? -std::log(mean) : mean);
      }
    }
  }
  if (clamped > 0)
    notes.push_back(
        fmt::format("{} of {} pixels had a transmission (I - dark) / (flat - dark) below {:g} "
                    "(or not finite) and were clamped to it (line integral {:.3g})",
                    clamped, in.size(), min_transmission, -std::log(min_transmission)));
  if (report) {
    report->clamped = clamped;
    report->warnings = join(notes);
  }
  return out;
}

projection_stack reorient_projections(const projection_view& p, bool transpose, bool flip_u,
                                      bool flip_v) {
  require_host(p, "reorienting projections");
  CTFORGE_EXPECTS(static_cast<std::int64_t>(p.data.size()) == p.size(),
                  "reorient_projections: data size does not match the dimensions");
  const std::int64_t rows = transpose ? p.cols : p.rows, cols = transpose ? p.rows : p.cols;
  projection_stack out(p.views, rows, cols);
#pragma omp parallel for schedule(static)
  for (std::int64_t v = 0; v < p.views; ++v)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::int64_t rr = flip_v ? rows - 1 - r : r, cc = flip_u ? cols - 1 - c : c;
        out.at(v, r, c) = transpose ? p.at(v, cc, rr) : p.at(v, rr, cc);
      }
  return out;
}

namespace {

/// projection_format, knowing the datasets the user names: with the frames named, a
/// DataExchange file stays "dxchange" and any other HDF5 file is "hdf5" (read by the NXtomo
/// reader, which finds image keys and angles beside the frames).
std::string projection_format(const std::string& path, const hdf5_scan_paths& paths) {
  std::error_code ec;
  if (!has_glob_chars(path) && is_zarr_path(path)) return "zarr";
  if (!has_glob_chars(path) && is_dicom_ct_pd(path)) return "dicom-ct-pd";
  if (fs::is_directory(path, ec) || has_glob_chars(path)) return "tiff";
  const std::string ext = lower_extension(path);
  if (ext == ".tif" || ext == ".tiff") return "tiff";
  CTFORGE_CHECK(io::is_object_url(path) || fs::exists(path, ec),
                path + ": no such file or directory");
  if (ext == ".npy") return "npy";
  if (ext == ".mat") return "mat";
  CTFORGE_CHECK(ext != ".dcm",
                path +
                    ": a DICOM file without DICOM-CT-PD tags: not projections (a CT image is "
                    "read as a volume)");
  auto f = detail::h5::file::open(path);
  if (f.has_dataset("/exchange/data")) return "dxchange";
  if (!paths.data.empty()) return f.has_dataset("/projections") ? "ctforge" : "hdf5";
  if (f.has_dataset("/projections")) return "ctforge";
  if (holds_nxtomo(f)) return "nxtomo";
  const std::string unreachable = nxtomo_unreachable_frames(f);
  std::string present;
  const auto names = f.dataset_names();
  for (std::size_t i = 0; i < names.size() && i < 20; ++i)
    present += (present.empty() ? "" : ", ") + names[i];
  if (names.size() > 20)
    present += fmt::format(", ... {} more (ctforge info lists them)", names.size() - 20);
  CTFORGE_FAIL(
      fmt::format("{}: not a projection file: no /projections (ctforge), /exchange/data "
                  "(DataExchange) or NXtomo entry with frames{} (datasets present: {}); "
                  "--data-path names the frames [n][rows][cols] in any HDF5 layout",
                  path, unreachable, present.empty() ? "none" : present));
}

}  // namespace

std::string projection_format(const std::string& path) {
  return projection_format(path, hdf5_scan_paths{});
}

namespace {

/// Stored frames [first, first + count) of `s` (frames only; flats / darks untouched).
projection_stack frames_subset(const projection_stack& s, const std::vector<std::int64_t>& idx) {
  projection_stack out(static_cast<std::int64_t>(idx.size()), s.rows, s.cols);
  for (std::size_t k = 0; k < idx.size(); ++k)
    std::copy_n(s.view(idx[k]), s.rows * s.cols, out.view(static_cast<std::int64_t>(k)));
  return out;
}

/// A single-page TIFF image holding a sinogram (image rows = views): views x 1 x cols.
raw_scan read_tiff_sinogram(const std::string& path, const detector_selection& sel) {
  raw_scan img = read_tiff_stack(path, {{0, 1}, sel.views, sel.cols});
  (void)resolve_range(sel.rows, 1, "rows", path);
  raw_scan s;
  s.full_views = img.full_rows;
  s.full_rows = 1;
  s.full_cols = img.full_cols;
  s.integer_data = img.integer_data;
  s.frames = std::move(img.frames);  // [1][views][cols] is [views][1][cols] in memory
  s.frames.views = s.frames.rows;
  s.frames.rows = 1;
  return s;
}

/// Reads the stored frames for load_projections: the format's reader, a TIFF sinogram when
/// asked for or evident (a single-page file with as many rows as the angle list has lines),
/// and with an image-key column the split into projections, flats and darks.
raw_scan read_frames_any(const std::string& path, const std::string& format,
                         const projection_read_options& opt, detector_selection sel,
                         const angle_list* list, bool frames, bool& sinogram,
                         std::optional<geometry>& stored_geometry) {
  const bool keyed = list && !list->keys.empty();
  const bool array = format == "npy" || format == "mat" || format == "zarr";
  CTFORGE_EXPECTS(!keyed || format == "tiff" || array,
                  fmt::format("--angles {}: an image-key column applies to TIFF, .npy, .mat and "
                              "Zarr "
                              "data; {} ({}) records its own flat and dark fields",
                              opt.angles_path, path, format));
  CTFORGE_EXPECTS(!opt.sinogram || format == "tiff" || array,
                  fmt::format("--sinogram: {} is a {} file; a sinogram is read from a single 2D "
                              "TIFF image, a 2D .npy array, a 2D .mat variable or a 2D Zarr "
                              "array",
                              path, format));
  sinogram = false;
  if (format == "tiff" && (opt.sinogram || list)) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      const raw_scan probe = read_tiff_stack(path, {{0, 1}, {0, 1}, {0, 1}});
      CTFORGE_EXPECTS(!opt.sinogram || probe.full_views == 1,
                      fmt::format("--sinogram: {} holds {} images; a sinogram is one 2D image "
                                  "(views x cols)",
                                  path, probe.full_views));
      sinogram =
          probe.full_views == 1 &&
          (opt.sinogram || static_cast<std::int64_t>(list->angles_rad.size()) == probe.full_rows);
    } else {
      CTFORGE_EXPECTS(!opt.sinogram, fmt::format("--sinogram: {} is not a single TIFF file; a "
                                                 "sinogram is one 2D image (views x cols)",
                                                 path));
    }
  }
  const index_range views = sel.views;
  if (keyed && frames) sel.views = {0, -1};  // every stored frame: flats and darks among them
  if (keyed && !frames) sel.views = {0, 1};
  const hdf5_scan_paths& ds = opt.datasets;
  const bool named =
      !ds.data.empty() || !ds.flats.empty() || !ds.darks.empty() || !ds.angles.empty();
  CTFORGE_EXPECTS(
      !named || format == "dxchange" || format == "nxtomo" || format == "hdf5" ||
          (format == "mat" && ds.flats.empty() && ds.darks.empty() && ds.angles.empty()),
      fmt::format("--data-path, --flat-path, --dark-path, --angles-path name datasets "
                  "of an HDF5 file (and --data-path the variable of a .mat file); {} "
                  "is a {} file{}",
                  path, format, format == "ctforge" ? ", whose datasets are fixed" : ""));
  raw_scan scan;
  if (format == "ctforge")
    scan = read_native_selection(path, sel, stored_geometry);
  else if (format == "dxchange")
    scan = read_dxchange(path, sel, ds);
  else if (format == "nxtomo" || format == "hdf5")
    scan = read_nxtomo(path, sel, ds);
  else if (format == "npy")
    scan = read_npy(path, sel);
  else if (format == "mat")
    scan = read_mat(path, ds.data, sel);
  else if (format == "zarr")
    scan = read_zarr_frames(path, sel, stored_geometry);
  else if (format == "dicom-ct-pd")
    scan = read_dicom_ct_pd_frames(path, sel, stored_geometry.emplace());
  else
    scan = sinogram ? read_tiff_sinogram(path, sel) : read_tiff_stack(path, sel);
  if (array) {
    sinogram = scan.full_rows == 1;
    CTFORGE_EXPECTS(!opt.sinogram || sinogram,
                    fmt::format("--sinogram: {} holds a 3D array of {} views x {} rows x {} cols; "
                                "a sinogram is 2D (views x cols)",
                                path, scan.full_views, scan.full_rows, scan.full_cols));
  }
  if (!list) return scan;
  const std::int64_t lines = static_cast<std::int64_t>(list->angles_rad.size());
  if (!keyed) {
    CTFORGE_CHECK(lines == scan.full_views,
                  fmt::format("--angles {}: {} angles (lines {}..{}) for the {} views of {}",
                              opt.angles_path, lines, list->line_numbers.front(),
                              list->line_numbers.back(), scan.full_views, path));
    scan.angles_rad = list->angles_rad;
    return scan;
  }
  CTFORGE_CHECK(lines == scan.full_views,
                fmt::format("--angles {}: {} lines with image keys (lines {}..{}) for the {} "
                            "stored frames of {}; the key column needs one line per frame",
                            opt.angles_path, lines, list->line_numbers.front(),
                            list->line_numbers.back(), scan.full_views, path));
  std::vector<std::int64_t> proj, flat, dark;
  scan.angles_rad.clear();
  for (std::int64_t i = 0; i < lines; ++i) {
    const int key = list->keys[static_cast<std::size_t>(i)];
    if (key == 0) scan.angles_rad.push_back(list->angles_rad[static_cast<std::size_t>(i)]);
    if (key == 0) proj.push_back(i);
    if (key == 1) flat.push_back(i);
    if (key == 2) dark.push_back(i);
  }
  CTFORGE_CHECK(!proj.empty(),
                fmt::format("--angles {}: no line has image key 0 (projection)", opt.angles_path));
  scan.full_views = static_cast<std::int64_t>(proj.size());
  const auto [v0, nv] = resolve_range(views, scan.full_views, "views", path);
  if (!frames) return scan;
  scan.flats = frames_subset(scan.frames, flat);
  scan.darks = frames_subset(scan.frames, dark);
  scan.frames = frames_subset(scan.frames,
                              std::vector<std::int64_t>(proj.begin() + v0, proj.begin() + v0 + nv));
  return scan;
}

/// Open-beam normalisation: frames become transmissions (I - dark) / I0 with I0 the mean of
/// (I - dark) over the open-beam columns of the same view and row; the flat field becomes 1
/// and the dark 0, so that normalize() takes -log and bins. Then the selected columns are kept.
void apply_open_beam(raw_scan& scan, const projection_read_options& opt, const std::string& path) {
  CTFORGE_CHECK(scan.flats.views == 0,
                fmt::format("--open-beam-cols: {} has flat fields (given or keyed); use either "
                            "flat fields or open-beam columns",
                            path));
  std::vector<double> dark = mean_frame(scan.darks);
  auto& f = scan.frames;
  if (dark.empty()) dark.assign(static_cast<std::size_t>(f.rows * f.cols), 0.0);
  std::int64_t n_open = 0;
  for (const auto& [a, b] : opt.open_beam_cols) n_open += b - a;
#pragma omp parallel for schedule(static)
  for (std::int64_t v = 0; v < f.views; ++v) {
    float* img = f.view(v);
    for (std::int64_t r = 0; r < f.rows; ++r) {
      float* row = img + r * f.cols;
      const double* d = dark.data() + r * f.cols;
      double i0 = 0;
      for (const auto& [a, b] : opt.open_beam_cols)
        for (std::int64_t c = a; c < b; ++c) i0 += row[c] - d[c];
      i0 /= static_cast<double>(n_open);
      for (std::int64_t c = 0; c < f.cols; ++c) row[c] = static_cast<float>((row[c] - d[c]) / i0);
    }
  }
  const auto [c0, nc] = resolve_range(opt.select.cols, f.cols, "cols", path);
  projection_stack kept(f.views, f.rows, nc);
  for (std::int64_t v = 0; v < f.views; ++v)
    for (std::int64_t r = 0; r < f.rows; ++r)
      std::copy_n(f.view(v) + r * f.cols + c0, nc, kept.view(v) + r * nc);
  f = std::move(kept);
  scan.flats = projection_stack(1, f.rows, f.cols);
  std::fill(scan.flats.data.begin(), scan.flats.data.end(), 1.0f);
  scan.darks = projection_stack(1, f.rows, f.cols);  // subtracted already: 0
  scan.integer_data = false;
}

/// The geometry of the whole stored data set (as reoriented: `full_rows` x `full_cols`): from
/// --geometry, an angle list, the file's own geometry, or its angles and pixel size.
geometry full_geometry(const std::string& path, const std::string& format,
                       const projection_read_options& opt, const raw_scan& scan,
                       const std::optional<angle_list>& list,
                       const std::optional<geometry>& stored_geometry, bool sinogram,
                       std::vector<std::string>& notes) {
  const std::int64_t full_rows = opt.transpose ? scan.full_cols : scan.full_rows;
  const std::int64_t full_cols = opt.transpose ? scan.full_rows : scan.full_cols;
  geometry full;
  if (!opt.geometry_path.empty()) {
    full = load_geometry(opt.geometry_path);
    // A runtime error (the files disagree), naming both sides.
    CTFORGE_CHECK(
        full.view_count() == scan.full_views && full.rows == full_rows && full.cols == full_cols,
        fmt::format(
            "--geometry {}: {} views of {} rows x {} cols, but {} holds projections "
            "[{}][{}][{}] (views, rows, cols; the geometry describes the whole stored scan)",
            opt.geometry_path, full.view_count(), full.rows, full.cols, path, scan.full_views,
            full_rows, full_cols));
  } else if (list) {
    const double du = scan.pixel_u_mm > 0 ? scan.pixel_u_mm : opt.pixel_size_mm;
    const double dv = scan.pixel_v_mm > 0 ? scan.pixel_v_mm : opt.pixel_size_mm;
    full = opt.transpose ? make_parallel_geometry(full_cols, full_rows, dv, du, scan.angles_rad)
                         : make_parallel_geometry(full_cols, full_rows, du, dv, scan.angles_rad);
    if (format == "tiff" && !sinogram && !opt.flip_v && full_rows > 1)
      notes.push_back(
          "the geometry comes from the angle list and the data are TIFF images, which store row "
          "0 at the top: if the reconstruction is upside down, add --flip-v (README: which way "
          "rows and columns run)");
  } else if (stored_geometry) {
    full = *stored_geometry;
    CTFORGE_CHECK(
        full.view_count() == scan.full_views && full.rows == full_rows && full.cols == full_cols,
        fmt::format(
            "{}: the stored geometry describes {} views of {}x{} pixels, the projections are {} "
            "of {}x{}",
            path, full.view_count(), full.rows, full.cols, scan.full_views, full_rows, full_cols));
  } else {
    CTFORGE_EXPECTS(format != "tiff" && format != "npy" && format != "mat" && format != "zarr",
                    fmt::format("{}: {} data need a geometry JSON file (--geometry) or an angle "
                                "list (--angles)",
                                path, format == "tiff" ? "TIFF" : "." + format));
    CTFORGE_EXPECTS(format != "ctforge",
                    fmt::format("{}: no /geometry dataset; pass --geometry FILE", path));
    CTFORGE_CHECK(static_cast<std::int64_t>(scan.angles_rad.size()) == scan.full_views,
                  fmt::format("{}: {} rotation angles for {} views and no geometry given{}", path,
                              scan.angles_rad.size(), scan.full_views,
                              format == "tiff" ? ""
                                               : " (--angles-path names the dataset of the "
                                                 "angles, --geometry gives a geometry file)"));
    const double du = scan.pixel_u_mm > 0 ? scan.pixel_u_mm : opt.pixel_size_mm;
    const double dv = scan.pixel_v_mm > 0 ? scan.pixel_v_mm : opt.pixel_size_mm;
    if (scan.pixel_u_mm <= 0)
      notes.push_back(fmt::format("pixel size not recorded: {:g} mm assumed", du));
    full = opt.transpose ? make_parallel_geometry(full_cols, full_rows, dv, du, scan.angles_rad)
                         : make_parallel_geometry(full_cols, full_rows, du, dv, scan.angles_rad);
  }
  return full;
}

/// The detector selection in the reoriented indexing (the kept pixels: binning drops a
/// remainder), and the bin factors along its rows and columns.
struct oriented_selection {
  detector_selection select;
  std::int64_t bin_rows = 1, bin_cols = 1;
};

oriented_selection orient_selection(const std::string& path, const projection_read_options& opt,
                                    const raw_scan& scan) {
  const std::int64_t full_rows = opt.transpose ? scan.full_cols : scan.full_rows;
  const std::int64_t full_cols = opt.transpose ? scan.full_rows : scan.full_cols;
  const auto kept = [&](const index_range& r, std::int64_t size, std::int64_t bin,
                        const char* what) {
    const auto [first, count] = resolve_range(r, size, what, path);
    return std::pair<std::int64_t, std::int64_t>{first, count / bin * bin};
  };
  auto [r0, nr] = kept(opt.select.rows, scan.full_rows, opt.bin_rows, "rows");
  auto [c0, nc] = kept(opt.select.cols, scan.full_cols, opt.bin_cols, "cols");
  std::int64_t bin_r = opt.bin_rows, bin_c = opt.bin_cols;
  if (opt.transpose) {
    std::swap(r0, c0);
    std::swap(nr, nc);
    std::swap(bin_r, bin_c);
  }
  if (opt.flip_u) c0 = full_cols - c0 - nc;
  if (opt.flip_v) r0 = full_rows - r0 - nr;
  return {detector_selection{opt.select.views, {r0, nr}, {c0, nc}}, bin_r, bin_c};
}

/// --bin within the selection, once the stored sizes are known.
void check_bins(const std::string& path, const projection_read_options& opt, const raw_scan& scan) {
  // Binning by more pixels than are selected leaves none: the option is at fault.
  const std::int64_t sel_rows = resolve_range(opt.select.rows, scan.full_rows, "rows", path).second;
  const std::int64_t sel_cols = resolve_range(opt.select.cols, scan.full_cols, "cols", path).second;
  for (const auto& [what, n, bin] :
       {std::tuple{"rows", sel_rows, opt.bin_rows}, std::tuple{"cols", sel_cols, opt.bin_cols}})
    CTFORGE_EXPECTS(bin <= n, fmt::format("--bin {}: more than the {} {} selected of {} ({} rows "
                                          "x {} cols stored); bin by at most {}",
                                          bin, n, what, path, scan.full_rows, scan.full_cols,
                                          std::min(sel_rows, sel_cols)));
}

/// --open-beam-cols within the stored columns.
void check_open_beam_cols(const std::string& path, const projection_read_options& opt,
                          const raw_scan& scan) {
  for (const auto& [a, b] : opt.open_beam_cols)
    CTFORGE_EXPECTS(0 <= a && a < b && b <= scan.full_cols,
                    fmt::format("--open-beam-cols: columns {}:{} are not within the {} columns "
                                "of {} (A:B means columns A to B-1)",
                                a, b, scan.full_cols, path));
}

/// The line integrals of `scan` into out.projections: separate flat / dark images replace the
/// stored ones, open-beam columns normalise, raw counts are normalised and binned.
void frames_to_line_integrals(const std::string& path, const std::string& format,
                              const projection_read_options& opt, intensity_mode mode,
                              const detector_selection& read_sel, raw_scan& scan,
                              loaded_projections& out, std::vector<std::string>& notes) {
  detector_selection field_sel{{0, -1}, opt.select.rows, read_sel.cols};
  auto read_field = [&](const std::string& source, const char* what) {
    raw_scan f = read_tiff_stack(source, field_sel);
    CTFORGE_CHECK(
        f.full_rows == scan.full_rows && f.full_cols == scan.full_cols,
        fmt::format("{}: {} images are {}x{} pixels, the projections in {} {}x{}", source, what,
                    f.full_rows, f.full_cols, path, scan.full_rows, scan.full_cols));
    return std::move(f.frames);
  };
  if (!opt.flat_path.empty()) scan.flats = read_field(opt.flat_path, "flat field");
  if (!opt.dark_path.empty()) scan.darks = read_field(opt.dark_path, "dark field");
  if (!opt.open_beam_cols.empty()) {
    apply_open_beam(scan, opt, path);
    mode = intensity_mode::raw;
  }
  normalize_report report;
  if (mode == intensity_mode::line_integrals && opt.bin_rows == 1 && opt.bin_cols == 1) {
    // Line integrals as stored (our own files): checked, then taken without a copy.
    // (read_native_selection has checked our own files already, naming the file's indices.)
    if (format != "ctforge") require_finite_line_integrals(scan.frames, path);
    out.projections = std::move(scan.frames);
  } else {
    out.projections =
        normalize(scan, mode, opt.bin_rows, opt.bin_cols, opt.min_transmission, path, &report);
  }
  out.clamped = report.clamped;
  if (!report.warnings.empty()) notes.push_back(report.warnings);
}

/// read_projections_any, or with `frames` false only its geometry: then one pixel of one
/// view is read (the readers' range checks and the stored sizes, angles and geometry still
/// apply) and no flat / dark field, normalisation or reorientation happens.
loaded_projections load_projections(const std::string& path, const projection_read_options& opt,
                                    bool frames) {
  CTFORGE_EXPECTS(opt.pixel_size_mm > 0 && std::isfinite(opt.pixel_size_mm),
                  fmt::format("pixel size must be positive (got {})", opt.pixel_size_mm));
  CTFORGE_EXPECTS(opt.angles_path.empty() || opt.geometry_path.empty(),
                  "--angles and --geometry: give one of them (an angle list builds the geometry)");
  const std::string format = projection_format(path, opt.datasets);
  loaded_projections out;
  out.format = format;
  std::vector<std::string> notes;

  std::optional<angle_list> list;
  if (!opt.angles_path.empty()) {
    list = read_angle_list(opt.angles_path, opt.angles_in_radians);
    if (!list->warning.empty()) notes.push_back(list->warning);
  }
  std::optional<geometry> stored_geometry;
  intensity_mode mode = opt.mode;
  detector_selection read_sel = opt.select;
  const bool open_beam = frames && !opt.open_beam_cols.empty();
  CTFORGE_EXPECTS(opt.open_beam_cols.empty() || mode != intensity_mode::line_integrals,
                  "--open-beam-cols: normalises raw counts; the data were declared line integrals");
  if (open_beam) read_sel.cols = {0, -1};  // the open-beam columns may lie outside the crop
  if (!frames) {
    const auto one = [](const index_range& r) { return index_range{r.first, 1}; };
    read_sel = {one(opt.select.views), one(opt.select.rows), one(opt.select.cols)};
  }
  bool sinogram = false;
  raw_scan scan = read_frames_any(path, format, opt, read_sel, list ? &*list : nullptr, frames,
                                  sinogram, stored_geometry);
  check_bins(path, opt, scan);
  if (format == "ctforge" || format == "dicom-ct-pd") {
    CTFORGE_EXPECTS(mode != intensity_mode::raw,
                    fmt::format("{}: {} files hold line integrals, not raw counts", path,
                                format == "ctforge" ? "ctforge projection" : "DICOM-CT-PD"));
    if (opt.flat_path.empty() && opt.dark_path.empty()) mode = intensity_mode::line_integrals;
  }
  if (!scan.notes.empty()) notes.push_back(scan.notes);
  check_open_beam_cols(path, opt, scan);
  // The view range is checked here, before any field image is read.
  (void)resolve_range(opt.select.views, scan.full_views, "views", path);
  if (frames) frames_to_line_integrals(path, format, opt, mode, read_sel, scan, out, notes);

  const geometry full =
      full_geometry(path, format, opt, scan, list, stored_geometry, sinogram, notes);
  const oriented_selection oriented = orient_selection(path, opt, scan);
  if (frames && (opt.transpose || opt.flip_u || opt.flip_v))
    out.projections = reorient_projections(out.projections, opt.transpose, opt.flip_u, opt.flip_v);
  out.geom = select_geometry(full, oriented.select, oriented.bin_rows, oriented.bin_cols);
  out.geometry_json = geometry_to_json(*out.geom);
  out.warnings = join(notes);
  return out;
}

}  // namespace

loaded_projections read_projections_any(const std::string& path,
                                        const projection_read_options& opt) {
  return load_projections(path, opt, /*frames=*/true);
}

geometry read_projection_geometry(const std::string& path, const projection_read_options& opt) {
  return *load_projections(path, opt, /*frames=*/false).geom;
}

projection_read_options row_band_options(const projection_read_options& opt,
                                         std::int64_t total_rows, std::int64_t r0,
                                         std::int64_t r1) {
  CTFORGE_EXPECTS(
      0 <= r0 && r0 < r1 && r1 <= total_rows,
      fmt::format("detector rows [{}, {}) are not within the {} rows read", r0, r1, total_rows));
  // Rows of the reoriented detector are rows (or, transposed, columns) of the binned stored
  // data, reversed by flip_v: the band is one contiguous range of stored pixels, and reading
  // it with the same options gives exactly these rows.
  const std::int64_t a = opt.flip_v ? total_rows - r1 : r0;
  const std::int64_t b = opt.flip_v ? total_rows - r0 : r1;
  projection_read_options band = opt;
  index_range& axis = opt.transpose ? band.select.cols : band.select.rows;
  const std::int64_t bin = opt.transpose ? opt.bin_cols : opt.bin_rows;
  axis = {axis.first + a * bin, (b - a) * bin};
  return band;
}

projection_read_options unit_band_options(const projection_read_options& opt,
                                          std::int64_t total_rows, std::int64_t r0, std::int64_t r1,
                                          std::int64_t v0, std::int64_t v1) {
  CTFORGE_EXPECTS(0 <= v0 && v0 < v1, fmt::format("views [{}, {}): not a range", v0, v1));
  projection_read_options band = row_band_options(opt, total_rows, r0, r1);
  band.select.views = {opt.select.views.first + v0, v1 - v0};
  return band;
}

std::string content_kind(const std::string& path) {
  const std::string ext = lower_extension(path);
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  if (!dir && (ext == ".json" || ext == ".xml" || ext == ".txt" || ext == ".vec"))
    return "geometry";
  if (is_zarr_path(path)) return zarr_content_kind(path);
  if ((dir || ext == ".dcm") && is_dicom_ct_pd(path)) return "projections";
  if (dir) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string x = lower_extension(e.path().string());
      if (x == ".tif" || x == ".tiff") return "projections";
    }
    return "volume";
  }
  if (has_glob_chars(path) || ext == ".tif" || ext == ".tiff" || ext == ".npy" || ext == ".mat")
    return "projections";
  if (ext == ".h5" || ext == ".hdf5" || ext == ".hdf" || ext == ".nx" || ext == ".nxs") {
    auto f = detail::h5::file::open(path);
    return f.has_dataset("/volume") ? "volume" : "projections";
  }
  (void)volume_format_of(path);  // throws usage_error for unknown extensions
  return "volume";
}

namespace {

/// Every link of an HDF5 file that holds no scan or volume ctforge recognises: groups (with
/// their NX_class), datasets (type and shape), soft and external links (with their targets).
std::string describe_hdf5_tree(const detail::h5::file& f) {
  const auto walk = f.walk();
  std::string d = fmt::format(
      "{}: HDF5 file, {} objects and links (no ctforge volume or projections, no DataExchange "
      "or NXtomo scan recognised{}; --data-path names the frames [n][rows][cols] of a scan)\n",
      f.path(), walk.size(), nxtomo_unreachable_frames(f));
  constexpr std::size_t shown = 400;
  for (std::size_t i = 0; i < walk.size() && i < shown; ++i) {
    const auto& e = walk[i];
    std::string what = e.kind;
    if (e.kind == "group" && !e.nx_class.empty()) what += " " + e.nx_class;
    if (e.kind == "dataset")
      what += " " + e.type + " " +
              (e.null_space ? std::string("(null dataspace)") : detail::h5::shape_string(e.shape));
    if (!e.target.empty()) what += " -> " + e.target;
    std::string name;  // control characters (newlines and tabs in real files' names) escaped
    for (const char c : e.path)
      name += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
    d += fmt::format("  {:<40} {}\n", name, what);
  }
  if (walk.size() > shown) d += fmt::format("  ... {} more\n", walk.size() - shown);
  return d;
}

}  // namespace

std::string describe_any(const std::string& path) {
  std::error_code ec;
  if (is_zarr_path(path)) return describe_zarr(path);
  const bool dir = fs::is_directory(path, ec);
  if ((dir || lower_extension(path) == ".dcm") && is_dicom_ct_pd(path))
    return describe_dicom_ct_pd(path);
  if (dir) {
    bool has_tiff = false;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string ext = lower_extension(e.path().string());
      has_tiff = has_tiff || ext == ".tif" || ext == ".tiff";
    }
    if (!has_tiff) return describe_dicom(path);
  }
  const std::string ext = lower_extension(path);
  if (!dir && !has_glob_chars(path)) {
    if (ext == ".dcm") return describe_dicom(path);
    if (ext == ".mha" || ext == ".mhd" || ext == ".nrrd" || ext == ".nhdr" || ext == ".nii" ||
        ext == ".gz")
      return describe_itk_volume(path);
  }
  if (!dir && !has_glob_chars(path) && ext != ".tif" && ext != ".tiff" && ext != ".npy" &&
      ext != ".mat") {
    auto f = detail::h5::file::open(path);
    if (f.has_dataset("/volume") || f.has_dataset("/projections")) return describe_file(path);
    if (!f.has_dataset("/exchange/data") && !holds_nxtomo(f)) return describe_hdf5_tree(f);
  }
  const std::string format = projection_format(path);
  // Foreign projection data: shapes, angles and the value range of the first view.
  detector_selection first{{0, 1}, {}, {}};
  raw_scan s = format == "dxchange" ? read_dxchange(path, first)
               : format == "nxtomo" ? read_nxtomo(path, first)
               : format == "npy"    ? read_npy(path, first)
               : format == "mat"    ? read_mat(path, "", first)
                                    : read_tiff_stack(path, first);
  const auto [lo, hi] = std::minmax_element(s.frames.data.begin(), s.frames.data.end());
  std::string d =
      fmt::format("{}: {} projections\n  views {}, rows {}, cols {} ({} data)\n", path, format,
                  s.full_views, s.full_rows, s.full_cols, s.integer_data ? "integer" : "float");
  if (format == "nxtomo") {
    std::istringstream layout(describe_nxtomo_layout(path));
    for (std::string line; std::getline(layout, line);) d += "  " + line + "\n";
  }
  if (format == "tiff") {
    const auto files = list_tiff_files(path);
    d += fmt::format("  files {} ({} ... {})\n", files.size(),
                     fs::path(files.front()).filename().string(),
                     fs::path(files.back()).filename().string());
  }
  d += fmt::format("  flat fields {}, dark fields {}\n", s.flats.views, s.darks.views);
  if (!s.angles_rad.empty()) {
    const auto [a0, a1] = std::minmax_element(s.angles_rad.begin(), s.angles_rad.end());
    d += fmt::format("  angles {:.4g} .. {:.4g} deg\n", rad_to_deg(*a0), rad_to_deg(*a1));
  }
  if (s.pixel_u_mm > 0) d += fmt::format("  pixel {:g} x {:g} mm\n", s.pixel_u_mm, s.pixel_v_mm);
  if (lo != s.frames.data.end()) d += fmt::format("  first view values {:g} .. {:g}\n", *lo, *hi);
  return d;
}

}  // namespace ctforge::io
