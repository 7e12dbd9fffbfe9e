#pragma once

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "ctforge/error.hpp"

namespace ctforge::io {

/// Registers `path` as an output being written. If the process is then stopped by SIGINT,
/// SIGTERM or SIGHUP (Ctrl-C, a spot instance being reclaimed) after
/// install_interrupt_cleanup(), the handler removes the file before the signal ends the process.
/// Returns a slot for unregister_partial_output, or -1 when the table is full (then the file is
/// simply not cleaned up). Thread-safe.
int register_partial_output(const std::string& path);
void unregister_partial_output(int slot);
/// Installs the SIGINT / SIGTERM / SIGHUP handlers that remove registered partial outputs and
/// then let the signal terminate the process as it would have (same exit status).
void install_interrupt_cleanup();

template <class F>
void write_atomically(const std::string& path, F&& write) {
  const std::string tmp = path + ".part";
  struct registration {
    int slot;
    ~registration() { unregister_partial_output(slot); }
  } reg{register_partial_output(tmp)};
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
