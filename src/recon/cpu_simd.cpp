#include "recon/cpu_simd.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/enum_names.hpp"
#include "ctforge/error.hpp"

namespace ctforge::detail {
namespace {

// set_cpu_simd_level's cap as an int (-1: none).
std::atomic<int> g_cap{-1};

std::optional<simd_level> environment_cap() {
  const char* s = std::getenv("CTFORGE_SIMD");
  if (s == nullptr || *s == '\0') return std::nullopt;
  const std::string_view v(s);
  if (v == "scalar" || v == "none") return simd_level::none;
  if (v == "avx2") return simd_level::avx2;
  if (v == "avx512") return simd_level::avx512;
  throw_usage(fmt::format("CTFORGE_SIMD: unknown level '{}' (expected scalar, avx2 or avx512)", v));
}

}  // namespace

simd_level cpu_simd_supported() {
#if defined(CTFORGE_SIMD_X86)
  static const simd_level level = [] {
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
      return simd_level::avx512;
    return avx2 ? simd_level::avx2 : simd_level::none;
  }();
  return level;
#else
  return simd_level::none;
#endif
}

simd_level cpu_simd_level() {
  static const std::optional<simd_level> env = environment_cap();
  simd_level level = cpu_simd_supported();
  if (env) level = std::min(level, *env);
  const int cap = g_cap.load(std::memory_order_relaxed);
  if (cap >= 0) level = std::min(level, static_cast<simd_level>(cap));
  return level;
}

void set_cpu_simd_level(std::optional<simd_level> cap) {
  g_cap.store(cap ? static_cast<int>(*cap) : -1, std::memory_order_relaxed);
}

constexpr enum_name<simd_level> k_level_names[] = {
    {simd_level::none, "scalar"}, {simd_level::avx2, "avx2"}, {simd_level::avx512, "avx512"}};

const char* to_string(simd_level level) {
  return name_of(level, k_level_names, "?");
}

}  // namespace ctforge::detail
