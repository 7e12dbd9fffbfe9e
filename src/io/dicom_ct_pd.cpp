// DICOM-CT-PD projections (formats.hpp; the tags and the frames: docs/file-formats.md).
//
// Every file is walked element by element here (io/dicom_walk.hpp, as dicom.cpp does before it
// hands a file to GDCM): the header up to the Pixel Data element, whose bytes are then read
// straight from the file, so that a truncated or malformed file is an error naming it and the
// tag, and the geometry of a scan of tens of thousands of views is read without its pixels.
// Private tags are read by their published tag numbers and VRs (explicit VR files must give the
// VR of the dictionary, or UN; implicit VR files are checked by length only).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/finite_scan.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/dicom_ct_pd_tags.hpp"
#include "io/dicom_walk.hpp"

namespace ctforge::io {

namespace {

namespace fs = std::filesystem;
using detail::ct_pd_tag;
using detail::dicom_element;
using detail::dicom_walk;
namespace tag = detail::ct_pd;

constexpr double k_pi = std::numbers::pi;

/// "(7031,1001) DetectorFocalCenterAngularPosition"
std::string name_of(const ct_pd_tag& t) {
  return fmt::format("({:04X},{:04X}) {}", t.group, t.element, t.name);
}

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t i1 = i, j1 = j;
      while (i1 < a.size() && std::isdigit(static_cast<unsigned char>(a[i1]))) ++i1;
      while (j1 < b.size() && std::isdigit(static_cast<unsigned char>(b[j1]))) ++j1;
      std::string x = a.substr(i, i1 - i), y = b.substr(j, j1 - j);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i1;
      j = j1;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// ---- one file's header ---------------------------------------------------------------------

/// A file's header bytes (at least up to its Pixel Data element) and their walk.
struct header_bytes {
  std::string path;
  std::vector<unsigned char> bytes;
  dicom_walk walk;
  std::uintmax_t size = 0;  ///< of the whole file
};

std::vector<unsigned char> read_prefix(const std::string& path, std::uintmax_t n) {
  std::ifstream in(path, std::ios::binary);
  CTFORGE_CHECK(in.good(), path + ": cannot open");
  std::vector<unsigned char> b(static_cast<std::size_t>(n));
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(n));
  CTFORGE_CHECK(in.gcount() == static_cast<std::streamsize>(n), path + ": cannot read");
  return b;
}

header_bytes read_header(const std::string& path) {
  constexpr std::uintmax_t k_prefix = 16 * 1024;  // a longer header is read whole below
  header_bytes h;
  h.path = path;
  std::error_code ec;
  h.size = fs::file_size(path, ec);
  CTFORGE_CHECK(!ec, fmt::format("{}: cannot read: {}", path, ec.message()));
  h.bytes = read_prefix(path, std::min(h.size, k_prefix));
  h.walk = detail::walk_dicom(h.bytes, /*stop_at_pixels=*/true);
  if (!h.walk.problem.empty() && h.bytes.size() < h.size) {  // a header longer than the prefix
    h.bytes = read_prefix(path, h.size);
    h.walk = detail::walk_dicom(h.bytes, /*stop_at_pixels=*/true);
  }
  return h;
}

/// A DICOM file is one that walks (or announces itself by the DICM preamble).
bool looks_dicom(const header_bytes& h) {
  return h.walk.preamble || (h.walk.problem.empty() && !h.walk.elements.empty());
}

bool has_ct_pd_tags(const header_bytes& h) {
  for (const auto& e : h.walk.elements)
    if (detail::is_ct_pd_element(e.group, e.element)) return true;
  return false;
}

/// Typed access to a header's tags, every failure an error naming the file and the tag.
class tag_reader {
 public:
  explicit tag_reader(const header_bytes& h) : h_(h) {}

  [[noreturn]] void fail(const ct_pd_tag& t, const std::string& what) const {
    CTFORGE_FAIL(fmt::format("{}: DICOM-CT-PD tag {} {}", h_.path, name_of(t), what));
  }

  /// The element of `t` with its VR checked (the dictionary's or UN; any in implicit VR).
  const dicom_element* find(const ct_pd_tag& t, bool required) const {
    const dicom_element* e = h_.walk.find(t.group, t.element);
    if (!e) {
      if (required) fail(t, "is missing");
      return nullptr;
    }
    if (e->vr[0] != '\0' && std::strcmp(e->vr, t.vr) != 0 && std::strcmp(e->vr, "UN") != 0 &&
        !(std::strcmp(t.vr, "OW") == 0 && std::strcmp(e->vr, "OB") == 0))
      fail(t, fmt::format("has VR {}, expected {}", e->vr, t.vr));
    if (e->undefined && std::strcmp(t.vr, "OW") != 0) fail(t, "has an undefined length");
    return e;
  }

  /// The numbers of a numeric tag (US, FL: binary; DS, IS: decimal text), checked for count
  /// and finiteness. Empty when absent and not required.
  std::vector<double> numbers(const ct_pd_tag& t, bool required) const {
    const dicom_element* e = find(t, required);
    std::vector<double> out;
    if (!e) return out;
    const std::span<const unsigned char> b(h_.bytes);
    const std::string vr = t.vr;
    if (vr == "US" || vr == "FL") {
      const std::uint32_t size = vr == "US" ? 2 : 4;
      const auto want = size * static_cast<std::uint32_t>(t.vm);
      if (t.vm > 0 && e->length != want)
        fail(t, fmt::format("holds {} bytes, expected {} ({} {} value{})", e->length, want, t.vm,
                            vr, t.vm == 1 ? "" : "s"));
      if (e->length == 0 || e->length % size != 0)
        fail(t, fmt::format("holds {} bytes, expected a positive multiple of {} ({} values)",
                            e->length, size, vr));
      if (vr == "US")
        for (std::uint16_t x : detail::element_u16(b, *e)) out.push_back(x);
      else
        for (float x : detail::element_f32(b, *e)) out.push_back(x);
    } else {
      std::string text = detail::element_text(b, *e);
      std::replace(text.begin(), text.end(), '\\', ' ');
      const char* p = text.c_str();
      char* end = nullptr;
      for (;;) {
        while (*p == ' ') ++p;
        if (*p == '\0') break;
        const double x = std::strtod(p, &end);
        if (end == p) fail(t, fmt::format("holds '{}', which is not a number", text));
        out.push_back(x);
        p = end;
      }
      if (out.empty() || (t.vm > 0 && out.size() != static_cast<std::size_t>(t.vm)))
        fail(t, fmt::format("holds '{}': {} number{} expected", text, t.vm, t.vm == 1 ? "" : "s"));
    }
    for (double x : out)
      if (!std::isfinite(x)) fail(t, "holds a value that is not finite");
    return out;
  }

  /// One number, or `fallback` when the tag is absent and not required.
  double number(const ct_pd_tag& t, bool required, double fallback = 0) const {
    const auto v = numbers(t, required);
    return v.empty() ? fallback : v.front();
  }

  /// Text (CS, UI), upper-cased for CS; empty when absent and not required.
  std::string text(const ct_pd_tag& t, bool required) const {
    const dicom_element* e = find(t, required);
    if (!e) return {};
    std::string s = detail::element_text(std::span<const unsigned char>(h_.bytes), *e);
    if (std::strcmp(t.vr, "CS") == 0)
      for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (required && s.empty()) fail(t, "is empty");
    return s;
  }

 private:
  const header_bytes& h_;
};

// ---- one file's view -----------------------------------------------------------------------

/// What one file holds: its view, its detector (repeated by every file) and where its pixels are.
struct pd_file {
  dicom_ct_pd_view view;
  bool has_instance = false;
  std::int64_t det_rows = 0, det_cols = 0;
  double col_spacing = 0, row_spacing = 0, central_col = 0, central_row = 0;
  std::string shape, ffs, scan_type, series_uid, log_flag;
  std::int64_t steps = 0, spectrum = -1;
  // Pixels: stored cols x rows (TCIA) instead of rows x cols (the manual), byte order, integer
  // type, offset and length in the file.
  bool transposed = false, big_endian = false, is_signed = false;
  int bits_stored = 16;
  std::size_t pixel_offset = 0, pixel_length = 0;
};

void read_detector(const tag_reader& t, pd_file& f) {
  f.det_rows = static_cast<std::int64_t>(t.number(tag::detector_rows, true));
  f.det_cols = static_cast<std::int64_t>(t.number(tag::detector_cols, true));
  if (f.det_rows < 1) t.fail(tag::detector_rows, "is 0");
  if (f.det_cols < 1) t.fail(tag::detector_cols, "is 0");
  f.col_spacing = t.number(tag::col_spacing, true);
  f.row_spacing = t.number(tag::row_spacing, true);
  for (const auto& [spacing, which] :
       {std::pair{f.col_spacing, &tag::col_spacing}, std::pair{f.row_spacing, &tag::row_spacing}})
    if (!(spacing > 0)) t.fail(*which, fmt::format("is {}: a positive spacing is needed", spacing));
  f.shape = t.text(tag::shape, true);
  if (f.shape != "CYLINDRICAL" && f.shape != "FLAT")
    t.fail(tag::shape,
           fmt::format("is '{}': CYLINDRICAL and FLAT detectors are supported", f.shape));
  const auto central = t.numbers(tag::central_element, true);
  f.central_col = central[0];
  f.central_row = central[1];
}

void read_view(const tag_reader& t, pd_file& f) {
  dicom_ct_pd_view& v = f.view;
  v.focal_angle_rad = t.number(tag::focal_angle, true);
  v.focal_z_mm = t.number(tag::focal_z, true);
  v.focal_radius_mm = t.number(tag::focal_radius, true);
  v.detector_radius_mm = t.number(tag::detector_radius, true);
  if (!(v.focal_radius_mm > 0))
    t.fail(tag::focal_radius,
           fmt::format("is {}: a positive distance is needed", v.focal_radius_mm));
  if (!(v.detector_radius_mm > v.focal_radius_mm))
    t.fail(tag::detector_radius,
           fmt::format("is {} mm, not more than {} {} mm (the detector lies beyond the isocentre)",
                       v.detector_radius_mm, name_of(tag::focal_radius), v.focal_radius_mm));
  v.source_d_angle_rad = t.number(tag::d_angle, false);
  v.source_d_z_mm = t.number(tag::d_z, false);
  v.source_d_radius_mm = t.number(tag::d_radius, false);
  v.rescale_slope = t.number(tag::rescale_slope, true);
  v.rescale_intercept = t.number(tag::rescale_intercept, true);
  const auto inst = t.numbers(tag::instance, false);
  f.has_instance = !inst.empty();
  if (f.has_instance) {
    if (inst[0] != std::floor(inst[0])) t.fail(tag::instance, "is not an integer");
    v.instance = static_cast<std::int64_t>(inst[0]);
  }
  f.ffs = t.text(tag::ffs_mode, false);
  f.steps = static_cast<std::int64_t>(t.number(tag::angular_steps, false));
  f.scan_type = t.text(tag::data_type, false);
  f.series_uid = t.text(tag::series_uid, false);
  f.spectrum = static_cast<std::int64_t>(t.number(tag::spectrum_index, false, -1));
  f.log_flag = t.text(tag::log_flag, false);
  const std::string geometry_type = t.text(tag::geometry_type, false);
  if (!geometry_type.empty() && geometry_type != "FANBEAM")
    t.fail(
        tag::geometry_type,
        fmt::format("is '{}': third-generation (FANBEAM) geometries are supported", geometry_type));
  (void)t.numbers(tag::photon_statistics, false);  // checked, not used
}

/// The pixel module: 16-bit grey values of detector rows x cols, stored either way round.
void read_pixel_layout(const tag_reader& t, const header_bytes& h, pd_file& f) {
  const auto image_rows = static_cast<std::int64_t>(t.number(tag::image_rows, true));
  const auto image_cols = static_cast<std::int64_t>(t.number(tag::image_cols, true));
  if (image_rows == f.det_rows && image_cols == f.det_cols)
    f.transposed = false;  // the manual's layout (also when square)
  else if (image_rows == f.det_cols && image_cols == f.det_rows)
    f.transposed = true;  // the TCIA files' layout
  else
    t.fail(tag::image_rows,
           fmt::format("and Columns (0028,0011) are {} x {}, but {} x {} are {} x {}: the image "
                       "must hold the detector's rows x columns (or columns x rows)",
                       image_rows, image_cols, name_of(tag::detector_rows),
                       name_of(tag::detector_cols), f.det_rows, f.det_cols));
  if (t.number(tag::samples, false, 1) != 1) t.fail(tag::samples, "is not 1 (greyscale)");
  const double allocated = t.number(tag::bits_allocated, true);
  if (allocated != 16)
    t.fail(tag::bits_allocated, fmt::format("is {}: DICOM-CT-PD pixels are 16-bit", allocated));
  f.bits_stored = static_cast<int>(t.number(tag::bits_stored, false, 16));
  if (f.bits_stored < 1 || f.bits_stored > 16)
    t.fail(tag::bits_stored, fmt::format("is {} with 16 bits allocated", f.bits_stored));
  const double high = t.number(tag::high_bit, false, f.bits_stored - 1);
  if (high != f.bits_stored - 1)
    t.fail(tag::high_bit, fmt::format("is {} with {} bits stored (expected {})", high,
                                      f.bits_stored, f.bits_stored - 1));
  const double representation = t.number(tag::pixel_representation, false, 0);
  if (representation != 0 && representation != 1)
    t.fail(tag::pixel_representation, fmt::format("is {}", representation));
  f.is_signed = representation == 1;
  CTFORGE_CHECK(
      !h.walk.deflated,
      fmt::format("{}: deflated transfer syntax: not supported (inflate the file first)", h.path));
  const dicom_element* e = t.find(tag::pixel_data, true);
  if (e->undefined)
    t.fail(tag::pixel_data,
           fmt::format("is encapsulated (compressed, transfer syntax {}): not supported; "
                       "decompress the files first (e.g. gdcmconv --raw)",
                       h.walk.transfer_syntax));
  const auto expected = static_cast<std::uint64_t>(f.det_rows * f.det_cols * 2);
  if (e->length != expected)
    t.fail(tag::pixel_data, fmt::format("holds {} bytes, expected {} ({} x {} 16-bit values)",
                                        e->length, expected, image_rows, image_cols));
  if (e->offset + e->length > h.size)
    t.fail(tag::pixel_data,
           fmt::format("announces {} bytes but only {} remain: truncated file", e->length,
                       h.size - std::min<std::uintmax_t>(h.size, e->offset)));
  f.pixel_offset = e->offset;
  f.pixel_length = e->length;
  f.big_endian = e->big_endian;
}

pd_file parse_file(const header_bytes& h) {
  CTFORGE_CHECK(h.walk.problem.empty(),
                fmt::format("{}: not a readable DICOM file: {}", h.path, h.walk.problem));
  const tag_reader t(h);
  pd_file f;
  f.view.file = h.path;
  read_detector(t, f);
  read_view(t, f);
  read_pixel_layout(t, h, f);
  return f;
}

// ---- the files of a scan -------------------------------------------------------------------

struct pd_files {
  std::vector<pd_file> files;  ///< in acquisition order
  std::vector<std::string> notes;
};

/// The DICOM files of `path` (a directory, or one file) that carry DICOM-CT-PD tags, parsed.
std::vector<pd_file> parse_files(const std::string& path, std::vector<std::string>& notes) {
  std::error_code ec;
  CTFORGE_CHECK(fs::exists(path, ec), path + ": no such file or directory");
  if (!fs::is_directory(path, ec)) {
    const header_bytes h = read_header(path);
    return {parse_file(h)};
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file()) names.push_back(e.path().string());
  CTFORGE_CHECK(!ec, fmt::format("{}: cannot list directory: {}", path, ec.message()));
  std::sort(names.begin(), names.end(), natural_less);
  std::vector<pd_file> out;
  std::int64_t other_dicom = 0;
  for (const auto& name : names) {
    const header_bytes h = read_header(name);
    if (!looks_dicom(h)) continue;  // not DICOM: not ours to judge
    if (h.walk.problem.empty() && !has_ct_pd_tags(h)) {
      ++other_dicom;  // a DICOMDIR, an image: not a projection
      continue;
    }
    out.push_back(parse_file(h));
  }
  CTFORGE_CHECK(!out.empty(), fmt::format("{}: no DICOM-CT-PD file found", path));
  if (other_dicom > 0)
    notes.push_back(fmt::format("{} DICOM file{} without DICOM-CT-PD tags ignored", other_dicom,
                                other_dicom == 1 ? "" : "s"));
  return out;
}

/// Acquisition order: by Instance Number (all files need one, all distinct), or by file name
/// when no file has one.
void sort_views(std::vector<pd_file>& files, std::vector<std::string>& notes) {
  const auto with =
      std::count_if(files.begin(), files.end(), [](const pd_file& f) { return f.has_instance; });
  if (with == 0) {
    if (files.size() > 1)
      notes.push_back("no file has an Instance Number (0020,0013): views taken in file-name order");
    return;
  }
  for (const auto& f : files)
    CTFORGE_CHECK(f.has_instance,
                  fmt::format("{}: DICOM-CT-PD tag {} is missing (other files of the scan have "
                              "one, e.g. {})",
                              f.view.file, name_of(tag::instance),
                              std::find_if(files.begin(), files.end(), [](const pd_file& g) {
                                return g.has_instance;
                              })->view.file));
  std::stable_sort(files.begin(), files.end(), [](const pd_file& a, const pd_file& b) {
    return a.view.instance < b.view.instance;
  });
  for (std::size_t i = 1; i < files.size(); ++i)
    CTFORGE_CHECK(files[i].view.instance != files[i - 1].view.instance,
                  fmt::format("{}: DICOM-CT-PD tag {} is {}, as in {}: every view needs a "
                              "number of its own",
                              files[i].view.file, name_of(tag::instance), files[i].view.instance,
                              files[i - 1].view.file));
}

/// Every file must describe the first file's detector, series and spectrum.
void check_consistent(const std::vector<pd_file>& files) {
  const pd_file& a = files.front();
  for (const pd_file& b : files) {
    auto same = [&](bool equal, const ct_pd_tag& t, const std::string& got,
                    const std::string& want) {
      CTFORGE_CHECK(equal, fmt::format("{}: DICOM-CT-PD tag {} is {}, but {} has {}: the files of "
                                       "one scan describe one detector",
                                       b.view.file, name_of(t), got, a.view.file, want));
    };
    same(b.det_rows == a.det_rows, tag::detector_rows, fmt::format("{}", b.det_rows),
         fmt::format("{}", a.det_rows));
    same(b.det_cols == a.det_cols, tag::detector_cols, fmt::format("{}", b.det_cols),
         fmt::format("{}", a.det_cols));
    same(b.col_spacing == a.col_spacing, tag::col_spacing, fmt::format("{}", b.col_spacing),
         fmt::format("{}", a.col_spacing));
    same(b.row_spacing == a.row_spacing, tag::row_spacing, fmt::format("{}", b.row_spacing),
         fmt::format("{}", a.row_spacing));
    same(b.shape == a.shape, tag::shape, b.shape, a.shape);
    same(b.central_col == a.central_col && b.central_row == a.central_row, tag::central_element,
         fmt::format("({}, {})", b.central_col, b.central_row),
         fmt::format("({}, {})", a.central_col, a.central_row));
    same(b.ffs == a.ffs, tag::ffs_mode, "'" + b.ffs + "'", "'" + a.ffs + "'");
    same(b.series_uid == a.series_uid, tag::series_uid, "'" + b.series_uid + "'",
         "'" + a.series_uid + "'");
    same(b.spectrum == a.spectrum, tag::spectrum_index, fmt::format("{}", b.spectrum),
         fmt::format("{}", a.spectrum));
  }
}

pd_files read_files(const std::string& path) {
  pd_files s;
  s.files = parse_files(path, s.notes);
  check_consistent(s.files);
  sort_views(s.files, s.notes);
  const pd_file& f = s.files.front();
  if (f.log_flag == "NO")
    s.notes.push_back(
        fmt::format("{} is NO: the values may not be line integrals", name_of(tag::log_flag)));
  return s;
}

dicom_ct_pd_scan scan_of(const pd_files& s) {
  const pd_file& f = s.files.front();
  dicom_ct_pd_scan scan;
  scan.cols = f.det_cols;
  scan.rows = f.det_rows;
  scan.col_spacing_mm = f.col_spacing;
  scan.row_spacing_mm = f.row_spacing;
  scan.shape = f.shape == "FLAT" ? detector_shape::flat : detector_shape::cylindrical;
  scan.central_col = f.central_col;
  scan.central_row = f.central_row;
  scan.flying_focal_spot = f.ffs;
  scan.views_per_turn = f.steps;
  scan.scan_type = f.scan_type;
  for (const auto& g : s.files) scan.views.push_back(g.view);
  return scan;
}

/// The geometry of the files, a file's fault an error naming the path.
geometry geometry_of(const std::string& path, const dicom_ct_pd_scan& scan, std::string& how) {
  try {
    return geometry_from_dicom_ct_pd(scan, &how);
  } catch (const usage_error& e) {
    CTFORGE_FAIL(fmt::format("{}: {}", path, e.what()));
  }
}

// ---- pixels --------------------------------------------------------------------------------

/// Rows [r0, r0 + nr) and columns [c0, c0 + nc) of our detector (row r is the format's row
/// rows - r, 1-based) of file `f`, rescaled, into `out` (nr x nc).
void read_pixels(const pd_file& f, std::int64_t r0, std::int64_t nr, std::int64_t c0,
                 std::int64_t nc, float* out) {
  std::ifstream in(f.view.file, std::ios::binary);
  CTFORGE_CHECK(in.good(), f.view.file + ": cannot open");
  std::vector<unsigned char> b(f.pixel_length);
  in.seekg(static_cast<std::streamoff>(f.pixel_offset));
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  CTFORGE_CHECK(
      in.gcount() == static_cast<std::streamsize>(b.size()),
      fmt::format("{}: cannot read {} (truncated file?)", f.view.file, name_of(tag::pixel_data)));
  const std::int64_t rows = f.det_rows, cols = f.det_cols;
  const unsigned mask = f.bits_stored >= 16 ? 0xFFFFu : (1u << f.bits_stored) - 1u;
  const unsigned sign = 1u << (f.bits_stored - 1);
  for (std::int64_t r = r0; r < r0 + nr; ++r) {
    const std::int64_t y = rows - 1 - r;
    for (std::int64_t c = c0; c < c0 + nc; ++c) {
      const std::size_t k = static_cast<std::size_t>(f.transposed ? c * rows + y : y * cols + c);
      const unsigned hi = b[2 * k + (f.big_endian ? 0 : 1)], lo = b[2 * k + (f.big_endian ? 1 : 0)];
      const unsigned raw = ((hi << 8) | lo) & mask;
      const double stored =
          f.is_signed && (raw & sign) ? static_cast<double>(raw) - 2.0 * sign : raw;
      out[(r - r0) * nc + (c - c0)] =
          static_cast<float>(stored * f.view.rescale_slope + f.view.rescale_intercept);
    }
  }
}

/// read_pixels for views [v0, v0 + nv) into a projection stack, files read in parallel.
projection_stack read_frames(const std::vector<pd_file>& files, std::int64_t v0, std::int64_t nv,
                             std::int64_t r0, std::int64_t nr, std::int64_t c0, std::int64_t nc) {
  projection_stack out(nv, nr, nc);
  std::string failure;
#pragma omp parallel for schedule(dynamic, 4)
  for (std::int64_t v = 0; v < nv; ++v) {
    try {
      read_pixels(files[static_cast<std::size_t>(v0 + v)], r0, nr, c0, nc, out.view(v));
    } catch (const std::exception& e) {
#pragma omp critical(ct_pd_read)
      if (failure.empty()) failure = e.what();
    }
  }
  if (!failure.empty()) throw error(failure);
  return out;
}

}  // namespace

// ---- geometry ------------------------------------------------------------------------------

namespace {

/// Angle difference wrapped into (-pi, pi].
double wrap(double d) {
  d = std::remainder(d, 2 * k_pi);
  return d <= -k_pi ? d + 2 * k_pi : d;
}

void check_scan(const dicom_ct_pd_scan& s) {
  CTFORGE_EXPECTS(s.cols >= 1 && s.rows >= 1,
                  fmt::format("DICOM-CT-PD: the detector has {} x {} pixels", s.rows, s.cols));
  CTFORGE_EXPECTS(s.col_spacing_mm > 0 && s.row_spacing_mm > 0 && std::isfinite(s.col_spacing_mm) &&
                      std::isfinite(s.row_spacing_mm),
                  fmt::format("DICOM-CT-PD: detector element spacing {} x {} mm", s.col_spacing_mm,
                              s.row_spacing_mm));
  CTFORGE_EXPECTS(std::isfinite(s.central_col) && std::isfinite(s.central_row),
                  "DICOM-CT-PD: DetectorCentralElement is not finite");
  CTFORGE_EXPECTS(!s.views.empty(), "DICOM-CT-PD: no view");
  for (std::size_t i = 0; i < s.views.size(); ++i) {
    const dicom_ct_pd_view& v = s.views[i];
    CTFORGE_EXPECTS(
        std::isfinite(v.focal_angle_rad) && std::isfinite(v.focal_z_mm) &&
            std::isfinite(v.source_d_angle_rad) && std::isfinite(v.source_d_z_mm) &&
            std::isfinite(v.source_d_radius_mm) && v.focal_radius_mm > 0 &&
            v.detector_radius_mm > v.focal_radius_mm && std::isfinite(v.detector_radius_mm),
        fmt::format("DICOM-CT-PD view {}{}: focal centre ({} mm, {} rad, {} mm), "
                    "ConstantRadialDistance {} mm: finite values and a detector beyond the "
                    "isocentre are needed",
                    i, v.file.empty() ? "" : " (" + v.file + ")", v.focal_radius_mm,
                    v.focal_angle_rad, v.focal_z_mm, v.detector_radius_mm));
  }
}

/// The views' angles in our frame (t = -phi), unwrapped into a continuous sequence.
std::vector<double> our_angles(const dicom_ct_pd_scan& s) {
  std::vector<double> t(s.views.size());
  double phi = s.views.front().focal_angle_rad;
  for (std::size_t i = 0; i < s.views.size(); ++i) {
    if (i > 0) phi += wrap(s.views[i].focal_angle_rad - s.views[i - 1].focal_angle_rad);
    t[i] = -phi;
  }
  return t;
}

/// Per-view vectors: the source where the focal spot is, the detector where the focal centre
/// puts it (a cylindrical one as a cylinder about the source through the true centre pixel).
geometry vector_geometry(const dicom_ct_pd_scan& s, double off_u, double off_v) {
  std::vector<view_vectors> views;
  for (const dicom_ct_pd_view& v : s.views) {
    const double t = -v.focal_angle_rad, ts = -(v.focal_angle_rad + v.source_d_angle_rad);
    const double rho = v.focal_radius_mm, rs = rho + v.source_d_radius_mm,
                 d0 = v.detector_radius_mm;
    const vec3 focal{rho * std::sin(t), -rho * std::cos(t), v.focal_z_mm};
    const vec3 n{-std::sin(t), std::cos(t), 0}, e{std::cos(t), std::sin(t), 0}, z{0, 0, 1};
    view_vectors w;
    w.source = {rs * std::sin(ts), -rs * std::cos(ts), v.focal_z_mm + v.source_d_z_mm};
    w.v = s.row_spacing_mm * z;
    if (s.shape == detector_shape::flat) {
      w.detector_center = focal + d0 * n + off_u * e + off_v * z;
      w.u = s.col_spacing_mm * e;
    } else {
      const double g = off_u / d0;
      w.detector_center = focal + d0 * (std::cos(g) * n + std::sin(g) * e) + off_v * z;
      vec3 r = w.detector_center - w.source;
      r.z = 0;
      r = (1.0 / norm(r)) * r;
      w.u = s.col_spacing_mm * vec3{r.y, -r.x, 0};  // r turned by -90 degrees: along e at g = 0
    }
    views.push_back(w);
  }
  return make_vec_geometry(beam_kind::cone, s.cols, s.rows, std::move(views), s.shape);
}

}  // namespace

geometry geometry_from_dicom_ct_pd(const dicom_ct_pd_scan& s, std::string* how) {
  CTFORGE_EXPECTS(s.shape == detector_shape::flat || s.shape == detector_shape::cylindrical,
                  "DICOM-CT-PD: unsupported detector shape");
  check_scan(s);
  const double du = s.col_spacing_mm, dv = s.row_spacing_mm;
  const double off_u = (0.5 * static_cast<double>(s.cols + 1) - s.central_col) * du;
  const double off_v = (s.central_row - 0.5 * static_cast<double>(s.rows + 1)) * dv;
  const dicom_ct_pd_view& a = s.views.front();
  const std::size_t n = s.views.size();
  bool shifted = false, same_radii = true;
  for (const auto& v : s.views) {
    shifted =
        shifted || v.source_d_angle_rad != 0 || v.source_d_z_mm != 0 || v.source_d_radius_mm != 0;
    same_radii =
        same_radii && std::abs(v.focal_radius_mm - a.focal_radius_mm) <= 1e-6 * a.focal_radius_mm &&
        std::abs(v.detector_radius_mm - a.detector_radius_mm) <= 1e-6 * a.detector_radius_mm;
  }
  auto say = [&](const std::string& text) {
    if (how) *how = text;
  };
  if (!shifted && same_radii) {
    const std::vector<double> t = our_angles(s);
    const double sid = a.focal_radius_mm, sdd = a.detector_radius_mm;
    // 1% of a detector row at the isocentre, 1% of the angular step.
    const double tol_z = 0.01 * dv * sid / sdd;
    bool flat_z = true;
    for (const auto& v : s.views) flat_z = flat_z && std::abs(v.focal_z_mm - a.focal_z_mm) <= tol_z;
    if (flat_z) {
      say(fmt::format("circular 'cone' (every view at focal height {} mm, our z = 0)",
                      a.focal_z_mm));
      return make_cone_geometry(s.cols, s.rows, du, dv, sid, sdd, t, {off_u}, {off_v}, s.shape);
    }
    const double step = (t.back() - t.front()) / static_cast<double>(n - 1);
    const double turns = std::abs(t.back() - t.front()) / (2 * k_pi);
    const double pitch = (s.views.back().focal_z_mm - a.focal_z_mm) / turns;
    bool regular = step != 0;
    for (std::size_t i = 0; i < n && regular; ++i) {
      const double ti = t.front() + step * static_cast<double>(i);
      const double zi = a.focal_z_mm + pitch * std::abs(t[i] - t.front()) / (2 * k_pi);
      regular = std::abs(t[i] - ti) <= 0.01 * std::abs(step) &&
                std::abs(s.views[i].focal_z_mm - zi) <= tol_z;
    }
    if (regular) {
      say(fmt::format("'helical' ({:.6g} mm per turn, {:.6g} deg per view)", pitch,
                      std::abs(step) * 180 / k_pi));
      return make_helical_geometry(s.cols, s.rows, du, dv, sid, sdd, t, pitch, a.focal_z_mm, off_u,
                                   off_v, s.shape);
    }
    say(
        fmt::format("'cone_vec' (views off a regular helix by more than 1% of an angular step or "
                    "of a detector row at the isocentre)"));
  } else {
    say(fmt::format("'cone_vec' ({}{})",
                    shifted ? "flying focal spot: per-view sources" : "focal distances vary",
                    s.shape == detector_shape::cylindrical && shifted
                        ? "; the cylindrical detector taken about each view's source"
                        : ""));
  }
  return vector_geometry(s, off_u, off_v);
}

dicom_ct_pd_scan dicom_ct_pd_from_geometry(const geometry& g) {
  g.validate();
  CTFORGE_EXPECTS(
      g.beam == beam_kind::cone && (g.helix || g.orbit),
      fmt::format("DICOM-CT-PD: needs a 'helical' or circular 'cone' geometry, not '{}'",
                  g.type_name()));
  CTFORGE_EXPECTS(g.pixel_u_mm > 0 && g.pixel_v_mm > 0,
                  "DICOM-CT-PD: negative pixel pitches (reversed detector axes) are not written");
  dicom_ct_pd_scan s;
  s.cols = g.cols;
  s.rows = g.rows;
  s.col_spacing_mm = g.pixel_u_mm;
  s.row_spacing_mm = g.pixel_v_mm;
  s.shape = g.shape;
  double sid = 0, sdd = 0, off_u = 0, off_v = 0;
  std::vector<double> angles, heights;
  if (g.helix) {
    const helical_orbit& h = *g.helix;
    sid = h.source_to_isocenter_mm;
    sdd = h.source_to_detector_mm;
    off_u = h.offset_u_mm;
    off_v = h.offset_v_mm;
    angles = h.angles_rad;
    for (double t : angles) heights.push_back(h.z_at(t));
    s.scan_type = "HELICAL";
  } else {
    const circular_orbit& o = *g.orbit;
    sid = o.source_to_isocenter_mm;
    sdd = o.source_to_detector_mm;
    off_u = o.offset_u_mm.front();
    off_v = o.offset_v_mm.front();
    for (std::size_t i = 0; i < o.angles_rad.size(); ++i)
      CTFORGE_EXPECTS(o.offset_u_mm[i] == off_u && o.offset_v_mm[i] == off_v,
                      "DICOM-CT-PD: the detector offsets must be the same in every view");
    angles = o.angles_rad;
    heights.assign(angles.size(), 0.0);
    s.scan_type = "AXIAL";
  }
  s.central_col = 0.5 * static_cast<double>(g.cols + 1) - off_u / g.pixel_u_mm;
  s.central_row = 0.5 * static_cast<double>(g.rows + 1) + off_v / g.pixel_v_mm;
  if (angles.size() > 1 && angles[1] != angles[0])
    s.views_per_turn = std::llround(2 * k_pi / std::abs(angles[1] - angles[0]));
  for (std::size_t i = 0; i < angles.size(); ++i) {
    dicom_ct_pd_view v;
    v.focal_angle_rad = std::remainder(-angles[i], 2 * k_pi);  // in [-pi, pi]: FL keeps 0.2 urad
    v.focal_z_mm = heights[i];
    v.focal_radius_mm = sid;
    v.detector_radius_mm = sdd;
    v.instance = static_cast<std::int64_t>(i) + 1;
    s.views.push_back(v);
  }
  return s;
}

// ---- reading -------------------------------------------------------------------------------

dicom_ct_pd_data read_dicom_ct_pd(const std::string& path) {
  const pd_files s = read_files(path);
  dicom_ct_pd_data out;
  out.scan = scan_of(s);
  std::string how;
  out.geom = geometry_of(path, out.scan, how);
  const auto& f = s.files.front();
  out.projections = read_frames(s.files, 0, static_cast<std::int64_t>(s.files.size()), 0,
                                f.det_rows, 0, f.det_cols);
  ctforge::detail::refuse_non_finite_input(out.projections.data.data(), out.projections.views,
                                           out.projections.rows, out.projections.cols, path,
                                           "the projections", "view, row, col");
  std::vector<std::string> notes = s.notes;
  notes.push_back("DICOM-CT-PD geometry: " + how);
  for (const auto& n : notes) out.warnings += (out.warnings.empty() ? "" : "\n") + n;
  return out;
}

raw_scan read_dicom_ct_pd_frames(const std::string& path, const detector_selection& sel,
                                 geometry& whole) {
  const pd_files s = read_files(path);
  const dicom_ct_pd_scan scan = scan_of(s);
  std::string how;
  whole = geometry_of(path, scan, how);
  const auto& f = s.files.front();
  raw_scan r;
  r.full_views = static_cast<std::int64_t>(s.files.size());
  r.full_rows = f.det_rows;
  r.full_cols = f.det_cols;
  r.pixel_u_mm = f.col_spacing;
  r.pixel_v_mm = f.row_spacing;
  const auto [v0, nv] = resolve_range(sel.views, r.full_views, "views", path);
  const auto [r0, nr] = resolve_range(sel.rows, r.full_rows, "rows", path);
  const auto [c0, nc] = resolve_range(sel.cols, r.full_cols, "cols", path);
  r.frames = read_frames(s.files, v0, nv, r0, nr, c0, nc);
  std::vector<std::string> notes = s.notes;
  notes.push_back("DICOM-CT-PD geometry: " + how);
  for (const auto& n : notes) r.notes += (r.notes.empty() ? "" : "\n") + n;
  return r;
}

bool is_dicom_ct_pd(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::is_regular_file(path, ec)) return false;
    const header_bytes h = read_header(path);
    return looks_dicom(h) && has_ct_pd_tags(h);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (ext == ".tif" || ext == ".tiff" || ext == ".json" || ext == ".txt") continue;
    names.push_back(e.path().string());
  }
  std::sort(names.begin(), names.end(), natural_less);
  int tried = 0;
  for (const auto& name : names) {
    const header_bytes h = read_header(name);
    if (looks_dicom(h)) return has_ct_pd_tags(h);
    if (++tried == 8) break;  // eight files that are no DICOM: not a DICOM directory
  }
  return false;
}

std::string describe_dicom_ct_pd(const std::string& path) {
  const pd_files s = read_files(path);
  const dicom_ct_pd_scan scan = scan_of(s);
  std::string how;
  const geometry g = geometry_of(path, scan, how);
  const auto& f = s.files.front();
  const auto& v0 = scan.views.front();
  std::string d = fmt::format("{}: DICOM-CT-PD projections ({} file{})\n", path, s.files.size(),
                              s.files.size() == 1 ? "" : "s");
  d += fmt::format(
      "  detector {} rows x {} cols, {:g} x {:g} mm ({}), central element ({:g}, {:g})\n",
      scan.rows, scan.cols, scan.row_spacing_mm, scan.col_spacing_mm, f.shape, scan.central_col,
      scan.central_row);
  d += fmt::format("  focal centre at {:g} mm from the isocentre, detector at {:g} mm\n",
                   v0.focal_radius_mm, v0.detector_radius_mm);
  d += fmt::format("  pixels stored {} ({})\n", f.transposed ? "cols x rows" : "rows x cols",
                   f.big_endian ? "big endian" : "little endian");
  if (!scan.scan_type.empty()) d += fmt::format("  scan {}\n", scan.scan_type);
  if (!scan.flying_focal_spot.empty())
    d += fmt::format("  flying focal spot {}\n", scan.flying_focal_spot);
  if (scan.views_per_turn > 0) d += fmt::format("  views per turn {}\n", scan.views_per_turn);
  const std::vector<double> t = our_angles(scan);
  const auto [zlo, zhi] =
      std::minmax_element(scan.views.begin(), scan.views.end(),
                          [](const auto& a, const auto& b) { return a.focal_z_mm < b.focal_z_mm; });
  d += fmt::format(
      "  views {}, focal angle {:.4f} .. {:.4f} rad (unwrapped, {:.2f} turns), "
      "height {:g} .. {:g} mm\n",
      scan.views.size(), -t.front(), -t.back(), std::abs(t.back() - t.front()) / (2 * k_pi),
      zlo->focal_z_mm, zhi->focal_z_mm);
  d += fmt::format("  geometry {} ({} views)\n", how, g.view_count());
  const projection_stack first = read_frames(s.files, 0, 1, 0, f.det_rows, 0, f.det_cols);
  const auto [lo, hi] = std::minmax_element(first.data.begin(), first.data.end());
  d += fmt::format("  first view values {:g} .. {:g} (stored * slope + intercept)\n", *lo, *hi);
  for (const auto& n : s.notes) d += "  note: " + n + "\n";
  return d;
}

}  // namespace ctforge::io
