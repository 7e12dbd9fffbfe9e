// Single sinograms and arrays as projection data: .npy (written here byte by byte, independently
// of the parser), MATLAB .mat v5 (written with libmatio) and v7.3 (HDF5 in MATLAB's transposed
// layout), 2D TIFF images; angle lists with image keys; open-beam normalisation.
#include <gtest/gtest.h>
#include <matio.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/io.hpp"
#include "io/h5.hpp"
#include "test_support.hpp"

namespace ctforge {
namespace {

namespace fs = std::filesystem;
namespace h5 = detail::h5;
using testing::expect_error_naming;

fs::path temp_dir(const std::string& name) {
  return testing::scratch_dir("sinogram_inputs", name);
}

/// A .npy file (format 1.0) with the given header dictionary and raw data bytes.
void write_npy_raw(const fs::path& p, const std::string& dict, const std::string& bytes) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const auto n = static_cast<std::uint16_t>(header.size());
  const char len[2] = {static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
  f.write(len, 2);
  f << header << bytes;
}

template <class T>
std::string bytes_of(const std::vector<T>& v, bool big_endian = false) {
  std::string s;
  for (const T& x : v) {
    char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    if (big_endian) std::reverse(b, b + sizeof(T));
    s.append(b, sizeof(T));
  }
  return s;
}

/// Values v * 7 + c * 0.25 + 1 (exact in float): a sinogram of V views x C cols.
std::vector<float> ramp(std::int64_t views, std::int64_t cols) {
  std::vector<float> s;
  for (std::int64_t v = 0; v < views; ++v)
    for (std::int64_t c = 0; c < cols; ++c)
      s.push_back(static_cast<float>(v * 7) + 0.25f * static_cast<float>(c) + 1.0f);
  return s;
}

void expect_sinogram(const io::raw_scan& s, const std::vector<float>& want, std::int64_t views,
                     std::int64_t cols) {
  ASSERT_EQ(s.full_views, views);
  ASSERT_EQ(s.full_rows, 1);
  ASSERT_EQ(s.full_cols, cols);
  ASSERT_EQ(s.frames.views, views);
  ASSERT_EQ(s.frames.rows, 1);
  ASSERT_EQ(s.frames.cols, cols);
  for (std::int64_t v = 0; v < views; ++v)
    for (std::int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(s.frames.at(v, 0, c), want[static_cast<std::size_t>(v * cols + c)])
          << "view " << v << " col " << c;
}

// ---- .npy --------------------------------------------------------------------------------------

TEST(Npy, SinogramInEveryByteOrderAndLayoutBitForBit) {
  const auto dir = temp_dir("npy_layouts");
  const std::int64_t V = 5, C = 7;
  const auto want = ramp(V, C);
  // C order, little-endian float32.
  write_npy_raw(dir / "c.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 7), }",
                bytes_of(want));
  expect_sinogram(io::read_npy((dir / "c.npy").string()), want, V, C);
  // Big-endian float32.
  write_npy_raw(dir / "be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (5, 7), }",
                bytes_of(want, true));
  expect_sinogram(io::read_npy((dir / "be.npy").string()), want, V, C);
  // Fortran order, float64: element (v, c) at v + V c.
  std::vector<double> fortran(static_cast<std::size_t>(V * C));
  for (std::int64_t v = 0; v < V; ++v)
    for (std::int64_t c = 0; c < C; ++c)
      fortran[static_cast<std::size_t>(v + V * c)] = want[static_cast<std::size_t>(v * C + c)];
  write_npy_raw(dir / "f.npy", "{'descr': '<f8', 'fortran_order': True, 'shape': (5, 7), }",
                bytes_of(fortran));
  const io::raw_scan f = io::read_npy((dir / "f.npy").string());
  expect_sinogram(f, want, V, C);
  EXPECT_FALSE(f.integer_data);
  // Negative control: the Fortran bytes taken in C order are another array.
  write_npy_raw(dir / "f_as_c.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (5, 7), }",
                bytes_of(fortran));
  const io::raw_scan wrong = io::read_npy((dir / "f_as_c.npy").string());
  EXPECT_NE(wrong.frames.data, f.frames.data);
  // Unsigned 16-bit counts.
  std::vector<std::uint16_t> counts;
  for (float x : want) counts.push_back(static_cast<std::uint16_t>(x * 4));
  write_npy_raw(dir / "u2.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (5, 7), }",
                bytes_of(counts));
  const io::raw_scan u = io::read_npy((dir / "u2.npy").string());
  EXPECT_TRUE(u.integer_data);
  for (std::size_t k = 0; k < counts.size(); ++k) ASSERT_EQ(u.frames.data[k], counts[k]);
}

TEST(Npy, StackOfThreeDimensionsAndPartialRead) {
  const auto dir = temp_dir("npy_stack");
  std::vector<std::int16_t> a;
  for (int v = 0; v < 3; ++v)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 5; ++c) a.push_back(static_cast<std::int16_t>(100 * v + 10 * r - c));
  write_npy_raw(dir / "s.npy", "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 4, 5), }",
                bytes_of(a));
  const io::raw_scan s = io::read_npy((dir / "s.npy").string(), {{1, 2}, {2, 2}, {1, 3}});
  EXPECT_EQ(s.full_views, 3);
  EXPECT_EQ(s.full_rows, 4);
  EXPECT_EQ(s.full_cols, 5);
  ASSERT_EQ(s.frames.views, 2);
  for (int v = 0; v < 2; ++v)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(s.frames.at(v, r, c), 100 * (v + 1) + 10 * (r + 2) - (c + 1));
  const std::string d = io::describe_any((dir / "s.npy").string());
  EXPECT_NE(d.find("npy projections"), std::string::npos) << d;
  EXPECT_NE(d.find("views 3, rows 4, cols 5 (integer data)"), std::string::npos) << d;
}

TEST(Npy, UnsupportedAndMalformedFilesNameTheFile) {
  const auto dir = temp_dir("npy_bad");
  const std::string four_d = (dir / "four.npy").string();
  write_npy_raw(four_d, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 2), }",
                bytes_of(std::vector<float>{1, 2}));
  expect_error_naming([&] { io::read_npy(four_d); }, four_d, "(1, 1, 1, 2)");
  const std::string complex = (dir / "complex.npy").string();
  write_npy_raw(complex, "{'descr': '<c8', 'fortran_order': False, 'shape': (1, 1), }",
                bytes_of(std::vector<float>{1, 2}));
  expect_error_naming([&] { io::read_npy(complex); }, complex, "complex");
  const std::string object = (dir / "object.npy").string();
  write_npy_raw(object, "{'descr': '|O', 'fortran_order': False, 'shape': (1, 1), }", "xxxxxxxx");
  expect_error_naming([&] { io::read_npy(object); }, object, "object");
  const std::string malformed = (dir / "malformed.npy").string();
  write_npy_raw(malformed, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1, 1), }",
                bytes_of(std::vector<float>{1}));
  expect_error_naming([&] { io::read_npy(malformed); }, malformed, "malformed .npy header");
  const std::string truncated = (dir / "truncated.npy").string();
  write_npy_raw(truncated, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }",
                bytes_of(std::vector<float>{1, 2, 3}));
  expect_error_naming([&] { io::read_npy(truncated); }, truncated, "truncated");
  const std::string not_npy = (dir / "text.npy").string();
  std::ofstream(not_npy) << "1 2 3\n";
  expect_error_naming([&] { io::read_npy(not_npy); }, not_npy, "not a .npy file");
}

// ---- .mat --------------------------------------------------------------------------------------

/// A MATLAB v5 file with float32 variables (MATLAB order: dims[0] = views, column-major).
void write_mat5(const std::string& path,
                const std::vector<std::pair<std::string, std::vector<float>>>& vars,
                std::int64_t views, std::int64_t cols) {
  mat_t* m = Mat_CreateVer(path.c_str(), nullptr, MAT_FT_MAT5);
  ASSERT_NE(m, nullptr);
  for (const auto& [name, rowmajor] : vars) {
    std::vector<float> colmajor(rowmajor.size());
    for (std::int64_t v = 0; v < views; ++v)
      for (std::int64_t c = 0; c < cols; ++c)
        colmajor[static_cast<std::size_t>(v + views * c)] =
            rowmajor[static_cast<std::size_t>(v * cols + c)];
    std::size_t dims[2] = {static_cast<std::size_t>(views), static_cast<std::size_t>(cols)};
    matvar_t* var =
        Mat_VarCreate(name.c_str(), MAT_C_SINGLE, MAT_T_SINGLE, 2, dims, colmajor.data(), 0);
    ASSERT_NE(var, nullptr);
    ASSERT_EQ(Mat_VarWrite(m, var, MAT_COMPRESSION_NONE), 0);
    Mat_VarFree(var);
  }
  Mat_Close(m);
}

TEST(Mat, Version5SinogramAndVariableChoice) {
  const auto dir = temp_dir("mat5");
  const std::int64_t V = 6, C = 4;
  const auto want = ramp(V, C);
  const std::string one = (dir / "one.mat").string();
  write_mat5(one, {{"sino", want}}, V, C);
  expect_sinogram(io::read_mat(one), want, V, C);
  const std::string two = (dir / "two.mat").string();
  auto other = want;
  for (float& x : other) x = -x;
  write_mat5(two, {{"sino", want}, {"other", other}}, V, C);
  expect_error_naming([&] { io::read_mat(two); }, two, "sino, other");
  expect_sinogram(io::read_mat(two, "other"), other, V, C);
  expect_error_naming([&] { io::read_mat(two, "nope"); }, two, "no variable 'nope'");
  // Through the pipeline: a 2D variable is a one-row scan, with data_path choosing it.
  io::projection_read_options opt;
  opt.datasets.data = "sino";
  opt.angles_path = (dir / "angles.txt").string();
  std::ofstream(opt.angles_path) << "0\n30\n60\n90\n120\n150\n";
  const io::loaded_projections p = io::read_projections_any(two, opt);
  EXPECT_EQ(p.format, "mat");
  ASSERT_EQ(p.projections.rows, 1);
  EXPECT_EQ(p.projections.data, want);
}

TEST(Mat, Version73TransposedLayoutIsUndone) {
  const auto dir = temp_dir("mat73");
  const std::int64_t V = 5, C = 3;
  const auto want = ramp(V, C);
  // MATLAB saves a V x C matrix column-major: HDF5 sees a dataset of shape [C][V].
  std::vector<double> stored(static_cast<std::size_t>(V * C));
  for (std::int64_t v = 0; v < V; ++v)
    for (std::int64_t c = 0; c < C; ++c)
      stored[static_cast<std::size_t>(c * V + v)] = want[static_cast<std::size_t>(v * C + c)];
  const std::string path = (dir / "sino73.mat").string();
  {
    auto f = h5::file::create(path);
    auto d =
        f.write_dataset<double>("/sino", {hsize_t(C), hsize_t(V)}, std::span<const double>(stored));
    d.write_string_attribute("MATLAB_class", "double");
    auto t = f.write_dataset<double>("/labels", {1, 2}, std::span<const double>(stored.data(), 2));
    t.write_string_attribute("MATLAB_class", "char");  // not numeric: not a candidate
  }
  const io::raw_scan s = io::read_mat(path);
  expect_sinogram(s, want, V, C);
  // Negative control: the stored order taken as [views][cols] is a different array (the test
  // data are not symmetric under the transpose).
  std::vector<float> untransposed(stored.begin(), stored.end());
  EXPECT_NE(untransposed, s.frames.data);
}

// ---- angle lists -------------------------------------------------------------------------------

TEST(AngleList, CommentsSeparatorsKeysAndErrorsWithLineNumbers) {
  const auto dir = temp_dir("angles");
  const std::string ok = (dir / "ok.txt").string();
  std::ofstream(ok) << "# angle key\n\n0, 2\n0 1  # flat\n  0\t0\n90.5,0\n\n180 , 3\n";
  const io::angle_list a = io::read_angle_list(ok);
  ASSERT_EQ(a.angles_rad.size(), 5u);
  EXPECT_EQ(a.keys, (std::vector<int>{2, 1, 0, 0, 3}));
  EXPECT_EQ(a.line_numbers, (std::vector<int>{3, 4, 5, 6, 8}));
  EXPECT_DOUBLE_EQ(a.angles_rad[3], deg_to_rad(90.5));
  EXPECT_TRUE(a.warning.empty());
  const std::string rad = (dir / "rad.txt").string();
  std::ofstream(rad) << "0\n1.5\n3.1\n";
  EXPECT_NE(io::read_angle_list(rad).warning.find("looks like radians"), std::string::npos);
  EXPECT_TRUE(io::read_angle_list(rad, true).warning.empty());
  EXPECT_DOUBLE_EQ(io::read_angle_list(rad, true).angles_rad[1], 1.5);

  const std::string nan = (dir / "word.txt").string();
  std::ofstream(nan) << "0\n10\nten\n";
  expect_error_naming([&] { io::read_angle_list(nan); }, nan + ": line 3", "'ten'");
  const std::string key7 = (dir / "key7.txt").string();
  std::ofstream(key7) << "0 0\n1 7\n";
  expect_error_naming([&] { io::read_angle_list(key7); }, key7 + ": line 2", "'7'");
  const std::string ragged = (dir / "ragged.txt").string();
  std::ofstream(ragged) << "0 0\n1\n";
  expect_error_naming([&] { io::read_angle_list(ragged); }, ragged + ": line 2", "columns");
  const std::string empty = (dir / "empty.txt").string();
  std::ofstream(empty) << "# nothing\n";
  expect_error_naming([&] { io::read_angle_list(empty); }, empty, "no angles");
}

/// A TIFF stack in acquisition order: 2 darks, 2 flats, 4 projections, 1 invalid, 1 flat.
struct keyed_stack {
  std::string dir, angles;
  std::vector<int> keys{2, 2, 1, 1, 0, 0, 0, 0, 3, 1};
  projection_stack frames{10, 3, 4};
};

keyed_stack make_keyed_stack(const fs::path& dir) {
  keyed_stack k;
  k.dir = (dir / "stack").string();
  k.angles = (dir / "angles.txt").string();
  for (std::int64_t i = 0; i < 10; ++i)
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 4; ++c) {
        const int key = k.keys[static_cast<std::size_t>(i)];
        const float base =
            key == 2 ? 10.0f + static_cast<float>(c) : 1000.0f + 3.0f * static_cast<float>(r + i);
        k.frames.at(i, r, c) = key == 0 ? base * 0.5f - 20.0f * static_cast<float>(c + i) : base;
      }
  io::write_tiff_stack(k.dir, k.frames);
  std::ofstream a(k.angles);
  a << "# theta key\n";
  int proj = 0;
  for (int key : k.keys) a << (key == 0 ? 45.0 * proj++ : 0.0) << ", " << key << "\n";
  return k;
}

TEST(AngleList, KeysTakeFlatsAndDarksFromTheStack) {
  const auto dir = temp_dir("keyed");
  const keyed_stack k = make_keyed_stack(dir);
  io::projection_read_options opt;
  opt.angles_path = k.angles;
  const io::loaded_projections p = io::read_projections_any(k.dir, opt);
  ASSERT_EQ(p.projections.views, 4);
  ASSERT_EQ(p.projections.rows, 3);
  ASSERT_EQ(p.projections.cols, 4);
  EXPECT_EQ(p.geom->type_name(), "parallel");
  for (int v = 0; v < 4; ++v)
    EXPECT_NEAR(p.geom->orbit->angles_rad[static_cast<std::size_t>(v)], deg_to_rad(45.0 * v),
                1e-12);
  EXPECT_NE(p.warnings.find("--flip-v"), std::string::npos) << p.warnings;
  // By hand: flat = mean of frames 2, 3, 9; dark = mean of frames 0, 1; projections 4..7.
  // Float output of a double computation: 1e-5 absolute on line integrals of order 1.
  for (std::int64_t v = 0; v < 4; ++v)
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 4; ++c) {
        const double flat =
            (k.frames.at(2, r, c) + double{k.frames.at(3, r, c)} + k.frames.at(9, r, c)) / 3;
        const double dark = (k.frames.at(0, r, c) + double{k.frames.at(1, r, c)}) / 2;
        const double want = -std::log((k.frames.at(4 + v, r, c) - dark) / (flat - dark));
        EXPECT_NEAR(p.projections.at(v, r, c), want, 1e-5) << v << " " << r << " " << c;
      }
  // A view range counts projections only; the geometry alone agrees.
  opt.select.views = {1, 2};
  const io::loaded_projections part = io::read_projections_any(k.dir, opt);
  ASSERT_EQ(part.projections.views, 2);
  for (std::int64_t i = 0; i < 2 * 3 * 4; ++i)
    EXPECT_EQ(part.projections.data[static_cast<std::size_t>(i)],
              p.projections.data[static_cast<std::size_t>(12 + i)]);
  EXPECT_EQ(geometry_to_json(io::read_projection_geometry(k.dir, opt)), part.geometry_json);
}

TEST(AngleList, CountMismatchNamesTheListAndTheData) {
  const auto dir = temp_dir("mismatch");
  const keyed_stack k = make_keyed_stack(dir);
  io::projection_read_options opt;
  opt.angles_path = (dir / "short.txt").string();
  std::ofstream(opt.angles_path) << "0 0\n1 0\n";
  expect_error_naming([&] { io::read_projections_any(k.dir, opt); }, opt.angles_path,
                      "2 lines with image keys (lines 1..2) for the 10 stored frames");
  std::ofstream(opt.angles_path) << "0\n1\n";
  expect_error_naming([&] { io::read_projections_any(k.dir, opt); }, opt.angles_path,
                      "for the 10 views of " + k.dir);
  opt.geometry_path = "g.json";
  EXPECT_THROW(io::read_projections_any(k.dir, opt), usage_error);
}

// ---- sinograms through the pipeline -----------------------------------------------------------

TEST(Sinogram, TiffImageWithAnAngleListEqualsTheOneRowScan) {
  const auto dir = temp_dir("tiff_sino");
  const std::int64_t V = 8, C = 6;
  projection_stack image(1, V, C);  // one image: rows are views
  image.data = ramp(V, C);
  for (float& x : image.data) x *= 0.01f;  // line integrals of order 1
  io::write_tiff_stack((dir / "img").string(), image);
  const std::string tif = (dir / "img" / "proj_00000.tif").string();
  const std::string angles = (dir / "angles.txt").string();
  {
    std::ofstream a(angles);
    for (int v = 0; v < V; ++v) a << 180.0 * v / V << "\n";
  }
  io::projection_read_options opt;
  opt.angles_path = angles;
  opt.pixel_size_mm = 0.5;
  const io::loaded_projections s = io::read_projections_any(tif, opt);
  ASSERT_EQ(s.projections.views, V);
  ASSERT_EQ(s.projections.rows, 1);
  EXPECT_EQ(s.projections.data, image.data);
  EXPECT_EQ(s.warnings.find("--flip-v"), std::string::npos) << s.warnings;  // one row
  // The same data as a one-row ctforge file with the geometry an angle list implies.
  std::vector<double> rad;
  for (int v = 0; v < V; ++v) rad.push_back(deg_to_rad(180.0 * v / V));
  const geometry g = make_parallel_geometry(C, 1, 0.5, 0.5, rad);
  projection_stack one_row(V, 1, C);
  one_row.data = image.data;
  const std::string h5 = (dir / "one_row.h5").string();
  io::write_projections(h5, one_row, g);
  const io::loaded_projections n = io::read_projections_any(h5);
  EXPECT_EQ(n.projections.data, s.projections.data);
  EXPECT_EQ(n.geometry_json, s.geometry_json);
  // Forced with sinogram = true (no angle list needed to decide; a geometry JSON works too).
  const std::string gjson = (dir / "g.json").string();
  std::ofstream(gjson) << geometry_to_json(g);
  io::projection_read_options forced;
  forced.sinogram = true;
  forced.geometry_path = gjson;
  EXPECT_EQ(io::read_projections_any(tif, forced).projections.data, image.data);
  // Without either, the image is one view of V rows and the JSON does not fit.
  forced.sinogram = false;
  expect_error_naming([&] { io::read_projections_any(tif, forced); }, gjson);
  // sinogram on a stack of several images is refused.
  io::projection_read_options stack;
  stack.sinogram = true;
  stack.geometry_path = gjson;
  EXPECT_THROW(io::read_projections_any((dir / "img").string(), stack), usage_error);
}

TEST(Sinogram, OpenBeamColumnsWithKeyedDarks) {
  const auto dir = temp_dir("open_beam");
  // Rows of an integer sinogram: 2 darks, then 3 projections; cols 0-1 and 8-9 see no object.
  const std::int64_t C = 10;
  std::vector<std::uint16_t> counts;
  for (int i = 0; i < 5; ++i)
    for (int c = 0; c < C; ++c) {
      const bool dark = i < 2, open = c < 2 || c >= 8;
      counts.push_back(static_cast<std::uint16_t>(dark   ? 100 + c + i
                                                  : open ? 4000 + 100 * i + c
                                                         : 1500 + 50 * c + 7 * i));
    }
  const std::string npy = (dir / "sino.npy").string();
  write_npy_raw(npy, "{'descr': '<u2', 'fortran_order': False, 'shape': (5, 10), }",
                bytes_of(counts));
  const std::string angles = (dir / "angles.txt").string();
  std::ofstream(angles) << "0 2\n0 2\n0 0\n60 0\n120 0\n";
  io::projection_read_options opt;
  opt.angles_path = angles;
  opt.open_beam_cols = {{0, 2}, {8, 10}};
  opt.select.cols = {2, 6};
  const io::loaded_projections p = io::read_projections_any(npy, opt);
  ASSERT_EQ(p.projections.views, 3);
  ASSERT_EQ(p.projections.cols, 6);
  const auto at = [&](int i, int c) {
    return static_cast<double>(counts[static_cast<std::size_t>(i * C + c)]);
  };
  for (int v = 0; v < 3; ++v) {
    double i0 = 0;
    for (int c : {0, 1, 8, 9}) i0 += at(2 + v, c) - 0.5 * (at(0, c) + at(1, c));
    i0 /= 4;
    for (int c = 2; c < 8; ++c) {
      const double want = -std::log((at(2 + v, c) - 0.5 * (at(0, c) + at(1, c))) / i0);
      EXPECT_NEAR(p.projections.at(v, 0, c - 2), want, 1e-5) << v << " " << c;
    }
  }
  // Without open-beam columns, integer counts with no flat field are refused.
  opt.open_beam_cols.clear();
  expect_error_naming([&] { io::read_projections_any(npy, opt); }, npy, "no flat field");
  opt.open_beam_cols = {{8, 11}};
  EXPECT_THROW(io::read_projections_any(npy, opt), usage_error);
}

}  // namespace
}  // namespace ctforge

namespace ctforge {
namespace {

// "START:STOP:COUNT" instead of a file: numpy.linspace's angles, both ends included; a file of
// that name is still read as a file.
TEST(AngleList, StartStopCountIsALinspace) {
  const auto l = io::read_angle_list("-88.2:91.8:91");
  ASSERT_EQ(l.angles_rad.size(), 91u);
  EXPECT_NEAR(rad_to_deg(l.angles_rad.front()), -88.2, 1e-12);
  EXPECT_NEAR(rad_to_deg(l.angles_rad[1]), -86.2, 1e-12);
  EXPECT_NEAR(rad_to_deg(l.angles_rad.back()), 91.8, 1e-12);
  const auto r = io::read_angle_list("0:3.14159:2", /*radians=*/true);
  EXPECT_DOUBLE_EQ(r.angles_rad[1], 3.14159);
  EXPECT_THROW((void)io::read_angle_list("0:180:2.5"), usage_error);
  EXPECT_THROW((void)io::read_angle_list("0:180:0"), usage_error);
  // Not of the form: a file that does not exist.
  EXPECT_THROW((void)io::read_angle_list("0:180"), error);
}

}  // namespace
}  // namespace ctforge
