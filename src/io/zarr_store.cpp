// Zarr arrays in a local directory: metadata (v3 zarr.json, v2 .zarray / .zattrs), reading a box
// of elements chunk by chunk (shards read by their index, only the inner chunks a box touches),
// and writing ctforge's float32 layout. Specification: https://zarr-specs.readthedocs.io (core v3
// and v2, codecs bytes, transpose, sharding_indexed, blosc, zstd, gzip, crc32c).
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/parallel_copy.hpp"
#include "ctforge/detail/atomic_write.hpp"
#include "ctforge/error.hpp"
#include "io/zarr_store.hpp"

namespace ctforge::io::zarr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using dims = std::array<std::int64_t, 3>;

// ---- metadata ----------------------------------------------------------------------------------

[[noreturn]] void bad(const std::string& file, const std::string& field, const std::string& what) {
  CTFORGE_FAIL(fmt::format("{}: field '{}': {}", file, field, what));
}

json read_json(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  CTFORGE_CHECK(in.good(), fmt::format("{}: cannot open", file));
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    CTFORGE_FAIL(fmt::format("{}: invalid JSON: {}", file, e.what()));
  }
}

/// `n` integers of field `field` (each >= lo), left-padded with 1 to 3 entries.
dims padded_ints(const json& j, const std::string& file, const std::string& field, int rank,
                 std::int64_t lo) {
  if (!j.is_array() || static_cast<int>(j.size()) != rank)
    bad(file, field, fmt::format("expected {} integers, got {}", rank, j.dump()));
  dims d{1, 1, 1};
  for (int k = 0; k < rank; ++k) {
    if (!j[k].is_number_integer() || j[k].get<std::int64_t>() < lo)
      bad(file, field, fmt::format("expected integers >= {}, got {}", lo, j.dump()));
    d[3 - rank + k] = j[k].get<std::int64_t>();
  }
  return d;
}

data_type v3_type(const json& j, const std::string& file) {
  if (!j.is_string())
    bad(file, "data_type", fmt::format("'{}' is not supported (real numbers and bool are)",
                                       j.dump()));
  const std::string n = j.get<std::string>();
  data_type t;
  t.name = n;
  if (n == "bool") return {'b', 1, false, n};
  if (n == "float16" || n == "float32" || n == "float64")
    return {'f', std::stoi(n.substr(5)) / 8, false, n};
  for (const char* prefix : {"uint", "int"}) {
    const std::string p = prefix;
    if (n.starts_with(p) && (n == p + "8" || n == p + "16" || n == p + "32" || n == p + "64"))
      return {p == "uint" ? 'u' : 'i', std::stoi(n.substr(p.size())) / 8, false, n};
  }
  bad(file, "data_type", fmt::format("'{}' is not supported (real numbers and bool are)", n));
}

/// A v2 dtype string: "<f4", ">i2", "|u1", "|b1".
data_type v2_type(const json& j, const std::string& file) {
  const std::string n = j.is_string() ? j.get<std::string>() : j.dump();
  const bool ok = j.is_string() && n.size() == 3 && std::string("<>|").find(n[0]) != std::string::npos &&
                  std::string("fiub").find(n[1]) != std::string::npos &&
                  std::isdigit(static_cast<unsigned char>(n[2]));
  if (!ok) bad(file, "dtype", fmt::format("'{}' is not supported (real numbers and bool are)", n));
  data_type t{n[1], n[2] - '0', n[0] == '>', n};
  const bool sized = t.kind == 'f' ? (t.size == 2 || t.size == 4 || t.size == 8)
                     : t.kind == 'b' ? t.size == 1
                                     : (t.size == 1 || t.size == 2 || t.size == 4 || t.size == 8);
  if (!sized) bad(file, "dtype", fmt::format("'{}' is not supported", n));
  return t;
}

/// An IEEE half-precision value.
float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  float v = exp == 0    ? std::ldexp(static_cast<float>(man), -24)
            : exp == 31 ? (man ? std::numeric_limits<float>::quiet_NaN()
                               : std::numeric_limits<float>::infinity())
                        : std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

/// The bits of a hexadecimal fill value ("0x7fc00000": exactly two digits per byte of `t`) as a
/// value of `t`.
double fill_from_bits(const std::string& hex, const data_type& t, const std::string& file) {
  std::uint64_t bits = 0;
  const char* first = hex.data() + 2;
  const char* last = hex.data() + hex.size();
  const auto [end, ec] = std::from_chars(first, last, bits, 16);
  if (ec != std::errc() || end != last || last - first != 2 * t.size || t.kind != 'f')
    bad(file, "fill_value",
        fmt::format("'{}' is not {} hexadecimal digits of a {} value", hex, 2 * t.size, t.name));
  if (t.size == 2) return half_bits_to_float(static_cast<std::uint16_t>(bits));
  if (t.size == 4) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
  return std::bit_cast<double>(bits);
}

double fill_value(const json& j, const data_type& t, const std::string& file) {
  if (j.is_null()) return 0;  // v2: no fill value; the chunks hold every element
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s.starts_with("0x")) return fill_from_bits(s, t, file);
  }
  bad(file, "fill_value", fmt::format("{} is not a value of type {}", j.dump(), t.name));
}

/// A transpose codec's order (a permutation of the stored axes), padded to 3 axes.
std::vector<int> transpose_order(const json& c, int rank, const std::string& file) {
  const json o = c.value("configuration", json::object()).value("order", json());
  std::vector<int> order;
  if (o.is_string() && (o == "C" || o == "F")) {  // early drafts of the specification
    for (int k = 0; k < rank; ++k) order.push_back(o == "C" ? k : rank - 1 - k);
  } else if (o.is_array() && static_cast<int>(o.size()) == rank) {
    for (const auto& x : o) order.push_back(x.is_number_integer() ? x.get<int>() : -1);
  }
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int k = 0; k < rank; ++k)
    if (static_cast<int>(sorted.size()) != rank || sorted[k] != k)
      bad(file, "codecs.transpose.order",
          fmt::format("expected a permutation of 0..{}, got {}", rank - 1, o.dump()));
  std::vector<int> padded;
  for (int k = 0; k < 3 - rank; ++k) padded.push_back(k);
  for (int x : order) padded.push_back(x + 3 - rank);
  return padded;
}

codec_chain parse_chain(const json& codecs, int rank, const data_type& t, const std::string& file,
                        const std::string& field);

std::shared_ptr<sharding> parse_sharding(const json& c, int rank, const data_type& t,
                                         const std::string& file, const std::string& field) {
  const json cfg = c.value("configuration", json::object());
  auto s = std::make_shared<sharding>();
  const dims inner =
      padded_ints(cfg.value("chunk_shape", json()), file, field + ".chunk_shape", rank, 1);
  s->inner_chunk.assign(inner.begin(), inner.end());
  s->inner = parse_chain(cfg.value("codecs", json()), rank, t, file, field + ".codecs");
  s->index = parse_chain(cfg.value("index_codecs", json()), 1, {'u', 8, false, "uint64"}, file,
                         field + ".index_codecs");
  for (const auto& b : s->index.post)
    if (b.name != "crc32c")
      bad(file, field + ".index_codecs",
          fmt::format("'{}' is not supported for a shard index (bytes and crc32c are)", b.name));
  if (s->index.shard || !s->index.order.empty())
    bad(file, field + ".index_codecs", "a shard index is not sharded nor transposed");
  const std::string where = cfg.value("index_location", std::string("end"));
  if (where != "end" && where != "start")
    bad(file, field + ".index_location", fmt::format("'{}' (expected start or end)", where));
  s->index_at_end = where == "end";
  return s;
}

codec_chain parse_chain(const json& codecs, int rank, const data_type& t, const std::string& file,
                        const std::string& field) {
  if (!codecs.is_array()) bad(file, field, "expected a list of codecs");
  codec_chain chain;
  int stage = 0;  // 0: array -> array, 1: bytes -> bytes after the array -> bytes codec
  for (const auto& c : codecs) {
    const std::string name =
        c.is_string() ? c.get<std::string>() : c.is_object() ? c.value("name", std::string()) : "";
    const json cfg = c.is_object() ? c.value("configuration", json::object()) : json::object();
    if (name == "transpose" && stage == 0 && chain.order.empty()) {
      chain.order = transpose_order(c, rank, file);
    } else if (name == "bytes" && stage == 0) {
      const std::string e = cfg.value("endian", std::string("little"));
      if (e != "little" && e != "big")
        bad(file, field + ".bytes.endian", fmt::format("'{}' (expected little or big)", e));
      chain.big_endian = e == "big";
      stage = 1;
    } else if (name == "sharding_indexed" && stage == 0) {
      if (!chain.order.empty())
        bad(file, field, "a transpose before sharding_indexed is not supported");
      chain.shard = parse_sharding(c, rank, t, file, field + ".sharding_indexed");
      stage = 1;
    } else if (stage == 1 && (name == "blosc" || name == "zstd" || name == "gzip" ||
                              name == "crc32c")) {
      chain.post.push_back({name});
    } else {
      bad(file, field,
          name.empty() ? fmt::format("not a codec: {}", c.dump())
          : stage == 0 ? fmt::format("codec '{}' is not supported here (transpose, bytes and "
                                     "sharding_indexed are, then blosc, zstd, gzip, crc32c)",
                                     name)
                       : fmt::format("codec '{}' is not supported (blosc, zstd, gzip and crc32c "
                                     "are)",
                                     name));
    }
  }
  if (stage == 0) bad(file, field, "no bytes or sharding_indexed codec");
  return chain;
}

/// Every shard's inner chunk shape divides the shape of the chunk it cuts (nested shards too).
void check_sharding_fits(const array& a) {
  std::vector<std::int64_t> outer = a.chunk;
  for (auto* s = a.codecs.shard.get(); s; s = s->inner.shard.get()) {
    for (int k = 0; k < 3; ++k)
      if (outer[k] % s->inner_chunk[k] != 0)
        bad(a.metadata_file, "codecs.sharding_indexed.chunk_shape",
            fmt::format("{} does not divide the shard shape {}", fmt::join(s->inner_chunk, ", "),
                        fmt::join(outer, ", ")));
    outer = s->inner_chunk;
  }
}

/// Element counts of the array and of one chunk fit 64 bits (and a chunk's bytes a buffer).
void check_sizes(const array& a) {
  const auto product = [&](const std::vector<std::int64_t>& d, const char* field) {
    std::int64_t n = 1;
    for (const std::int64_t x : d)
      if (__builtin_mul_overflow(n, x, &n) || n > (std::int64_t{1} << 56))
        bad(a.metadata_file, field, fmt::format("{} elements: more than can be addressed",
                                                fmt::join(d, " x ")));
    return n;
  };
  (void)product(a.shape, "shape");
  (void)product(a.chunk, "chunk shape");
  if (!a.attributes.is_object())
    bad(a.metadata_file, "attributes", fmt::format("expected an object, got {}", a.attributes.dump()));
}

[[noreturn]] void refuse_group(const std::string& path);

void open_v3(array& a, const json& j) {
  const std::string& f = a.metadata_file;
  const std::string node = j.value("node_type", std::string());
  if (node == "group") refuse_group(a.path);
  if (node != "array") bad(f, "node_type", fmt::format("expected \"array\", got {}",
                                                       j.value("node_type", json()).dump()));
  const json shape = j.value("shape", json());
  a.rank = shape.is_array() ? static_cast<int>(shape.size()) : 0;
  if (a.rank < 1 || a.rank > 3)
    bad(f, "shape", fmt::format("{}: 1 to 3 dimensions are read", shape.dump()));
  const dims s = padded_ints(shape, f, "shape", a.rank, 0);
  a.shape.assign(s.begin(), s.end());
  a.dtype = v3_type(j.value("data_type", json()), f);
  const json grid = j.value("chunk_grid", json::object());
  if (grid.value("name", std::string()) != "regular")
    bad(f, "chunk_grid.name", fmt::format("{} (a regular grid is read)", grid.dump()));
  const dims c = padded_ints(grid.value("configuration", json::object()).value("chunk_shape", json()),
                             f, "chunk_grid.configuration.chunk_shape", a.rank, 1);
  a.chunk.assign(c.begin(), c.end());
  const json keys = j.value("chunk_key_encoding", json{{"name", "default"}});
  const std::string kname = keys.value("name", std::string());
  if (kname != "default" && kname != "v2")
    bad(f, "chunk_key_encoding.name", fmt::format("'{}' (default and v2 are read)", kname));
  a.v2_keys = kname == "v2";
  const std::string sep =
      keys.value("configuration", json::object()).value("separator", std::string(a.v2_keys ? "." : "/"));
  if (sep != "/" && sep != ".") bad(f, "chunk_key_encoding.separator", "'" + sep + "'");
  a.separator = sep[0];
  a.fill = fill_value(j.value("fill_value", json()), a.dtype, f);
  a.codecs = parse_chain(j.value("codecs", json()), a.rank, a.dtype, f, "codecs");
  const json st = j.value("storage_transformers", json::array());
  if (!st.is_array() || !st.empty())
    bad(f, "storage_transformers", fmt::format("{} (none are supported)", st.dump()));
  a.attributes = j.value("attributes", json::object());
  check_sharding_fits(a);
}

void open_v2(array& a, const json& j) {
  const std::string& f = a.metadata_file;
  if (j.value("zarr_format", 0) != 2) bad(f, "zarr_format", "expected 2");
  const json shape = j.value("shape", json());
  a.format = 2;
  a.rank = shape.is_array() ? static_cast<int>(shape.size()) : 0;
  if (a.rank < 1 || a.rank > 3)
    bad(f, "shape", fmt::format("{}: 1 to 3 dimensions are read", shape.dump()));
  const dims s = padded_ints(shape, f, "shape", a.rank, 0);
  a.shape.assign(s.begin(), s.end());
  const dims c = padded_ints(j.value("chunks", json()), f, "chunks", a.rank, 1);
  a.chunk.assign(c.begin(), c.end());
  a.dtype = v2_type(j.value("dtype", json()), f);
  a.fill = fill_value(j.value("fill_value", json()), a.dtype, f);
  a.v2_keys = true;
  const std::string sep = j.value("dimension_separator", std::string("."));
  if (sep != "/" && sep != ".") bad(f, "dimension_separator", "'" + sep + "'");
  a.separator = sep[0];
  a.codecs.big_endian = a.dtype.big_endian;
  const std::string order = j.value("order", std::string("C"));
  if (order != "C" && order != "F") bad(f, "order", "'" + order + "' (expected C or F)");
  if (order == "F")
    a.codecs.order = {0, 1, 2}, std::reverse(a.codecs.order.end() - a.rank, a.codecs.order.end());
  const json filters = j.value("filters", json());
  if (!filters.is_null() && !(filters.is_array() && filters.empty()))
    bad(f, "filters", fmt::format("{} (filters are not supported)", filters.dump()));
  const json comp = j.value("compressor", json());
  if (!comp.is_null()) {
    const std::string id = comp.is_object() ? comp.value("id", std::string()) : "";
    if (id != "blosc" && id != "zstd" && id != "zlib" && id != "gzip" && id != "bz2")
      bad(f, "compressor",
          fmt::format("{} is not supported (blosc, zstd, zlib, gzip and bz2 are)", comp.dump()));
    a.codecs.post.push_back({id});
  }
  const fs::path attrs = fs::path(a.path) / ".zattrs";
  std::error_code ec;
  if (fs::exists(attrs, ec)) a.attributes = read_json(attrs.string());
  if (!a.attributes.is_object())
    CTFORGE_FAIL(fmt::format("{}: expected a JSON object", attrs.string()));
}

// ---- bytes from files ----------------------------------------------------------------------------

/// Bytes [offset, offset + size) of a file, or of a buffer decoded in memory.
class byte_source {
 public:
  byte_source(std::string path, std::uint64_t offset, std::uint64_t size)
      : path_(std::move(path)), offset_(offset), size_(size) {}
  explicit byte_source(std::shared_ptr<const std::vector<std::uint8_t>> mem, std::string where)
      : path_(std::move(where)), size_(mem->size()), mem_(std::move(mem)) {}
  std::uint64_t size() const { return size_; }
  const std::string& where() const { return path_; }
  byte_source sub(std::uint64_t off, std::uint64_t n) const {
    CTFORGE_CHECK(off <= size_ && n <= size_ - off,
                  fmt::format("{}: bytes [{}, {}) lie outside its {} bytes (corrupt shard index)",
                              path_, off, off + n, size_));
    byte_source s = *this;
    s.offset_ += off;
    s.size_ = n;
    return s;
  }
  std::vector<std::uint8_t> read(std::uint64_t off, std::uint64_t n) const {
    const byte_source s = sub(off, n);
    std::vector<std::uint8_t> out(n);
    if (mem_) {
      std::memcpy(out.data(), mem_->data() + s.offset_, n);
      return out;
    }
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    CTFORGE_CHECK(fd >= 0, fmt::format("{}: cannot open: {}", path_, std::strerror(errno)));
    std::uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, out.data() + done, n - done, static_cast<off_t>(s.offset_ + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const int err = r < 0 ? errno : 0;
        ::close(fd);
        CTFORGE_FAIL(fmt::format("{}: read failed at byte {}: {}", path_, s.offset_ + done,
                                 err ? std::strerror(err) : "truncated file"));
      }
      done += static_cast<std::uint64_t>(r);
    }
    ::close(fd);
    return out;
  }
  std::vector<std::uint8_t> all() const { return read(0, size_); }

 private:
  std::string path_;
  std::uint64_t offset_ = 0, size_ = 0;
  std::shared_ptr<const std::vector<std::uint8_t>> mem_;
};

// ---- decoding ------------------------------------------------------------------------------------

/// Where a box lands: the box [first, first + count) of the array, written in C order.
struct target {
  dims first, count;
  float* out;
};

/// The part of the chunk at `origin` of shape `shape` inside the target box, as [lo, hi) per
/// axis; empty when they do not meet.
bool overlap(const dims& origin, const dims& shape, const target& t, dims& lo, dims& hi) {
  for (int k = 0; k < 3; ++k) {
    lo[k] = std::max(origin[k], t.first[k]);
    hi[k] = std::min(origin[k] + shape[k], t.first[k] + t.count[k]);
    if (lo[k] >= hi[k]) return false;
  }
  return true;
}

void fill_region(const dims& lo, const dims& hi, const target& t, float v) {
  for (std::int64_t i = lo[0]; i < hi[0]; ++i)
    for (std::int64_t j = lo[1]; j < hi[1]; ++j) {
      float* row = t.out + ((i - t.first[0]) * t.count[1] + (j - t.first[1])) * t.count[2];
      std::fill(row + (lo[2] - t.first[2]), row + (hi[2] - t.first[2]), v);
    }
}

/// Element at `p` of type `t` stored with `big` endianness, as float.
float element(const std::uint8_t* p, const data_type& t, bool big) {
  std::uint8_t b[8] = {};
  for (int k = 0; k < t.size; ++k) b[k] = big ? p[t.size - 1 - k] : p[k];
  const auto get = [&](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, b, sizeof v);
    return static_cast<float>(v);
  };
  if (t.kind == 'b') return b[0] ? 1.0f : 0.0f;
  if (t.kind == 'f')
    return t.size == 2 ? half_bits_to_float(static_cast<std::uint16_t>(b[0] | b[1] << 8))
           : t.size == 4 ? get(float{})
                         : get(double{});
  if (t.kind == 'u')
    return t.size == 1 ? get(std::uint8_t{}) : t.size == 2 ? get(std::uint16_t{})
                                          : t.size == 4 ? get(std::uint32_t{})
                                                        : get(std::uint64_t{});
  return t.size == 1 ? get(std::int8_t{}) : t.size == 2 ? get(std::int16_t{})
                                        : t.size == 4 ? get(std::int32_t{})
                                                      : get(std::int64_t{});
}

std::size_t elements(const dims& d) { return static_cast<std::size_t>(d[0] * d[1] * d[2]); }

/// What a chunk of `shape` under codecs `c` decodes to at most before its array -> bytes
/// codec: its elements' bytes for the bytes codec (which then checks the size exactly), and
/// for a shard its inner chunks' elements plus some slack for their own codecs and the index. A corrupt header claiming
/// more is refused before anything is allocated.
std::size_t decode_limit(const array& a, const codec_chain& c, const dims& shape) {
  const std::size_t raw = elements(shape) * static_cast<std::size_t>(a.dtype.size);
  if (!c.shard) return raw + raw / 64 + 4096;  // (slack for a compressor's own framing)
  const dims in{c.shard->inner_chunk[0], c.shard->inner_chunk[1], c.shard->inner_chunk[2]};
  const std::size_t n = elements({shape[0] / in[0], shape[1] / in[1], shape[2] / in[2]});
  return raw + raw / 8 + n * (16 + 64 + 4 * c.shard->inner.post.size()) + 4096;
}

void decode_chunk(const array& a, const codec_chain& c, const dims& origin, const dims& shape,
                  byte_source src, const target& t);

/// The elements of a chunk encoded by the bytes codec (after any transpose).
void decode_plain(const array& a, const codec_chain& c, const dims& origin, const dims& shape,
                  const byte_source& src, const target& t) {
  const std::size_t expected = elements(shape) * static_cast<std::size_t>(a.dtype.size);
  CTFORGE_CHECK(src.size() == expected,
                fmt::format("{}: {} bytes, expected {} ({} elements of {}): truncated or corrupt",
                            src.where(), src.size(), expected, elements(shape), a.dtype.name));
  const std::vector<std::uint8_t> raw = src.all();
  std::array<int, 3> order{0, 1, 2};
  if (!c.order.empty()) std::copy(c.order.begin(), c.order.end(), order.begin());
  // Stored axis d holds logical axis order[d]: the stride of each logical axis in the buffer.
  dims stored{shape[order[0]], shape[order[1]], shape[order[2]]};
  dims stride{};
  stride[order[2]] = 1;
  stride[order[1]] = stored[2];
  stride[order[0]] = stored[1] * stored[2];
  dims lo, hi;
  if (!overlap(origin, shape, t, lo, hi)) return;
  const auto sz = static_cast<std::int64_t>(a.dtype.size);
  const bool as_is = c.order.empty() && a.dtype.kind == 'f' && sz == 4 && !c.big_endian &&
                     std::endian::native == std::endian::little;
  for (std::int64_t i = lo[0]; i < hi[0]; ++i)
    for (std::int64_t j = lo[1]; j < hi[1]; ++j) {
      float* row = t.out + ((i - t.first[0]) * t.count[1] + (j - t.first[1])) * t.count[2];
      const std::int64_t base = (i - origin[0]) * stride[0] + (j - origin[1]) * stride[1];
      if (as_is) {  // float32 little endian in C order: the row as stored
        std::memcpy(row + (lo[2] - t.first[2]), raw.data() + (base + lo[2] - origin[2]) * sz,
                    static_cast<std::size_t>((hi[2] - lo[2]) * sz));
        continue;
      }
      for (std::int64_t k = lo[2]; k < hi[2]; ++k)
        row[k - t.first[2]] =
            element(raw.data() + (base + (k - origin[2]) * stride[2]) * sz, a.dtype, c.big_endian);
    }
}

/// The (offset, size) pairs of a shard's index.
std::vector<std::uint64_t> shard_index(const sharding& s, std::size_t n, const byte_source& src) {
  const std::size_t bytes = 16 * n + 4 * s.index.post.size();
  CTFORGE_CHECK(src.size() >= bytes,
                fmt::format("{}: {} bytes, too short for the shard index of {} chunks ({} bytes)",
                            src.where(), src.size(), n, bytes));
  std::vector<std::uint8_t> idx = src.read(s.index_at_end ? src.size() - bytes : 0, bytes);
  for (auto it = s.index.post.rbegin(); it != s.index.post.rend(); ++it)
    idx = decode_bytes(*it, std::move(idx), bytes, src.where() + " (shard index)");
  std::vector<std::uint64_t> v(2 * n);
  for (std::size_t k = 0; k < 2 * n; ++k) {
    std::uint64_t x = 0;
    for (int b = 0; b < 8; ++b)
      x |= static_cast<std::uint64_t>(idx[8 * k + (s.index.big_endian ? 7 - b : b)]) << (8 * b);
    v[k] = x;
  }
  return v;
}

void decode_shard(const array& a, const sharding& s, const dims& origin, const dims& shape,
                  const byte_source& src, const target& t) {
  const dims in{s.inner_chunk[0], s.inner_chunk[1], s.inner_chunk[2]};
  const dims grid{shape[0] / in[0], shape[1] / in[1], shape[2] / in[2]};
  const std::vector<std::uint64_t> index = shard_index(s, elements(grid), src);
  // The inner chunks the box meets.
  dims lo, hi;
  if (!overlap(origin, shape, t, lo, hi)) return;
  dims c0, c1;
  for (int k = 0; k < 3; ++k) {
    c0[k] = (lo[k] - origin[k]) / in[k];
    c1[k] = (hi[k] - 1 - origin[k]) / in[k] + 1;
  }
  const dims n{c1[0] - c0[0], c1[1] - c0[1], c1[2] - c0[2]};
  ctforge::detail::parallel_for(elements(n), 0, [&](std::size_t q) {
    const auto qi = static_cast<std::int64_t>(q);
    const dims c{c0[0] + qi / (n[1] * n[2]), c0[1] + qi / n[2] % n[1], c0[2] + qi % n[2]};
    const std::size_t e = static_cast<std::size_t>((c[0] * grid[1] + c[1]) * grid[2] + c[2]);
    const dims o{origin[0] + c[0] * in[0], origin[1] + c[1] * in[1], origin[2] + c[2] * in[2]};
    const std::uint64_t off = index[2 * e], size = index[2 * e + 1];
    if (off == ~std::uint64_t{0} && size == ~std::uint64_t{0}) {  // never written
      dims l, h;
      if (overlap(o, in, t, l, h)) fill_region(l, h, t, static_cast<float>(a.fill));
      return;
    }
    byte_source inner = src.sub(off, size);
    decode_chunk(a, s.inner, o, in, std::move(inner), t);
  });
}

void decode_chunk(const array& a, const codec_chain& c, const dims& origin, const dims& shape,
                  byte_source src, const target& t) {
  if (!c.post.empty()) {
    std::vector<std::uint8_t> b = src.all();
    for (auto it = c.post.rbegin(); it != c.post.rend(); ++it)
      b = decode_bytes(*it, std::move(b), decode_limit(a, c, shape), src.where());
    src = byte_source(std::make_shared<const std::vector<std::uint8_t>>(std::move(b)), src.where());
  }
  if (c.shard)
    decode_shard(a, *c.shard, origin, shape, src, t);
  else
    decode_plain(a, c, origin, shape, src, t);
}

std::string chunk_key(const array& a, const dims& c) {
  std::string key = a.v2_keys ? "" : std::string("c") + a.separator;
  for (int k = 3 - a.rank; k < 3; ++k)
    key += std::to_string(c[k]) + (k < 2 ? std::string(1, a.separator) : "");
  return key;
}

/// "array", "group" or "" for directory `d` (by zarr.json's node_type, .zarray or .zgroup).
std::string node_kind(const fs::path& d) {
  std::error_code ec;
  if (fs::exists(d / ".zarray", ec)) return "array";
  if (fs::exists(d / "zarr.json", ec)) {
    std::ifstream in(d / "zarr.json");
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("node_type") && j["node_type"].is_string())
      return j["node_type"].get<std::string>();
    return "";
  }
  return fs::exists(d / ".zgroup", ec) ? "group" : "";
}

/// The arrays below group `dir` (groups inside it followed, 4 levels at most), as
/// "dir/name (shape, dtype)", at most `most` of them.
void list_arrays(const fs::path& dir, int depth, std::size_t most,
                 std::vector<std::string>& out) {
  std::error_code ec;
  std::vector<fs::path> subs;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) subs.push_back(e.path());
  std::sort(subs.begin(), subs.end());
  for (const fs::path& d : subs) {
    if (out.size() >= most) return;
    const std::string kind = node_kind(d);
    if (kind == "group" && depth < 4) {
      list_arrays(d, depth + 1, most, out);
    } else if (kind == "array") {
      try {
        const array a = open_array(d.string());
        std::string shape;
        for (int k = 3 - a.rank; k < 3; ++k) shape += (shape.empty() ? "" : ", ") + std::to_string(a.shape[k]);
        out.push_back(fmt::format("{} ([{}], {})", d.string(), shape, a.dtype.name));
      } catch (const error& e) {
        out.push_back(fmt::format("{} (unreadable: {})", d.string(), e.what()));
      }
    }
  }
}

[[noreturn]] void refuse_group(const std::string& path) {
  std::vector<std::string> arrays;
  list_arrays(path, 0, 20, arrays);
  CTFORGE_FAIL(fmt::format("{}: a Zarr group, not an array: name an array inside it ({})", path,
                           arrays.empty() ? std::string("this group holds none")
                                          : fmt::format("{}", fmt::join(arrays, "; "))));
}

}  // namespace

bool looks_like_zarr(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.ends_with('/')) p.pop_back();
  for (auto& ch : p) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const fs::path lp(p);
  if (lp.filename().string().ends_with(".zarr")) return true;
  // An array inside a group (scan.zarr/recon): a name without extension under a .zarr.
  if (!lp.has_extension())
    for (const auto& part : lp.parent_path())
      if (part.string().ends_with(".zarr")) return true;
  std::error_code ec;
  return fs::is_directory(path, ec) &&
         (fs::exists(fs::path(path) / "zarr.json", ec) || fs::exists(fs::path(path) / ".zarray", ec));
}

array open_array(const std::string& path) {
  array a;
  a.path = path;
  while (a.path.size() > 1 && a.path.ends_with('/')) a.path.pop_back();
  std::error_code ec;
  CTFORGE_CHECK(fs::is_directory(a.path, ec),
                fmt::format("{}: no such Zarr array (not a directory)", path));
  const fs::path v3 = fs::path(a.path) / "zarr.json", v2 = fs::path(a.path) / ".zarray";
  const bool is_v3 = fs::exists(v3, ec);
  if (!is_v3 && !fs::exists(v2, ec)) {
    if (fs::exists(fs::path(a.path) / ".zgroup", ec)) refuse_group(a.path);
    CTFORGE_FAIL(fmt::format("{}: no Zarr array there (no zarr.json or .zarray)", path));
  }
  a.metadata_file = (is_v3 ? v3 : v2).string();
  const json j = read_json(a.metadata_file);
  CTFORGE_CHECK(j.is_object(), fmt::format("{}: expected a JSON object", a.metadata_file));
  try {  // a field of an unexpected JSON type is the file's fault, named as such
    CTFORGE_CHECK(!is_v3 || j.value("zarr_format", json()) == 3,
                  fmt::format("{}: field 'zarr_format': expected 3", a.metadata_file));
    is_v3 ? open_v3(a, j) : open_v2(a, j);
  } catch (const json::exception& e) {
    CTFORGE_FAIL(fmt::format("{}: a field of an unexpected type: {}", a.metadata_file, e.what()));
  }
  check_sizes(a);
  return a;
}

std::vector<float> read_box(const array& a, std::span<const std::int64_t, 3> first,
                            std::span<const std::int64_t, 3> count) {
  target t{{first[0], first[1], first[2]}, {count[0], count[1], count[2]}, nullptr};
  for (int k = 0; k < 3; ++k)
    CTFORGE_EXPECTS(t.first[k] >= 0 && t.count[k] >= 0 && t.first[k] + t.count[k] <= a.shape[k],
                    fmt::format("{}: box [{}] + [{}] outside the array's shape [{}]", a.path,
                                fmt::join(t.first, ", "), fmt::join(t.count, ", "),
                                fmt::join(a.shape, ", ")));
  ctforge::detail::require_memory_to_read(elements(t.count), sizeof(float),
                                          fmt::format("{}: the elements read", a.path),
                                          "read fewer views, rows or planes");
  ctforge::detail::require_memory_to_read(
      elements({a.chunk[0], a.chunk[1], a.chunk[2]}) * static_cast<std::uint64_t>(a.dtype.size),
      2 * static_cast<std::uint64_t>(ctforge::detail::resolve_threads(0)),
      fmt::format("{}: its chunks, decoded on every thread", a.metadata_file),
      "read it on fewer threads (OMP_NUM_THREADS)");
  std::vector<float> out(elements(t.count));
  t.out = out.data();
  if (out.empty()) return out;
  const dims ch{a.chunk[0], a.chunk[1], a.chunk[2]};
  dims c0, n;
  for (int k = 0; k < 3; ++k) {
    c0[k] = t.first[k] / ch[k];
    n[k] = (t.first[k] + t.count[k] - 1) / ch[k] + 1 - c0[k];
  }
  ctforge::detail::parallel_for(elements(n), 0, [&](std::size_t q) {
    const auto qi = static_cast<std::int64_t>(q);
    const dims c{c0[0] + qi / (n[1] * n[2]), c0[1] + qi / n[2] % n[1], c0[2] + qi % n[2]};
    const dims o{c[0] * ch[0], c[1] * ch[1], c[2] * ch[2]};
    const std::string file = (fs::path(a.path) / chunk_key(a, c)).string();
    struct stat st {};
    const bool absent = ::stat(file.c_str(), &st) != 0;
    CTFORGE_CHECK(!absent || errno == ENOENT,
                  fmt::format("{}: cannot read: {}", file, std::strerror(errno)));
    if (absent) {  // never written: the fill value
      CTFORGE_CHECK(!a.require_chunks,
                    fmt::format("{}: chunk {} is missing from a finished ctforge array (lost or "
                                "removed): its planes cannot be read",
                                a.path, chunk_key(a, c)));
      dims lo, hi;
      if (overlap(o, ch, t, lo, hi)) fill_region(lo, hi, t, static_cast<float>(a.fill));
      return;
    }
    decode_chunk(a, a.codecs, o, ch, byte_source(file, 0, static_cast<std::uint64_t>(st.st_size)),
                 t);
  });
  return out;
}

static_assert(std::endian::native == std::endian::little,
              "the writer stores floats and the shard index as they are in memory, little endian");

void write_shard(const std::string& dir, std::span<const std::int64_t, 3> shape,
                 std::int64_t planes_per_shard, std::int64_t s, const float* planes,
                 bool compress) {
  const std::int64_t n0 = shape[0], n1 = shape[1], n2 = shape[2];
  const std::int64_t p = planes_per_shard;
  const std::int64_t m = std::min(p, n0 - s * p);  // the last shard may be shorter
  CTFORGE_EXPECTS(p >= 1 && s >= 0 && m >= 1,
                  fmt::format("{}: shard {} of {} planes outside {} planes", dir, s, p, n0));
  const std::size_t plane = static_cast<std::size_t>(n1 * n2);
  std::vector<std::vector<std::uint8_t>> chunks(static_cast<std::size_t>(m));
  ctforge::detail::parallel_for(static_cast<std::size_t>(m), 0, [&](std::size_t k) {
    const float* src = planes + k * plane;
    if (compress) {
      chunks[k] = blosc_zstd_compress(src, plane * sizeof(float), 4);
    } else {
      chunks[k].resize(plane * sizeof(float));
      std::memcpy(chunks[k].data(), src, chunks[k].size());  // little-endian hosts only
    }
  });
  std::vector<std::uint8_t> shard;
  std::vector<std::uint8_t> index;
  for (std::int64_t k = 0; k < p; ++k) {
    // Inner chunks past the array's end (a last, shorter shard) are not stored.
    const bool stored = k < m;
    const auto i = static_cast<std::size_t>(std::min(k, m - 1));
    const std::uint64_t off = stored ? shard.size() : ~std::uint64_t{0};
    const std::uint64_t len = stored ? chunks[i].size() : ~std::uint64_t{0};
    for (const std::uint64_t x : {off, len})
      for (int b = 0; b < 8; ++b) index.push_back(static_cast<std::uint8_t>(x >> (8 * b)));
    if (stored) shard.insert(shard.end(), chunks[i].begin(), chunks[i].end());
  }
  const std::uint32_t crc = crc32c(index.data(), index.size());
  for (int b = 0; b < 4; ++b) index.push_back(static_cast<std::uint8_t>(crc >> (8 * b)));
  shard.insert(shard.end(), index.begin(), index.end());
  const fs::path f = fs::path(dir) / "c" / std::to_string(s) / "0";
  std::error_code ec;
  fs::create_directories(f, ec);
  CTFORGE_CHECK(!ec, fmt::format("{}: cannot create {}: {}", dir, f.string(), ec.message()));
  write_file_bytes((f / "0").string(), shard.data(), shard.size(), dir);
}

void write_metadata(const std::string& dir, std::span<const std::int64_t, 3> shape,
                    std::int64_t p, bool compress, const json& attributes,
                    const std::vector<std::string>& dimension_names) {
  const std::int64_t n0 = shape[0], n1 = shape[1], n2 = shape[2];
  json inner_codecs = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
  if (compress)
    inner_codecs.push_back({{"name", "blosc"},
                            {"configuration",
                             {{"typesize", 4}, {"cname", "zstd"}, {"clevel", 3},
                              {"shuffle", "shuffle"}, {"blocksize", 0}}}});
  const json meta = {
      {"zarr_format", 3},
      {"node_type", "array"},
      {"shape", {n0, n1, n2}},
      {"data_type", "float32"},
      {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", {p, n1, n2}}}}}},
      {"chunk_key_encoding", {{"name", "default"}, {"configuration", {{"separator", "/"}}}}},
      {"fill_value", 0.0},
      {"codecs",
       {{{"name", "sharding_indexed"},
         {"configuration",
          {{"chunk_shape", {1, n1, n2}},
           {"codecs", inner_codecs},
           {"index_codecs",
            {{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}, {{"name", "crc32c"}}}},
           {"index_location", "end"}}}}}},
      {"attributes", attributes},
      {"dimension_names", dimension_names},
      {"storage_transformers", json::array()}};
  const std::string text = meta.dump(2) + "\n";
  write_file_bytes((fs::path(dir) / "zarr.json").string(), text.data(), text.size(), dir);
}

void write_planes_array(const std::string& dir, std::span<const std::int64_t, 3> shape,
                        const float* data, std::int64_t planes_per_shard, bool compress,
                        const json& attributes, const std::vector<std::string>& dimension_names) {
  const std::int64_t p = std::clamp<std::int64_t>(planes_per_shard, 1, std::max<std::int64_t>(shape[0], 1));
  const auto plane = static_cast<std::size_t>(shape[1] * shape[2]);
  for (std::int64_t s = 0; s * p < shape[0]; ++s)
    write_shard(dir, shape, p, s, data + static_cast<std::size_t>(s * p) * plane, compress);
  write_metadata(dir, shape, p, compress, attributes, dimension_names);
}

}  // namespace ctforge::io::zarr
