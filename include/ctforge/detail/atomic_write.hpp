#pragma once

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "ctforge/error.hpp"

namespace ctforge::io {

template <class F>
void write_atomically(const std::string& path, F&& write) {
  const std::string tmp = path + ".part";
  try {
    write(tmp);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) CTFORGE_FAIL(path + ": cannot rename " + tmp + " into place: " + ec.message());
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace ctforge::io
