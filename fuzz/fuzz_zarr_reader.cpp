// Zarr arrays (io::read_volume_any and io::read_projections_any on a .zarr directory). The input
// is the array's metadata, a NUL byte, then the bytes of its one chunk, stored under the first
// chunk's key in every encoding and separator for the metadata's rank ("c/0/0/0", "0.0.0", ...) and as
// zarr.json or .zarray by the metadata's zarr_format. Metadata declaring more than 16 M
// elements (2^24) in any shape are skipped: an honest file of that size needs as much memory,
// which
// the libFuzzer malloc limit would report as a finding.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ctforge/formats.hpp"
#include "fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;

bool small(const nlohmann::json& j) {
  if (j.is_object()) {
    for (const auto& [key, v] : j.items()) {
      if ((key == "shape" || key == "chunk_shape" || key == "chunks") && v.is_array()) {
        double n = 1;
        for (const auto& x : v) n *= x.is_number() ? std::max(1.0, x.get<double>()) : 1.0;
        if (n > (1 << 24)) return false;
      }
      if (!small(v)) return false;
    }
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (!small(v)) return false;
  }
  return true;
}

void write(const fs::path& p, const std::uint8_t* data, std::size_t n) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(data),
                                            static_cast<std::streamsize>(n));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t split = 0;
  while (split < size && data[split] != 0) ++split;
  const std::string meta(reinterpret_cast<const char*>(data), split);
  const auto j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  if (!small(j)) return 0;
  const fs::path dir = "/tmp/ctforge_fuzz_" + std::to_string(::getpid()) + ".zarr";
  std::error_code ec;
  fs::remove_all(dir, ec);
  const bool v2 = j.is_object() && j.contains("zarr_format") && j["zarr_format"] == 2;
  write(dir / (v2 ? ".zarray" : "zarr.json"), data, split);
  const std::uint8_t* chunk = data + std::min(size, split + 1);
  const std::size_t n = size - std::min(size, split + 1);
  const std::size_t rank =
      j.is_object() && j.contains("shape") && j["shape"].is_array() ? j["shape"].size() : 3;
  for (const char sep : {'/', '.'}) {
    std::string zeros = "0";
    for (std::size_t k = 1; k < std::min<std::size_t>(rank, 3); ++k) zeros += std::string(1, sep) + "0";
    write(dir / (std::string("c") + sep + zeros), chunk, n);
    write(dir / zeros, chunk, n);
  }
  ctforge::fuzz::refused_or_fine([&] { (void)ctforge::io::read_volume_any(dir.string()); });
  ctforge::fuzz::refused_or_fine([&] {
    ctforge::io::projection_read_options o;
    o.angles_path = "0:179:180";
    (void)ctforge::io::read_projections_any(dir.string(), o);
  });
  return 0;
}
