// Shared by the libFuzzer targets: each input is handed to one reader; ctforge::error (and its
// usage_error) is the documented way to refuse it. Anything else -- a crash, a sanitizer
// report, another exception escaping, a hang -- is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "ctforge/error.hpp"

namespace ctforge::fuzz {

/// Writes the input to a per-process scratch file with extension `ext` and returns its path
/// (for readers that take a file name).
inline std::string scratch_file(const std::uint8_t* data, std::size_t size, const char* ext) {
  const std::string path = "/tmp/ctforge_fuzz_" + std::to_string(::getpid()) + std::string(ext);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

/// Runs f(); ctforge::error means "refused", which is fine.
template <class F>
void refused_or_fine(F&& f) {
  try {
    f();
  } catch (const ctforge::error&) {
  }
}

}  // namespace ctforge::fuzz
