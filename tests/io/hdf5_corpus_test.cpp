// Valid HDF5 files of every kind the format allows (scalar, empty, null, string, compound,
// variable-length, reference, enum and external-storage datasets; soft, dangling and external
// links; attributes of every kind; NeXus groups), written here with the HDF5 C API: each must
// open (the contained parse must not refuse it), `ctforge info` must list it, and a scan in it
// must be found wherever it sits (NXtomo by definition, or named with --data-path).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
namespace h5 = detail::h5;

const std::string data_dir = CTFORGE_DATA_DIR;
const std::string tooth = data_dir + "/dxchange/tooth.h5";

fs::path temp_dir(const std::string& name) {
  return testing::scratch_dir("hdf5_corpus", name);
}

// ---- small writers over the C API (each closes what it opens) ----------------------------

void scalar_dataset(hid_t loc, const char* name, hid_t type, const void* value) {
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t d = H5Dcreate2(loc, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0) << name;
  H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, value);
  H5Dclose(d);
  H5Sclose(s);
}

void string_attribute(hid_t obj, const char* name, const char* value, bool variable) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, variable ? H5T_VARIABLE : std::strlen(value) + 1);
  const hid_t s = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  if (variable)
    H5Awrite(a, t, &value);
  else
    H5Awrite(a, t, value);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

void string_dataset(hid_t loc, const char* name, const char* value, bool variable) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, variable ? H5T_VARIABLE : std::strlen(value) + 1);
  if (variable)
    scalar_dataset(loc, name, t, &value);
  else
    scalar_dataset(loc, name, t, value);
  H5Tclose(t);
}

hid_t group(hid_t loc, const char* name, const char* nx_class = nullptr) {
  const hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (nx_class) string_attribute(g, "NX_class", nx_class, /*variable=*/false);
  return g;
}

void float_dataset(hid_t loc, const char* name, const std::vector<hsize_t>& dims,
                   const std::vector<float>& values) {
  const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(loc, name, H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (!values.empty()) H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Dclose(d);
  H5Sclose(s);
}

// ---- the corpus ------------------------------------------------------------------------------

/// One valid file per kind of object: name -> writer into the open file's root.
using writer = std::function<void(hid_t)>;
std::vector<std::pair<std::string, writer>> corpus(const fs::path& dir) {
  std::vector<std::pair<std::string, writer>> c;
  c.emplace_back("scalar_int64", [](hid_t f) {
    const std::int64_t v = 5;
    const hid_t g = group(f, "entry", "NXentry");
    scalar_dataset(g, "duration", H5T_STD_I64LE, &v);
    H5Gclose(g);
  });
  c.emplace_back("scalar_float", [](hid_t f) {
    const double v = 53.0;
    scalar_dataset(f, "energy", H5T_IEEE_F64LE, &v);
    const float w = 0.5f;
    scalar_dataset(f, "distance", H5T_IEEE_F32BE, &w);
  });
  c.emplace_back("strings", [](hid_t f) {
    string_dataset(f, "title_fixed", "dendrite scan", /*variable=*/false);
    string_dataset(f, "title_variable", "dendrite scan", /*variable=*/true);
    string_attribute(f, "file_name", "scan.nxs", /*variable=*/true);
    string_attribute(f, "HDF5_Version", "1.10.8", /*variable=*/false);
  });
  c.emplace_back("empty_and_null", [](hid_t f) {
    float_dataset(f, "empty_1d", {0}, {});
    float_dataset(f, "empty_3d", {0, 4, 5}, {});
    const hid_t s = H5Screate(H5S_NULL);
    const hid_t d = H5Dcreate2(f, "null", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t a = H5Acreate2(d, "null_attribute", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Aclose(a);
    H5Dclose(d);
    H5Sclose(s);
  });
  c.emplace_back("compound_and_enum", [](hid_t f) {
    struct pair {
      double x;
      std::int32_t n;
    } v[3] = {{1.5, 1}, {2.5, 2}, {3.5, 3}};
    const hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(pair));
    H5Tinsert(t, "x", HOFFSET(pair, x), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "n", HOFFSET(pair, n), H5T_NATIVE_INT32);
    const hsize_t n = 3;
    const hid_t s = H5Screate_simple(1, &n, nullptr);
    const hid_t d = H5Dcreate2(f, "table", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    const hid_t a = H5Acreate2(d, "compound_attribute", t, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Dclose(d);
    const hid_t e = H5Tenum_create(H5T_NATIVE_INT8);  // h5py's bool
    std::int8_t no = 0, yes = 1;
    H5Tenum_insert(e, "FALSE", &no);
    H5Tenum_insert(e, "TRUE", &yes);
    scalar_dataset(f, "flag", e, &yes);
    H5Tclose(e);
    H5Sclose(s);
    H5Tclose(t);
  });
  c.emplace_back("variable_length", [](hid_t f) {
    int a[2] = {1, 2}, b[3] = {3, 4, 5};
    hvl_t v[2] = {{2, a}, {3, b}};
    const hid_t t = H5Tvlen_create(H5T_NATIVE_INT);
    const hsize_t n = 2;
    const hid_t s = H5Screate_simple(1, &n, nullptr);
    const hid_t d = H5Dcreate2(f, "ragged", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    const char* names[2] = {"alpha", "beta"};  // an array of variable-length strings
    const hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, H5T_VARIABLE);
    const hid_t d2 = H5Dcreate2(f, "names", st, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d2, st, H5S_ALL, H5S_ALL, H5P_DEFAULT, names);
    H5Dclose(d2);
    H5Tclose(st);
    H5Sclose(s);
    H5Tclose(t);
  });
  c.emplace_back("references", [](hid_t f) {
    float_dataset(f, "target", {2}, {1.f, 2.f});
    hobj_ref_t r[2];
    H5Rcreate(&r[0], f, "/target", H5R_OBJECT, -1);
    H5Rcreate(&r[1], f, "/", H5R_OBJECT, -1);
    const hsize_t n = 2;
    const hid_t s = H5Screate_simple(1, &n, nullptr);
    const hid_t d = H5Dcreate2(f, "refs", H5T_STD_REF_OBJ, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_STD_REF_OBJ, H5S_ALL, H5S_ALL, H5P_DEFAULT, r);
    H5Dclose(d);
    H5Sclose(s);
  });
  c.emplace_back("links", [dir](hid_t f) {
    float_dataset(f, "values", {3}, {1.f, 2.f, 3.f});
    H5Lcreate_soft("/values", f, "soft", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_soft("/nowhere", f, "dangling", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_external("missing_file.h5", "/x", f, "external_missing", H5P_DEFAULT, H5P_DEFAULT);
    const std::string other = (dir / "other.h5").string();
    if (!fs::exists(other)) {
      const hid_t o = H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
      float_dataset(o, "x", {2}, {4.f, 5.f});
      H5Fclose(o);
    }
    H5Lcreate_external("other.h5", "/x", f, "external", H5P_DEFAULT, H5P_DEFAULT);
    const hid_t g = group(f, "a");
    H5Lcreate_hard(f, "/values", g, "hard_again", H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
  });
  c.emplace_back("attributes", [](hid_t f) {
    const hid_t g = group(f, "instrument", "NXinstrument");
    const double arr[2][3] = {{1, 2, 3}, {4, 5, 6}};
    const hsize_t dims[2] = {2, 3};
    const hid_t s = H5Screate_simple(2, dims, nullptr);
    const hid_t a = H5Acreate2(g, "matrix", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, arr);
    H5Aclose(a);
    H5Sclose(s);
    const std::int64_t one = 1;
    const hid_t sc = H5Screate(H5S_SCALAR);
    const hid_t b = H5Acreate2(g, "count", H5T_STD_I64BE, sc, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(b, H5T_NATIVE_INT64, &one);
    H5Aclose(b);
    H5Sclose(sc);
    const hsize_t zero = 0;
    const hid_t se = H5Screate_simple(1, &zero, nullptr);
    const hid_t c2 = H5Acreate2(g, "empty", H5T_IEEE_F32LE, se, H5P_DEFAULT, H5P_DEFAULT);
    H5Aclose(c2);
    H5Sclose(se);
    string_attribute(g, "units", "mm", /*variable=*/true);
    H5Gclose(g);
  });
  c.emplace_back("external_storage", [dir](hid_t f) {
    const std::string raw = (dir / "raw.bin").string();
    std::vector<float> v{1, 2, 3, 4};
    std::ofstream(raw, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), 16);
    const hid_t p = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(p, raw.c_str(), 0, 16);
    const hsize_t n = 4;
    const hid_t s = H5Screate_simple(1, &n, nullptr);
    const hid_t d = H5Dcreate2(f, "external_data", H5T_IEEE_F32LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(s);
    H5Pclose(p);
  });
  c.emplace_back("named_datatype", [](hid_t f) {
    const hid_t t = H5Tcopy(H5T_IEEE_F64LE);
    H5Tcommit2(f, "my_type", t, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Tclose(t);
  });
  return c;
}

std::string write_corpus_file(const fs::path& dir, const std::string& name, const writer& w) {
  const std::string path = (dir / (name + ".h5")).string();
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  w(f);
  H5Fclose(f);
  return path;
}

TEST(Hdf5Corpus, EveryValidFileOpensAndInfoListsIt) {
  const fs::path dir = temp_dir("every");
  for (const auto& [name, w] : corpus(dir)) {
    SCOPED_TRACE(name);
    const std::string path = write_corpus_file(dir, name, w);
    std::string d;
    ASSERT_NO_THROW(d = io::describe_any(path));
    EXPECT_NE(d.find("HDF5 file"), std::string::npos) << d;
    // Every link of the file is listed, with what it is.
    auto f = h5::file::open(path);
    for (const auto& e : f.walk()) EXPECT_NE(d.find(e.path), std::string::npos) << d;
  }
  // The CLI says the same, with exit 0.
  const auto r = testing::run_cli(dir, "info scalar_int64.h5");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("/entry/duration"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("int64 scalar"), std::string::npos) << r.output;
}

TEST(Hdf5Corpus, WalkNamesKindsTargetsAndNexusClasses) {
  const fs::path dir = temp_dir("walk");
  const auto c = corpus(dir);
  std::string links, attrs;
  for (const auto& [name, w] : c) {
    if (name == "links") links = write_corpus_file(dir, name, w);
    if (name == "attributes") attrs = write_corpus_file(dir, name, w);
  }
  auto f = h5::file::open(links);
  std::map<std::string, h5::file::entry> by_path;
  for (auto& e : f.walk()) by_path[e.path] = e;
  EXPECT_EQ(by_path["/soft"].kind, "soft link");
  EXPECT_EQ(by_path["/soft"].target, "/values");
  EXPECT_EQ(by_path["/dangling"].kind, "soft link");
  EXPECT_EQ(by_path["/external"].kind, "external link");
  EXPECT_EQ(by_path["/external"].target, "other.h5:/x");
  EXPECT_EQ(by_path["/a/hard_again"].kind, "dataset");
  EXPECT_EQ(by_path["/values"].shape, h5::dims_t{3});
  auto g = h5::file::open(attrs);
  EXPECT_EQ(g.walk().at(0).nx_class, "NXinstrument");
}

/// The tooth scan with NeXus-style scalars, strings and attributes added, as beamline files
/// carry them: it must read exactly as the original.
TEST(Hdf5Corpus, RealScanWithScalarsAddedReadsAsBefore) {
  const fs::path dir = temp_dir("tooth");
  const std::string path = (dir / "tooth_scalars.h5").string();
  fs::copy_file(tooth, path);
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t g = group(f, "entry", "NXentry");
    const std::int64_t duration = 5;
    scalar_dataset(g, "duration", H5T_STD_I64LE, &duration);
    const double energy = 25.0;
    scalar_dataset(g, "energy", H5T_IEEE_F64LE, &energy);
    string_dataset(g, "title", "tooth", /*variable=*/true);
    H5Gclose(g);
    H5Fclose(f);
  }
  io::projection_read_options o;
  o.select.cols = {200, 200};
  const auto a = io::read_projections_any(tooth, o);
  io::loaded_projections b;
  ASSERT_NO_THROW(b = io::read_projections_any(path, o));
  EXPECT_EQ(b.format, "dxchange");
  EXPECT_EQ(a.projections.data, b.projections.data);
  const auto r = testing::run_cli(dir, "info tooth_scalars.h5");
  EXPECT_EQ(r.status, 0) << r.output;
}

/// An NXtomo scan written as beamlines do: under an NXsubentry with definition NXtomo, the
/// frames in the detector group and linked into NXdata, scalars and strings beside them, an
/// unrelated NXentry first (whose /entry*/data/data the old path rule would have taken).
std::string write_nested_nxtomo(const fs::path& dir, std::int64_t np) {
  const std::string path = (dir / "nested.nxs").string();
  const std::int64_t nflat = 2, ndark = 1, rows = 3, cols = 5;
  const std::int64_t frames = ndark + nflat + np;
  std::vector<float> data(static_cast<std::size_t>(frames * rows * cols));
  std::vector<std::int32_t> keys;
  std::vector<double> angles;
  for (std::int64_t i = 0; i < frames; ++i) {
    const int key = i < ndark ? 2 : i < ndark + nflat ? 1 : 0;
    keys.push_back(key);
    angles.push_back(key == 0 ? 180.0 * double(i - ndark - nflat) / double(np) : 0.0);
    for (std::int64_t p = 0; p < rows * cols; ++p)
      data[std::size_t(i * rows * cols + p)] =
          key == 2 ? 10.f : key == 1 ? 1010.f : 10.f + 1000.f * std::exp(-0.01f * float(i + p));
  }
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t other = group(f, "entry", "NXentry");  // a decoy: not NXtomo, float "data"
  const hid_t od = group(other, "data", "NXdata");
  float_dataset(od, "data", {1, 2, 2}, {1, 2, 3, 4});
  const hid_t e = group(other, "tomo", "NXsubentry");
  string_dataset(e, "definition", "NXtomo", /*variable=*/false);
  const double energy = 53;
  const hid_t inst = group(e, "instrument", "NXinstrument");
  const hid_t det = group(inst, "detector", "NXdetector");
  float_dataset(det, "frames", {hsize_t(frames), hsize_t(rows), hsize_t(cols)}, data);
  {
    const hsize_t n = hsize_t(frames);
    const hid_t s = H5Screate_simple(1, &n, nullptr);
    const hid_t k = H5Dcreate2(det, "image_key", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
    H5Dwrite(k, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, keys.data());
    H5Dclose(k);
    H5Sclose(s);
  }
  scalar_dataset(det, "distance", H5T_IEEE_F64LE, &energy);
  const hid_t src = group(inst, "source", "NXsource");
  scalar_dataset(src, "energy", H5T_IEEE_F64LE, &energy);
  const hid_t sample = group(e, "sample", "NXsample");
  {
    const hsize_t n = hsize_t(frames);
    const hid_t s = H5Screate_simple(1, &n, nullptr);
    const hid_t a = H5Dcreate2(sample, "rotation_angle", H5T_IEEE_F64LE, s, H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(a, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, angles.data());
    string_attribute(a, "units", "degrees", /*variable=*/true);
    H5Dclose(a);
    H5Sclose(s);
  }
  const hid_t nxdata = group(e, "data", "NXdata");
  H5Lcreate_soft("/entry/tomo/instrument/detector/frames", nxdata, "data", H5P_DEFAULT,
                 H5P_DEFAULT);
  H5Lcreate_hard(det, "image_key", nxdata, "image_key", H5P_DEFAULT, H5P_DEFAULT);
  for (hid_t g : {nxdata, sample, src, det, inst, e, od, other}) H5Gclose(g);
  H5Fclose(f);
  return path;
}

TEST(NxTomoByDefinition, FindsTheEntryInASubentryBehindLinks) {
  const fs::path dir = temp_dir("nested");
  const std::int64_t np = 6;
  const std::string path = write_nested_nxtomo(dir, np);
  EXPECT_EQ(io::projection_format(path), "nxtomo");
  const auto layout = io::describe_nxtomo_layout(path);
  EXPECT_NE(layout.find("entry: /entry/tomo\n"), std::string::npos) << layout;
  EXPECT_NE(layout.find("rotation_angle: /entry/tomo/sample/rotation_angle"), std::string::npos)
      << layout;
  const auto raw = io::read_nxtomo(path);
  EXPECT_EQ(raw.full_views, np);
  EXPECT_EQ(raw.flats.views, 2);
  EXPECT_EQ(raw.darks.views, 1);
  ASSERT_EQ(raw.angles_rad.size(), std::size_t(np));
  EXPECT_NEAR(rad_to_deg(raw.angles_rad[3]), 90.0, 1e-12);
  const auto p = io::read_projections_any(path);
  // Frame i = 3 + v: transmission exp(-0.01 (i + pixel)) exactly (dark 10, flat 1010).
  for (std::int64_t v = 0; v < np; ++v)
    EXPECT_NEAR(p.projections.at(v, 1, 2), 0.01 * double(3 + v + 5 + 2), 1e-5);
  const auto r = testing::run_cli(dir, "info nested.nxs");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("/entry/tomo"), std::string::npos) << r.output;
}

TEST(NxTomoByDefinition, DatasetsNamedInAnyLayout) {
  const fs::path dir = temp_dir("named");
  const std::string path = (dir / "any.h5").string();
  const std::int64_t n = 4, rows = 2, cols = 3;
  {
    auto f = h5::file::create(path);
    std::vector<float> frames(std::size_t(n * rows * cols)), white(std::size_t(rows * cols), 200.f),
        dark(std::size_t(rows * cols), 0.f);
    for (std::size_t i = 0; i < frames.size(); ++i) frames[i] = 100.f;  // transmission 1/2
    f.write_dataset<float>("/measurement/frames", {hsize_t(n), hsize_t(rows), hsize_t(cols)},
                           frames);
    f.write_dataset<float>("/measurement/open_beam", {hsize_t(rows), hsize_t(cols)}, white);
    f.write_dataset<float>("/measurement/background", {1, hsize_t(rows), hsize_t(cols)}, dark);
    std::vector<double> a{0, 0.5, 1, 1.5};
    auto d = f.write_dataset<double>("/measurement/theta", {hsize_t(n)}, a);
    d.write_string_attribute("units", "rad");
    const std::int64_t scalar = 7;
    f.write_dataset<std::int64_t>("/measurement/count", {}, std::span(&scalar, 1));
  }
  // Unnamed: not a projection file, and the message says how to name the frames.
  testing::expect_error_naming([&] { (void)io::read_projections_any(path); }, path,
                               "--data-path");
  io::projection_read_options o;
  o.datasets = {"/measurement/frames", "/measurement/open_beam", "/measurement/background",
                "/measurement/theta"};
  const auto p = io::read_projections_any(path, o);
  EXPECT_EQ(p.format, "hdf5");
  for (float v : p.projections.data) EXPECT_NEAR(v, std::log(2.0), 1e-6);
  EXPECT_DOUBLE_EQ(p.geom->orbit->angles_rad[3], 1.5);
  // A name that is not there: a usage error naming the option and the dataset.
  o.datasets.flats = "/measurement/white";
  testing::expect_error_naming([&] { (void)io::read_projections_any(path, o); }, "--flat-path",
                               "/measurement/white");
  // The CLI takes the same names.
  const auto r = testing::run_cli(
      dir, "convert any.h5 out.h5 --data-path /measurement/frames --flat-path "
           "/measurement/open_beam --dark-path /measurement/background --angles-path "
           "/measurement/theta");
  EXPECT_EQ(r.status, 0) << r.output;
  const auto bad = testing::run_cli(dir, "convert any.h5 out2.h5 --data-path /nothing");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--data-path"), std::string::npos) << bad.output;
}

TEST(NxTomoByDefinition, DataExchangeTakesTheSameOptions) {
  const fs::path dir = temp_dir("dx");
  // The tooth's theta as a named dataset in radians, replacing /exchange/theta.
  const std::string path = (dir / "tooth.h5").string();
  fs::copy_file(tooth, path);
  {
    auto f = h5::file::open(path, /*writable=*/true);
    const auto theta = f.open_dataset("/exchange/theta").read<double>();
    std::vector<double> twice;
    for (double t : theta) twice.push_back(2 * t * M_PI / 180);
    auto d = f.write_dataset<double>("/other/angles", {theta.size()}, twice);
    d.write_string_attribute("units", "radians");
  }
  io::projection_read_options o;
  o.select.cols = {0, 4};
  o.datasets.angles = "/other/angles";
  const auto a = io::read_projections_any(path, o);
  const auto b = io::read_projections_any(tooth, io::projection_read_options{.select = o.select});
  ASSERT_EQ(a.geom->orbit->angles_rad.size(), b.geom->orbit->angles_rad.size());
  EXPECT_NEAR(a.geom->orbit->angles_rad[10], 2 * b.geom->orbit->angles_rad[10], 1e-12);
  EXPECT_EQ(a.projections.data, b.projections.data);
}


// ---- real NeXus files from beamline software repositories (data/README.md) -------------------

namespace real {

const std::string i13 = data_dir + "/nexus/savu_i13/24888.nxs";
const std::string i12 = data_dir + "/nexus/httomo_i12_360/112482.nxs";
const std::string k11 = data_dir + "/nexus/httomo_k11_diad/k11-18014.nxs";

}  // namespace real

/// Real beamline files are full of scalars (energies, distances, durations), strings, links
/// and attributes: each opens, and `ctforge info` lists it with exit 0.
TEST(RealNexus, EveryFileOpensAndInfoListsIt) {
  const fs::path dir = temp_dir("real");
  for (const std::string& path : {real::i13, real::i12, real::k11}) {
    SCOPED_TRACE(path);
    EXPECT_NO_THROW(detail::probe_in_child(path, "libhdf5", [&] {
      detail::probe_hdf5_file(path);
    }));
    const auto r = testing::run_cli(dir, "info '" + path + "'");
    EXPECT_EQ(r.status, 0) << r.output;
  }
  // The I12 file holds rank-0 datasets, the case the parse crashed on.
  auto f = h5::file::open(real::i12);
  bool scalar = false;
  for (const auto& e : f.walk()) scalar = scalar || (e.kind == "dataset" && e.shape.empty() && !e.null_space);
  EXPECT_TRUE(scalar);
}

/// The I13 and I12 NXtomo entries keep their frames in raw files not copied with them: the
/// entry is found by its definition and the message names the link that cannot be followed.
TEST(RealNexus, FramesInAMissingRawFileAreNamed) {
  testing::expect_runtime_error_naming([] { (void)io::read_projections_any(real::i13); },
                                       "/entry1/tomo_entry/data/data", "pco1-24888.hdf");
  testing::expect_runtime_error_naming([] { (void)io::read_projections_any(real::i12); },
                                       "pco1-112482.hdf");
}

/// Diamond K11 (DIAD): no NXtomo definition; the frames are an external link into a file
/// beside it, the image keys sit in the detector's group, the angles are named by the user.
TEST(RealNexus, DiadScanReadsWithTheAnglesNamed) {
  io::projection_read_options o;
  o.datasets.angles = "/entry/imaging/gts_theta_value";
  const auto p = io::read_projections_any(real::k11, o);
  EXPECT_EQ(p.format, "nxtomo");
  EXPECT_EQ(p.projections.views, 3001);
  EXPECT_EQ(p.projections.rows, 22);
  EXPECT_EQ(p.projections.cols, 26);
  const auto raw = io::read_nxtomo(real::k11, {}, o.datasets);
  EXPECT_EQ(raw.flats.views, 100);
  EXPECT_EQ(raw.darks.views, 100);
  const auto& a = p.geom->orbit->angles_rad;
  EXPECT_NEAR(rad_to_deg(a.front()), 90.0, 0.05);
  EXPECT_NEAR(rad_to_deg(a.back()), 270.0, 0.05);
  // Line integrals of a real sample: finite, mostly positive, below the clamp floor's 9.2.
  double sum = 0;
  for (float v : p.projections.data) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
  }
  EXPECT_GT(sum / double(p.projections.data.size()), 0.05);
  // Without the angles: the NXtomo rules find no rotation_angle, and the message says so.
  testing::expect_runtime_error_naming([] { (void)io::read_projections_any(real::k11); },
                                       real::k11, "rotation angles");
}

}  // namespace
}  // namespace ctforge
