// Internal RAII layer over the HDF5 C API (never included by public headers).
//
//  * handle<Close>: move-only owner of one hid_t, closed by `Close` in the destructor.
//  * file / dataset: handles that also know their file name and object path, so that every
//    failure becomes a ctforge::error of the form
//        "<file>: dataset /x: H5Dread failed: <messages from the HDF5 error stack>".
//  * Typed reads and writes (whole datasets or hyperslabs) with HDF5 converting between the
//    stored numeric type and the C++ type; scalar string datasets and attributes (fixed or
//    variable length); numeric array attributes; recursive listing of datasets.
//  * float reads and writes of chunked datasets compressed with shuffle + deflate (our own
//    files) code their chunks in parallel (io/h5_chunks.hpp), bit-identical to libhdf5's.
//
// HDF5's automatic printing of its error stack is switched off (once per process) the first time
// a file is opened or created here: failures are reported through exceptions only.
// Not thread-safe (neither is the serial HDF5 library): use from one thread at a time.
#pragma once

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/unique_handle.hpp"
#include "ctforge/error.hpp"
#include "io/contained.hpp"
#include "io/h5_chunks.hpp"
#include "io/object_store.hpp"

namespace ctforge::detail::h5 {

using dims_t = std::vector<hsize_t>;

/// Switches off HDF5's automatic error printing (idempotent).
inline void silence_errors() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

/// Text of the current HDF5 error stack (outermost call first, at most a few entries), then
/// clears the stack. Empty when the stack is empty.
inline std::string error_stack() {
  std::vector<std::string> parts;
  auto walk = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto& out = *static_cast<std::vector<std::string>*>(data);
    if (e && e->desc && *e->desc) {
      std::string d = e->desc;
      bool seen = false;
      for (const auto& p : out) seen = seen || p == d;
      if (!seen && out.size() < 4) out.push_back(std::move(d));
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk, &parts);
  H5Eclear2(H5E_DEFAULT);
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : "; ") + p;
  return s.empty() ? "no further detail from HDF5" : s;
}

/// Throws ctforge::error "<context>: <call> failed: <HDF5 error stack>".
[[noreturn]] inline void fail(std::string_view context, std::string_view call) {
  throw error(fmt::format("{}: {} failed: {}", context, call, error_stack()));
}

/// Returns `id` when valid, else fails naming `call`.
inline hid_t check_id(hid_t id, std::string_view context, std::string_view call) {
  if (id < 0) fail(context, call);
  return id;
}
/// Returns `status` when >= 0, else fails naming `call`.
inline herr_t check(herr_t status, std::string_view context, std::string_view call) {
  if (status < 0) fail(context, call);
  return status;
}

/// Traits of an HDF5 identifier released by `Close` (errors ignored there: see handle::close).
template <herr_t (*Close)(hid_t)>
struct close_traits {
  using handle_type = hid_t;
  static constexpr hid_t null() noexcept { return H5I_INVALID_HID; }
  static bool is_null(hid_t id) noexcept { return id < 0; }
  static void release(hid_t id) noexcept { Close(id); }
};

/// Move-only owner of an HDF5 identifier; `Close` releases it.
template <herr_t (*Close)(hid_t)>
class handle : public unique_handle<close_traits<Close>> {
  using base = unique_handle<close_traits<Close>>;

 public:
  using base::base;
  /// Closes and reports a failure (e.g. data that could not be flushed) as ctforge::error.
  void close(std::string_view context) {
    if (!this->owns()) return;
    const herr_t st = Close(this->release());
    check(st, context, "closing");
  }
};

using file_id = handle<H5Fclose>;
using group_id = handle<H5Gclose>;
using dataset_id = handle<H5Dclose>;
using dataspace_id = handle<H5Sclose>;
using datatype_id = handle<H5Tclose>;  ///< only for types we own (H5Tcopy, H5Dget_type, ...)
using attribute_id = handle<H5Aclose>;
using plist_id = handle<H5Pclose>;
using object_id = handle<H5Oclose>;

/// In-memory HDF5 type of a C++ arithmetic type.
template <class T>
hid_t native_type() {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "numeric types only");
  if constexpr (std::is_same_v<T, float>)
    return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, long double>)
    return H5T_NATIVE_LDOUBLE;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 1)
    return H5T_NATIVE_INT8;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 2)
    return H5T_NATIVE_INT16;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 4)
    return H5T_NATIVE_INT32;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 8)
    return H5T_NATIVE_INT64;
  else if constexpr (sizeof(T) == 1)
    return H5T_NATIVE_UINT8;
  else if constexpr (sizeof(T) == 2)
    return H5T_NATIVE_UINT16;
  else if constexpr (sizeof(T) == 4)
    return H5T_NATIVE_UINT32;
  else
    return H5T_NATIVE_UINT64;
}

/// Little-endian file type used when writing a C++ arithmetic type.
template <class T>
hid_t file_type() {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "numeric types only");
  if constexpr (std::is_same_v<T, float>)
    return H5T_IEEE_F32LE;
  else if constexpr (std::is_floating_point_v<T>)
    return H5T_IEEE_F64LE;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 1)
    return H5T_STD_I8LE;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 2)
    return H5T_STD_I16LE;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 4)
    return H5T_STD_I32LE;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 8)
    return H5T_STD_I64LE;
  else if constexpr (sizeof(T) == 1)
    return H5T_STD_U8LE;
  else if constexpr (sizeof(T) == 2)
    return H5T_STD_U16LE;
  else if constexpr (sizeof(T) == 4)
    return H5T_STD_U32LE;
  else
    return H5T_STD_U64LE;
}

/// Short name of a stored type: "float32", "int16", "uint8", "string", "compound", ...
inline std::string type_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = 8 * H5Tget_size(type);
  switch (cls) {
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_FLOAT:
      return fmt::format("float{}", bits);
    case H5T_STRING:
      return H5Tis_variable_str(type) > 0 ? "string" : fmt::format("string[{}]", bits / 8);
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "vlen";
    case H5T_REFERENCE:
      return "reference";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_TIME:
      return "time";
    default:
      return "unknown";
  }
}

/// Product of the dimensions (1 for a scalar dataspace).
inline std::uint64_t element_count(const dims_t& d) {
  std::uint64_t n = 1;
  for (hsize_t x : d) n *= x;
  return n;
}

/// "[60][32][40]" (or "scalar" for rank 0).
inline std::string shape_string(const dims_t& d) {
  if (d.empty()) return "scalar";
  std::string s;
  for (hsize_t x : d) s += fmt::format("[{}]", x);
  return s;
}

/// Dimensions of a dataspace (empty for scalar; fails for a null dataspace).
inline dims_t space_dims(hid_t space, std::string_view context) {
  const int rank = check(H5Sget_simple_extent_ndims(space), context, "H5Sget_simple_extent_ndims");
  dims_t d(static_cast<std::size_t>(rank));
  if (rank > 0)
    check(H5Sget_simple_extent_dims(space, d.data(), nullptr), context,
          "H5Sget_simple_extent_dims");
  return d;
}

// ---- strings and attributes on any object (file root, group, dataset) ----------------------

namespace impl {

/// Reads one string (scalar or single-element dataspace) through `read(memtype, buffer)`.
template <class Read>
std::string read_string(hid_t stored_type, hid_t space, std::string_view context, Read&& read) {
  CTFORGE_CHECK(H5Tget_class(stored_type) == H5T_STRING,
                fmt::format("{}: expected a string, found {}", context, type_name(stored_type)));
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  CTFORGE_CHECK(n == 1, fmt::format("{}: expected a single string, found {} elements", context, n));
  datatype_id mem(check_id(H5Tcopy(H5T_C_S1), context, "H5Tcopy"));
  H5Tset_cset(mem.get(), H5Tget_cset(stored_type));
  if (H5Tis_variable_str(stored_type) > 0) {
    check(H5Tset_size(mem.get(), H5T_VARIABLE), context, "H5Tset_size");
    char* buf = nullptr;
    check(read(mem.get(), static_cast<void*>(&buf)), context, "reading a variable-length string");
    std::string s = buf ? std::string(buf) : std::string();
    if (buf) H5free_memory(buf);
    return s;
  }
  const std::size_t size = H5Tget_size(stored_type);
  check(H5Tset_size(mem.get(), size), context, "H5Tset_size");
  // NULLPAD in memory: every stored byte arrives. The default (NULLTERM) keeps the last byte
  // for a terminator, which cut the last character of a string that fills its size, as h5py
  // writes numpy bytes (np.bytes_): a /geometry JSON then lost its closing brace.
  check(H5Tset_strpad(mem.get(), H5T_STR_NULLPAD), context, "H5Tset_strpad");
  std::string s(size, '\0');
  check(read(mem.get(), static_cast<void*>(s.data())), context, "reading a fixed-length string");
  // Fixed-length strings are padded with NULs or spaces depending on H5Tget_strpad.
  const std::size_t end = s.find('\0');
  if (end != std::string::npos) s.resize(end);
  if (H5Tget_strpad(stored_type) == H5T_STR_SPACEPAD) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
  }
  return s;
}

/// Variable-length UTF-8 string type (what h5py writes for `str`).
inline datatype_id utf8_string_type(std::string_view context) {
  datatype_id t(check_id(H5Tcopy(H5T_C_S1), context, "H5Tcopy"));
  check(H5Tset_size(t.get(), H5T_VARIABLE), context, "H5Tset_size");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), context, "H5Tset_cset");
  return t;
}

}  // namespace impl

/// An HDF5 object (file root group, group or dataset) plus a description used in messages.
class location {
 public:
  hid_t id() const noexcept { return id_; }
  /// "<file>" for the root, "<file>: dataset /x" for a dataset; prefixes every message.
  const std::string& context() const noexcept { return context_; }

  bool has_attribute(const std::string& name) const {
    return check(H5Aexists(id_, name.c_str()), attr_context(name), "H5Aexists") > 0;
  }
  /// Names of the attributes attached to this object, in creation/name order.
  std::vector<std::string> attribute_names() const {
    std::vector<std::string> names;
    auto op = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
      static_cast<std::vector<std::string>*>(data)->emplace_back(name);
      return 0;
    };
    hsize_t idx = 0;
    check(H5Aiterate2(id_, H5_INDEX_NAME, H5_ITER_INC, &idx, op, &names), context_, "H5Aiterate2");
    return names;
  }
  /// Stored type name and shape of an attribute, e.g. {"float64", {3}}.
  std::pair<std::string, dims_t> attribute_info(const std::string& name) const {
    const std::string ctx = attr_context(name);
    attribute_id a = open_attribute(name);
    datatype_id t(check_id(H5Aget_type(a.get()), ctx, "H5Aget_type"));
    dataspace_id s(check_id(H5Aget_space(a.get()), ctx, "H5Aget_space"));
    return {type_name(t.get()), space_dims(s.get(), ctx)};
  }

  std::string read_string_attribute(const std::string& name) const {
    const std::string ctx = attr_context(name);
    attribute_id a = open_attribute(name);
    datatype_id t(check_id(H5Aget_type(a.get()), ctx, "H5Aget_type"));
    dataspace_id s(check_id(H5Aget_space(a.get()), ctx, "H5Aget_space"));
    return impl::read_string(t.get(), s.get(), ctx,
                             [&](hid_t mem, void* buf) { return H5Aread(a.get(), mem, buf); });
  }
  /// Writes (replacing any existing) a scalar variable-length UTF-8 string attribute.
  void write_string_attribute(const std::string& name, std::string_view value) const {
    const std::string ctx = attr_context(name);
    remove_attribute_if_present(name);
    datatype_id t = impl::utf8_string_type(ctx);
    dataspace_id s(check_id(H5Screate(H5S_SCALAR), ctx, "H5Screate"));
    attribute_id a(
        check_id(H5Acreate2(id_, name.c_str(), t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT), ctx,
                 "H5Acreate2"));
    const std::string copy(value);
    const char* p = copy.c_str();
    check(H5Awrite(a.get(), t.get(), &p), ctx, "H5Awrite");
    a.close(ctx);
  }

  /// Reads a numeric attribute (any rank, any integer or float type) as doubles, row-major.
  std::vector<double> read_double_attribute(const std::string& name) const {
    const std::string ctx = attr_context(name);
    attribute_id a = open_attribute(name);
    datatype_id t(check_id(H5Aget_type(a.get()), ctx, "H5Aget_type"));
    const H5T_class_t cls = H5Tget_class(t.get());
    CTFORGE_CHECK(cls == H5T_INTEGER || cls == H5T_FLOAT,
                  fmt::format("{}: expected numbers, found {}", ctx, type_name(t.get())));
    dataspace_id s(check_id(H5Aget_space(a.get()), ctx, "H5Aget_space"));
    const hssize_t n = H5Sget_simple_extent_npoints(s.get());
    if (n < 0) fail(ctx, "H5Sget_simple_extent_npoints");
    std::vector<double> v(static_cast<std::size_t>(n));
    if (n > 0) check(H5Aread(a.get(), H5T_NATIVE_DOUBLE, v.data()), ctx, "H5Aread");
    return v;
  }
  /// Writes (replacing any existing) a 1-D float64 attribute.
  void write_double_attribute(const std::string& name, std::span<const double> values) const {
    const std::string ctx = attr_context(name);
    remove_attribute_if_present(name);
    const hsize_t n = values.size();
    dataspace_id s(check_id(H5Screate_simple(1, &n, nullptr), ctx, "H5Screate_simple"));
    attribute_id a(
        check_id(H5Acreate2(id_, name.c_str(), H5T_IEEE_F64LE, s.get(), H5P_DEFAULT, H5P_DEFAULT),
                 ctx, "H5Acreate2"));
    check(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, values.data()), ctx, "H5Awrite");
    a.close(ctx);
  }

 protected:
  location() = default;
  location(hid_t id, std::string context) : id_(id), context_(std::move(context)) {}

  std::string attr_context(const std::string& name) const {
    return fmt::format("{}: attribute {}", context_, name);
  }
  attribute_id open_attribute(const std::string& name) const {
    const std::string ctx = attr_context(name);
    CTFORGE_CHECK(has_attribute(name), ctx + ": not found");
    return attribute_id(check_id(H5Aopen(id_, name.c_str(), H5P_DEFAULT), ctx, "H5Aopen"));
  }
  void remove_attribute_if_present(const std::string& name) const {
    if (has_attribute(name)) check(H5Adelete(id_, name.c_str()), attr_context(name), "H5Adelete");
  }

  hid_t id_ = H5I_INVALID_HID;  // owned by the derived class
  std::string context_;
};

/// Options for creating a dataset.
struct create_options {
  dims_t chunk;          ///< chunk shape (same rank); empty = contiguous storage
  int deflate = 0;       ///< gzip level 0..9 (0 = none; needs chunks; skipped if unavailable)
  bool shuffle = false;  ///< byte shuffle before deflate (helps float data)
  /// Contiguous storage only: the data's space is allocated at creation and no fill value is
  /// ever written, so dataset::data_offset() is known and the data can be written in place.
  bool preallocate = false;
};

/// An open dataset. Reads/writes convert between the stored type and T.
class dataset : public location {
 public:
  dataset(dataset_id id, std::string file, std::string name)
      : location(id.get(), fmt::format("{}: dataset {}", file, name)),
        handle_(std::move(id)),
        file_(std::move(file)),
        name_(std::move(name)) {
    check_chunk_layout();
  }
  dataset(dataset&&) noexcept = default;
  dataset& operator=(dataset&&) noexcept = default;

  const std::string& name() const noexcept { return name_; }
  const std::string& file_path() const noexcept { return file_; }

  /// libhdf5 1.10 trusts a chunk's dimensions when it reads: in a corrupt file whose chunks
  /// reach beyond a fixed dimension it copies past the end of its buffers (found by
  /// fuzz_hdf5_readers). Such a layout cannot be created; it is refused as corrupt.
  void check_chunk_layout() const {
    plist_id dcpl(check_id(H5Dget_create_plist(id_), context_, "H5Dget_create_plist"));
    if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return;
    dataspace_id s(check_id(H5Dget_space(id_), context_, "H5Dget_space"));
    const int rank = H5Sget_simple_extent_ndims(s.get());
    if (rank <= 0 || rank > H5S_MAX_RANK) return;
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), max(dims.size()), chunk(dims.size());
    check(H5Sget_simple_extent_dims(s.get(), dims.data(), max.data()), context_,
          "H5Sget_simple_extent_dims");
    CTFORGE_CHECK(H5Pget_chunk(dcpl.get(), rank, chunk.data()) == rank,
                  context_ + ": chunks of another rank than the data: corrupt file");
    for (std::size_t i = 0; i < dims.size(); ++i)
      CTFORGE_CHECK(max[i] == H5S_UNLIMITED || chunk[i] <= max[i],
                    fmt::format("{}: chunks of {} along dimension {} exceed its fixed size {}: "
                                "corrupt file",
                                context_, chunk[i], i, max[i]));
  }

  /// Byte offset of the data in the file (contiguous storage, allocated); throws otherwise.
  std::uint64_t data_offset() const {
    const haddr_t a = H5Dget_offset(id_);
    CTFORGE_CHECK(a != HADDR_UNDEF, context_ + ": H5Dget_offset (storage not allocated)");
    return static_cast<std::uint64_t>(a);
  }
  /// Dimensions, slowest first (empty for a scalar).
  dims_t shape() const {
    dataspace_id s(check_id(H5Dget_space(id_), context_, "H5Dget_space"));
    return space_dims(s.get(), context_);
  }
  /// Class of the stored element type (H5T_INTEGER, H5T_FLOAT, H5T_STRING, ...).
  H5T_class_t type_class() const {
    datatype_id t(check_id(H5Dget_type(id_), context_, "H5Dget_type"));
    return H5Tget_class(t.get());
  }
  /// e.g. "float32", "uint16", "string".
  std::string type_name() const {
    datatype_id t(check_id(H5Dget_type(id_), context_, "H5Dget_type"));
    return h5::type_name(t.get());
  }
  bool is_numeric() const {
    const H5T_class_t c = type_class();
    return c == H5T_INTEGER || c == H5T_FLOAT;
  }

  /// Reads the whole dataset into `out` (size = element count), converting to T.
  template <class T>
  void read(std::span<T> out) const {
    require_numeric();
    const auto n = element_count(shape());
    CTFORGE_CHECK(out.size() == n, fmt::format("{}: buffer of {} elements for {} stored elements",
                                               context_, out.size(), n));
    if (n == 0) return;
    if constexpr (std::is_same_v<T, float>) {
      const dims_t d = shape();
      if (read_float_chunks(id_, dims_t(d.size(), 0), d, out.data(), context_)) return;
    }
    check(H5Dread(id_, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), context_,
          "H5Dread");
  }
  template <class T>
  std::vector<T> read() const {
    std::vector<T> v(static_cast<std::size_t>(element_count(shape())));
    read<T>(std::span<T>(v));
    return v;
  }
  /// Reads the block [start, start + count) (one entry per dimension) into `out` (row-major,
  /// size = product of count).
  template <class T>
  void read_slab(const dims_t& start, const dims_t& count, std::span<T> out) const {
    require_numeric();
    auto [file_space, mem_space] = select(start, count, out.size());
    if (out.empty()) return;
    if constexpr (std::is_same_v<T, float>) {
      if (read_float_chunks(id_, start, count, out.data(), context_)) return;
    }
    check(
        H5Dread(id_, native_type<T>(), mem_space.get(), file_space.get(), H5P_DEFAULT, out.data()),
        context_, "H5Dread (hyperslab)");
  }

  /// Writes the whole dataset from `data` (size = element count), converting from T.
  template <class T>
  void write(std::span<const T> data) const {
    const auto n = element_count(shape());
    CTFORGE_CHECK(data.size() == n, fmt::format("{}: {} elements given for {} stored elements",
                                                context_, data.size(), n));
    if (n == 0) return;
    if constexpr (std::is_same_v<T, float>) {
      const dims_t d = shape();
      if (write_float_chunks(id_, dims_t(d.size(), 0), d, data.data(), context_)) return;
    }
    check(H5Dwrite(id_, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), context_,
          "H5Dwrite");
  }
  /// Writes the block [start, start + count) from `data` (row-major).
  template <class T>
  void write_slab(const dims_t& start, const dims_t& count, std::span<const T> data) const {
    auto [file_space, mem_space] = select(start, count, data.size());
    if (data.empty()) return;
    if constexpr (std::is_same_v<T, float>) {
      if (write_float_chunks(id_, start, count, data.data(), context_)) return;
    }
    check(H5Dwrite(id_, native_type<T>(), mem_space.get(), file_space.get(), H5P_DEFAULT,
                   data.data()),
          context_, "H5Dwrite (hyperslab)");
  }

  /// Reads a scalar (or single-element) string dataset, fixed or variable length.
  std::string read_string() const {
    datatype_id t(check_id(H5Dget_type(id_), context_, "H5Dget_type"));
    dataspace_id s(check_id(H5Dget_space(id_), context_, "H5Dget_space"));
    return impl::read_string(t.get(), s.get(), context_, [&](hid_t mem, void* buf) {
      return H5Dread(id_, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    });
  }

  /// Closes now, reporting failures (e.g. a write that could not be flushed).
  void close() {
    handle_.close(context_);
    id_ = H5I_INVALID_HID;
  }

 private:
  void require_numeric() const {
    CTFORGE_CHECK(is_numeric(),
                  fmt::format("{}: stored type {} is not numeric", context_, type_name()));
  }
  std::pair<dataspace_id, dataspace_id> select(const dims_t& start, const dims_t& count,
                                               std::size_t buffer_size) const {
    const dims_t d = shape();
    CTFORGE_CHECK(start.size() == d.size() && count.size() == d.size(),
                  fmt::format("{}: hyperslab of rank {} for a dataset of rank {}", context_,
                              start.size(), d.size()));
    for (std::size_t i = 0; i < d.size(); ++i)
      CTFORGE_CHECK(start[i] + count[i] <= d[i],
                    fmt::format("{}: hyperslab {}+{} exceeds dimension {} of size {}", context_,
                                start[i], count[i], i, d[i]));
    CTFORGE_CHECK(buffer_size == element_count(count),
                  fmt::format("{}: buffer of {} elements for a hyperslab of {}", context_,
                              buffer_size, element_count(count)));
    dataspace_id fs(check_id(H5Dget_space(id_), context_, "H5Dget_space"));
    check(
        H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
        context_, "H5Sselect_hyperslab");
    dataspace_id ms(
        check_id(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), context_,
                 "H5Screate_simple"));
    return {std::move(fs), std::move(ms)};
  }

  dataset_id handle_;
  std::string file_;
  std::string name_;
};

/// Where the core driver keeps a file made by file::create_in_memory: its buffer, allocated
/// through HDF5's file image callbacks (malloc / realloc / free as the driver does itself).
struct core_image {
  void* mem = nullptr;
  std::size_t size = 0;

  static H5FD_file_image_callbacks_t callbacks() {
    H5FD_file_image_callbacks_t cb{};
    cb.image_malloc = [](std::size_t n, H5FD_file_image_op_t, void* u) -> void* {
      return static_cast<core_image*>(u)->track(std::malloc(n), n);
    };
    cb.image_memcpy = [](void* dst, const void* src, std::size_t n, H5FD_file_image_op_t,
                         void*) -> void* { return std::memcpy(dst, src, n); };
    cb.image_realloc = [](void* p, std::size_t n, H5FD_file_image_op_t, void* u) -> void* {
      return static_cast<core_image*>(u)->track(std::realloc(p, n), n);
    };
    cb.image_free = [](void* p, H5FD_file_image_op_t, void* u) -> herr_t {
      auto* img = static_cast<core_image*>(u);
      if (p == img->mem) img->track(nullptr, 0);
      std::free(p);
      return 0;
    };
    // The tracker outlives the file (file::image_ is destroyed after file::handle_): property
    // list copies share it.
    cb.udata_copy = [](void* u) -> void* { return u; };
    cb.udata_free = [](void*) -> herr_t { return 0; };
    return cb;
  }

 private:
  void* track(void* p, std::size_t n) {
    if (p != nullptr || n == 0) {
      mem = p;
      size = n;
    }
    return p;
  }
};

/// An open HDF5 file. Object names are absolute or relative to the root ("/a/b" == "a/b").
class file : public location {
 public:
  /// Opens an existing file read-only (or read-write). Errors: "<path>: no such file",
  /// "<path>: not an HDF5 file", or the HDF5 error stack.
  static file open(const std::string& path, bool writable = false) {
    silence_errors();
    if (io::is_object_url(path)) {  // s3://: ranged reads (src/io/object_store.hpp)
      CTFORGE_EXPECTS(!writable, path + ": HDF5 files in object storage are read, not modified");
      return file(file_id(io::open_s3_hdf5(path)), path);
    }
    std::error_code ec;
    CTFORGE_CHECK(std::filesystem::exists(path, ec), path + ": no such file");
    CTFORGE_CHECK(!std::filesystem::is_directory(path, ec),
                  path + ": is a directory, not an HDF5 file");
    // libhdf5 can crash on corrupt object headers: walk the file in a child process first.
    if (!writable)
      ctforge::detail::probe_in_child(path, "libhdf5", [&] { ctforge::detail::probe_hdf5_file(path); });
    const htri_t is_h5 = H5Fis_hdf5(path.c_str());
    if (is_h5 < 0) fail(path, "H5Fis_hdf5 (cannot read the file)");
    CTFORGE_CHECK(is_h5 > 0, path + ": not an HDF5 file");
    return file(file_id(check_id(
                    H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT),
                    path, "H5Fopen")),
                path);
  }
  /// Creates (truncating) a file.
  static file create(const std::string& path) {
    silence_errors();
    return file(file_id(check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                 path, "H5Fcreate")),
                path);
  }
  /// Creates a file held in memory (core driver, no backing store): nothing touches the disk
  /// until image() is written out by the caller, whose writes are checked (HDF5's own handling
  /// of a full disk can crash at close). `path` names it in messages.
  static file create_in_memory(const std::string& path) {
    silence_errors();
    plist_id fapl(check_id(H5Pcreate(H5P_FILE_ACCESS), path, "H5Pcreate"));
    check(H5Pset_fapl_core(fapl.get(), std::size_t{1} << 24, 0), path, "H5Pset_fapl_core");
    // The core driver's buffer is allocated through these callbacks, so that image_view can
    // hand it out without copying it (image() would hold the file twice).
    auto img = std::make_unique<core_image>();
    H5FD_file_image_callbacks_t cb = core_image::callbacks();
    cb.udata = img.get();
    check(H5Pset_file_image_callbacks(fapl.get(), &cb), path, "H5Pset_file_image_callbacks");
    file f(file_id(check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), path,
                            "H5Fcreate (in memory)")),
           path);
    f.image_ = std::move(img);
    return f;
  }
  /// The bytes of the whole file (flushed first), in place in the core driver's buffer: for a
  /// file made by create_in_memory; valid until the file is written to or closed.
  std::span<const char> image_view() {
    check(H5Fflush(handle_.get(), H5F_SCOPE_GLOBAL), path_, "H5Fflush");
    const ssize_t n = H5Fget_file_image(handle_.get(), nullptr, 0);
    check(n < 0 ? -1 : 0, path_, "H5Fget_file_image");
    CTFORGE_CHECK(image_ && image_->mem && static_cast<std::size_t>(n) <= image_->size,
                  path_ + ": the in-memory file image is not where it was allocated");
    return {static_cast<const char*>(image_->mem), static_cast<std::size_t>(n)};
  }
  /// The bytes of the whole file (flushed first): for a file made by create_in_memory.
  std::vector<char> image() {
    check(H5Fflush(handle_.get(), H5F_SCOPE_GLOBAL), path_, "H5Fflush");
    const ssize_t n = H5Fget_file_image(handle_.get(), nullptr, 0);
    check(n < 0 ? -1 : 0, path_, "H5Fget_file_image");
    std::vector<char> bytes(static_cast<std::size_t>(n));
    check(H5Fget_file_image(handle_.get(), bytes.data(), bytes.size()) < 0 ? -1 : 0, path_,
          "H5Fget_file_image");
    return bytes;
  }
  file(file&&) noexcept = default;
  file& operator=(file&&) noexcept = default;

  const std::string& path() const noexcept { return path_; }

  /// True when every component of `name` exists (a link, followed to any object kind).
  bool has(std::string_view name) const {
    const std::string n = absolute(name);
    std::string prefix;
    std::size_t pos = 1;
    while (pos <= n.size()) {
      std::size_t next = n.find('/', pos);
      if (next == std::string::npos) next = n.size();
      prefix = n.substr(0, next);
      if (check(H5Lexists(id_, prefix.c_str(), H5P_DEFAULT), context_, "H5Lexists") <= 0)
        return false;
      pos = next + 1;
    }
    return true;
  }
  /// True when `name` exists and is a dataset.
  bool has_dataset(std::string_view name) const {
    if (!has(name)) return false;
    const std::string n = absolute(name);
    object_id o(H5Oopen(id_, n.c_str(), H5P_DEFAULT));
    if (!o) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    return H5Iget_type(o.get()) == H5I_DATASET;
  }
  /// Absolute paths of all datasets in the file (recursive, in name order).
  std::vector<std::string> dataset_names() const {
    struct state {
      hid_t file;
      std::vector<std::string> names;
    } st{id_, {}};
    auto op = [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
      auto& s = *static_cast<state*>(data);
      if (info->type != H5L_TYPE_HARD) return 0;  // soft/external links: not followed
      object_id o(H5Oopen(s.file, name, H5P_DEFAULT));
      if (!o) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
      }
      if (H5Iget_type(o.get()) == H5I_DATASET) s.names.push_back(std::string("/") + name);
      return 0;
    };
    check(H5Lvisit(id_, H5_INDEX_NAME, H5_ITER_INC, op, &st), context_, "H5Lvisit");
    return st.names;
  }

  /// One link of the file as walk() lists it.
  struct entry {
    std::string path;    ///< absolute path of the link
    std::string kind;    ///< "group", "dataset", "datatype", "soft link", "external link", "other"
    std::string target;  ///< soft link: the path it names; external link: "file:/path"
    std::string type;    ///< dataset: stored type name ("float32", "string", "compound", ...)
    dims_t shape;        ///< dataset: dimensions (empty for a scalar or a null dataspace)
    bool null_space = false;  ///< dataset with a null dataspace (no elements, no shape)
    std::string nx_class;     ///< group: its NX_class attribute when that is a string
  };
  /// Every link below the root, recursively in name order: hard links to groups, datasets and
  /// named datatypes (each object once per hard link), soft and external links listed with
  /// their targets but not followed. Never throws for what a valid file may hold.
  std::vector<entry> walk() const {
    struct state {
      hid_t file;
      std::vector<entry> out;
    } st{id_, {}};
    auto op = [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
      auto& s = *static_cast<state*>(data);
      entry e;
      e.path = std::string("/") + name;
      if (info->type == H5L_TYPE_SOFT || info->type == H5L_TYPE_EXTERNAL) {
        e.kind = info->type == H5L_TYPE_SOFT ? "soft link" : "external link";
        std::vector<char> val(info->u.val_size + 1, '\0');
        if (H5Lget_val(s.file, name, val.data(), val.size(), H5P_DEFAULT) >= 0) {
          if (info->type == H5L_TYPE_SOFT) {
            e.target = val.data();
          } else {
            const char* fname = nullptr;
            const char* oname = nullptr;
            unsigned flags = 0;
            if (H5Lunpack_elink_val(val.data(), val.size(), &flags, &fname, &oname) >= 0)
              e.target = fmt::format("{}:{}", fname ? fname : "", oname ? oname : "");
          }
        }
        H5Eclear2(H5E_DEFAULT);
        s.out.push_back(std::move(e));
        return 0;
      }
      e.kind = "other";
      object_id o(H5Oopen(s.file, name, H5P_DEFAULT));
      if (!o) {
        H5Eclear2(H5E_DEFAULT);
        s.out.push_back(std::move(e));
        return 0;
      }
      const H5I_type_t t = H5Iget_type(o.get());
      if (t == H5I_GROUP) e.kind = "group";
      if (t == H5I_DATATYPE) e.kind = "datatype";
      if (t == H5I_DATASET) {
        e.kind = "dataset";
        datatype_id dt(H5Dget_type(o.get()));
        if (dt) e.type = type_name(dt.get());
        dataspace_id sp(H5Dget_space(o.get()));
        if (sp) {
          e.null_space = H5Sget_simple_extent_type(sp.get()) == H5S_NULL;
          const int rank = H5Sget_simple_extent_ndims(sp.get());
          if (rank > 0) {
            e.shape.resize(static_cast<std::size_t>(rank));
            H5Sget_simple_extent_dims(sp.get(), e.shape.data(), nullptr);
          }
        }
      }
      H5Eclear2(H5E_DEFAULT);
      s.out.push_back(std::move(e));
      return 0;
    };
    check(H5Lvisit(id_, H5_INDEX_NAME, H5_ITER_INC, op, &st), context_, "H5Lvisit");
    for (auto& e : st.out) {
      if (e.kind != "group") continue;
      e.nx_class = string_attribute_or_empty(e.path, "NX_class");
    }
    return st.out;
  }
  /// The string attribute `attr` of the object at `path` (links followed), or "" when the
  /// object or the attribute is missing or the attribute is not a single string.
  std::string string_attribute_or_empty(const std::string& path, const char* attr) const {
    const std::string n = absolute(path);
    if (n != "/" && !has(n)) return {};
    object_id o(H5Oopen(id_, n.c_str(), H5P_DEFAULT));
    if (!o) {
      H5Eclear2(H5E_DEFAULT);
      return {};
    }
    if (H5Aexists(o.get(), attr) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return {};
    }
    attribute_id a(H5Aopen(o.get(), attr, H5P_DEFAULT));
    if (!a) {
      H5Eclear2(H5E_DEFAULT);
      return {};
    }
    datatype_id t(H5Aget_type(a.get()));
    dataspace_id s(H5Aget_space(a.get()));
    if (!t || !s || H5Tget_class(t.get()) != H5T_STRING ||
        H5Sget_simple_extent_npoints(s.get()) != 1) {
      H5Eclear2(H5E_DEFAULT);
      return {};
    }
    try {
      return impl::read_string(t.get(), s.get(), n, [&](hid_t mem, void* buf) {
        return H5Aread(a.get(), mem, buf);
      });
    } catch (const error&) {
      H5Eclear2(H5E_DEFAULT);
      return {};
    }
  }
  /// Opens a dataset; a missing one gives
  /// "<path>: dataset /x not found (datasets present: /a, /b)".
  dataset open_dataset(std::string_view name) const {
    const std::string n = absolute(name);
    if (!has_dataset(n)) {
      std::string present;
      for (const auto& d : dataset_names()) present += (present.empty() ? "" : ", ") + d;
      CTFORGE_FAIL(fmt::format("{}: dataset {} not found (datasets present: {})", path_, n,
                               present.empty() ? "none" : present));
    }
    return dataset(dataset_id(check_id(H5Dopen2(id_, n.c_str(), H5P_DEFAULT),
                                       fmt::format("{}: dataset {}", path_, n), "H5Dopen2")),
                   path_, n);
  }

  /// Creates a numeric dataset of element type T (little endian) and shape `dims`; missing
  /// intermediate groups are created.
  template <class T>
  dataset create_dataset(std::string_view name, const dims_t& dims,
                         const create_options& opt = {}) const {
    return create_typed(name, file_type<T>(), dims, opt);
  }
  /// Creates a numeric dataset and writes `data` (row-major, size = product of dims).
  template <class T>
  dataset write_dataset(std::string_view name, const dims_t& dims, std::span<const T> data,
                        const create_options& opt = {}) const {
    dataset d = create_dataset<T>(name, dims, opt);
    d.template write<T>(data);
    return d;
  }
  /// Creates a scalar variable-length UTF-8 string dataset holding `text`.
  dataset write_string_dataset(std::string_view name, std::string_view text) const {
    const std::string n = absolute(name);
    const std::string ctx = fmt::format("{}: dataset {}", path_, n);
    datatype_id t = impl::utf8_string_type(ctx);
    dataspace_id s(check_id(H5Screate(H5S_SCALAR), ctx, "H5Screate"));
    plist_id lcpl = link_plist(ctx);
    dataset d(dataset_id(check_id(H5Dcreate2(id_, n.c_str(), t.get(), s.get(), lcpl.get(),
                                             H5P_DEFAULT, H5P_DEFAULT),
                                  ctx, "H5Dcreate2")),
              path_, n);
    const std::string copy(text);
    const char* p = copy.c_str();
    check(H5Dwrite(d.id(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), ctx, "H5Dwrite");
    return d;
  }

  /// Flushes and closes, reporting failures. Datasets opened from this file must be closed
  /// (destroyed) first, otherwise HDF5 defers the actual close until they are.
  void close() {
    handle_.close(context_);
    id_ = H5I_INVALID_HID;
  }

  /// "/x" for "x" or "/x".
  static std::string absolute(std::string_view name) {
    std::string s;
    s.reserve(name.size() + 1);
    if (!name.starts_with('/')) s.push_back('/');
    s.append(name);
    return s;
  }

 private:
  file(file_id id, std::string path)
      : location(id.get(), path), handle_(std::move(id)), path_(std::move(path)) {}

  static plist_id link_plist(std::string_view ctx) {
    plist_id lcpl(check_id(H5Pcreate(H5P_LINK_CREATE), ctx, "H5Pcreate"));
    check(H5Pset_create_intermediate_group(lcpl.get(), 1), ctx, "H5Pset_create_intermediate_group");
    return lcpl;
  }

  dataset create_typed(std::string_view name, hid_t type, const dims_t& dims,
                       const create_options& opt) const {
    const std::string n = absolute(name);
    const std::string ctx = fmt::format("{}: dataset {}", path_, n);
    dataspace_id s(check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                            ctx, "H5Screate_simple"));
    plist_id dcpl(check_id(H5Pcreate(H5P_DATASET_CREATE), ctx, "H5Pcreate"));
    const bool empty = element_count(dims) == 0;
    if (!opt.chunk.empty() && !empty) {
      CTFORGE_CHECK(
          opt.chunk.size() == dims.size(),
          fmt::format("{}: chunk of rank {} for rank {}", ctx, opt.chunk.size(), dims.size()));
      dims_t chunk(dims.size());
      for (std::size_t i = 0; i < dims.size(); ++i)
        chunk[i] = std::max<hsize_t>(1, std::min(opt.chunk[i], dims[i]));
      check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), ctx,
            "H5Pset_chunk");
      if (opt.deflate > 0 && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
        if (opt.shuffle) check(H5Pset_shuffle(dcpl.get()), ctx, "H5Pset_shuffle");
        check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(std::min(opt.deflate, 9))), ctx,
              "H5Pset_deflate");
      }
    }
    if (opt.preallocate) {
      CTFORGE_CHECK(opt.chunk.empty(), ctx + ": preallocated storage must be contiguous");
      check(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), ctx, "H5Pset_layout");
      check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), ctx, "H5Pset_alloc_time");
      check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), ctx, "H5Pset_fill_time");
    }
    plist_id lcpl = link_plist(ctx);
    return dataset(dataset_id(check_id(H5Dcreate2(id_, n.c_str(), type, s.get(), lcpl.get(),
                                                  dcpl.get(), H5P_DEFAULT),
                                       ctx, "H5Dcreate2")),
                   path_, n);
  }

  std::unique_ptr<core_image> image_;  // before handle_: freed after the file is closed
  file_id handle_;
  std::string path_;
};

}  // namespace ctforge::detail::h5
