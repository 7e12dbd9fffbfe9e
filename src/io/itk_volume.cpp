// Volumes through ITK: MetaImage (.mha/.mhd), NRRD (.nrrd/.nhdr) and NIfTI (.nii/.nii.gz), and
// the format dispatch of read_volume_any / write_volume_any. The ImageIO is chosen from the
// extension (no ITK factory registration needed). ITK exceptions become ctforge::error naming
// the file. One of the two translation units that include ITK headers (with dicom.cpp).
#include <fmt/format.h>
// clang-format off
#include "io/itk_compiler.hpp"  // first: before any ITK header
// clang-format on
#include <itkImage.h>
#include <itkImageFileReader.h>
#include <itkImageFileWriter.h>
#include <itkMetaImageIO.h>
#include <itkNiftiImageIO.h>
#include <itkNrrdImageIO.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/finite_scan.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "io/itk_image.hpp"

namespace ctforge::io {
namespace {

namespace fs = std::filesystem;
using image3 = ctforge::detail::itk_image3;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

itk::ImageIOBase::Pointer make_io(const std::string& path) {
  switch (volume_format_of(path)) {
    case volume_format::metaimage:
      return itk::MetaImageIO::New().GetPointer();
    case volume_format::nrrd:
      return itk::NrrdImageIO::New().GetPointer();
    case volume_format::nifti:
      return itk::NiftiImageIO::New().GetPointer();
    default:
      break;
  }
  throw usage_error(path + ": not a MetaImage, NRRD or NIfTI file name");
}

/// MetaIO reports a short read on stderr but ITK does not throw: check that the file holds all
/// the voxel data its header announces (LOCAL or separate data file; raw or zlib with
/// CompressedDataSize). Lists and numbered file patterns are not checked.
void check_metaimage_complete(const std::string& path, const itk::ImageIOBase& io) {
  std::ifstream in(path, std::ios::binary);
  std::string line, data_file;
  bool compressed = false;
  std::int64_t compressed_size = -1, header_size = 0;
  auto value = [](const std::string& l) {
    std::string v = l.substr(l.find('=') + 1);
    v.erase(0, v.find_first_not_of(" \t\r"));
    v.erase(v.find_last_not_of(" \t\r") + 1);
    return v;
  };
  while (std::getline(in, line)) {
    const std::string key = lower(line.substr(0, line.find_first_of(" =")));
    if (key == "compresseddata")
      compressed = lower(value(line)) == "true";
    else if (key == "compresseddatasize")
      compressed_size = std::stoll(value(line));
    else if (key == "headersize")
      header_size = std::stoll(value(line));
    else if (key == "elementdatafile") {
      data_file = value(line);
      break;
    }
  }
  if (data_file.empty()) return;
  std::error_code ec;
  std::int64_t available = 0;
  if (lower(data_file) == "local") {
    const auto offset = static_cast<std::int64_t>(in.tellg());
    available = static_cast<std::int64_t>(fs::file_size(path, ec)) - offset;
  } else {
    if (data_file.find('%') != std::string::npos || lower(data_file).starts_with("list")) return;
    const fs::path raw = fs::path(path).parent_path() / data_file;
    CTFORGE_CHECK(fs::is_regular_file(raw, ec),
                  fmt::format("{}: data file {} is missing", path, raw.string()));
    available =
        static_cast<std::int64_t>(fs::file_size(raw, ec)) - std::max<std::int64_t>(header_size, 0);
  }
  const auto expected =
      compressed ? compressed_size : static_cast<std::int64_t>(io.GetImageSizeInBytes());
  if (expected < 0) return;
  CTFORGE_CHECK(available >= expected,
                fmt::format("{}: truncated: {} bytes of voxel data, the header announces {}", path,
                            std::max<std::int64_t>(available, 0), expected));
}

/// Where a NIfTI file's voxels start and in which byte order (NIfTI-1: float vox_offset at byte
/// 108; NIfTI-2: int64 at byte 168; either byte order), from its first 176 bytes; offset < 0
/// when sizeof_hdr is neither 348 nor 540.
struct nifti_layout {
  bool swap = false;
  double offset = -1;
};

nifti_layout nifti_layout_of(const unsigned char (&h)[176]) {
  auto get = [&](std::size_t at, std::size_t n, bool swap) {
    std::array<unsigned char, 8> b{};
    for (std::size_t i = 0; i < n; ++i) b[i] = h[at + (swap ? n - 1 - i : i)];
    return b;
  };
  nifti_layout l;
  std::int32_t sizeof_hdr = 0;
  std::memcpy(&sizeof_hdr, get(0, 4, false).data(), 4);
  if (sizeof_hdr != 348 && sizeof_hdr != 540) {
    l.swap = true;
    std::memcpy(&sizeof_hdr, get(0, 4, true).data(), 4);
  }
  if (sizeof_hdr == 348) {
    float o = 0;
    std::memcpy(&o, get(108, 4, l.swap).data(), 4);
    l.offset = o;
  } else if (sizeof_hdr == 540) {
    std::int64_t o = 0;
    std::memcpy(&o, get(168, 8, l.swap).data(), 8);
    l.offset = static_cast<double>(o);
  }
  return l;
}

using gz_file = std::unique_ptr<gzFile_s, int (*)(gzFile)>;

/// Opens `path` through zlib (plain files read transparently) and reads its first 176 bytes.
gz_file open_nifti(const std::string& path, unsigned char (&h)[176]) {
  gz_file f(gzopen(path.c_str(), "rb"), gzclose_r);
  CTFORGE_CHECK(f != nullptr, path + ": cannot open");
  const int got = gzread(f.get(), h, sizeof h);
  CTFORGE_CHECK(got == static_cast<int>(sizeof h), path + ": truncated NIfTI header");
  return f;
}

/// The first non-finite value among the float32 / float64 voxels of a NIfTI file streaming by
/// (niftilib replaces them by 0 while reading, so ctforge would never see them): feed() takes
/// the decompressed bytes from file position 176 on.
class nifti_non_finite_scan {
 public:
  nifti_non_finite_scan(const itk::ImageIOBase& io, const nifti_layout& l)
      : swap_(l.swap), skip_(static_cast<std::int64_t>(l.offset) - 176) {
    const auto type = io.GetComponentType();
    bytes_ = type == itk::IOComponentEnum::FLOAT ? 4 : type == itk::IOComponentEnum::DOUBLE ? 8 : 0;
    if (bytes_ == 0 || l.offset < 176) return;  // no such value, or voxels inside the header
    count_ = static_cast<std::int64_t>(io.GetImageSizeInBytes()) / bytes_;
  }
  void feed(const unsigned char* p, std::size_t n) {
    for (std::size_t i = 0; i < n && index_ < 0 && next_ < count_; ++i) {
      if (skip_ > 0) {
        --skip_;
        continue;
      }
      part_[static_cast<std::size_t>(have_++)] = p[i];
      if (have_ < bytes_) continue;
      have_ = 0;
      std::array<unsigned char, 8> ordered{};
      for (int k = 0; k < bytes_; ++k)
        ordered[static_cast<std::size_t>(k)] =
            part_[static_cast<std::size_t>(swap_ ? bytes_ - 1 - k : k)];
      if (bytes_ == 4) {
        float x = 0;
        std::memcpy(&x, ordered.data(), 4);
        value_ = x;
      } else {
        std::memcpy(&value_, ordered.data(), 8);
      }
      if (!std::isfinite(value_)) index_ = next_;
      ++next_;
    }
  }
  /// Throws as refuse_non_finite_input does for the first non-finite value found, if any.
  void refuse(const std::string& path, const itk::ImageIOBase& io) const {
    if (index_ < 0) return;
    const auto nx = static_cast<std::int64_t>(io.GetDimensions(0));
    const std::int64_t ny =
        io.GetNumberOfDimensions() > 1 ? static_cast<std::int64_t>(io.GetDimensions(1)) : 1;
    CTFORGE_FAIL(
        fmt::format("{}: the image holds a non-finite value ({}) at index [{}][{}][{}] (z, y, x)",
                    path, value_, index_ / (nx * ny), (index_ / nx) % ny, index_ % nx));
  }

 private:
  bool swap_;
  std::int64_t skip_;
  int bytes_ = 0;
  std::int64_t count_ = 0, next_ = 0, index_ = -1;
  std::array<unsigned char, 8> part_{};
  int have_ = 0;
  double value_ = 0;
};

/// The NIfTI library returns short reads of .nii and .nii.gz files without an error: check that
/// the (decompressed) file holds vox_offset + voxel bytes. With `refuse_non_finite`, the same
/// pass refuses a NaN / Inf voxel (see nifti_non_finite_scan).
void check_nifti_complete(const std::string& path, const itk::ImageIOBase& io,
                          bool refuse_non_finite) {
  unsigned char h[176] = {};
  const gz_file f = open_nifti(path, h);
  const nifti_layout l = nifti_layout_of(h);
  if (l.offset < 0) return;  // accepted by the NIfTI reader; nothing more we can check
  nifti_non_finite_scan scan(io, l);
  double total = sizeof h;
  std::vector<unsigned char> buf(1 << 16);
  for (int n; (n = gzread(f.get(), buf.data(), static_cast<unsigned>(buf.size()))) > 0;) {
    total += n;
    if (refuse_non_finite) scan.feed(buf.data(), static_cast<std::size_t>(n));
  }
  const double expected = l.offset + static_cast<double>(io.GetImageSizeInBytes());
  CTFORGE_CHECK(
      total >= expected,
      fmt::format("{}: truncated: {:.0f} bytes (decompressed), the header announces {:.0f}", path,
                  total, expected));
  scan.refuse(path, io);
}

/// Reads header information; checks a scalar image of at most 3 dimensions. With
/// `refuse_non_finite`, a NIfTI file's stored NaN / Inf voxels are refused here (its library
/// hides them); the other formats' values are checked once read.
itk::ImageIOBase::Pointer read_info(const std::string& path, bool refuse_non_finite = false) {
  std::error_code ec;
  CTFORGE_CHECK(fs::is_regular_file(path, ec), path + ": no such file");
  auto io = make_io(path);
  try {
    io->SetFileName(path);
    CTFORGE_CHECK(io->CanReadFile(path.c_str()),
                  fmt::format("{}: not a readable {} file", path, io->GetNameOfClass()));
    io->ReadImageInformation();
    const unsigned dims = io->GetNumberOfDimensions();
    CTFORGE_CHECK(dims >= 1 && dims <= 3,
                  fmt::format("{}: {}-dimensional image (1 to 3 supported)", path, dims));
    CTFORGE_CHECK(io->GetNumberOfComponents() == 1,
                  fmt::format("{}: {} components per voxel (scalar images only)", path,
                              io->GetNumberOfComponents()));
    CTFORGE_CHECK(io->GetComponentType() != itk::IOComponentEnum::UNKNOWNCOMPONENTTYPE,
                  fmt::format("{}: unknown voxel type in the header", path));
    if (volume_format_of(path) == volume_format::metaimage) check_metaimage_complete(path, *io);
    if (volume_format_of(path) == volume_format::nifti)
      check_nifti_complete(path, *io, refuse_non_finite);
  } catch (const itk::ExceptionObject& e) {
    // ITK's descriptions start with its source location; the file is what the user needs.
    CTFORGE_FAIL(fmt::format("{}: cannot read the image header: {}", path, e.GetDescription()));
  }
  return io;
}

}  // namespace

/// The data file a detached header names (MetaImage "ElementDataFile = X", NRRD "data file: X"),
/// or "" when `header` is missing or names none (LOCAL, lists, patterns).
std::string data_file_named_by(const fs::path& header) {
  std::ifstream in(header);
  std::string line;
  while (std::getline(in, line)) {
    for (const char* key : {"ElementDataFile", "data file", "datafile"}) {
      if (!line.starts_with(key)) continue;
      std::size_t at = line.find_first_of("=:", std::strlen(key));
      if (at == std::string::npos) continue;
      std::string name = line.substr(at + 1);
      name.erase(0, name.find_first_not_of(" \t"));
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back())))
        name.pop_back();
      if (name.empty() || name == "LOCAL" || name.starts_with("LIST") ||
          name.find('/') != std::string::npos || name.find(' ') != std::string::npos)
        return {};
      return name;
    }
  }
  return {};
}

/// Header + data written into `tmp_dir` under their final names, moved beside `path` so that
/// the pair is replaced as a unit: when a file of the data's name exists there already (the
/// earlier output's data), the new data takes a fresh name (<stem>.<n><ext>) and the header is
/// rewritten to name it; the data is moved in first (replacing nothing), the header last (the
/// one step that switches to the new pair), and the earlier data file is removed after. An
/// interruption at any point leaves the earlier pair complete, or the new one.
void commit_detached(temporary_output& out, const std::string& path) {
  const fs::path header_name = fs::path(path).filename();
  const fs::path dir = fs::path(out.path());
  const fs::path dest = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
  const std::string data = data_file_named_by(dir / header_name);
  const std::string earlier = data_file_named_by(dest / header_name);
  std::error_code ec;
  std::string fresh;
  if (!data.empty() && fs::exists(dest / data, ec)) {
    const fs::path d(data);
    // <stem>.<n><ext>, ext including ".raw.gz" style double extensions
    std::string stem = data, ext;
    for (const char* e : {".raw.gz", ".zraw", ".raw"})
      if (data.size() > std::strlen(e) && data.ends_with(e)) {
        stem = data.substr(0, data.size() - std::strlen(e));
        ext = e;
        break;
      }
    for (int n = 1;; ++n) {
      fresh = fmt::format("{}.{}{}", stem, n, ext);
      if (!fs::exists(dest / fresh, ec) && !fs::exists(dir / fresh, ec)) break;
    }
    fs::rename(dir / data, dir / fresh, ec);
    CTFORGE_CHECK(
        !ec, fmt::format("{}: cannot rename {} in {}: {}", path, data, dir.string(), ec.message()));
    std::ifstream in(dir / header_name);
    std::stringstream text;
    text << in.rdbuf();
    std::string h = text.str();
    const std::size_t at = h.rfind(data);
    CTFORGE_CHECK(at != std::string::npos,
                  fmt::format("{}: the header does not name its data file {}", path, data));
    h.replace(at, data.size(), fresh);
    write_file_bytes((dir / header_name).string(), h.data(), h.size(), path);
  }
  out.commit_files({header_name.string()});
  // The earlier pair's data file, now named by no header of this output.
  const std::string now = fresh.empty() ? data : fresh;
  if (!earlier.empty() && earlier != now && earlier != header_name.string())
    fs::remove(dest / earlier, ec);
}

namespace detail {
/// Converts an ITK image to a volume, undoing axis flips of the direction matrix; rejects
/// oblique or permuted directions. Also used by dicom.cpp.
volume volume_from_itk(const itk::Image<float, 3>* img, const std::string& path) {
  const auto region = img->GetLargestPossibleRegion();
  const auto size = region.GetSize();
  const auto& dir = img->GetDirection();
  std::array<int, 3> sign{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) {
      const double d = dir[r][c];
      if (r == c) {
        CTFORGE_CHECK(
            std::abs(std::abs(d) - 1) < 1e-6,
            fmt::format(
                "{}: direction matrix is not axis-aligned (oblique or permuted axes are not "
                "supported)",
                path));
        sign[r] = d > 0 ? 1 : -1;
      } else {
        CTFORGE_CHECK(
            std::abs(d) < 1e-6,
            fmt::format(
                "{}: direction matrix is not axis-aligned (oblique or permuted axes are not "
                "supported)",
                path));
      }
    }
  }
  volume_geometry g;
  g.nx = static_cast<std::int64_t>(size[0]);
  g.ny = static_cast<std::int64_t>(size[1]);
  g.nz = static_cast<std::int64_t>(size[2]);
  const std::array<std::int64_t, 3> n{g.nx, g.ny, g.nz};
  for (int a = 0; a < 3; ++a) {
    g.spacing_mm[a] = img->GetSpacing()[a];
    g.origin_mm[a] = img->GetOrigin()[a];
    if (sign[a] < 0) g.origin_mm[a] -= static_cast<double>(n[a] - 1) * g.spacing_mm[a];
  }
  try {
    g.validate();
  } catch (const usage_error& e) {
    CTFORGE_FAIL(fmt::format("{}: {}", path, e.what()));
  }
  volume v(g);
  const float* src = img->GetBufferPointer();
  for (std::int64_t k = 0; k < g.nz; ++k)
    for (std::int64_t j = 0; j < g.ny; ++j)
      for (std::int64_t i = 0; i < g.nx; ++i) {
        const std::int64_t si = sign[0] > 0 ? i : g.nx - 1 - i;
        const std::int64_t sj = sign[1] > 0 ? j : g.ny - 1 - j;
        const std::int64_t sk = sign[2] > 0 ? k : g.nz - 1 - k;
        v.at(k, j, i) = src[(sk * g.ny + sj) * g.nx + si];
      }
  return v;
}
}  // namespace detail

volume_format volume_format_of(const std::string& path) {
  std::error_code ec;
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  // (Before the directory test: a Zarr array is a directory, not a DICOM series.)
  if (is_zarr_path(trimmed)) return volume_format::zarr;
  if (fs::is_directory(path, ec) || path.ends_with('/')) return volume_format::dicom;
  const std::string l = lower(path);
  if (l.ends_with(".nii.gz") || l.ends_with(".nii")) return volume_format::nifti;
  const std::string ext = lower(fs::path(path).extension().string());
  if (ext == ".h5" || ext == ".hdf5" || ext == ".hdf") return volume_format::hdf5;
  if (ext == ".mha" || ext == ".mhd") return volume_format::metaimage;
  if (ext == ".nrrd" || ext == ".nhdr") return volume_format::nrrd;
  if (ext == ".dcm" || ext.empty()) return volume_format::dicom;  // no extension: a DICOM directory
  throw usage_error(
      fmt::format("{}: unknown volume format (expected .h5, .mha/.mhd, .nrrd/.nhdr, .nii/.nii.gz, "
                  "a DICOM directory or .dcm file)",
                  path));
}

std::string to_string(volume_format f) {
  switch (f) {
    case volume_format::hdf5:
      return "hdf5";
    case volume_format::metaimage:
      return "metaimage";
    case volume_format::nrrd:
      return "nrrd";
    case volume_format::nifti:
      return "nifti";
    case volume_format::dicom:
      return "dicom";
    case volume_format::zarr:
      return "zarr";
  }
  return "unknown";
}

namespace {

/// The image as stored (NaN / Inf included, except as read_info refused them), from the
/// header information `io` read_info returned.
volume read_itk_values(const std::string& path, const itk::ImageIOBase::Pointer& io) {
  auto reader = itk::ImageFileReader<image3>::New();
  reader->SetImageIO(io);
  reader->SetFileName(path);
  try {
    reader->Update();
  } catch (const itk::ExceptionObject& e) {
    CTFORGE_FAIL(fmt::format("{}: cannot read the image data (truncated or corrupt file?): {}",
                             path, e.GetDescription()));
  }
  return detail::volume_from_itk(reader->GetOutput(), path);
}

}  // namespace

volume read_itk_volume(const std::string& path) {
  volume v = read_itk_values(path, read_info(path, /*refuse_non_finite=*/true));
  // Refused as the HDF5 reader refuses them: a NaN would spread through every later step.
  ctforge::detail::refuse_non_finite_input(v.data.data(), v.geom.nz, v.geom.ny, v.geom.nx, path,
                                           "the image", "z, y, x");
  return v;
}

void write_itk_volume(const std::string& path, const volume_view& v, bool compress) {
  v.geom.validate();
  CTFORGE_EXPECTS(static_cast<std::int64_t>(v.data.size()) == v.geom.voxel_count(),
                  fmt::format("{}: volume holds {} values for {} voxels", path, v.data.size(),
                              v.geom.voxel_count()));
  auto io = make_io(path);
  auto img = ctforge::detail::new_itk_image(v.geom);
  // Shares the volume's buffer (no copy); ITK does not take ownership.
  img->GetPixelContainer()->SetImportPointer(const_cast<float*>(v.data.data()), v.data.size(),
                                             false);

  const std::string l = lower(path);
  // Detached headers (.mhd, .nhdr) name their data file: header and data are written into a
  // temporary directory and replace an earlier pair as a unit (commit_detached); single files
  // are written under a temporary name with the final extension.
  const bool detached = l.ends_with(".mhd") || l.ends_with(".nhdr");
  temporary_output out(path, detached);
  const std::string target =
      detached ? (fs::path(out.path()) / fs::path(path).filename()).string() : out.path();
  try {
    auto writer = itk::ImageFileWriter<image3>::New();
    writer->SetImageIO(io);
    writer->SetFileName(target);
    writer->SetInput(img);
    writer->SetUseCompression(compress || l.ends_with(".gz"));
    writer->Update();
  } catch (const itk::ExceptionObject& e) {
    CTFORGE_FAIL(fmt::format("{}: cannot write the image: {}", path, e.GetDescription()));
  }
  // ITK's writers do not report every short write (a full disk leaves a truncated file and no
  // error): the written file must read back bit for bit.
  volume back;
  try {
    back = read_itk_volume(target);
  } catch (const error& e) {
    CTFORGE_FAIL(
        fmt::format("{}: the written file does not read back (disk full?): {}", path, e.what()));
  }
  CTFORGE_CHECK(
      back.data.size() == v.data.size() &&
          std::equal(back.data.begin(), back.data.end(), v.data.begin(),
                     [](float a, float b) {
                       return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
                     }),
      fmt::format("{}: the written file does not read back as written (disk full?)", path));
  if (detached)
    commit_detached(out, path);
  else
    out.commit();
}

std::string describe_itk_volume(const std::string& path) {
  auto io = read_info(path);
  const volume v = read_itk_values(path, io);
  const auto [lo, hi] = std::minmax_element(v.data.begin(), v.data.end());
  std::string s = fmt::format(
      "{}: {} volume ({} stored, {})\n", path, to_string(volume_format_of(path)),
      itk::ImageIOBase::GetComponentTypeAsString(io->GetComponentType()), io->GetNameOfClass());
  s += fmt::format("  size {} x {} x {} (x, y, z)\n", v.geom.nx, v.geom.ny, v.geom.nz);
  s += fmt::format("  spacing {:g} x {:g} x {:g} mm\n", v.geom.spacing_mm[0], v.geom.spacing_mm[1],
                   v.geom.spacing_mm[2]);
  s += fmt::format("  origin ({:g}, {:g}, {:g}) mm (centre of voxel 0,0,0)\n", v.geom.origin_mm[0],
                   v.geom.origin_mm[1], v.geom.origin_mm[2]);
  if (lo != v.data.end()) s += fmt::format("  values {:g} .. {:g}\n", *lo, *hi);
  return s;
}

volume read_volume_any(const std::string& path, const volume_read_options& opt) {
  switch (volume_format_of(path)) {
    case volume_format::hdf5:
      return read_volume(path);
    case volume_format::dicom:
      return read_dicom(path, opt);
    case volume_format::zarr:
      return read_zarr_volume(path);
    default:
      return read_itk_volume(path);
  }
}

void write_volume_any(const std::string& path, const volume_view& v,
                      const volume_write_options& opt) {
  if (static_cast<std::int64_t>(v.data.size()) == v.geom.voxel_count())
    ctforge::detail::refuse_non_finite(v.data.data(), v.geom.nz, v.geom.ny, v.geom.nx, path,
                                       "z, y, x");
  switch (volume_format_of(path)) {
    case volume_format::hdf5:
      write_volume(path, v);
      return;
    case volume_format::dicom:
      write_dicom_series(path, v, opt);
      return;
    case volume_format::zarr:
      write_zarr_volume(path, v, opt.compress);
      return;
    default:
      write_itk_volume(path, v, opt.compress);
      return;
  }
}

}  // namespace ctforge::io
