// Angle-list text files as beamlines write them (see read_angle_list in formats.hpp).
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <optional>
#include <fstream>
#include <numbers>

#include "ctforge/error.hpp"
#include "ctforge/formats.hpp"
#include "ctforge/geometry.hpp"

namespace ctforge::io {

namespace {

/// "START:STOP:COUNT" (COUNT angles from START to STOP, both included, as numpy.linspace and
/// tomopy.angles), or nothing when `text` is not of that form.
std::optional<angle_list> angle_range(const std::string& text, bool radians) {
  double v[3];
  std::size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const std::size_t end = i < 2 ? text.find(':', start) : text.size();
    if (end == std::string::npos) return std::nullopt;
    const auto [p, ec] = std::from_chars(text.data() + start, text.data() + end, v[i]);
    if (ec != std::errc() || p != text.data() + end || end == start) return std::nullopt;
    start = end + 1;
  }
  const double count = v[2];
  CTFORGE_EXPECTS(std::isfinite(v[0]) && std::isfinite(v[1]) && count >= 1 &&
                      count == std::floor(count) && count <= 1e7,
                  fmt::format("--angles {}: START:STOP:COUNT needs finite angles and a whole "
                              "count of 1 to 10^7 views",
                              text));
  angle_list out;
  const auto n = static_cast<std::int64_t>(count);
  for (std::int64_t k = 0; k < n; ++k) {
    const double a = n == 1 ? v[0] : v[0] + (v[1] - v[0]) * double(k) / double(n - 1);
    out.angles_rad.push_back(radians ? a : deg_to_rad(a));
    out.line_numbers.push_back(static_cast<int>(k + 1));
  }
  return out;
}

}  // namespace

angle_list read_angle_list(const std::string& path, bool radians) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    if (auto r = angle_range(path, radians)) return *r;
  std::ifstream in(path);
  CTFORGE_CHECK(in.good(), path + ": cannot open the angle list");
  angle_list out;
  std::string line;
  std::size_t columns = 0;
  double max_abs = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    for (char& c : line)
      if (c == ',' || c == ';' || c == '\t' || c == '\r') c = ' ';
    std::vector<std::string> fields;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && line[i] == ' ') ++i;
      const std::size_t e = std::min(line.find(' ', i), line.size());
      if (e > i) fields.push_back(line.substr(i, e - i));
      i = e;
    }
    if (fields.empty()) continue;
    const std::string where = fmt::format("{}: line {}", path, number);
    CTFORGE_CHECK(fields.size() <= 2,
                  fmt::format("{}: {} columns; expected the angle and optionally the image key "
                              "(0 projection, 1 flat, 2 dark, 3 invalid)",
                              where, fields.size()));
    CTFORGE_CHECK(
        columns == 0 || fields.size() == columns,
        fmt::format("{}: {} columns, the lines before have {}", where, fields.size(), columns));
    columns = fields.size();
    double a = 0;
    const auto& f = fields[0];
    const auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), a);
    CTFORGE_CHECK(ec == std::errc() && p == f.data() + f.size() && std::isfinite(a),
                  fmt::format("{}: '{}' is not a finite angle", where, f));
    max_abs = std::max(max_abs, std::abs(a));
    out.angles_rad.push_back(radians ? a : deg_to_rad(a));
    out.line_numbers.push_back(number);
    if (columns == 2) {
      int key = -1;
      const auto& k = fields[1];
      const auto [q, kec] = std::from_chars(k.data(), k.data() + k.size(), key);
      CTFORGE_CHECK(kec == std::errc() && q == k.data() + k.size() && key >= 0 && key <= 3,
                    fmt::format("{}: image key '{}': expected 0 (projection), 1 (flat), 2 (dark) "
                                "or 3 (invalid)",
                                where, k));
      out.keys.push_back(key);
    }
  }
  CTFORGE_CHECK(!out.angles_rad.empty(), path + ": the angle list holds no angles");
  if (!radians && out.angles_rad.size() > 2 && max_abs <= 2 * std::numbers::pi + 1e-6)
    out.warning = fmt::format(
        "{}: the angles span at most {:.4g}, which looks like radians, but degrees were assumed "
        "(give --angle-unit rad if they are radians)",
        path, max_abs);
  return out;
}

}  // namespace ctforge::io
