// Names of enumerators from one table per enumeration, instead of a switch per to_string.
#pragma once

#include <cstddef>
#include <utility>

namespace ctforge::detail {

template <class E>
using enum_name = std::pair<E, const char*>;

/// The name `table` gives `value`, or `fallback` when it gives none.
template <class E, std::size_t N>
constexpr const char* name_of(E value, const enum_name<E> (&table)[N], const char* fallback) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return fallback;
}

}  // namespace ctforge::detail
