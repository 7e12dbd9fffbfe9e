// Internal: reading JSON descriptions (geometry, phantom) with errors that name the source and
// the field, e.g. "geom.json: field 'detector.cols': expected an integer".
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ctforge/error.hpp"
#include "ctforge/vec3.hpp"

namespace ctforge::detail {

using json = nlohmann::json;

struct json_reader {
  std::string origin;  ///< names the source (a file name) in messages

  /// Parses `text`; invalid JSON (or a number out of range, e.g. 1e999) is a usage_error.
  json parse(std::string_view text) const {
    try {
      return json::parse(text);
    } catch (const json::exception& e) {
      throw usage_error(fmt::format("{}: invalid JSON: {}", origin, e.what()));
    }
  }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw usage_error(fmt::format("{}: field '{}': {}", origin, field, what));
  }
  /// Every key of object `obj` (at `path`) must be one of `keys`: an unknown one (a typo such
  /// as "colz") is a usage_error naming it, with the closest known key as a suggestion. Keys
  /// starting with '_' and "comment" / "description" are free-form notes and allowed.
  void known_keys(const json& obj, const std::string& path,
                  std::initializer_list<std::string_view> keys) const {
    if (!obj.is_object()) return;
    for (const auto& [key, value] : obj.items()) {
      (void)value;
      if (key.starts_with('_') || key == "comment" || key == "description") continue;
      bool known = false;
      for (std::string_view k : keys) known = known || k == key;
      if (known) continue;
      std::string_view best;
      std::size_t best_d = std::string::npos;
      for (std::string_view k : keys) {
        const std::size_t d = edit_distance(key, k);
        if (d < best_d) {
          best_d = d;
          best = k;
        }
      }
      const std::string field = path.empty() ? key : path + "." + key;
      std::string known_list;
      for (std::string_view k : keys)
        known_list += (known_list.empty() ? "'" : ", '") + std::string(k) + "'";
      if (best_d <= std::max<std::size_t>(2, key.size() / 3))
        fail(field, fmt::format("unknown key; did you mean '{}'?", best));
      fail(field, fmt::format("unknown key (known here: {})", known_list));
    }
  }
  static std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  }
  const json& member(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object()) fail(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(path.empty() ? key : path + "." + key, "missing");
    return *it;
  }
  double number(const json& j, const std::string& field) const {
    if (!j.is_number()) fail(field, "expected a number");
    const double v = j.get<double>();
    if (!std::isfinite(v)) fail(field, "not a finite number");
    return v;
  }
  std::int64_t integer(const json& j, const std::string& field) const {
    if (!j.is_number_integer() && !j.is_number_unsigned()) fail(field, "expected an integer");
    return j.get<std::int64_t>();
  }
  std::vector<double> numbers(const json& j, const std::string& field) const {
    if (!j.is_array()) fail(field, "expected an array of numbers");
    std::vector<double> out;
    for (std::size_t i = 0; i < j.size(); ++i)
      out.push_back(number(j[i], fmt::format("{}[{}]", field, i)));
    return out;
  }
  /// [x, y, z] of finite numbers; `positive` also requires each to be > 0.
  vec3 triple(const json& j, const std::string& field, bool positive = false) const {
    const char* what = positive ? "expected 3 positive numbers" : "expected 3 finite numbers";
    if (!j.is_array() || j.size() != 3) fail(field, what);
    double v[3];
    for (int i = 0; i < 3; ++i) {
      if (!j[i].is_number()) fail(field, what);
      v[i] = j[i].get<double>();
      if (!std::isfinite(v[i]) || (positive && !(v[i] > 0))) fail(field, what);
    }
    return {v[0], v[1], v[2]};
  }
};

inline json vec_json(vec3 a) {
  return json::array({a.x, a.y, a.z});
}

}  // namespace ctforge::detail
