// Volumes in MetaImage / NRRD / NIfTI / DICOM: round trips, the real sample data (checked
// against the raw bytes of the files where possible), a voxel phantom for forward_project, and
// errors that name the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/projector.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;

const std::string data_dir = CTFORGE_DATA_DIR;
using testing::expect_error_naming;
using testing::ramp_volume;

fs::path temp_dir(const std::string& name) {
  return testing::scratch_dir("volumes", name);
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Stored pixel values of an uncompressed little-endian DICOM file, located independently of
/// GDCM: the (7FE0,0010) element, explicit ("OW" + reserved + 32-bit length) or implicit VR.
template <class T>
std::vector<T> dicom_raw_pixels(const std::string& path, std::size_t count) {
  const auto b = file_bytes(path);
  const char tag[4] = {'\xE0', '\x7F', '\x10', '\x00'};
  std::size_t pos = 0;
  for (std::size_t i = 0; i + 12 <= b.size(); ++i) {
    if (std::memcmp(b.data() + i, tag, 4) == 0) {
      pos = (b[i + 4] == 'O' && b[i + 5] == 'W') ? i + 12 : i + 8;
      break;
    }
  }
  EXPECT_GT(pos, 0u) << "no pixel data element in " << path;
  std::vector<T> out(count);
  if (pos == 0 || pos + count * sizeof(T) > b.size()) return {};
  std::memcpy(out.data(), b.data() + pos, count * sizeof(T));
  return out;
}

// ---- ITK formats round trips --------------------------------------------------------------------

struct itk_case {
  std::string ext;
  std::int64_t nx, ny, nz;
};

class ItkRoundTrip : public ::testing::TestWithParam<itk_case> {};

TEST_P(ItkRoundTrip, ValuesSpacingOrigin) {
  const auto c = GetParam();
  const volume v = ramp_volume(c.nx, c.ny, c.nz);
  const std::string path = (temp_dir("itk") / ("vol" + c.ext)).string();
  io::write_volume_any(path, v);
  EXPECT_TRUE(ctforge::testing::leftover_temporaries(fs::path(path).parent_path()).empty())
      << "temporary file left behind";
  const volume back = io::read_volume_any(path);
  ASSERT_EQ(back.geom.nx, c.nx);
  ASSERT_EQ(back.geom.ny, c.ny);
  ASSERT_EQ(back.geom.nz, c.nz);
  // Values are stored as float32: bit exact.
  ASSERT_EQ(back.data.size(), v.data.size());
  for (std::size_t i = 0; i < v.data.size(); ++i)
    ASSERT_EQ(back.data[i], v.data[i]) << "voxel " << i;
  // NIfTI keeps spacing and origin in float32 (relative 6e-8); the others as decimal text of
  // double precision. 1e-5 mm covers both.
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(back.geom.spacing_mm[a], v.geom.spacing_mm[a], 1e-5) << "axis " << a;
    EXPECT_NEAR(back.geom.origin_mm[a], v.geom.origin_mm[a], 1e-5) << "axis " << a;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ItkRoundTrip,
                         ::testing::Values(itk_case{".mha", 7, 5, 3}, itk_case{".mhd", 1, 4, 6},
                                           itk_case{".nrrd", 9, 1, 1}, itk_case{".nrrd", 6, 7, 8},
                                           itk_case{".nii", 5, 3, 2}, itk_case{".nii.gz", 3, 1, 4},
                                           itk_case{".h5", 4, 3, 5}),
                         [](const auto& info) {
                           std::string e = info.param.ext.substr(1);
                           std::replace(e.begin(), e.end(), '.', '_');
                           return e + "_" + std::to_string(info.param.nx) + "x" +
                                  std::to_string(info.param.ny) + "x" +
                                  std::to_string(info.param.nz);
                         });

/// Names of the regular files in `dir`, sorted.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A detached header and its data are replaced as a unit: a new pair never overwrites the
// earlier data file before its header is in place (its data takes a fresh name while the earlier
// one exists), the earlier data file goes once the new header names another, and a file that
// only happens to have the data file's name is never overwritten.
TEST(VolumeFormats, DetachedHeaderAndDataAreReplacedAsAUnit) {
  for (const std::string ext : {".mhd", ".nhdr"}) {
    const fs::path dir = temp_dir("detached" + ext.substr(1));
    const std::string path = (dir / ("v" + ext)).string();
    std::vector<volume> written;
    std::vector<std::string> seen;
    for (int round = 0; round < 3; ++round) {
      volume v = ramp_volume(5, 4, 3);
      for (float& x : v.data) x += static_cast<float>(round);
      io::write_volume_any(path, v);
      EXPECT_EQ(io::read_volume_any(path).data, v.data) << ext << " round " << round;
      const auto files = files_in(dir);
      ASSERT_EQ(files.size(), 2u) << ext << ": header and one data file, got " << files.size();
      seen.push_back(files[0] == "v" + ext ? files[1] : files[0]);
    }
    // The data file's name alternates: the new one never replaced the earlier one in place.
    EXPECT_NE(seen[0], seen[1]) << ext;
    EXPECT_NE(seen[1], seen[2]) << ext;
    // An unrelated file with the data file's name survives the first write of a header.
    const fs::path other = temp_dir("detached_other" + ext.substr(1));
    const std::string data_name = ext == ".mhd" ? "w.zraw" : "w.raw.gz";
    std::ofstream(other / data_name) << "precious";
    io::write_volume_any((other / ("w" + ext)).string(), ramp_volume(5, 4, 3));
    std::ifstream in(other / data_name);
    std::string content;
    std::getline(in, content);
    EXPECT_EQ(content, "precious") << ext;
    EXPECT_EQ(io::read_volume_any((other / ("w" + ext)).string()).data, ramp_volume(5, 4, 3).data);
  }
}

TEST(VolumeFormats, FormatFromPath) {
  EXPECT_EQ(io::volume_format_of("a.mha"), io::volume_format::metaimage);
  EXPECT_EQ(io::volume_format_of("a.MHD"), io::volume_format::metaimage);
  EXPECT_EQ(io::volume_format_of("a.nii.gz"), io::volume_format::nifti);
  EXPECT_EQ(io::volume_format_of("a.nhdr"), io::volume_format::nrrd);
  EXPECT_EQ(io::volume_format_of("a.h5"), io::volume_format::hdf5);
  EXPECT_EQ(io::volume_format_of("series/"), io::volume_format::dicom);
  EXPECT_EQ(io::volume_format_of("series"), io::volume_format::dicom);
  EXPECT_EQ(io::volume_format_of(data_dir + "/dicom/thorax"), io::volume_format::dicom);
  EXPECT_THROW(io::volume_format_of("a.png"), usage_error);
  // A Zarr array (a directory) is one, not a DICOM series, whatever the case of its name, and
  // so is a directory holding Zarr metadata under any name or an array inside a group.
  const auto zarr = testing::scratch_dir("volume_formats", "v.zarr");
  EXPECT_EQ(io::volume_format_of(zarr.string()), io::volume_format::zarr);
  EXPECT_EQ(io::volume_format_of("out.ZARR/"), io::volume_format::zarr);
  EXPECT_EQ(io::volume_format_of("scan.zarr/recon"), io::volume_format::zarr);
  EXPECT_EQ(io::volume_format_of("scan.zarr/recon.h5"), io::volume_format::hdf5);
  const auto plain = testing::scratch_dir("volume_formats", "plain");
  std::ofstream(plain / ".zarray") << "{}";
  EXPECT_EQ(io::volume_format_of(plain.string()), io::volume_format::zarr);
  std::filesystem::remove_all(zarr.parent_path());
}

// ---- real data
// -----------------------------------------------------------------------------------

TEST(VolumeFormats, HeadMetaImageIsAVoxelPhantom) {
  const volume head = io::read_volume_any(data_dir + "/metaimage/head.mha");
  ASSERT_EQ(head.geom.nx, 64);
  ASSERT_EQ(head.geom.ny, 64);
  ASSERT_EQ(head.geom.nz, 93);
  // The header stores 3.2000000476837158 (3.2 as float) and 1.5.
  EXPECT_NEAR(head.geom.spacing_mm[0], 3.2, 1e-6);
  EXPECT_NEAR(head.geom.spacing_mm[1], 3.2, 1e-6);
  EXPECT_DOUBLE_EQ(head.geom.spacing_mm[2], 1.5);
  // Values: ushort data, raw bytes are the last 64*64*93*2 bytes of the file (ElementDataFile
  // LOCAL).
  const auto bytes = file_bytes(data_dir + "/metaimage/head.mha");
  const std::size_t n = static_cast<std::size_t>(head.geom.voxel_count());
  ASSERT_GE(bytes.size(), 2 * n);
  std::vector<std::uint16_t> raw(n);
  std::memcpy(raw.data(), bytes.data() + bytes.size() - 2 * n, 2 * n);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(head.data[i], static_cast<float>(raw[i])) << "voxel " << i;
  EXPECT_EQ(*std::max_element(head.data.begin(), head.data.end()), 3926.0f);

  // As a phantom: centre it on the isocentre and project it in parallel beam. A parallel
  // projection conserves mass: sum over the detector of p * du * dv = sum over voxels of
  // value * voxel volume, at every angle. Joseph interpolation with 1.6 mm pixels (half the
  // voxel pitch in x/y) deviates from this by discretisation only: allow 2%.
  volume ph = head;
  ph.geom =
      volume_geometry::centered(head.geom.nx, head.geom.ny, head.geom.nz, head.geom.spacing_mm);
  const double du = 1.6, dv = 1.5;
  const geometry g =
      make_parallel_geometry(200, 100, du, dv, {0.0, deg_to_rad(37), deg_to_rad(90)});
  const projection_stack p = forward_project(ph, g);
  double mass = 0;
  for (float x : ph.data) mass += x;
  mass *= ph.geom.spacing_mm[0] * ph.geom.spacing_mm[1] * ph.geom.spacing_mm[2];
  for (std::int64_t v = 0; v < p.views; ++v) {
    double s = 0;
    for (std::int64_t i = 0; i < p.rows * p.cols; ++i) s += p.view(v)[i];
    EXPECT_NEAR(s * du * dv, mass, 0.02 * mass) << "view " << v;
  }
}

TEST(VolumeFormats, ThoraxSeriesHuSpacingAndOrder) {
  const std::string dir = data_dir + "/dicom/thorax";
  const volume t = io::read_volume_any(dir);
  ASSERT_EQ((std::array<std::int64_t, 3>{t.geom.nx, t.geom.ny, t.geom.nz}),
            (std::array<std::int64_t, 3>{512, 512, 6}));
  EXPECT_NEAR(t.geom.spacing_mm[0], 0.9765625, 1e-9);
  EXPECT_NEAR(t.geom.spacing_mm[1], 0.9765625, 1e-9);
  EXPECT_NEAR(t.geom.spacing_mm[2], 2.0, 1e-6);
  // HU range: air at -1024 (stored 0); bone below the 12-bit ceiling 4095 - 1024. (The data
  // README says 1101 for the maximum, but the raw bytes of slices 079 and 083 reach stored
  // 2239, i.e. 1215 HU; the per-pixel comparison with the raw bytes below is the real check.)
  const auto [lo, hi] = std::minmax_element(t.data.begin(), t.data.end());
  EXPECT_EQ(*lo, -1024.0f);
  EXPECT_GT(*hi, 1000.0f);
  EXPECT_LE(*hi, 3071.0f);
  // Every slice equals the single file with the same z (read on its own), and its values are
  // the file's stored 12-bit integers + intercept -1024, read from the raw bytes.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  ASSERT_EQ(files.size(), 6u);
  const std::size_t plane = 512 * 512;
  int matched = 0;
  for (const auto& f : files) {
    const volume s = io::read_volume_any(f);
    ASSERT_EQ(s.geom.nz, 1);
    EXPECT_DOUBLE_EQ(s.geom.origin_mm[0], t.geom.origin_mm[0]);
    EXPECT_DOUBLE_EQ(s.geom.origin_mm[1], t.geom.origin_mm[1]);
    const double k = (s.geom.origin_mm[2] - t.geom.origin_mm[2]) / t.geom.spacing_mm[2];
    const auto ki = static_cast<std::int64_t>(std::lround(k));
    ASSERT_NEAR(k, static_cast<double>(ki), 1e-6) << f;
    ASSERT_GE(ki, 0);
    ASSERT_LT(ki, 6);
    const auto raw = dicom_raw_pixels<std::uint16_t>(f, plane);
    ASSERT_EQ(raw.size(), plane);
    for (std::size_t i = 0; i < plane; ++i) {
      ASSERT_EQ(t.data[static_cast<std::size_t>(ki) * plane + i], s.data[i]) << f;
      ASSERT_EQ(s.data[i], static_cast<float>((raw[i] & 0x0FFF) - 1024)) << f << " pixel " << i;
    }
    ++matched;
  }
  EXPECT_EQ(matched, 6);
}

TEST(VolumeFormats, CtSmallSingleFileHuAndMu) {
  const std::string f = data_dir + "/dicom/ct_small/CT_small.dcm";
  const volume v = io::read_volume_any(f);
  ASSERT_EQ(v.geom.nx, 128);
  ASSERT_EQ(v.geom.ny, 128);
  ASSERT_EQ(v.geom.nz, 1);
  EXPECT_NEAR(v.geom.spacing_mm[0], 0.661468, 1e-9);
  EXPECT_NEAR(v.geom.spacing_mm[1], 0.661468, 1e-9);
  EXPECT_DOUBLE_EQ(v.geom.spacing_mm[2], 5.0);  // Slice Thickness of the single slice
  EXPECT_NEAR(v.geom.origin_mm[0], -158.135803, 1e-9);
  EXPECT_NEAR(v.geom.origin_mm[2], -75.699997, 1e-9);
  const auto raw = dicom_raw_pixels<std::int16_t>(f, 128 * 128);
  ASSERT_EQ(raw.size(), 128u * 128u);
  for (std::size_t i = 0; i < raw.size(); ++i)
    ASSERT_EQ(v.data[i], static_cast<float>(raw[i] - 1024)) << i;
  // mu = mu_water (1 + HU / 1000).
  io::volume_read_options o;
  o.mu_water_per_mm = 0.02;
  const volume mu = io::read_volume_any(f, o);
  for (std::size_t i = 0; i < v.data.size(); i += 97)
    EXPECT_NEAR(mu.data[i], 0.02 * (1 + v.data[i] / 1000.0), 1e-7);
}

// ---- DICOM writing
// --------------------------------------------------------------------------------

struct dicom_case {
  std::int64_t nx, ny, nz;
};
class DicomWrite : public ::testing::TestWithParam<dicom_case> {};

TEST_P(DicomWrite, SeriesReadsBackWithinQuantisation) {
  const auto c = GetParam();
  // Attenuation values around water, soft tissue and bone, plus air.
  volume v = ramp_volume(c.nx, c.ny, c.nz);
  for (auto& x : v.data) x = 0.0192f + x * 1.5e-4f;  // 0.0042 .. 0.034 /mm
  v.data[0] = 0;                                     // air: -1000 HU
  const fs::path dir = temp_dir("dicom_write") / "series";
  io::volume_write_options w;
  w.series_description = "unit test series";
  io::write_volume_any(dir.string(), v, w);
  EXPECT_TRUE(ctforge::testing::leftover_temporaries(dir.parent_path()).empty());
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".dcm";
  EXPECT_EQ(files, static_cast<std::size_t>(c.nz));

  // HU back (default): the HU of each voxel within half a stored unit (slope 1 here: |HU| < 800).
  const volume hu = io::read_volume_any(dir.string());
  ASSERT_EQ(hu.geom.nx, c.nx);
  ASSERT_EQ(hu.geom.ny, c.ny);
  ASSERT_EQ(hu.geom.nz, c.nz);
  for (std::size_t i = 0; i < v.data.size(); ++i)
    ASSERT_NEAR(hu.data[i], io::hu_from_mu(v.data[i], io::default_mu_water_per_mm), 0.5 + 1e-3)
        << i;
  EXPECT_EQ(hu.data[0], -1000.0f);
  // Geometry: DS strings with 12 significant digits.
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(hu.geom.spacing_mm[a], v.geom.spacing_mm[a], 1e-9) << a;
    EXPECT_NEAR(hu.geom.origin_mm[a], v.geom.origin_mm[a], 1e-9) << a;
  }
  // mu back with the same water value: within half a HU = mu_water / 2000.
  io::volume_read_options r;
  r.mu_water_per_mm = io::default_mu_water_per_mm;
  const volume mu = io::read_volume_any(dir.string(), r);
  for (std::size_t i = 0; i < v.data.size(); ++i)
    ASSERT_NEAR(mu.data[i], v.data[i], io::default_mu_water_per_mm / 2000 + 1e-7) << i;

  // Tags, as GDCM reads them back.
  const std::string d = io::describe_dicom(dir.string());
  EXPECT_NE(d.find("modality CT"), std::string::npos) << d;
  EXPECT_NE(d.find("manufacturer ctforge"), std::string::npos) << d;
  EXPECT_NE(d.find("series description unit test series"), std::string::npos) << d;
  EXPECT_NE(d.find("rescale slope 1"), std::string::npos) << d;

  // Writing again replaces the series (a directory of .dcm files).
  io::write_volume_any(dir.string(), v, w);
  EXPECT_EQ(io::read_volume_any(dir.string()).geom.nz, c.nz);
}

INSTANTIATE_TEST_SUITE_P(Sizes, DicomWrite,
                         ::testing::Values(dicom_case{5, 4, 3}, dicom_case{17, 9, 1},
                                           dicom_case{1, 6, 4}));

TEST(DicomWriteValues, HuInputAndLargeRangeUsePowerOfTwoSlope) {
  volume v = ramp_volume(6, 5, 2);
  for (std::size_t i = 0; i < v.data.size(); ++i)
    v.data[i] = static_cast<float>(-70000.0 + 13000.0 * static_cast<double>(i % 12));
  const fs::path dir = temp_dir("dicom_range") / "series";
  io::volume_write_options w;
  w.values_are_hu = true;
  io::write_volume_any(dir.string(), v, w);
  // |HU| up to 70000 needs slope 4 (70000 / 2 > 32767 >= 70000 / 4): error <= 2 HU.
  const volume back = io::read_volume_any(dir.string());
  for (std::size_t i = 0; i < v.data.size(); ++i)
    ASSERT_NEAR(back.data[i], v.data[i], 2.0 + 1e-3) << i;
  EXPECT_NE(io::describe_dicom(dir.string()).find("rescale slope 4"), std::string::npos);
}

TEST(DicomWriteValues, RefusesToReplaceOtherFilesAndNonFiniteValues) {
  const fs::path dir = temp_dir("dicom_refuse") / "series";
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "keep me";
  const volume v = ramp_volume(3, 3, 2);
  EXPECT_THROW(io::write_volume_any(dir.string(), v), error);
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_TRUE(ctforge::testing::leftover_temporaries(dir.parent_path()).empty());
  volume bad = v;
  bad.data[4] = std::nanf("");
  // Non-finite values are refused by every writer, naming the voxel; nothing is written.
  for (const char* name : {"other", "other.h5", "other.mha", "other.nii.gz"}) {
    const std::string out = (dir.parent_path() / name).string();
    try {
      io::write_volume_any(out, bad);
      ADD_FAILURE() << name << ": NaN written";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("[0][1][1]"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out)) << name;
  }
  projection_stack p(2, 2, 2);
  p.data[5] = INFINITY;
  EXPECT_THROW(io::write_projections((dir.parent_path() / "p.h5").string(), p,
                                     make_parallel_geometry(2, 2, 1, 1, {0.0, 1.0})),
               error);
  EXPECT_FALSE(fs::exists(dir.parent_path() / "p.h5"));
}

/// Replaces every occurrence of `from` in the file at `path` by `to` (same length); the count.
int patch_bytes(const fs::path& path, const std::string& from, const std::string& to) {
  auto b = file_bytes(path.string());
  int n = 0;
  for (std::size_t i = 0; i + from.size() <= b.size(); ++i)
    if (std::memcmp(b.data() + i, from.data(), from.size()) == 0) {
      std::memcpy(b.data() + i, to.data(), to.size());
      ++n;
    }
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(b.data(), static_cast<std::streamsize>(b.size()));
  return n;
}

// Every volume reader refuses NaN / Inf as the HDF5 reader does, naming the file and the first
// bad voxel ([z][y][x]). The files are written finite (the writers refuse NaN) with a marker
// value at voxel [1][2][3], whose stored bytes are then replaced by a NaN.
TEST(VolumeReaders, EveryFormatRefusesNonFiniteValues) {
  const fs::path dir = temp_dir("nan_readers");
  volume v = ramp_volume(5, 4, 3);
  const float marker = 12345.671875f;  // exact in float32, absent from the ramp
  const std::size_t at = (1 * 4 + 2) * 5 + 3;
  v.data[at] = marker;
  std::string marker_bytes(4, '\0'), nan_bytes(4, '\0');
  const float nan = std::nanf("");
  std::memcpy(marker_bytes.data(), &marker, 4);
  std::memcpy(nan_bytes.data(), &nan, 4);
  io::volume_write_options raw;
  raw.compress = false;  // the marker's bytes stay findable
  // (HDF5 files are always compressed: tests/io/hdf5_test.cpp covers the HDF5 reader. niftilib
  // replaces non-finite floats by 0 while reading: the NIfTI cases check that the reader looks
  // at the stored bytes itself.)
  for (const std::string name : {"v.mha", "v.mhd", "v.nrrd", "v.nii"}) {
    const fs::path path = dir / name;
    io::write_volume_any(path.string(), v, raw);
    EXPECT_EQ(io::read_volume_any(path.string()).data, v.data) << name;
    fs::path data_file = path;
    if (name == "v.mhd") {  // the data file the header names
      std::ifstream header(path);
      for (std::string line; std::getline(header, line);)
        if (line.rfind("ElementDataFile = ", 0) == 0) data_file = dir / line.substr(18);
    }
    ASSERT_TRUE(fs::exists(data_file)) << data_file;
    ASSERT_EQ(patch_bytes(data_file, marker_bytes, nan_bytes), 1) << name;
    expect_error_naming([&] { io::read_volume_any(path.string()); }, path.string(),
                        "non-finite value (nan) at index [1][2][3]");
  }
  // The same NIfTI file gzipped: the scan reads through the compression.
  const fs::path gz = dir / "v.nii.gz";
  ASSERT_EQ(
      std::system(("gzip -c '" + (dir / "v.nii").string() + "' > '" + gz.string() + "'").c_str()),
      0);
  expect_error_naming([&] { io::read_volume_any(gz.string()); }, gz.string(),
                      "non-finite value (nan) at index [1][2][3]");
  // DICOM stores integers: an infinite value comes from the rescale slope. |HU| up to 1e9 is
  // written with slope 32768, patched to 1e300 (every stored value but 0 overflows float32).
  volume hu = ramp_volume(5, 4, 1);
  for (std::size_t i = 0; i < hu.data.size(); ++i)
    hu.data[i] = static_cast<float>(i == 0 ? 1e9 : 1e8 + 1e6 * static_cast<double>(i));
  const fs::path series = dir / "series";
  io::volume_write_options w;
  w.values_are_hu = true;
  io::write_volume_any(series.string(), hu, w);
  ASSERT_NE(io::describe_dicom(series.string()).find("rescale slope 32768"), std::string::npos);
  int patched = 0;
  for (const auto& e : fs::directory_iterator(series))
    patched += patch_bytes(e.path(), "32768 ", "1e300 ");
  ASSERT_EQ(patched, 1);
  expect_error_naming([&] { io::read_volume_any(series.string()); }, series.string(),
                      "non-finite value (inf) at index [0][0][0]");
}

// ---- errors
// ---------------------------------------------------------------------------------------

TEST(VolumeErrors, MixedSeriesRejected) {
  const fs::path dir = temp_dir("mixed");
  fs::copy_file(data_dir + "/dicom/ct_small/CT_small.dcm", dir / "a.dcm");
  fs::copy_file(data_dir + "/dicom/thorax/00-slice078.dcm", dir / "b.dcm");
  expect_error_naming([&] { io::read_volume_any(dir.string()); }, dir.string(),
                      "mixed DICOM series");
}

TEST(VolumeErrors, MissingSliceRejected) {
  const fs::path dir = temp_dir("gap");
  for (const auto& e : fs::directory_iterator(data_dir + "/dicom/thorax"))
    if (e.path().filename() != "00-slice080.dcm")
      fs::copy_file(e.path(), dir / e.path().filename());
  // The message names the two slices around the gap (079 and 081), not the first pair.
  expect_error_naming([&] { io::read_volume_any(dir.string()); }, "00-slice081.dcm",
                      "4 mm apart, the series steps 2 mm (missing slices between them?)");
}

TEST(VolumeErrors, DuplicateSliceNamedWhereItIs) {
  const fs::path dir = temp_dir("duplicate");
  for (const auto& e : fs::directory_iterator(data_dir + "/dicom/thorax"))
    fs::copy_file(e.path(), dir / e.path().filename());
  fs::copy_file(dir / "00-slice080.dcm", dir / "00-slice080-copy.dcm");
  expect_error_naming([&] { io::read_volume_any(dir.string()); }, "00-slice080-copy.dcm",
                      "at the same position (duplicate slice?)");
}

// Pixel Spacing 0 (ITK silently took 1 mm) and a slice whose spacing differs from the others
// are errors naming the slice. The files are a series we write, with the spacing string
// patched in place (same length, so the file stays valid).
TEST(VolumeErrors, ZeroOrMixedPixelSpacingNamesTheSlice) {
  const fs::path dir = temp_dir("pixel_spacing");
  volume v(volume_geometry::centered(8, 8, 3, {2, 2, 2}));
  for (std::size_t i = 0; i < v.data.size(); ++i) v.data[i] = 0.02f;
  const auto patch = [](const fs::path& file, const std::string& to) {
    std::vector<char> b = file_bytes(file.string());
    const std::string tag("\x28\x00\x30\x00", 4);
    auto it = std::search(b.begin(), b.end(), tag.begin(), tag.end());
    ASSERT_NE(it, b.end()) << file;
    const std::string from = "2\\2";
    auto at = std::search(it, std::min(it + 24, b.end()), from.begin(), from.end());
    ASSERT_NE(at, std::min(it + 24, b.end())) << "no '2\\2' after (0028,0030) in " << file;
    std::copy(to.begin(), to.end(), at);
    std::ofstream(file, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  for (const std::string& bad : {std::string("0\\0"), std::string("3\\3")}) {
    const fs::path series = dir / (bad[0] == '0' ? "zero" : "mixed");
    io::write_volume_any(series.string(), v);
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(series)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    patch(files[1], bad);
    expect_error_naming([&] { io::read_volume_any(series.string()); }, files[1].filename().string(),
                        bad[0] == '0' ? "two positive numbers" : "mixed DICOM series");
  }
}

TEST(VolumeErrors, TruncatedAndCorruptFiles) {
  const fs::path dir = temp_dir("corrupt");
  // Truncated MetaImage: header intact, half the voxel data missing.
  const auto head = file_bytes(data_dir + "/metaimage/head.mha");
  const std::string mha = (dir / "truncated.mha").string();
  std::ofstream(mha, std::ios::binary)
      .write(head.data(), static_cast<std::streamsize>(head.size() / 2));
  expect_error_naming([&] { io::read_volume_any(mha); }, mha, "truncated");
  // Truncated NRRD and NIfTI written by us.
  const volume v = ramp_volume(20, 10, 6);
  for (const std::string ext : {".nrrd", ".nii", ".mha"}) {
    const std::string full = (dir / ("full" + ext)).string(), cut = (dir / ("cut" + ext)).string();
    io::write_itk_volume(full, v, /*compress=*/false);
    const auto b = file_bytes(full);
    std::ofstream(cut, std::ios::binary)
        .write(b.data(), static_cast<std::streamsize>(b.size() - 500));
    expect_error_naming([&] { io::read_volume_any(cut); }, cut);
  }
  // Compressed files cut short.
  for (const std::string name : {"z.mha", "z.nii.gz"}) {
    const std::string full = (dir / name).string(), cut = (dir / ("cut_" + name)).string();
    io::write_itk_volume(full, v, /*compress=*/true);
    const auto b = file_bytes(full);
    std::ofstream(cut, std::ios::binary)
        .write(b.data(), static_cast<std::streamsize>(b.size() - 200));
    expect_error_naming([&] { io::read_volume_any(cut); }, cut);
  }
  // Not a NIfTI file at all.
  const std::string nii = (dir / "garbage.nii").string();
  std::ofstream(nii) << "this is not an image";
  expect_error_naming([&] { io::read_volume_any(nii); }, nii);
  // Truncated DICOM (pixel data cut) as a single file.
  const auto ct = file_bytes(data_dir + "/dicom/ct_small/CT_small.dcm");
  const std::string dcm = (dir / "cut.dcm").string();
  std::ofstream(dcm, std::ios::binary).write(ct.data(), 3000);
  expect_error_naming([&] { io::read_volume_any(dcm); }, dcm);
  // A series whose one file lost the end of its pixel data (an interrupted copy), and one whose
  // file was cut inside the header (GDCM itself would abort the process on that one).
  for (const std::size_t keep : {std::size_t{300000}, std::size_t{1000}}) {
    const fs::path series = temp_dir("cut_series_" + std::to_string(keep));
    for (const auto& e : fs::directory_iterator(data_dir + "/dicom/thorax"))
      fs::copy_file(e.path(), series / e.path().filename());
    const auto b = file_bytes((series / "00-slice081.dcm").string());
    std::ofstream((series / "00-slice081.dcm").string(), std::ios::binary | std::ios::trunc)
        .write(b.data(), static_cast<std::streamsize>(keep));
    expect_error_naming([&] { io::read_volume_any(series.string()); }, "00-slice081.dcm",
                        "corrupt DICOM");
  }
  // A directory with no DICOM files.
  const fs::path empty = temp_dir("empty_series");
  expect_error_naming([&] { io::read_volume_any(empty.string()); }, empty.string(), "no DICOM");
  // Missing files.
  expect_error_naming([&] { io::read_volume_any((dir / "missing.nrrd").string()); },
                      "missing.nrrd");
}

TEST(VolumeErrors, DescribeAnyReportsEveryFormat) {
  const std::string head = io::describe_any(data_dir + "/metaimage/head.mha");
  EXPECT_NE(head.find("64 x 64 x 93"), std::string::npos) << head;
  const std::string thorax = io::describe_any(data_dir + "/dicom/thorax");
  EXPECT_NE(thorax.find("512 x 512 x 6"), std::string::npos) << thorax;
  EXPECT_NE(thorax.find("6 files"), std::string::npos) << thorax;
  const std::string ct = io::describe_any(data_dir + "/dicom/ct_small/CT_small.dcm");
  EXPECT_NE(ct.find("rescale intercept -1024"), std::string::npos) << ct;
}

}  // namespace
}  // namespace ctforge
