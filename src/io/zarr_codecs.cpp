// The bytes -> bytes codecs of Zarr arrays: Blosc (libblosc), Zstandard (libzstd), gzip and
// zlib (zlib), bzip2 (libbz2; v2 arrays), and the crc32c checksum of sharded arrays' indexes.
#include <blosc.h>
#include <bzlib.h>
#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include <array>
#include <cstring>

#include "ctforge/error.hpp"
#include "io/zarr_store.hpp"

namespace ctforge::io::zarr {
namespace {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one table, one byte at a time: the
/// indexes it guards are 16 bytes per chunk.
constexpr std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto crc_table = crc32c_table();

std::vector<std::uint8_t> blosc_decode(const std::vector<std::uint8_t>& in, std::size_t limit,
                                       const std::string& where) {
  std::size_t nbytes = 0;
  CTFORGE_CHECK(in.size() >= BLOSC_MIN_HEADER_LENGTH &&
                    blosc_cbuffer_validate(in.data(), in.size(), &nbytes) == 0,
                fmt::format("{}: corrupt Blosc data ({} bytes)", where, in.size()));
  CTFORGE_CHECK(nbytes <= limit, fmt::format("{}: Blosc data claim {} bytes, more than the {} a "
                                             "chunk can hold (corrupt)",
                                             where, nbytes, limit));
  std::vector<std::uint8_t> out(nbytes);
  const int n = blosc_decompress_ctx(in.data(), out.data(), out.size(), 1);
  CTFORGE_CHECK(n >= 0 && static_cast<std::size_t>(n) == nbytes,
                fmt::format("{}: blosc_decompress_ctx failed ({}): corrupt Blosc data", where, n));
  return out;
}

std::vector<std::uint8_t> zstd_decode(const std::vector<std::uint8_t>& in, std::size_t limit,
                                      const std::string& where) {
  const unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  CTFORGE_CHECK(size != ZSTD_CONTENTSIZE_ERROR,
                fmt::format("{}: corrupt Zstandard data ({} bytes)", where, in.size()));
  CTFORGE_CHECK(size == ZSTD_CONTENTSIZE_UNKNOWN || size <= limit,
                fmt::format("{}: Zstandard data claim {} bytes, more than the {} a chunk can hold "
                            "(corrupt)",
                            where, size, limit));
  // Decoded in steps (frames may omit their size, or be several), bounded by `limit`.
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  CTFORGE_CHECK(ctx != nullptr, "ZSTD_createDCtx failed");
  std::vector<std::uint8_t> out;
  if (size != ZSTD_CONTENTSIZE_UNKNOWN) out.reserve(size);
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  std::vector<std::uint8_t> step(ZSTD_DStreamOutSize());
  for (;;) {
    ZSTD_outBuffer dst{step.data(), step.size(), 0};
    const std::size_t r = ZSTD_decompressStream(ctx.get(), &dst, &src);
    CTFORGE_CHECK(!ZSTD_isError(r), fmt::format("{}: ZSTD_decompressStream failed: {}", where,
                                                ZSTD_isError(r) ? ZSTD_getErrorName(r) : ""));
    out.insert(out.end(), step.begin(), step.begin() + static_cast<std::ptrdiff_t>(dst.pos));
    CTFORGE_CHECK(out.size() <= limit,
                  fmt::format("{}: Zstandard data decode to more than the {} bytes a chunk can "
                              "hold (corrupt)",
                              where, limit));
    if (src.pos == src.size && dst.pos < dst.size) {  // all read, nothing more buffered
      CTFORGE_CHECK(r == 0, fmt::format("{}: truncated Zstandard data", where));
      break;
    }
  }
  return out;
}

/// gzip or zlib streams (inflate detects which).
std::vector<std::uint8_t> inflate_decode(const std::vector<std::uint8_t>& in, std::size_t limit,
                                         const std::string& where, const char* what) {
  z_stream z{};
  CTFORGE_CHECK(inflateInit2(&z, 15 + 32) == Z_OK, fmt::format("{}: inflateInit2 failed", where));
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> step(std::size_t{1} << 20);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  int r = Z_OK;
  while (r != Z_STREAM_END) {
    z.next_out = step.data();
    z.avail_out = static_cast<uInt>(step.size());
    r = inflate(&z, Z_NO_FLUSH);
    const std::size_t got = step.size() - z.avail_out;
    out.insert(out.end(), step.begin(), step.begin() + static_cast<std::ptrdiff_t>(got));
    if ((r != Z_OK && r != Z_STREAM_END) || out.size() > limit || (r == Z_OK && got == 0)) {
      inflateEnd(&z);
      CTFORGE_FAIL(fmt::format("{}: corrupt {} data (inflate: {})", where, what,
                               out.size() > limit ? "more bytes than a chunk holds"
                               : z.msg           ? z.msg
                                                 : "truncated"));
    }
  }
  inflateEnd(&z);
  return out;
}

/// bzip2 streams (numcodecs' BZ2: one stream, no header of its own).
std::vector<std::uint8_t> bunzip_decode(const std::vector<std::uint8_t>& in, std::size_t limit,
                                        const std::string& where) {
  bz_stream z{};
  CTFORGE_CHECK(BZ2_bzDecompressInit(&z, 0, 0) == BZ_OK,
                fmt::format("{}: BZ2_bzDecompressInit failed", where));
  std::vector<std::uint8_t> out;
  std::vector<char> step(std::size_t{1} << 20);
  z.next_in = reinterpret_cast<char*>(const_cast<std::uint8_t*>(in.data()));
  z.avail_in = static_cast<unsigned>(in.size());
  int r = BZ_OK;
  while (r != BZ_STREAM_END) {
    z.next_out = step.data();
    z.avail_out = static_cast<unsigned>(step.size());
    r = BZ2_bzDecompress(&z);
    const std::size_t got = step.size() - z.avail_out;
    out.insert(out.end(), step.begin(), step.begin() + static_cast<std::ptrdiff_t>(got));
    if ((r != BZ_OK && r != BZ_STREAM_END) || out.size() > limit || (r == BZ_OK && got == 0)) {
      BZ2_bzDecompressEnd(&z);
      CTFORGE_FAIL(fmt::format("{}: corrupt bz2 data (BZ2_bzDecompress: {})", where,
                               out.size() > limit ? "more bytes than a chunk holds"
                               : r != BZ_OK       ? fmt::format("error {}", r)
                                                  : "truncated"));
    }
  }
  BZ2_bzDecompressEnd(&z);
  return out;
}

}  // namespace

std::uint32_t crc32c(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = crc_table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::vector<std::uint8_t> decode_bytes(const bytes_codec& c, std::vector<std::uint8_t> in,
                                       std::size_t limit, const std::string& where) {
  if (c.name == "blosc") return blosc_decode(in, limit, where);
  if (c.name == "zstd") return zstd_decode(in, limit, where);
  if (c.name == "gzip" || c.name == "zlib")
    return inflate_decode(in, limit, where, c.name.c_str());
  if (c.name == "bz2") return bunzip_decode(in, limit, where);
  if (c.name == "crc32c") {
    CTFORGE_CHECK(in.size() >= 4, fmt::format("{}: {} bytes, too short for its crc32c checksum",
                                              where, in.size()));
    const std::size_t n = in.size() - 4;
    const std::uint32_t stored = static_cast<std::uint32_t>(in[n]) |
                                 static_cast<std::uint32_t>(in[n + 1]) << 8 |
                                 static_cast<std::uint32_t>(in[n + 2]) << 16 |
                                 static_cast<std::uint32_t>(in[n + 3]) << 24;
    const std::uint32_t computed = crc32c(in.data(), n);
    CTFORGE_CHECK(stored == computed,
                  fmt::format("{}: crc32c checksum mismatch (stored {:08x}, computed {:08x}): "
                              "the data are corrupt",
                              where, stored, computed));
    in.resize(n);
    return in;
  }
  CTFORGE_FAIL(fmt::format("{}: codec '{}' is not supported", where, c.name));
}

std::vector<std::uint8_t> blosc_zstd_compress(const void* src, std::size_t n, int typesize) {
  std::vector<std::uint8_t> out(n + BLOSC_MAX_OVERHEAD);
  const int m = blosc_compress_ctx(3, BLOSC_SHUFFLE, static_cast<std::size_t>(typesize), n, src,
                                   out.data(), out.size(), "zstd", 0, 1);
  CTFORGE_CHECK(m > 0, fmt::format("blosc_compress_ctx (zstd, {} bytes) failed ({})", n, m));
  out.resize(static_cast<std::size_t>(m));
  return out;
}

}  // namespace ctforge::io::zarr
