// Internal: Zarr arrays in a local directory, read and written without a Zarr library (none is
// packaged for C++ in Debian). What is read: Zarr v3 (zarr.json) and v2 (.zarray / .zattrs)
// arrays of 1 to 3 dimensions, real or boolean data types, regular chunk grids, the default and
// v2 chunk key encodings, fill values for missing chunks, and the codecs zarr-python writes:
// bytes (either endianness), transpose, sharding_indexed (index at the start or the end, with or
// without crc32c), blosc, zstd, gzip, crc32c; v2 compressors blosc, zstd, zlib, gzip and bz2 and C or
// F order. What is written: the layout of ctforge's Zarr volumes (python/ctforge/zarr_volumes.py):
// float32, shards of whole planes, one chunk per plane inside, blosc zstd with byte shuffle.
// Anything else is refused naming the file and the field.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace ctforge::io::zarr {

/// Element type of an array as stored.
struct data_type {
  char kind = 'f';  ///< 'f' float, 'i' signed, 'u' unsigned, 'b' boolean
  int size = 4;     ///< bytes per element
  bool big_endian = false;
  std::string name;  ///< as the metadata spells it (for messages)
};

/// One bytes -> bytes codec (compressor or checksum).
struct bytes_codec {
  std::string name;  ///< "blosc", "zstd", "gzip", "zlib" (v2) or "crc32c"
};

struct sharding;

/// The codecs of one level of chunks (an array's chunks, or a shard's inner chunks).
struct codec_chain {
  /// transpose: stored axis d holds logical axis order[d] (empty: C order).
  std::vector<int> order;
  bool big_endian = false;          ///< the bytes codec's endianness
  std::shared_ptr<sharding> shard;  ///< array -> bytes is sharding_indexed (else bytes)
  std::vector<bytes_codec> post;    ///< bytes -> bytes codecs, in encoding order
};

struct sharding {
  std::vector<std::int64_t> inner_chunk;  ///< padded to 3 like array::chunk
  codec_chain inner;
  codec_chain index;  ///< bytes (+ crc32c)
  bool index_at_end = true;
};

/// An opened array's metadata. Shapes are padded on the left to 3 axes (a 2D array [a][b] is
/// [1][a][b]); `rank` is the stored number of axes.
struct array {
  std::string path;  ///< the array's directory
  int format = 3;    ///< 2 or 3
  int rank = 3;
  std::vector<std::int64_t> shape, chunk;
  data_type dtype;
  double fill = 0;  ///< value of elements in chunks that were never written
  codec_chain codecs;
  bool v2_keys = false;  ///< keys "i.j.k" (v2, or v3's "v2" encoding) instead of "c/i/j/k"
  char separator = '/';
  nlohmann::json attributes = nlohmann::json::object();
  std::string metadata_file;  ///< zarr.json or .zarray (for messages)
  /// A missing chunk is an error, not the fill value (ctforge's finished arrays store every
  /// chunk: one missing was lost).
  bool require_chunks = false;
};

/// True for a directory holding zarr.json or .zarray, or a path one of whose components ends
/// in ".zarr" (a Zarr array, or one inside a group: scan.zarr/recon).
bool looks_like_zarr(const std::string& path);

/// Reads the metadata of the array at `path` (a directory). Throws error naming the file and
/// the field for anything this reader does not understand or that is inconsistent; a group or
/// a missing directory is an error saying so.
array open_array(const std::string& path);

/// The elements of the box [first, first + count) (3 axes, padded like array::shape), as floats
/// in C order. Only the chunks (and, in shards, the inner chunks) the box touches are read.
std::vector<float> read_box(const array& a, std::span<const std::int64_t, 3> first,
                            std::span<const std::int64_t, 3> count);

/// Writes a float32 array of shape [n0][n1][n2] into the empty directory `dir`: shards of
/// `planes_per_shard` planes (write_shard), then the metadata (write_metadata). No renaming:
/// the caller stages `dir`.
void write_planes_array(const std::string& dir, std::span<const std::int64_t, 3> shape,
                        const float* data, std::int64_t planes_per_shard, bool compress,
                        const nlohmann::json& attributes,
                        const std::vector<std::string>& dimension_names);

/// Shard `s` of that layout: planes [s p, min((s + 1) p, n0)) from `planes`, one chunk per plane
/// (blosc zstd with byte shuffle when `compress`), the index at the end with a crc32c, written
/// as dir/c/<s>/0/0.
void write_shard(const std::string& dir, std::span<const std::int64_t, 3> shape,
                 std::int64_t planes_per_shard, std::int64_t s, const float* planes,
                 bool compress);
/// zarr.json of that layout, with `attributes` and the dimension names given.
void write_metadata(const std::string& dir, std::span<const std::int64_t, 3> shape,
                    std::int64_t planes_per_shard, bool compress, const nlohmann::json& attributes,
                    const std::vector<std::string>& dimension_names);

/// Codec primitives (zarr_codecs.cpp). Decoding throws error naming `where` on corrupt input;
/// `limit` bounds the decoded size (a corrupt header cannot ask for more memory).
std::vector<std::uint8_t> decode_bytes(const bytes_codec& c, std::vector<std::uint8_t> in,
                                       std::size_t limit, const std::string& where);
std::uint32_t crc32c(const std::uint8_t* p, std::size_t n);
/// Blosc with zstd, byte shuffle, level 3 (what zarr_volumes.py writes).
std::vector<std::uint8_t> blosc_zstd_compress(const void* src, std::size_t n, int typesize);

}  // namespace ctforge::io::zarr
