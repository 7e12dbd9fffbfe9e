// Errors thrown by ctforge. Two kinds matter to callers:
//  - ctforge::usage_error: the caller asked for something invalid (a bad option value, an
//    invalid geometry or phantom description). The command line exits with status 2.
//  - ctforge::error: everything else that goes wrong at run time (a missing or corrupt file,
//    a dataset of the wrong shape, a CUDA / cuFFT / HDF5 failure). The command line exits with 1.
// Messages name the file, dataset, field or option at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace ctforge {

/// Runtime failure (I/O, device, numerical). Exit status 1 in the CLI.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Invalid request by the caller (option, configuration field). Exit status 2 in the CLI.
class usage_error : public error {
 public:
  using error::error;
};

namespace detail {
[[noreturn]] void throw_usage(const std::string& what);
[[noreturn]] void throw_runtime(const std::string& what);
}  // namespace detail

}  // namespace ctforge

/// Precondition on caller input: throws ctforge::usage_error(msg) when `cond` is false.
/// `msg` is any expression convertible to std::string; it is only evaluated on failure.
#define CTFORGE_EXPECTS(cond, msg)                                 \
  do {                                                             \
    if (!(cond)) ::ctforge::detail::throw_usage(std::string(msg)); \
  } while (0)

/// Runtime check: throws ctforge::error(msg) when `cond` is false.
#define CTFORGE_CHECK(cond, msg)                                     \
  do {                                                               \
    if (!(cond)) ::ctforge::detail::throw_runtime(std::string(msg)); \
  } while (0)

/// Unconditional runtime failure.
#define CTFORGE_FAIL(msg) ::ctforge::detail::throw_runtime(std::string(msg))
