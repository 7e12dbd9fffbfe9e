// Single arrays as projection data: NumPy .npy files (a small strict parser) and MATLAB .mat
// files (v5 through libmatio, v7.3 through the HDF5 layer). A 2D array is a sinogram
// [views][cols], read as views x 1 row x cols; a 3D array a stack [views][rows][cols]. MATLAB
// arrays are column-major: a MATLAB (views, cols) matrix is stored with the views varying
// fastest, and a v7.3 (HDF5) file shows it as a dataset of shape [cols][views]; both are turned
// into row-major [views][cols] here, in MATLAB's index order.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <matio.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "io/h5.hpp"

namespace ctforge::io {
namespace {

namespace fs = std::filesystem;

/// A whole array as floats in C (row-major) order.
struct dense_array {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
  bool integer = false;
};

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "(";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

/// Row-major copy of a column-major array of dimensions `dims` (the first varies fastest).
std::vector<float> c_order_from_fortran(const std::vector<float>& f,
                                        const std::vector<std::int64_t>& dims) {
  if (dims.size() < 2) return f;
  std::vector<float> c(f.size());
  const std::int64_t d0 = dims[0], d1 = dims[1], d2 = dims.size() == 3 ? dims[2] : 1;
  for (std::int64_t i = 0; i < d0; ++i)
    for (std::int64_t j = 0; j < d1; ++j)
      for (std::int64_t k = 0; k < d2; ++k)
        c[static_cast<std::size_t>((i * d1 + j) * d2 + k)] =
            f[static_cast<std::size_t>(i + d0 * (j + d1 * k))];
  return c;
}

/// The selection of a 2D (sinogram) or 3D array as a raw scan.
raw_scan scan_from_array(dense_array a, const detector_selection& sel, const std::string& path) {
  CTFORGE_CHECK(a.shape.size() == 2 || a.shape.size() == 3,
                fmt::format("{}: array of shape {}: expected 2 dimensions (a sinogram, views x "
                            "cols) or 3 (projections, views x rows x cols)",
                            path, shape_text(a.shape)));
  raw_scan s;
  s.full_views = a.shape[0];
  s.full_rows = a.shape.size() == 3 ? a.shape[1] : 1;
  s.full_cols = a.shape.back();
  s.integer_data = a.integer;
  const auto [v0, nv] = resolve_range(sel.views, s.full_views, "views", path);
  const auto [r0, nr] = resolve_range(sel.rows, s.full_rows, "rows", path);
  const auto [c0, nc] = resolve_range(sel.cols, s.full_cols, "cols", path);
  s.frames = projection_stack(nv, nr, nc);
  for (std::int64_t v = 0; v < nv; ++v)
    for (std::int64_t r = 0; r < nr; ++r)
      std::copy_n(a.data.begin() + ((v0 + v) * s.full_rows + r0 + r) * s.full_cols + c0, nc,
                  s.frames.view(v) + r * nc);
  return s;
}

// ---- .npy ------------------------------------------------------------------------------------

/// The header dictionary of a .npy file: {'descr': '<f4', 'fortran_order': False, 'shape': (..)}.
struct npy_header {
  std::string descr;
  bool fortran = false;
  std::vector<std::int64_t> shape;
};

npy_header parse_npy_header(const std::string& h, const std::string& path) {
  std::size_t i = 0;
  const auto bad = [&](const std::string& what) -> error {
    return error(fmt::format("{}: malformed .npy header ({}): {}", path, what, h));
  };
  const auto skip = [&] {
    while (i < h.size() && std::isspace(static_cast<unsigned char>(h[i]))) ++i;
  };
  const auto expect = [&](char c) {
    skip();
    if (i >= h.size() || h[i] != c) throw bad(fmt::format("expected '{}'", c));
    ++i;
  };
  const auto string_literal = [&] {
    skip();
    if (i >= h.size() || (h[i] != '\'' && h[i] != '"')) throw bad("expected a string");
    const char q = h[i++];
    const std::size_t e = h.find(q, i);
    if (e == std::string::npos) throw bad("unterminated string");
    std::string s = h.substr(i, e - i);
    i = e + 1;
    return s;
  };
  npy_header out;
  bool have_descr = false, have_order = false, have_shape = false;
  expect('{');
  for (;;) {
    skip();
    if (i < h.size() && h[i] == '}') break;
    const std::string key = string_literal();
    expect(':');
    skip();
    if (key == "descr") {
      if (i < h.size() && h[i] == '[')
        throw error(fmt::format("{}: structured arrays (descr {}) are not supported", path,
                                h.substr(i, h.find(']', i) - i + 1)));
      out.descr = string_literal();
      have_descr = true;
    } else if (key == "fortran_order") {
      if (h.compare(i, 4, "True") == 0) {
        out.fortran = true;
        i += 4;
      } else if (h.compare(i, 5, "False") == 0) {
        i += 5;
      } else {
        throw bad("fortran_order is neither True nor False");
      }
      have_order = true;
    } else if (key == "shape") {
      expect('(');
      for (;;) {
        skip();
        if (i < h.size() && h[i] == ')') break;
        std::size_t used = 0;
        long long n = -1;
        try {
          n = std::stoll(h.substr(i, 24), &used);
        } catch (const std::exception&) {
          throw bad("shape holds a non-integer");
        }
        if (n < 0) throw bad("negative dimension");
        out.shape.push_back(n);
        i += used;
        skip();
        if (i < h.size() && h[i] == ',') ++i;
      }
      ++i;
      have_shape = true;
    } else {
      throw bad("unknown key '" + key + "'");
    }
    skip();
    if (i < h.size() && h[i] == ',') ++i;
  }
  if (!have_descr || !have_order || !have_shape)
    throw bad("descr, fortran_order and shape are required");
  return out;
}

/// Element conversion for a .npy descr: byte order, kind, size.
struct npy_type {
  bool big_endian = false, integer = false, is_signed = false;
  int bytes = 0;
};

npy_type parse_descr(const std::string& d, const std::string& path) {
  const auto refuse = [&](const std::string& why) {
    return error(
        fmt::format("{}: .npy arrays of type '{}' are not supported ({}); expected "
                    "floats (f4, f8) or integers (i1/u1, i2/u2, i4/u4)",
                    path, d, why));
  };
  if (d.size() < 3) throw refuse("unknown type");
  const char order = d[0], kind = d[1];
  int bytes = 0;
  try {
    bytes = std::stoi(d.substr(2));
  } catch (const std::exception&) {
    throw refuse("unknown type");
  }
  if (order != '<' && order != '>' && order != '|' && order != '=') throw refuse("byte order");
  if (kind == 'O') throw refuse("object array");
  if (kind == 'c') throw refuse("complex numbers");
  npy_type t;
  t.big_endian = order == '>' || (order == '=' && std::endian::native == std::endian::big);
  t.bytes = bytes;
  if (kind == 'f' && (bytes == 4 || bytes == 8)) return t;
  if ((kind == 'i' || kind == 'u') && (bytes == 1 || bytes == 2 || bytes == 4)) {
    t.integer = true;
    t.is_signed = kind == 'i';
    return t;
  }
  throw refuse("unsupported kind or size");
}

/// Converts n elements of type T (byte-swapped when `swap`) to float.
template <class T>
void convert_elements(const unsigned char* src, std::size_t n, bool swap, float* dst) {
  for (std::size_t k = 0; k < n; ++k) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, src + k * sizeof(T), sizeof(T));
    if (swap) std::reverse(b, b + sizeof(T));
    T v;
    std::memcpy(&v, b, sizeof(T));
    dst[k] = static_cast<float>(v);
  }
}

void convert_npy(const unsigned char* src, std::size_t n, const npy_type& t, float* dst) {
  const bool swap = t.big_endian != (std::endian::native == std::endian::big);
  if (!t.integer) {
    if (t.bytes == 4) return convert_elements<float>(src, n, swap, dst);
    return convert_elements<double>(src, n, swap, dst);
  }
  switch (t.bytes) {
    case 1:
      return t.is_signed ? convert_elements<std::int8_t>(src, n, swap, dst)
                         : convert_elements<std::uint8_t>(src, n, swap, dst);
    case 2:
      return t.is_signed ? convert_elements<std::int16_t>(src, n, swap, dst)
                         : convert_elements<std::uint16_t>(src, n, swap, dst);
    default:
      return t.is_signed ? convert_elements<std::int32_t>(src, n, swap, dst)
                         : convert_elements<std::uint32_t>(src, n, swap, dst);
  }
}

dense_array read_npy_array(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CTFORGE_CHECK(in.good(), path + ": cannot open");
  char magic[8] = {};
  in.read(magic, 8);
  CTFORGE_CHECK(in.gcount() == 8 && std::memcmp(magic, "\x93NUMPY", 6) == 0,
                path + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  CTFORGE_CHECK(major >= 1 && major <= 3,
                fmt::format("{}: .npy format version {} is not supported", path, major));
  unsigned char len_bytes[4] = {};
  const int len_size = major == 1 ? 2 : 4;
  in.read(reinterpret_cast<char*>(len_bytes), len_size);
  std::uint32_t header_len = len_bytes[0] | (len_bytes[1] << 8);
  if (len_size == 4)
    header_len |= (std::uint32_t{len_bytes[2]} << 16) | (std::uint32_t{len_bytes[3]} << 24);
  CTFORGE_CHECK(in.good() && header_len < (1u << 20), path + ": truncated or corrupt .npy header");
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  CTFORGE_CHECK(static_cast<std::uint32_t>(in.gcount()) == header_len,
                path + ": truncated .npy header");
  const npy_header h = parse_npy_header(header, path);
  const npy_type t = parse_descr(h.descr, path);
  CTFORGE_CHECK(h.shape.size() == 2 || h.shape.size() == 3,
                fmt::format("{}: .npy array of shape {}: expected 2 dimensions (a sinogram, "
                            "views x cols) or 3 (projections, views x rows x cols)",
                            path, shape_text(h.shape)));
  std::uint64_t n = 1;
  for (auto d : h.shape) n *= static_cast<std::uint64_t>(d);
  CTFORGE_CHECK(n > 0, fmt::format("{}: empty array of shape {}", path, shape_text(h.shape)));
  const std::uint64_t data_start = 6 + 2 + static_cast<std::uint64_t>(len_size) + header_len;
  std::error_code ec;
  const std::uint64_t file_bytes = fs::file_size(path, ec);
  const std::uint64_t need = n * static_cast<std::uint64_t>(t.bytes);
  CTFORGE_CHECK(!ec && file_bytes >= data_start + need,
                fmt::format("{}: truncated: shape {} of {}-byte elements needs {} data bytes, the "
                            "file has {}",
                            path, shape_text(h.shape), t.bytes, need,
                            file_bytes > data_start ? file_bytes - data_start : 0));
  detail::require_memory(n, sizeof(float) + static_cast<std::uint64_t>(t.bytes),
                         path + ": reading the array", "convert it to a TIFF stack or HDF5");
  std::vector<unsigned char> raw(static_cast<std::size_t>(need));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(need));
  CTFORGE_CHECK(static_cast<std::uint64_t>(in.gcount()) == need, path + ": truncated data");
  dense_array a;
  a.shape = h.shape;
  a.integer = t.integer;
  a.data.resize(static_cast<std::size_t>(n));
  convert_npy(raw.data(), a.data.size(), t, a.data.data());
  if (h.fortran) {
    std::vector<std::int64_t> dims = h.shape;
    a.data = c_order_from_fortran(a.data, dims);
  }
  return a;
}

// ---- .mat ------------------------------------------------------------------------------------

bool is_hdf5_mat(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char buf[520] = {};
  in.read(buf, sizeof buf);
  const auto n = in.gcount();
  static constexpr char sig[] = "\x89HDF\r\n\x1a\n";
  return (n >= 8 && std::memcmp(buf, sig, 8) == 0) ||
         (n >= 520 && std::memcmp(buf + 512, sig, 8) == 0);
}

bool numeric_matlab_class(const std::string& c) {
  return c == "double" || c == "single" || c == "int8" || c == "uint8" || c == "int16" ||
         c == "uint16" || c == "int32" || c == "uint32" || c == "int64" || c == "uint64";
}

/// v7.3: root-level datasets are the variables; HDF5 dims are MATLAB's reversed.
dense_array read_mat73(const std::string& path, const std::string& name) {
  namespace h5 = ctforge::detail::h5;
  auto f = h5::file::open(path);
  std::vector<std::string> usable, all;
  for (const auto& d : f.dataset_names()) {
    if (d.find('/', 1) != std::string::npos) continue;  // #refs# and groups (structs, cells)
    all.push_back(d.substr(1));
    auto ds = f.open_dataset(d);
    const std::string cls =
        ds.has_attribute("MATLAB_class") ? ds.read_string_attribute("MATLAB_class") : "";
    const auto rank = ds.shape().size();
    if (ds.is_numeric() && (cls.empty() || numeric_matlab_class(cls)) && (rank == 2 || rank == 3))
      usable.push_back(d.substr(1));
  }
  std::string var = name;
  if (var.empty()) {
    CTFORGE_CHECK(usable.size() == 1,
                  fmt::format("{}: {} 2D/3D numeric variables ({}); choose one with --data-path "
                              "(variables: {})",
                              path, usable.size(), fmt::join(usable, ", "), fmt::join(all, ", ")));
    var = usable[0];
  }
  CTFORGE_CHECK(
      std::find(all.begin(), all.end(), var) != all.end(),
      fmt::format("{}: no variable '{}' (variables: {})", path, var, fmt::join(all, ", ")));
  auto ds = f.open_dataset("/" + var);
  CTFORGE_CHECK(ds.is_numeric(), fmt::format("{}: variable '{}' holds {}, not real numbers", path,
                                             var, ds.type_name()));
  const auto h5shape = ds.shape();
  dense_array a;
  for (auto it = h5shape.rbegin(); it != h5shape.rend(); ++it)
    a.shape.push_back(static_cast<std::int64_t>(*it));
  CTFORGE_CHECK(a.shape.size() == 2 || a.shape.size() == 3,
                fmt::format("{}: variable '{}' has MATLAB size {}: expected 2 dimensions (a "
                            "sinogram, views x cols) or 3 (views x rows x cols)",
                            path, var, shape_text(a.shape)));
  a.integer = ds.type_class() == H5T_INTEGER;
  std::vector<float> stored(h5::element_count(h5shape));
  ds.read<float>(std::span<float>(stored));  // row-major over [..][cols][views]: column-major
  a.data = c_order_from_fortran(stored, a.shape);
  return a;
}

/// Collects libmatio's log messages (it prints them otherwise).
std::string& matio_messages() {
  static thread_local std::string m;
  return m;
}
void matio_log(int, char* message) {
  auto& m = matio_messages();
  if (!m.empty()) m += "; ";
  m += message ? message : "";
}

struct mat_closer {
  void operator()(mat_t* m) const { Mat_Close(m); }
};
struct var_freer {
  void operator()(matvar_t* v) const { Mat_VarFree(v); }
};

bool numeric_mat_class(matio_classes c) {
  return c == MAT_C_DOUBLE || c == MAT_C_SINGLE || c == MAT_C_INT8 || c == MAT_C_UINT8 ||
         c == MAT_C_INT16 || c == MAT_C_UINT16 || c == MAT_C_INT32 || c == MAT_C_UINT32 ||
         c == MAT_C_INT64 || c == MAT_C_UINT64;
}

dense_array read_mat5(const std::string& path, const std::string& name) {
  Mat_LogInitFunc("ctforge", matio_log);
  matio_messages().clear();
  std::unique_ptr<mat_t, mat_closer> mat(Mat_Open(path.c_str(), MAT_ACC_RDONLY));
  CTFORGE_CHECK(mat != nullptr,
                fmt::format("{}: cannot read as a MATLAB .mat file{}", path,
                            matio_messages().empty() ? "" : " (" + matio_messages() + ")"));
  std::vector<std::string> usable, all;
  while (matvar_t* info = Mat_VarReadNextInfo(mat.get())) {
    std::unique_ptr<matvar_t, var_freer> v(info);
    if (!v->name) continue;
    all.emplace_back(v->name);
    if (numeric_mat_class(v->class_type) && !v->isComplex && (v->rank == 2 || v->rank == 3))
      usable.emplace_back(v->name);
  }
  std::string var = name;
  if (var.empty()) {
    CTFORGE_CHECK(usable.size() == 1,
                  fmt::format("{}: {} 2D/3D real numeric variables ({}); choose one with "
                              "--data-path (variables: {})",
                              path, usable.size(), fmt::join(usable, ", "), fmt::join(all, ", ")));
    var = usable[0];
  }
  CTFORGE_CHECK(
      std::find(all.begin(), all.end(), var) != all.end(),
      fmt::format("{}: no variable '{}' (variables: {})", path, var, fmt::join(all, ", ")));
  std::unique_ptr<matvar_t, var_freer> v(Mat_VarRead(mat.get(), var.c_str()));
  CTFORGE_CHECK(v != nullptr && v->data != nullptr,
                fmt::format("{}: cannot read variable '{}'{}", path, var,
                            matio_messages().empty() ? "" : " (" + matio_messages() + ")"));
  CTFORGE_CHECK(numeric_mat_class(v->class_type) && !v->isComplex,
                fmt::format("{}: variable '{}' is not a real numeric array", path, var));
  dense_array a;
  for (int k = 0; k < v->rank; ++k) a.shape.push_back(static_cast<std::int64_t>(v->dims[k]));
  CTFORGE_CHECK(a.shape.size() == 2 || a.shape.size() == 3,
                fmt::format("{}: variable '{}' has size {}: expected 2 dimensions (a sinogram, "
                            "views x cols) or 3 (views x rows x cols)",
                            path, var, shape_text(a.shape)));
  std::size_t n = 1;
  for (auto d : a.shape) n *= static_cast<std::size_t>(d);
  a.integer = v->class_type != MAT_C_DOUBLE && v->class_type != MAT_C_SINGLE;
  std::vector<float> stored(n);
  const auto convert = [&](auto tag) {
    using T = decltype(tag);
    CTFORGE_CHECK(
        v->nbytes >= n * sizeof(T),
        fmt::format("{}: variable '{}': {} data bytes for {} elements", path, var, v->nbytes, n));
    const T* p = static_cast<const T*>(v->data);
    for (std::size_t k = 0; k < n; ++k) stored[k] = static_cast<float>(p[k]);
  };
  switch (v->class_type) {
    case MAT_C_DOUBLE:
      convert(double{});
      break;
    case MAT_C_SINGLE:
      convert(float{});
      break;
    case MAT_C_INT8:
      convert(std::int8_t{});
      break;
    case MAT_C_UINT8:
      convert(std::uint8_t{});
      break;
    case MAT_C_INT16:
      convert(std::int16_t{});
      break;
    case MAT_C_UINT16:
      convert(std::uint16_t{});
      break;
    case MAT_C_INT32:
      convert(std::int32_t{});
      break;
    case MAT_C_UINT32:
      convert(std::uint32_t{});
      break;
    case MAT_C_INT64:
      convert(std::int64_t{});
      break;
    default:
      convert(std::uint64_t{});
      break;
  }
  a.data = c_order_from_fortran(stored, a.shape);
  return a;
}

}  // namespace

raw_scan read_npy(const std::string& path, const detector_selection& sel) {
  return scan_from_array(read_npy_array(path), sel, path);
}

raw_scan read_mat(const std::string& path, const std::string& name, const detector_selection& sel) {
  std::error_code ec;
  CTFORGE_CHECK(fs::is_regular_file(path, ec), path + ": no such file");
  dense_array a = is_hdf5_mat(path) ? read_mat73(path, name) : read_mat5(path, name);
  return scan_from_array(std::move(a), sel, path);
}

}  // namespace ctforge::io
