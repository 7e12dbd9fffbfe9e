// DICOM CT series through ITK's GDCMImageIO (see formats.hpp). One of the two translation units
// that include ITK headers (with itk_volume.cpp).
//
// Reading: every file is first walked element by element here (no GDCM): the Debian build of
// GDCM aborts the process (assert) on some truncated headers, and silently accepts truncated
// pixel data, so a file with the DICM preamble whose elements do not fit is reported as a
// ctforge::error naming it. The same walk yields Series Instance UID, Image Position /
// Orientation (Patient), Rows and Columns: files of a directory are grouped by series (more
// than one series, or different orientations or sizes, is an error; files that are not DICOM
// images are ignored) and sorted by position along the slice normal. Repeated or unevenly
// spaced positions (missing slices) are errors. GDCMImageIO then reads the pixels and applies
// Rescale Slope / Intercept, so values are HU for CT.
//
// Writing: float HU slices with (0028,1052/1053) and (0028,0100..0103) in the dictionary make
// GDCMImageIO store signed 16-bit values = (HU - intercept) / slope. We use intercept 0 and a
// slope that is a power of two (1 unless |HU| exceeds 32767) and round HU to multiples of the
// slope first, so the stored integers are exact and a reader gets our rounded values back.
#include <fmt/format.h>
// clang-format off
#include "io/itk_compiler.hpp"  // first: before any ITK header
// clang-format on
#include <gdcmUIDGenerator.h>
#include <itkGDCMImageIO.h>

#include "io/contained.hpp"
#include <itkImage.h>
#include <itkImageSeriesReader.h>
#include <itkImageSeriesWriter.h>
#include <itkMetaDataObject.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>

#include "core/finite_scan.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/dicom_walk.hpp"
#include "io/itk_image.hpp"

namespace ctforge::io {

namespace detail {
// Defined in itk_volume.cpp.
volume volume_from_itk(const itk::Image<float, 3>* img, const std::string& path);
}  // namespace detail

namespace {

namespace fs = std::filesystem;
using image3 = ctforge::detail::itk_image3;
using image2 = itk::Image<float, 2>;

std::string tag(const itk::MetaDataDictionary& d, const char* key) {
  std::string v;
  itk::ExposeMetaData<std::string>(d, key, v);
  // DICOM pads values to even length with spaces (or NUL for UIDs).
  while (!v.empty() && (v.back() == ' ' || v.back() == '\0')) v.pop_back();
  while (!v.empty() && v.front() == ' ') v.erase(v.begin());
  return v;
}

std::vector<double> numbers(const std::string& s) {
  std::vector<double> out;
  std::string t = s;
  std::replace(t.begin(), t.end(), '\\', ' ');
  std::istringstream in(t);
  double x;
  while (in >> x) out.push_back(x);
  return out;
}

// ---- structural walk of a DICOM file ------------------------------------------------------------

/// What the walk found: `problem` is empty for a well-formed file.
struct dicom_scan {
  bool preamble = false;  ///< 128-byte preamble + "DICM"
  std::string problem;
  bool has_pixels = false;
  std::string series_uid, position, orientation;
  std::int64_t rows = 0, cols = 0;
  /// Image Pixel module, -1 when absent: (0028,0002) samples per pixel, (0028,0100..0103)
  /// bits allocated / stored, high bit, pixel representation.
  int samples = -1, bits_allocated = -1, bits_stored = -1, high_bit = -1, representation = -1;
  std::string photometric;  ///< (0028,0004); empty when absent
};

/// Why GDCM must not be given this image (it asserts, aborting the process, on some of these):
/// empty when the pixel description is one we read (grey, 8/16/32-bit integers).
std::string pixel_format_problem(const dicom_scan& s) {
  if (s.samples != -1 && s.samples != 1)
    return fmt::format("Samples per Pixel (0028,0002) is {}; only greyscale (1) is supported",
                       s.samples);
  if (!s.photometric.empty() && s.photometric != "MONOCHROME1" && s.photometric != "MONOCHROME2")
    return fmt::format(
        "Photometric Interpretation (0028,0004) is '{}'; only MONOCHROME1/2 "
        "(greyscale) is supported",
        s.photometric);
  if (s.rows == 0 || s.cols == 0)
    return fmt::format("Rows x Columns (0028,0010/0011) is {} x {}", s.rows, s.cols);
  if (s.bits_allocated != -1 && s.bits_allocated != 8 && s.bits_allocated != 16 &&
      s.bits_allocated != 32)
    return fmt::format("Bits Allocated (0028,0100) is {}; 8, 16 or 32 are supported",
                       s.bits_allocated);
  const int alloc = s.bits_allocated == -1 ? 16 : s.bits_allocated;
  if (s.bits_stored != -1 && (s.bits_stored < 1 || s.bits_stored > alloc))
    return fmt::format("Bits Stored (0028,0101) is {} with {} bits allocated", s.bits_stored,
                       alloc);
  if (s.high_bit != -1 && s.high_bit >= alloc)
    return fmt::format("High Bit (0028,0102) is {} with {} bits allocated", s.high_bit, alloc);
  if (s.representation != -1 && s.representation != 0 && s.representation != 1)
    return fmt::format("Pixel Representation (0028,0103) is {}", s.representation);
  return {};
}

/// The fields of `s` that a top-level element of the walked `bytes` holds.
void capture(std::span<const unsigned char> bytes, const detail::dicom_element& e, dicom_scan& s) {
  const std::uint16_t group = e.group, elem = e.element;
  if (e.undefined) {
    if (group == 0x7FE0 && elem == 0x0010) s.has_pixels = true;
    return;
  }
  auto u16 = [&] { return detail::element_u16(bytes, e).front(); };
  if (group == 0x0020 && elem == 0x000E)
    s.series_uid = detail::element_text(bytes, e);
  else if (group == 0x0020 && elem == 0x0032)
    s.position = detail::element_text(bytes, e);
  else if (group == 0x0020 && elem == 0x0037)
    s.orientation = detail::element_text(bytes, e);
  else if (group == 0x0028 && elem == 0x0004)
    s.photometric = detail::element_text(bytes, e);
  else if (group == 0x0028 && (elem == 0x0010 || elem == 0x0011) && e.length == 2)
    (elem == 0x0010 ? s.rows : s.cols) = u16();
  else if (group == 0x0028 && e.length == 2 &&
           (elem == 0x0002 || (elem >= 0x0100 && elem <= 0x0103))) {
    const int v = u16();
    switch (elem) {
      case 0x0002:
        s.samples = v;
        break;
      case 0x0100:
        s.bits_allocated = v;
        break;
      case 0x0101:
        s.bits_stored = v;
        break;
      case 0x0102:
        s.high_bit = v;
        break;
      default:
        s.representation = v;
        break;
    }
  } else if (group == 0x7FE0 && elem == 0x0010)
    s.has_pixels = true;
}

dicom_scan scan_dicom(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  dicom_scan s;
  if (!in) {
    s.problem = "cannot open";
    return s;
  }
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  const detail::dicom_walk w = detail::walk_dicom(bytes);
  s.preamble = w.preamble;
  s.problem = w.problem;
  for (const auto& e : w.elements) capture(bytes, e, s);
  return s;
}

/// Files of the single series in `path` (a directory) or {path} (a file), in slice order.
std::vector<std::string> series_files(const std::string& path) {
  std::error_code ec;
  CTFORGE_CHECK(fs::exists(path, ec), path + ": no such file or directory");
  if (!fs::is_directory(path, ec)) {
    const dicom_scan s = scan_dicom(path);
    CTFORGE_CHECK(s.problem.empty(),
                  fmt::format("{}: not a readable DICOM file: {}", path, s.problem));
    CTFORGE_CHECK(s.has_pixels, path + ": DICOM file without pixel data (not an image)");
    const std::string bad = pixel_format_problem(s);
    CTFORGE_CHECK(bad.empty(), fmt::format("{}: unsupported DICOM image: {}", path, bad));
    return {path};
  }
  struct slice {
    std::string file;
    dicom_scan scan;
  };
  std::map<std::string, std::vector<slice>> by_series;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file()) names.push_back(e.path().string());
  CTFORGE_CHECK(!ec, fmt::format("{}: cannot list directory: {}", path, ec.message()));
  std::sort(names.begin(), names.end());
  for (const auto& f : names) {
    dicom_scan s = scan_dicom(f);
    if (!s.problem.empty()) {
      // A file announcing itself as DICOM must be readable; anything else is not ours to judge.
      CTFORGE_CHECK(!s.preamble, fmt::format("{}: corrupt DICOM file in series directory {}: {}", f,
                                             path, s.problem));
      continue;
    }
    if (!s.has_pixels || s.series_uid.empty()) continue;  // DICOMDIR, reports, other non-images
    const std::string bad = pixel_format_problem(s);
    CTFORGE_CHECK(bad.empty(), fmt::format("{}: unsupported DICOM image in series directory {}: {}",
                                           f, path, bad));
    by_series[s.series_uid].push_back({f, std::move(s)});
  }
  CTFORGE_CHECK(!by_series.empty(), path + ": no DICOM series found");
  if (by_series.size() > 1) {
    std::string list;
    for (const auto& [uid, files] : by_series)
      list += fmt::format("{}{} ({} files)", list.empty() ? "" : ", ", uid, files.size());
    CTFORGE_FAIL(
        fmt::format("{}: mixed DICOM series: {} Series Instance UIDs in one directory (one series "
                    "expected): {}",
                    path, by_series.size(), list));
  }
  auto& slices = by_series.begin()->second;
  const auto& first = slices.front().scan;
  for (const auto& s : slices) {
    CTFORGE_CHECK(
        s.scan.rows == first.rows && s.scan.cols == first.cols,
        fmt::format("{}: mixed DICOM series: {} is {}x{} pixels, {} {}x{}", path, s.file,
                    s.scan.cols, s.scan.rows, slices.front().file, first.cols, first.rows));
    CTFORGE_CHECK(
        numbers(s.scan.orientation) == numbers(first.orientation),
        fmt::format("{}: mixed DICOM series: {} and {} differ in Image Orientation (Patient)", path,
                    s.file, slices.front().file));
  }
  if (slices.size() > 1) {
    const auto iop = numbers(first.orientation);
    CTFORGE_CHECK(iop.size() == 6, fmt::format("{}: {} lacks Image Orientation (Patient)", path,
                                               slices.front().file));
    const vec3 n = cross(vec3{iop[0], iop[1], iop[2]}, vec3{iop[3], iop[4], iop[5]});
    std::vector<std::pair<double, std::string>> order;
    for (const auto& s : slices) {
      const auto p = numbers(s.scan.position);
      CTFORGE_CHECK(p.size() == 3,
                    fmt::format("{}: {} lacks Image Position (Patient)", path, s.file));
      order.push_back({dot(n, vec3{p[0], p[1], p[2]}), s.file});
    }
    std::sort(order.begin(), order.end());
    std::vector<std::string> files;
    for (auto& o : order) files.push_back(std::move(o.second));
    return files;
  }
  return {slices.front().file};
}

struct series {
  volume vol;
  std::vector<itk::MetaDataDictionary> dicts;  // one per slice, in slice order
  std::vector<std::string> files;
};

series read_series_in_process(const std::string& path);

/// GDCM asserts (aborting the process) on some corrupt files: the series is read in a child
/// process first, and a child that dies makes the path an error instead of ending the caller.
series read_series(const std::string& path) {
  ctforge::detail::probe_in_child(path, "GDCM", [&] { (void)read_series_in_process(path); });
  return read_series_in_process(path);
}

series read_series_in_process(const std::string& path) {
  series s;
  s.files = series_files(path);
  auto io = itk::GDCMImageIO::New();
  auto reader = itk::ImageSeriesReader<image3>::New();
  reader->SetImageIO(io);
  reader->SetFileNames(s.files);
  reader->MetaDataDictionaryArrayUpdateOn();
  // ITK prints its own warning for uneven slices to stderr; the checks below report them with
  // the files' names instead.
  itk::Object::GlobalWarningDisplayOff();
  try {
    reader->Update();
  } catch (const itk::ExceptionObject& e) {
    CTFORGE_FAIL(
        fmt::format("{}: cannot read DICOM data (not DICOM, truncated, or slices of different "
                    "sizes?): {}",
                    path, e.GetDescription()));
  }
  const auto* array = reader->GetMetaDataDictionaryArray();
  if (array && array->size() == s.files.size()) {
    for (const auto* d : *array) s.dicts.push_back(*d);
  } else {
    s.dicts.push_back(io->GetMetaDataDictionary());
  }
  s.vol = detail::volume_from_itk(reader->GetOutput(), path);

  // Pixel Spacing: present, positive and the same on every slice (ITK takes 1 mm for a zero
  // and the first slice's for all).
  for (std::size_t i = 0; i < s.dicts.size(); ++i) {
    const std::string file = i < s.files.size() ? s.files[i] : path;
    const std::string raw = tag(s.dicts[i], "0028|0030");
    if (raw.empty()) continue;  // absent: ITK's default (1 mm) applies, as for secondary captures
    const auto ps = numbers(raw);
    CTFORGE_CHECK(
        ps.size() == 2 && ps[0] > 0 && ps[1] > 0 && std::isfinite(ps[0]) && std::isfinite(ps[1]),
        fmt::format("{}: slice {} ({}) has Pixel Spacing (0028,0030) '{}': two "
                    "positive numbers are needed",
                    path, i, file, raw));
    if (i > 0)
      CTFORGE_CHECK(numbers(tag(s.dicts[0], "0028|0030")) == ps,
                    fmt::format("{}: mixed DICOM series: slice {} ({}) has Pixel Spacing {}, "
                                "slice 0 ({}) {}",
                                path, i, file, raw, s.files.front(), tag(s.dicts[0], "0028|0030")));
  }

  // Slice positions along the normal: distinct and evenly spaced.
  const auto& first = s.dicts.front();
  const auto iop = numbers(tag(first, "0020|0037"));
  if (s.dicts.size() >= 2) {
    CTFORGE_CHECK(iop.size() == 6,
                  fmt::format("{}: Image Orientation (Patient) missing or malformed", path));
    const vec3 r{iop[0], iop[1], iop[2]}, c{iop[3], iop[4], iop[5]};
    const vec3 n = cross(r, c);
    std::vector<double> pos;
    for (std::size_t i = 0; i < s.dicts.size(); ++i) {
      CTFORGE_CHECK(numbers(tag(s.dicts[i], "0020|0037")).size() == 6 &&
                        tag(s.dicts[i], "0020|0037") == tag(first, "0020|0037"),
                    fmt::format("{}: slice {} ({}) has a different Image Orientation (Patient)",
                                path, i, s.files[i]));
      const auto p = numbers(tag(s.dicts[i], "0020|0032"));
      CTFORGE_CHECK(p.size() == 3, fmt::format("{}: slice {} ({}) lacks Image Position (Patient)",
                                               path, i, s.files[i]));
      pos.push_back(dot(n, vec3{p[0], p[1], p[2]}));
    }
    // The series' step is the median of the steps between neighbours, so that one duplicate
    // or missing slice is reported where it is rather than as a wrong mean everywhere.
    std::vector<double> steps;
    for (std::size_t i = 1; i < pos.size(); ++i) steps.push_back(pos[i] - pos[i - 1]);
    std::vector<double> sorted = steps;
    // The lower median: with one gap among few slices it is the regular step.
    const std::size_t mid = (sorted.size() - 1) / 2;
    std::sort(sorted.begin(), sorted.end(),
              [](double a, double b) { return std::abs(a) < std::abs(b); });
    const double typical = sorted[mid];
    for (std::size_t i = 1; i < pos.size(); ++i) {
      const double step = steps[i - 1];
      CTFORGE_CHECK(std::abs(step) > 1e-3,
                    fmt::format("{}: slices {} and {} ({} and {}) are at the same position "
                                "(duplicate slice?)",
                                path, i - 1, i, s.files[i - 1], s.files[i]));
      CTFORGE_CHECK(
          std::abs(typical) > 1e-6 && std::abs(step - typical) <= 1e-2 * std::abs(typical) + 1e-3,
          fmt::format("{}: slices {} and {} ({} and {}) are {:g} mm apart, the series steps {:g} "
                      "mm ({})",
                      path, i - 1, i, s.files[i - 1], s.files[i], std::abs(step), std::abs(typical),
                      std::abs(step) > std::abs(typical) ? "missing slices between them?"
                                                         : "an extra slice between them?"));
    }
    const double mean = (pos.back() - pos.front()) / static_cast<double>(pos.size() - 1);
    // ITK derives the spacing from the positions too; keep the measured mean (mm, positive).
    s.vol.geom.spacing_mm[2] = std::abs(mean);
  } else {
    // One slice: the slice thickness is the only z extent there is.
    const auto t = numbers(tag(first, "0018|0050"));
    if (!t.empty() && t[0] > 0) s.vol.geom.spacing_mm[2] = t[0];
  }
  return s;
}

std::string today(const char* format) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

/// Decimal string (DICOM DS: at most 16 characters).
std::string ds(double x) {
  for (int digits = 12; digits >= 4; --digits) {
    std::string s = fmt::format("{:.{}g}", x, digits);
    if (s.size() <= 16) return s;
  }
  return fmt::format("{:.3g}", x);
}

}  // namespace

volume read_dicom(const std::string& path, const volume_read_options& opt) {
  CTFORGE_EXPECTS(!is_dicom_ct_pd(path),
                  fmt::format("{}: holds DICOM-CT-PD projections (one file per view), not a CT "
                              "image series; read it as projections (ctforge recon, convert)",
                              path));
  series s = read_series(path);
  // Refused as the HDF5 reader refuses them (a float series, or an infinite rescale slope).
  ctforge::detail::refuse_non_finite_input(s.vol.data.data(), s.vol.geom.nz, s.vol.geom.ny,
                                           s.vol.geom.nx, path, "the series", "z, y, x");
  if (opt.mu_water_per_mm) {
    const double mw = *opt.mu_water_per_mm;
    CTFORGE_EXPECTS(mw > 0 && std::isfinite(mw),
                    fmt::format("mu_water must be positive (got {})", mw));
    for (float& x : s.vol.data) x = static_cast<float>(mu_from_hu(x, mw));
  }
  return std::move(s.vol);
}

void write_dicom_series(const std::string& dir_in, const volume_view& v,
                        const volume_write_options& opt) {
  v.geom.validate();
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  CTFORGE_EXPECTS(static_cast<std::int64_t>(v.data.size()) == v.geom.voxel_count(),
                  fmt::format("{}: volume holds {} values for {} voxels", dir, v.data.size(),
                              v.geom.voxel_count()));
  CTFORGE_EXPECTS(
      opt.values_are_hu || (opt.mu_water_per_mm > 0 && std::isfinite(opt.mu_water_per_mm)),
      fmt::format("mu_water must be positive (got {})", opt.mu_water_per_mm));

  // HU, rounded to multiples of a power-of-two slope so that int16 holds them exactly.
  std::vector<double> hu(v.data.size());
  double maxabs = 0;
  for (std::size_t i = 0; i < v.data.size(); ++i) {
    const double x = v.data[i];
    CTFORGE_EXPECTS(std::isfinite(x),
                    fmt::format("{}: voxel {} is not finite; DICOM cannot store it", dir, i));
    hu[i] = opt.values_are_hu ? x : hu_from_mu(x, opt.mu_water_per_mm);
    maxabs = std::max(maxabs, std::abs(hu[i]));
  }
  double slope = 1;
  while (maxabs / slope > 32767.0) slope *= 2;
  auto img = ctforge::detail::new_itk_image(v.geom);
  img->Allocate();
  float* buf = img->GetBufferPointer();
  for (std::size_t i = 0; i < hu.size(); ++i)
    buf[i] = static_cast<float>(std::clamp(std::round(hu[i] / slope), -32768.0, 32767.0) * slope);

  gdcm::UIDGenerator uid;
  const std::string study_uid = uid.Generate(), series_uid = uid.Generate(),
                    frame_uid = uid.Generate();
  const std::string date = today("%Y%m%d"), time = today("%H%M%S");
  const double dz = v.geom.spacing_mm[2];
  std::vector<itk::MetaDataDictionary> dicts(static_cast<std::size_t>(v.geom.nz));
  std::vector<std::string> names;
  // Replace the target only when it is absent, empty or holds DICOM files only.
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    bool only_dicom = fs::is_directory(dir, ec);
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      only_dicom = only_dicom && e.is_regular_file() && ext == ".dcm";
    }
    CTFORGE_EXPECTS(only_dicom,
                    fmt::format("{}: exists and is not a directory of .dcm files; refusing to "
                                "replace it",
                                dir));
  }
  // GDCM aborts the process on a short write (an assertion in its data-element writer) instead
  // of reporting it: check the room the series needs before writing (a full disk or a file-size
  // limit then is an error naming the directory, and nothing is written).
  {
    const std::uint64_t slice_bytes =
        static_cast<std::uint64_t>(v.geom.nx) * static_cast<std::uint64_t>(v.geom.ny) * 2 + 8192;
    const std::uint64_t total = slice_bytes * static_cast<std::uint64_t>(v.geom.nz);
    fs::path parent = fs::path(dir).parent_path();
    if (parent.empty()) parent = ".";
    struct statvfs st {};
    if (::statvfs(parent.c_str(), &st) == 0) {
      const std::uint64_t avail = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
      CTFORGE_CHECK(avail >= total + (std::uint64_t{1} << 20),
                    fmt::format("{}: not enough free space for the DICOM series: it needs about "
                                "{} bytes, {} are free",
                                dir, total, avail));
    }
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      CTFORGE_CHECK(static_cast<std::uint64_t>(rl.rlim_cur) >= slice_bytes,
                    fmt::format("{}: each DICOM slice needs about {} bytes, more than the file "
                                "size limit of {} bytes (ulimit -f)",
                                dir, slice_bytes, static_cast<std::uint64_t>(rl.rlim_cur)));
  }
  temporary_output out(dir, /*directory=*/true);
  const std::string& tmp = out.path();
  for (std::int64_t k = 0; k < v.geom.nz; ++k) {
    auto& d = dicts[static_cast<std::size_t>(k)];
    auto put = [&](const char* key, const std::string& value) {
      itk::EncapsulateMetaData<std::string>(d, key, value);
    };
    const double z = v.geom.origin_mm[2] + static_cast<double>(k) * dz;
    put("0008|0008", "DERIVED\\SECONDARY\\AXIAL");
    put("0008|0016", "1.2.840.10008.5.1.4.1.1.2");  // CT Image Storage
    put("0008|0018", uid.Generate());
    put("0008|0020", date);
    put("0008|0021", date);
    put("0008|0030", time);
    put("0008|0031", time);
    put("0008|0060", "CT");
    put("0008|0070", "ctforge");
    put("0008|1090", "ctforge " CTFORGE_VERSION);
    put("0008|103e", opt.series_description);
    put("0010|0010", "ctforge");
    put("0010|0020", "ctforge");
    put("0018|0050", ds(dz));
    put("0018|0088", ds(dz));
    put("0020|000d", study_uid);
    put("0020|000e", series_uid);
    put("0020|0052", frame_uid);
    put("0020|0011", "1");
    put("0020|0013", std::to_string(k + 1));
    put("0020|0032",
        fmt::format("{}\\{}\\{}", ds(v.geom.origin_mm[0]), ds(v.geom.origin_mm[1]), ds(z)));
    put("0020|0037", "1\\0\\0\\0\\1\\0");
    put("0020|1041", ds(z));
    put("0028|0002", "1");
    put("0028|0004", "MONOCHROME2");
    put("0028|0100", "16");
    put("0028|0101", "16");
    put("0028|0102", "15");
    put("0028|0103", "1");
    put("0028|1050", "40");
    put("0028|1051", "400");
    put("0028|1052", "0");
    put("0028|1053", ds(slope));
    put("0028|1054", "HU");
    names.push_back((fs::path(tmp) / fmt::format("slice_{:05d}.dcm", k + 1)).string());
  }
  std::vector<itk::MetaDataDictionary*> dict_ptrs;
  for (auto& d : dicts) dict_ptrs.push_back(&d);

  try {
    auto io = itk::GDCMImageIO::New();
    io->KeepOriginalUIDOn();  // our Study/Series/SOP Instance UIDs, not fresh ones per file
    auto writer = itk::ImageSeriesWriter<image3, image2>::New();
    writer->SetInput(img);
    writer->SetImageIO(io);
    writer->SetFileNames(names);
    writer->SetMetaDataDictionaryArray(&dict_ptrs);
    writer->Update();
  } catch (const itk::ExceptionObject& e) {
    CTFORGE_FAIL(fmt::format("{}: cannot write DICOM series: {}", dir, e.GetDescription()));
  }
  // GDCM does not report every short write: every slice must read back as written.
  for (std::int64_t k = 0; k < v.geom.nz; ++k) {
    const std::string& f = names[static_cast<std::size_t>(k)];
    std::error_code fe;
    CTFORGE_CHECK(fs::exists(f, fe) && fs::file_size(f, fe) > 0,
                  fmt::format("{}: slice {} was not written", dir, k + 1));
  }
  try {
    const volume back = read_dicom(tmp);
    CTFORGE_CHECK(
        back.geom.nx == v.geom.nx && back.geom.ny == v.geom.ny && back.geom.nz == v.geom.nz,
        fmt::format("{}: the written series does not read back ({}x{}x{})", dir, back.geom.nx,
                    back.geom.ny, back.geom.nz));
  } catch (const error& e) {
    CTFORGE_FAIL(fmt::format("{}: the written series does not read back: {}", dir, e.what()));
  }
  out.commit_directory();
}

std::string describe_dicom(const std::string& path) {
  const series s = read_series(path);
  const auto& d = s.dicts.front();
  const auto& g = s.vol.geom;
  const auto [lo, hi] = std::minmax_element(s.vol.data.begin(), s.vol.data.end());
  std::string out =
      fmt::format("{}: DICOM {} ({} file{})\n", path, s.files.size() > 1 ? "series" : "image",
                  s.files.size(), s.files.size() == 1 ? "" : "s");
  auto line = [&](const char* name, const char* key) {
    const std::string v = tag(d, key);
    if (!v.empty()) out += fmt::format("  {} {}\n", name, v);
  };
  line("modality", "0008|0060");
  line("manufacturer", "0008|0070");
  line("series description", "0008|103e");
  line("series UID", "0020|000e");
  line("study date", "0008|0020");
  out += fmt::format("  size {} x {} x {} (x, y, z)\n", g.nx, g.ny, g.nz);
  out += fmt::format("  spacing {:g} x {:g} x {:g} mm\n", g.spacing_mm[0], g.spacing_mm[1],
                     g.spacing_mm[2]);
  out += fmt::format("  origin ({:g}, {:g}, {:g}) mm (first voxel centre, patient LPS)\n",
                     g.origin_mm[0], g.origin_mm[1], g.origin_mm[2]);
  line("rescale intercept", "0028|1052");
  line("rescale slope", "0028|1053");
  if (lo != s.vol.data.end())
    out += fmt::format("  values {:g} .. {:g} (stored * slope + intercept)\n", *lo, *hi);
  return out;
}

}  // namespace ctforge::io
