// Internal: reading a small text description (geometry JSON, phantom JSON, RTK XML, ASTRA
// vectors) whole, refusing what cannot be one: a directory, a device or FIFO (/dev/zero would
// be read forever), or a file larger than 256 MiB.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ctforge/error.hpp"

namespace ctforge::detail {

inline constexpr std::uintmax_t k_max_description_bytes = std::uintmax_t{256} << 20;

/// The whole content of text file `path`; `what` ("geometry file") names it in errors
/// (ctforge::error: missing, unreadable, not a regular file, too large).
inline std::string read_description_file(const std::string& path, const char* what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  CTFORGE_CHECK(!ec && std::filesystem::exists(st),
                fmt::format("{}: cannot open {}: no such file", path, what));
  CTFORGE_CHECK(std::filesystem::is_regular_file(st),
                fmt::format("{}: the {} is not a regular file", path, what));
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  CTFORGE_CHECK(!ec && size <= k_max_description_bytes,
                fmt::format("{}: the {} holds {} bytes, more than the {} a description may", path,
                            what, size, k_max_description_bytes));
  std::ifstream in(path, std::ios::binary);
  CTFORGE_CHECK(in.good(), fmt::format("{}: cannot open {}", path, what));
  std::stringstream ss;
  ss << in.rdbuf();
  CTFORGE_CHECK(!in.bad(), fmt::format("{}: read error", path));
  return ss.str();
}

}  // namespace ctforge::detail
