// Parallel chunk coding for HDF5 float datasets: see io/h5_chunks.hpp.
#include "core/parallel_copy.hpp"
#include "io/h5_chunks.hpp"

#include <fmt/format.h>
#include <libdeflate.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "io/h5.hpp"

namespace ctforge::detail::h5 {
namespace {

/// What a qualifying dataset's storage looks like.
struct chunk_layout {
  dims_t dims, chunk;
  std::size_t chunk_elems = 0;
  int shuffle_bit = -1;  ///< pipeline position of the shuffle filter (-1: none)
  int deflate_bit = -1;  ///< pipeline position of the deflate filter (-1: none)
  int level = 1;         ///< deflate level (writes)
};

/// Chunked float32 (little-endian, as the host) with filters among shuffle, deflate in that
/// order; nullopt otherwise.
std::optional<chunk_layout> qualify(hid_t dset) {
  if constexpr (std::endian::native != std::endian::little) return std::nullopt;
  datatype_id type(H5Dget_type(dset));
  if (!type || H5Tequal(type.get(), H5T_IEEE_F32LE) <= 0) return std::nullopt;
  plist_id dcpl(H5Dget_create_plist(dset));
  if (!dcpl || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return std::nullopt;
  dataspace_id space(H5Dget_space(dset));
  if (!space) return std::nullopt;
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1 || rank > 32) return std::nullopt;
  chunk_layout L;
  L.dims.resize(static_cast<std::size_t>(rank));
  L.chunk.resize(static_cast<std::size_t>(rank));
  if (H5Sget_simple_extent_dims(space.get(), L.dims.data(), nullptr) != rank ||
      H5Pget_chunk(dcpl.get(), rank, L.chunk.data()) != rank)
    return std::nullopt;
  L.chunk_elems = 1;
  for (hsize_t c : L.chunk) {
    if (c == 0) return std::nullopt;
    L.chunk_elems *= static_cast<std::size_t>(c);
  }
  // Over 64 MiB per chunk (never ours; the scratch is two chunks per thread): left to libhdf5.
  if (L.chunk_elems > (std::size_t{1} << 24)) return std::nullopt;
  const int nf = H5Pget_nfilters(dcpl.get());
  if (nf < 0 || nf > 2) return std::nullopt;
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, cd[8] = {};
    std::size_t n_cd = 8;
    unsigned config = 0;
    char name[64];
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &n_cd,
                                           cd, sizeof name, name, &config);
    if (id == H5Z_FILTER_SHUFFLE && L.shuffle_bit < 0 && L.deflate_bit < 0) {
      L.shuffle_bit = i;
    } else if (id == H5Z_FILTER_DEFLATE && L.deflate_bit < 0) {
      L.deflate_bit = i;
      L.level = n_cd >= 1 ? static_cast<int>(std::min(cd[0], 9u)) : 6;
    } else {
      H5Eclear2(H5E_DEFAULT);
      return std::nullopt;
    }
  }
  return L;
}

/// Chunk origins (element coordinates) of every chunk meeting [start, start + count).
std::vector<dims_t> chunks_meeting(const chunk_layout& L, const dims_t& start,
                                   const dims_t& count) {
  const std::size_t r = L.dims.size();
  dims_t first(r), last(r);
  for (std::size_t i = 0; i < r; ++i) {
    first[i] = start[i] / L.chunk[i];
    last[i] = (start[i] + count[i] - 1) / L.chunk[i];
  }
  std::vector<dims_t> out;
  dims_t idx = first;
  for (;;) {
    dims_t origin(r);
    for (std::size_t i = 0; i < r; ++i) origin[i] = idx[i] * L.chunk[i];
    out.push_back(std::move(origin));
    std::size_t d = r;
    while (d-- > 0) {
      if (++idx[d] <= last[d]) break;
      idx[d] = first[d];
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
  return out;
}

/// Calls run(chunk_offset, block_offset, n) for each row of n contiguous elements of the part of
/// a chunk (origin `co`, full chunk shape) inside the block [s, s + c) of the dataset; offsets
/// in elements of the chunk buffer and of the row-major block buffer.
template <class Run>
void for_each_intersection_row(const chunk_layout& L, const dims_t& co, const dims_t& s,
                               const dims_t& c, Run&& run) {
  const std::size_t r = L.dims.size();
  dims_t lo(r), hi(r);
  for (std::size_t i = 0; i < r; ++i) {
    lo[i] = std::max(co[i], s[i]);
    hi[i] = std::min({co[i] + L.chunk[i], s[i] + c[i], L.dims[i]});
    if (hi[i] <= lo[i]) return;
  }
  const std::size_t n = static_cast<std::size_t>(hi[r - 1] - lo[r - 1]);
  dims_t idx = lo;
  for (;;) {
    std::size_t ci = 0, bi = 0;
    for (std::size_t i = 0; i < r; ++i) {
      ci = ci * L.chunk[i] + (idx[i] - co[i]);
      bi = bi * c[i] + (idx[i] - s[i]);
    }
    run(ci, bi, n);
    if (r == 1) return;
    std::size_t d = r - 1;
    while (d-- > 0) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

/// HDF5's shuffle filter for 4-byte elements: byte k of element j goes to k * n + j.
void shuffle4(const unsigned char* src, unsigned char* dst, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t k = 0; k < 4; ++k) dst[k * n + j] = src[4 * j + k];
}
void unshuffle4(const unsigned char* src, unsigned char* dst, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t k = 0; k < 4; ++k) dst[4 * j + k] = src[k * n + j];
}

struct decompressor_deleter {
  void operator()(libdeflate_decompressor* d) const noexcept { libdeflate_free_decompressor(d); }
};
struct compressor_deleter {
  void operator()(libdeflate_compressor* c) const noexcept { libdeflate_free_compressor(c); }
};

std::string chunk_name(const dims_t& origin) {
  std::string s;
  for (hsize_t x : origin) s += fmt::format("[{}]", x);
  return s;
}

/// Raw chunks read or encoded per group: bounds the extra memory of a large read or write.
constexpr std::size_t k_group_bytes = std::size_t{64} << 20;


}  // namespace

bool read_float_chunks(hid_t dset, const dims_t& start, const dims_t& count, float* out,
                       const std::string& context, int threads) {
  const std::optional<chunk_layout> L = qualify(dset);
  if (!L || start.size() != L->dims.size() || count.size() != L->dims.size()) return false;
  for (std::size_t i = 0; i < count.size(); ++i)
    if (count[i] == 0 || start[i] + count[i] > L->dims[i]) return false;
  const std::vector<dims_t> chunks = chunks_meeting(*L, start, count);
  const std::size_t chunk_bytes = L->chunk_elems * sizeof(float);
  const int nt =
      std::max(1, std::min<int>(resolve_threads(threads), static_cast<int>(chunks.size())));

  // Per-thread decoders and scratch, made once for the whole read.
  struct scratch {
    std::unique_ptr<libdeflate_decompressor, decompressor_deleter> inflater;
    std::vector<unsigned char> a, b;
  };
  std::vector<scratch> per_thread(static_cast<std::size_t>(nt));
  for (scratch& s : per_thread) {
    s.inflater.reset(libdeflate_alloc_decompressor());
    CTFORGE_CHECK(s.inflater != nullptr, context + ": out of memory for a chunk decoder");
    s.a.resize(chunk_bytes);
    s.b.resize(chunk_bytes);
  }

  std::vector<std::vector<unsigned char>> raw;
  std::vector<std::uint32_t> masks;
  for (std::size_t g0 = 0; g0 < chunks.size();) {
    // Read a group of raw chunks (libhdf5: this thread only).
    raw.clear();
    masks.clear();
    std::size_t bytes = 0, g1 = g0;
    while (g1 < chunks.size() && (g1 == g0 || bytes < k_group_bytes)) {
      hsize_t stored = 0;
      if (H5Dget_chunk_storage_size(dset, chunks[g1].data(), &stored) < 0 || stored == 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;  // not allocated (fill values): libhdf5 knows what to return
      }
      // A deflate stream of a chunk is at most a few bytes per 16 KiB larger than the chunk.
      if (stored > chunk_bytes + chunk_bytes / 64 + 1024)
        throw error(fmt::format("{}: chunk at {} claims {} stored bytes for {} bytes of data "
                                "(corrupt file)",
                                context, chunk_name(chunks[g1]), stored, chunk_bytes));
      std::vector<unsigned char> buf(static_cast<std::size_t>(stored));
      std::uint32_t mask = 0;
      check(H5Dread_chunk(dset, H5P_DEFAULT, chunks[g1].data(), &mask, buf.data()), context,
            fmt::format("H5Dread_chunk (chunk at {})", chunk_name(chunks[g1])));
      bytes += buf.size();
      raw.push_back(std::move(buf));
      masks.push_back(mask);
      ++g1;
    }
    // Decode it in parallel.
    parallel_for(g1 - g0, nt, [&](std::size_t k) {
      scratch& s = per_thread[static_cast<std::size_t>(std::max(0, omp_get_thread_num()))];
      const std::vector<unsigned char>& in = raw[k];
      const dims_t& origin = chunks[g0 + k];
      const unsigned char* data = in.data();
      std::size_t size = in.size();
      if (L->deflate_bit >= 0 && !(masks[k] & (1u << L->deflate_bit))) {
        std::size_t got = 0;
        const libdeflate_result rc = libdeflate_zlib_decompress(s.inflater.get(), data, size,
                                                                s.a.data(), chunk_bytes, &got);
        if (rc != LIBDEFLATE_SUCCESS || got != chunk_bytes)
          throw error(fmt::format("{}: chunk at {} is corrupt (its deflate stream does not "
                                  "decode to {} bytes)",
                                  context, chunk_name(origin), chunk_bytes));
        data = s.a.data();
        size = got;
      }
      if (size != chunk_bytes)
        throw error(fmt::format("{}: chunk at {} holds {} bytes (expected {})", context,
                                chunk_name(origin), size, chunk_bytes));
      if (L->shuffle_bit >= 0 && !(masks[k] & (1u << L->shuffle_bit)) && L->chunk_elems > 1) {
        unsigned char* dst = data == s.a.data() ? s.b.data() : s.a.data();
        unshuffle4(data, dst, L->chunk_elems);
        data = dst;
      }
      // Copied by bytes: `data` may be the raw buffer (an unfiltered chunk), aligned or not.
      for_each_intersection_row(*L, origin, start, count,
                                [&](std::size_t ci, std::size_t bi, std::size_t n) {
                                  std::memcpy(out + bi, data + ci * sizeof(float),
                                              n * sizeof(float));
                                });
    });
    g0 = g1;
  }
  return true;
}

bool write_float_chunks(hid_t dset, const dims_t& start, const dims_t& count, const float* in,
                        const std::string& context, int threads) {
  const std::optional<chunk_layout> L = qualify(dset);
  if (!L || start.size() != L->dims.size() || count.size() != L->dims.size()) return false;
  for (std::size_t i = 0; i < count.size(); ++i) {
    if (count[i] == 0 || start[i] + count[i] > L->dims[i]) return false;
    const hsize_t end = start[i] + count[i];
    if (start[i] % L->chunk[i] != 0 || (end % L->chunk[i] != 0 && end != L->dims[i]))
      return false;  // a chunk would be written only in part
  }
  const std::vector<dims_t> chunks = chunks_meeting(*L, start, count);
  const std::size_t chunk_bytes = L->chunk_elems * sizeof(float);
  const int nt =
      std::max(1, std::min<int>(resolve_threads(threads), static_cast<int>(chunks.size())));
  const std::size_t per_group = std::max<std::size_t>(1, k_group_bytes / chunk_bytes);

  struct scratch {
    std::unique_ptr<libdeflate_compressor, compressor_deleter> deflater;
    std::vector<unsigned char> a, b;
  };
  std::vector<scratch> per_thread(static_cast<std::size_t>(nt));
  for (scratch& s : per_thread) {
    if (L->deflate_bit >= 0) {
      s.deflater.reset(libdeflate_alloc_compressor(L->level));
      CTFORGE_CHECK(s.deflater != nullptr, context + ": out of memory for a chunk encoder");
    }
    s.a.resize(chunk_bytes);
    s.b.resize(chunk_bytes);
  }
  std::vector<std::vector<unsigned char>> coded;
  for (std::size_t g0 = 0; g0 < chunks.size(); g0 += per_group) {
    const std::size_t g1 = std::min(chunks.size(), g0 + per_group);
    coded.assign(g1 - g0, {});
    parallel_for(g1 - g0, nt, [&](std::size_t k) {
      scratch& s = per_thread[static_cast<std::size_t>(std::max(0, omp_get_thread_num()))];
      // The chunk's values; the part beyond the dataset's edge is stored as zeros.
      std::fill(s.a.begin(), s.a.end(), 0);
      auto* values = reinterpret_cast<float*>(s.a.data());
      for_each_intersection_row(*L, chunks[g0 + k], start, count,
                                [&](std::size_t ci, std::size_t bi, std::size_t n) {
                                  std::memcpy(values + ci, in + bi, n * sizeof(float));
                                });
      const unsigned char* data = s.a.data();
      if (L->shuffle_bit >= 0 && L->chunk_elems > 1) {
        shuffle4(data, s.b.data(), L->chunk_elems);
        data = s.b.data();
      }
      std::vector<unsigned char>& out = coded[k];
      if (L->deflate_bit >= 0) {
        out.resize(libdeflate_zlib_compress_bound(s.deflater.get(), chunk_bytes));
        const std::size_t n =
            libdeflate_zlib_compress(s.deflater.get(), data, chunk_bytes, out.data(), out.size());
        if (n == 0)
          throw error(fmt::format("{}: chunk at {} could not be compressed", context,
                                  chunk_name(chunks[g0 + k])));
        out.resize(n);
      } else {
        out.assign(data, data + chunk_bytes);
      }
    });
    for (std::size_t k = 0; k < g1 - g0; ++k)
      check(H5Dwrite_chunk(dset, H5P_DEFAULT, 0, chunks[g0 + k].data(), coded[k].size(),
                           coded[k].data()),
            context, fmt::format("H5Dwrite_chunk (chunk at {})", chunk_name(chunks[g0 + k])));
  }
  return true;
}

}  // namespace ctforge::detail::h5
