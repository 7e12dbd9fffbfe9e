// TIFF projection stacks (libtiff): one image per view from a directory or a glob pattern
// (natural name order: "p2" before "p10"), or every page of one multi-page file. Grey images
// only (one sample per pixel), unsigned/signed integers of 8, 16 or 32 bits or IEEE floats of
// 32 or 64 bits; strips or tiles, any compression libtiff decodes. Only the selected rows and
// columns are decoded per image (scan lines / tiles). libtiff messages are collected per file
// (no global handlers) and reported in ctforge::error.
#include <fmt/format.h>
#include <glob.h>
#include <tiffio.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/finite_scan.hpp"
#include "core/parallel_copy.hpp"
#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"

namespace ctforge::io {
namespace {

namespace fs = std::filesystem;

/// Natural order: digit runs compare as numbers, other characters as bytes.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])),
               db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      if (int c = a.compare(is, ie - is, b, js, je - js); c != 0) return c < 0;
      if (ie - i != je - j) return ie - i < je - j;  // fewer leading zeros first
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

bool tiff_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".tif" || e == ".tiff";
}

/// Collects libtiff error messages of one open file.
struct tiff_messages {
  std::string errors;
};

int collect_error(TIFF*, void* user, const char* module, const char* fmt_str, va_list ap) {
  auto* m = static_cast<tiff_messages*>(user);
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt_str, ap);
  if (!m->errors.empty()) m->errors += "; ";
  m->errors += module && *module ? fmt::format("{}: {}", module, buf) : std::string(buf);
  return 1;
}
int ignore_warning(TIFF*, void*, const char*, const char*, va_list) {
  return 1;
}

/// An open TIFF file whose failures become ctforge::error naming it.
class tiff_file {
 public:
  tiff_file(const std::string& path, const char* mode) : path_(path) {
    std::unique_ptr<TIFFOpenOptions, void (*)(TIFFOpenOptions*)> opts(TIFFOpenOptionsAlloc(),
                                                                      TIFFOpenOptionsFree);
    CTFORGE_CHECK(opts != nullptr, path + ": cannot allocate TIFF options");
    TIFFOpenOptionsSetErrorHandlerExtR(opts.get(), collect_error, &messages_);
    TIFFOpenOptionsSetWarningHandlerExtR(opts.get(), ignore_warning, nullptr);
    tif_ = TIFFOpenExt(path.c_str(), mode, opts.get());
    if (!tif_) fail(std::string(mode) == "r" ? "cannot read as TIFF" : "cannot create TIFF file");
  }
  ~tiff_file() {
    if (tif_) TIFFClose(tif_);
  }
  tiff_file(const tiff_file&) = delete;
  tiff_file& operator=(const tiff_file&) = delete;

  TIFF* get() const { return tif_; }
  [[noreturn]] void fail(const std::string& what) const {
    CTFORGE_FAIL(fmt::format("{}: {}{}", path_, what,
                             messages_.errors.empty() ? "" : " (" + messages_.errors + ")"));
  }
  /// Closes, flushing data (writers); reports failures.
  void close() {
    if (!tif_) return;
    const bool ok = TIFFFlush(tif_) == 1;
    TIFFClose(tif_);
    tif_ = nullptr;
    if (!ok || !messages_.errors.empty()) fail("write failed");
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  tiff_messages messages_;
  TIFF* tif_ = nullptr;
};

/// Layout of the current page.
struct page_info {
  std::uint32_t width = 0, height = 0;
  std::uint16_t bits = 0, format = SAMPLEFORMAT_UINT;
  bool tiled = false;
};

page_info read_page_info(const tiff_file& t) {
  TIFF* tif = t.get();
  page_info p;
  std::uint16_t spp = 1, planar = PLANARCONFIG_CONTIG;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &p.width) ||
      !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &p.height))
    t.fail("image size missing");
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &p.bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &p.format);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  if (spp != 1) t.fail(fmt::format("{} samples per pixel; projections must be grey images", spp));
  const bool fp = p.format == SAMPLEFORMAT_IEEEFP;
  const bool integer = p.format == SAMPLEFORMAT_UINT || p.format == SAMPLEFORMAT_INT;
  if (!(fp && (p.bits == 32 || p.bits == 64)) &&
      !(integer && (p.bits == 8 || p.bits == 16 || p.bits == 32)))
    t.fail(fmt::format(
        "unsupported pixel type ({} bits, sample format {}): expected 8/16/32-bit integers "
        "or 32/64-bit floats",
        p.bits, p.format));
  p.tiled = TIFFIsTiled(tif) != 0;
  // A page cannot hold more pixels than a thousand times its file's bytes (compression of real
  // detector images is a few to one): a tiny file declaring gigapixels is corrupt, and reading
  // it would allocate gigabytes first.
  std::error_code ec;
  const std::uintmax_t file_bytes = std::filesystem::file_size(t.path(), ec);
  const double declared = static_cast<double>(p.width) * static_cast<double>(p.height) *
                          static_cast<double>(p.bits / 8);
  if (!ec && declared > std::max(1024.0 * static_cast<double>(file_bytes), 64.0 * (1 << 20)))
    t.fail(fmt::format("declares {} x {} pixels ({} bytes) in a file of {} bytes: corrupt", p.width,
                       p.height, declared, file_bytes));
  return p;
}

/// Converts n samples of the page's type at `src` to float.
void convert(const page_info& p, const unsigned char* src, std::size_t n, float* dst) {
  auto cast = [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, src + i * sizeof(T), sizeof(T));
      dst[i] = static_cast<float>(v);
    }
  };
  if (p.format == SAMPLEFORMAT_IEEEFP) {
    if (p.bits == 32)
      cast(float{});
    else
      cast(double{});
  } else if (p.format == SAMPLEFORMAT_INT) {
    if (p.bits == 8)
      cast(std::int8_t{});
    else if (p.bits == 16)
      cast(std::int16_t{});
    else
      cast(std::int32_t{});
  } else {
    if (p.bits == 8)
      cast(std::uint8_t{});
    else if (p.bits == 16)
      cast(std::uint16_t{});
    else
      cast(std::uint32_t{});
  }
}

/// Reads rows [r0, r0+nr) x cols [c0, c0+nc) of the current page into out (nr*nc floats).
void read_region(const tiff_file& t, const page_info& p, std::int64_t r0, std::int64_t nr,
                 std::int64_t c0, std::int64_t nc, float* out) {
  TIFF* tif = t.get();
  const std::size_t bytes = p.bits / 8;
  if (!p.tiled) {
    std::vector<unsigned char> line(static_cast<std::size_t>(TIFFScanlineSize64(tif)));
    CTFORGE_CHECK(line.size() >= p.width * bytes,
                  t.path() + ": scan line shorter than the image width");
    for (std::int64_t r = 0; r < nr; ++r) {
      if (TIFFReadScanline(tif, line.data(), static_cast<std::uint32_t>(r0 + r), 0) < 0)
        t.fail(fmt::format("cannot read row {} (truncated or corrupt file?)", r0 + r));
      convert(p, line.data() + static_cast<std::size_t>(c0) * bytes, static_cast<std::size_t>(nc),
              out + r * nc);
    }
    return;
  }
  std::uint32_t tw = 0, th = 0;
  TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
  TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
  if (tw == 0 || th == 0) t.fail("tiled image without tile size");
  // Tiles are at most the image rounded up to the 16-pixel multiple TIFF requires (a corrupt
  // tile size would make the reader allocate gigabytes).
  const std::uint64_t tile_bytes = TIFFTileSize64(tif);
  if (tw > p.width + 16 || th > p.height + 16 || tile_bytes == 0 ||
      tile_bytes > std::uint64_t{tw} * th * bytes)
    t.fail(fmt::format("tile of {} x {} pixels ({} bytes) for an image of {} x {}: corrupt", tw, th,
                       tile_bytes, p.width, p.height));
  std::vector<unsigned char> tile(static_cast<std::size_t>(tile_bytes));
  std::vector<float> row(tw);
  for (std::int64_t ty = r0 / th * th; ty < r0 + nr; ty += th) {
    for (std::int64_t tx = c0 / tw * tw; tx < c0 + nc; tx += tw) {
      if (TIFFReadTile(tif, tile.data(), static_cast<std::uint32_t>(tx),
                       static_cast<std::uint32_t>(ty), 0, 0) < 0)
        t.fail(fmt::format("cannot read the tile at row {}, col {} (truncated or corrupt file?)",
                           ty, tx));
      for (std::int64_t y = std::max(ty, r0); y < std::min<std::int64_t>(ty + th, r0 + nr); ++y) {
        convert(p, tile.data() + static_cast<std::size_t>((y - ty) * tw) * bytes, tw, row.data());
        for (std::int64_t x = std::max(tx, c0); x < std::min<std::int64_t>(tx + tw, c0 + nc); ++x)
          out[(y - r0) * nc + (x - c0)] = row[static_cast<std::size_t>(x - tx)];
      }
    }
  }
}

}  // namespace

std::vector<std::string> list_tiff_files(const std::string& source) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    for (const auto& e : fs::directory_iterator(source, ec))
      if (e.is_regular_file() && tiff_extension(e.path())) files.push_back(e.path().string());
    CTFORGE_CHECK(!ec, fmt::format("{}: cannot list directory: {}", source, ec.message()));
    CTFORGE_CHECK(!files.empty(), source + ": directory holds no .tif/.tiff files");
  } else if (source.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(source.c_str(), 0, nullptr, &g);
    for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
      if (fs::is_regular_file(g.gl_pathv[i], ec)) files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    CTFORGE_CHECK(!files.empty(), source + ": pattern matches no files");
  } else {
    CTFORGE_CHECK(fs::exists(source, ec), source + ": no such file or directory");
    files.push_back(source);
  }
  std::sort(files.begin(), files.end(), natural_less);
  return files;
}

raw_scan read_tiff_stack(const std::string& source, const detector_selection& sel) {
  const auto files = list_tiff_files(source);
  raw_scan s;
  page_info first;
  const bool multipage = files.size() == 1;
  {
    tiff_file t(files[0], "r");
    first = read_page_info(t);
    if (multipage) {
      const int n = TIFFNumberOfDirectories(t.get());
      CTFORGE_CHECK(n >= 1, files[0] + ": TIFF without images");
      s.full_views = n;
    }
  }
  if (!multipage) s.full_views = static_cast<std::int64_t>(files.size());
  s.full_rows = first.height;
  s.full_cols = first.width;
  s.integer_data = first.format != SAMPLEFORMAT_IEEEFP;
  const auto [v0, nv] = resolve_range(sel.views, s.full_views, "views", source);
  const auto [r0, nr] = resolve_range(sel.rows, s.full_rows, "rows", source);
  const auto [c0, nc] = resolve_range(sel.cols, s.full_cols, "cols", source);
  detail::require_memory(static_cast<std::uint64_t>(nv) * static_cast<std::uint64_t>(nr) *
                             static_cast<std::uint64_t>(nc),
                         sizeof(float),
                         fmt::format("{}: reading {} views of {} x {} pixels", source, nv, nc, nr),
                         "read a part with --views / --rows / --cols");
  s.frames = projection_stack(nv, nr, nc);

  auto check_same = [&](const tiff_file& t, const page_info& p, std::int64_t view) {
    if (p.width != first.width || p.height != first.height)
      t.fail(fmt::format("view {} is {}x{} pixels, the first image {}x{}", view, p.width, p.height,
                         first.width, first.height));
  };
  if (multipage) {
    tiff_file t(files[0], "r");
    for (std::int64_t v = 0; v < nv; ++v) {
      if (!TIFFSetDirectory(t.get(), static_cast<tdir_t>(v0 + v)))
        t.fail(fmt::format("cannot read page {}", v0 + v));
      const page_info p = read_page_info(t);
      check_same(t, p, v0 + v);
      read_region(t, p, r0, nr, c0, nc, s.frames.view(v));
    }
  } else {
    for (std::int64_t v = 0; v < nv; ++v) {
      tiff_file t(files[static_cast<std::size_t>(v0 + v)], "r");
      const page_info p = read_page_info(t);
      check_same(t, p, v0 + v);
      read_region(t, p, r0, nr, c0, nc, s.frames.view(v));
    }
  }
  return s;
}

void write_tiff_stack(const std::string& dir, const projection_view& p, const std::string& prefix,
                      const std::string& geometry_json) {
  require_host(p, "write_tiff_stack");
  CTFORGE_EXPECTS(p.views >= 1 && p.rows >= 1 && p.cols >= 1,
                  "write_tiff_stack: empty projection stack");
  detail::refuse_non_finite(p.data.data(), p.views, p.rows, p.cols, dir, "view, row, col");
  // The whole stack (every view, then geometry.json) is written into a temporary directory beside
  // `dir` and exchanged with it in one step (temporary_output::commit_directory), as a DICOM
  // series is: an interrupted or failed run (a signal, SIGKILL, a full disk) leaves no part of a
  // stack under the final name and an earlier stack there as it was, and after success the
  // directory holds exactly the new stack (no views of an earlier, longer one).
  std::string target = dir;
  while (target.size() > 1 && target.ends_with('/')) target.pop_back();
  const fs::path parent =
      fs::path(target).has_parent_path() ? fs::path(target).parent_path() : fs::path(".");
  std::error_code ec;
  CTFORGE_EXPECTS(fs::is_directory(parent, ec),
                  fmt::format("{}: directory '{}' does not exist", dir, parent.string()));
  // Replace the target only when it is absent or holds a TIFF stack (images, geometry.json):
  // nothing else of the user's is ever removed with it.
  if (fs::exists(fs::symlink_status(target, ec))) {
    CTFORGE_EXPECTS(fs::is_directory(fs::symlink_status(target, ec)),
                    fmt::format("{}: exists and is not a directory; refusing to replace it", dir));
    for (const auto& e : fs::directory_iterator(target, ec)) {
      const std::string name = e.path().filename().string();
      CTFORGE_EXPECTS(
          e.is_regular_file() && (tiff_extension(e.path()) || name == "geometry.json"),
          fmt::format("{}: exists and is not a TIFF stack directory (it holds {}); refusing to "
                      "replace it",
                      dir, name));
    }
    CTFORGE_CHECK(!ec, fmt::format("{}: cannot list directory: {}", dir, ec.message()));
  }
  temporary_output out(target, /*directory=*/true);
  for (std::int64_t v = 0; v < p.views; ++v) {
    tiff_file t((fs::path(out.path()) / fmt::format("{}_{:05d}.tif", prefix, v)).string(), "w");
    TIFF* tif = t.get();
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, static_cast<std::uint32_t>(p.cols));
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, static_cast<std::uint32_t>(p.rows));
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 32);
    TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_IEEEFP);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, TIFFDefaultStripSize(tif, 0));
    std::vector<float> line(static_cast<std::size_t>(p.cols));
    for (std::int64_t r = 0; r < p.rows; ++r) {
      std::copy_n(p.view(v) + r * p.cols, p.cols, line.begin());
      if (TIFFWriteScanline(tif, line.data(), static_cast<std::uint32_t>(r), 0) < 0)
        t.fail(fmt::format("cannot write row {}", r));
    }
    t.close();
  }
  if (!geometry_json.empty()) {
    const std::string json_path = (fs::path(out.path()) / "geometry.json").string();
    write_file_bytes(json_path, geometry_json.data(), geometry_json.size(),
                     (fs::path(target) / "geometry.json").string());
  }
  out.commit_directory();
}

}  // namespace ctforge::io
