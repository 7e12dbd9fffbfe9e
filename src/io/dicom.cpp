// DICOM CT series through ITK's GDCMImageIO (see formats.hpp). One of the two translation units
// that include ITK headers (with itk_volume.cpp).
//
// Reading: GDCMSeriesFileNames groups the files of a directory by Series Instance UID (plus
// orientation and size details, so geometrically different series never mix) and sorts them
// by Image Position (Patient) along the slice normal. More than one series is an error; so are
// repeated or unevenly spaced positions (missing slices). GDCMImageIO applies Rescale Slope /
// Intercept, so values are HU for CT.
//
// Writing: float HU slices with (0028,1052/1053) and (0028,0100..0103) in the dictionary make
// GDCMImageIO store signed 16-bit values = (HU - intercept) / slope. We use intercept 0 and a
// slope that is a power of two (1 unless |HU| exceeds 32767) and round HU to multiples of the
// slope first, so the stored integers are exact and a reader gets our rounded values back.
#include <gdcmUIDGenerator.h>
#include <itkGDCMImageIO.h>
#include <itkGDCMSeriesFileNames.h>
#include <itkImage.h>
#include <itkImageSeriesReader.h>
#include <itkImageSeriesWriter.h>
#include <itkMetaDataObject.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"

namespace ctforge::io {

namespace detail {
// Defined in itk_volume.cpp.
volume volume_from_itk(const itk::Image<float, 3>* img, const std::string& path);
}  // namespace detail

namespace {

namespace fs = std::filesystem;
using image3 = itk::Image<float, 3>;
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

/// Files of the single series in `path` (a directory) or {path} (a file), in slice order.
std::vector<std::string> series_files(const std::string& path) {
  std::error_code ec;
  CTFORGE_CHECK(fs::exists(path, ec), path + ": no such file or directory");
  if (!fs::is_directory(path, ec)) return {path};
  auto names = itk::GDCMSeriesFileNames::New();
  std::vector<std::string> uids;
  try {
    names->SetUseSeriesDetails(true);
    names->SetDirectory(path);
    uids = names->GetSeriesUIDs();
  } catch (const itk::ExceptionObject& e) {
    CTFORGE_FAIL(fmt::format("{}: cannot scan for DICOM files: {}", path, e.GetDescription()));
  }
  CTFORGE_CHECK(!uids.empty(), path + ": no DICOM series found");
  if (uids.size() > 1) {
    std::string list;
    for (const auto& u : uids) list += (list.empty() ? "" : ", ") + u;
    CTFORGE_FAIL(fmt::format("{}: mixed DICOM series: {} series in one directory (one series expected; "
                             "series keys: {})",
                             path, uids.size(), list));
  }
  auto files = names->GetFileNames(uids[0]);
  CTFORGE_CHECK(!files.empty(), path + ": DICOM series without files");
  return files;
}

struct series {
  volume vol;
  std::vector<itk::MetaDataDictionary> dicts;  // one per slice, in slice order
  std::vector<std::string> files;
};

series read_series(const std::string& path) {
  series s;
  s.files = series_files(path);
  auto io = itk::GDCMImageIO::New();
  auto reader = itk::ImageSeriesReader<image3>::New();
  reader->SetImageIO(io);
  reader->SetFileNames(s.files);
  reader->MetaDataDictionaryArrayUpdateOn();
  try {
    reader->Update();
  } catch (const itk::ExceptionObject& e) {
    CTFORGE_FAIL(fmt::format("{}: cannot read DICOM data (not DICOM, truncated, or slices of different "
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

  // Slice positions along the normal: distinct and evenly spaced.
  const auto& first = s.dicts.front();
  const auto iop = numbers(tag(first, "0020|0037"));
  if (s.dicts.size() >= 2) {
    CTFORGE_CHECK(iop.size() == 6, fmt::format("{}: Image Orientation (Patient) missing or malformed", path));
    const vec3 r{iop[0], iop[1], iop[2]}, c{iop[3], iop[4], iop[5]};
    const vec3 n = cross(r, c);
    std::vector<double> pos;
    for (std::size_t i = 0; i < s.dicts.size(); ++i) {
      CTFORGE_CHECK(numbers(tag(s.dicts[i], "0020|0037")).size() == 6 &&
                        tag(s.dicts[i], "0020|0037") == tag(first, "0020|0037"),
                    fmt::format("{}: slice {} ({}) has a different Image Orientation (Patient)", path, i,
                                s.files[i]));
      const auto p = numbers(tag(s.dicts[i], "0020|0032"));
      CTFORGE_CHECK(p.size() == 3, fmt::format("{}: slice {} ({}) lacks Image Position (Patient)", path, i,
                                               s.files[i]));
      pos.push_back(dot(n, vec3{p[0], p[1], p[2]}));
    }
    const double mean = (pos.back() - pos.front()) / static_cast<double>(pos.size() - 1);
    for (std::size_t i = 1; i < pos.size(); ++i) {
      const double step = pos[i] - pos[i - 1];
      CTFORGE_CHECK(std::abs(mean) > 1e-6 && std::abs(step - mean) <= 1e-2 * std::abs(mean) + 1e-3,
                    fmt::format("{}: slices {} and {} ({} and {}) are {:g} mm apart, the series averages "
                                "{:g} mm (duplicate or missing slices?)",
                                path, i - 1, i, s.files[i - 1], s.files[i], step, mean));
    }
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
  series s = read_series(path);
  if (opt.mu_water_per_mm) {
    const double mw = *opt.mu_water_per_mm;
    CTFORGE_EXPECTS(mw > 0 && std::isfinite(mw), fmt::format("mu_water must be positive (got {})", mw));
    for (float& x : s.vol.data) x = static_cast<float>(mu_from_hu(x, mw));
  }
  return std::move(s.vol);
}

void write_dicom_series(const std::string& dir_in, const volume& v, const volume_write_options& opt) {
  v.geom.validate();
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  CTFORGE_EXPECTS(static_cast<std::int64_t>(v.data.size()) == v.geom.voxel_count(),
                  fmt::format("{}: volume holds {} values for {} voxels", dir, v.data.size(), v.geom.voxel_count()));
  CTFORGE_EXPECTS(opt.values_are_hu || (opt.mu_water_per_mm > 0 && std::isfinite(opt.mu_water_per_mm)),
                  fmt::format("mu_water must be positive (got {})", opt.mu_water_per_mm));

  // HU, rounded to multiples of a power-of-two slope so that int16 holds them exactly.
  std::vector<double> hu(v.data.size());
  double maxabs = 0;
  for (std::size_t i = 0; i < v.data.size(); ++i) {
    const double x = v.data[i];
    CTFORGE_EXPECTS(std::isfinite(x), fmt::format("{}: voxel {} is not finite; DICOM cannot store it", dir, i));
    hu[i] = opt.values_are_hu ? x : hu_from_mu(x, opt.mu_water_per_mm);
    maxabs = std::max(maxabs, std::abs(hu[i]));
  }
  double slope = 1;
  while (maxabs / slope > 32767.0) slope *= 2;
  auto img = image3::New();
  image3::RegionType region;
  image3::SizeType size;
  size[0] = static_cast<itk::SizeValueType>(v.geom.nx);
  size[1] = static_cast<itk::SizeValueType>(v.geom.ny);
  size[2] = static_cast<itk::SizeValueType>(v.geom.nz);
  region.SetSize(size);
  img->SetRegions(region);
  image3::SpacingType spacing;
  image3::PointType origin;
  for (int a = 0; a < 3; ++a) {
    spacing[a] = v.geom.spacing_mm[a];
    origin[a] = v.geom.origin_mm[a];
  }
  img->SetSpacing(spacing);
  img->SetOrigin(origin);
  img->Allocate();
  float* buf = img->GetBufferPointer();
  for (std::size_t i = 0; i < hu.size(); ++i)
    buf[i] = static_cast<float>(std::clamp(std::round(hu[i] / slope), -32768.0, 32767.0) * slope);

  gdcm::UIDGenerator uid;
  const std::string study_uid = uid.Generate(), series_uid = uid.Generate(), frame_uid = uid.Generate();
  const std::string date = today("%Y%m%d"), time = today("%H%M%S");
  const double dz = v.geom.spacing_mm[2];
  std::vector<itk::MetaDataDictionary> dicts(static_cast<std::size_t>(v.geom.nz));
  std::vector<std::string> names;
  const std::string tmp = dir + ".part";
  for (std::int64_t k = 0; k < v.geom.nz; ++k) {
    auto& d = dicts[static_cast<std::size_t>(k)];
    auto put = [&](const char* key, const std::string& value) { itk::EncapsulateMetaData<std::string>(d, key, value); };
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
    put("0020|0032", fmt::format("{}\\{}\\{}", ds(v.geom.origin_mm[0]), ds(v.geom.origin_mm[1]), ds(z)));
    put("0020|0037", "1\\0\\0\\0\\1\\0");
    put("0020|1041", ds(z));
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

  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  CTFORGE_CHECK(!ec, fmt::format("{}: cannot create directory: {}", tmp, ec.message()));
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
    fs::remove_all(tmp, ec);
    CTFORGE_FAIL(fmt::format("{}: cannot write DICOM series: {}", dir, e.GetDescription()));
  }

  // Replace the target: only an empty directory or one holding DICOM files only.
  const std::string old = dir + ".old";
  bool had_old = false;
  if (fs::exists(dir, ec)) {
    bool only_dicom = fs::is_directory(dir, ec);
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
      only_dicom = only_dicom && e.is_regular_file() && ext == ".dcm";
    }
    if (!only_dicom) {
      fs::remove_all(tmp, ec);
      CTFORGE_FAIL(fmt::format("{}: exists and is not a directory of .dcm files; refusing to replace it", dir));
    }
    fs::remove_all(old, ec);
    fs::rename(dir, old, ec);
    if (ec) {
      const std::string msg = ec.message();
      fs::remove_all(tmp, ec);
      CTFORGE_FAIL(fmt::format("{}: cannot move the existing series aside: {}", dir, msg));
    }
    had_old = true;
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    const std::string msg = ec.message();
    if (had_old) fs::rename(old, dir, ec);
    CTFORGE_FAIL(fmt::format("{}: cannot rename {} into place: {}", dir, tmp, msg));
  }
  if (had_old) fs::remove_all(old, ec);
}

std::string describe_dicom(const std::string& path) {
  const series s = read_series(path);
  const auto& d = s.dicts.front();
  const auto& g = s.vol.geom;
  const auto [lo, hi] = std::minmax_element(s.vol.data.begin(), s.vol.data.end());
  std::string out = fmt::format("{}: DICOM {} ({} file{})\n", path, s.files.size() > 1 ? "series" : "image",
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
  out += fmt::format("  spacing {:g} x {:g} x {:g} mm\n", g.spacing_mm[0], g.spacing_mm[1], g.spacing_mm[2]);
  out += fmt::format("  origin ({:g}, {:g}, {:g}) mm (first voxel centre, patient LPS)\n", g.origin_mm[0],
                     g.origin_mm[1], g.origin_mm[2]);
  line("rescale intercept", "0028|1052");
  line("rescale slope", "0028|1053");
  if (lo != s.vol.data.end()) out += fmt::format("  values {:g} .. {:g} (stored * slope + intercept)\n", *lo, *hi);
  return out;
}

}  // namespace ctforge::io
