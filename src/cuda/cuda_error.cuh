// Error checking for CUDA runtime and cuFFT calls (CUDA translation units only).
//
//   CTFORGE_CUDA_TRY(cudaMemcpyAsync(...));
//   CTFORGE_CUDA_TRY(cudaMemcpyAsync(...), "uploading projection batch " + std::to_string(b));
//   CTFORGE_CUFFT_TRY(cufftExecR2C(...), "ramp filter");
//
// A failing call throws ctforge::error whose message holds the call text, the error's name and
// description, file:line and the optional context. Out-of-memory failures add the device's free
// and total memory and the hint to lower the problem size or set --gpu-memory-limit.
// CTFORGE_CUDA_CHECK_LAUNCH(context) checks cudaGetLastError() after a kernel launch.
#pragma once

#include <cuda_runtime.h>
#include <cufft.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "ctforge/error.hpp"

namespace ctforge::kernels::cuda {

/// "123.4 MiB" for a byte count.
inline std::string format_bytes(std::int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

/// " (device memory: X free of Y)" or empty when the query itself fails.
inline std::string memory_state() {
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return " (device memory: " + format_bytes(static_cast<std::int64_t>(free_b)) + " free of " +
         format_bytes(static_cast<std::int64_t>(total_b)) + ")";
}

inline const char* k_memory_hint =
    "; reduce the volume / batch size or set a device memory budget with --gpu-memory-limit "
    "(the reconstruction then splits the volume into slabs)";

inline const char* cufft_error_name(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS:
      return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN:
      return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED:
      return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE:
      return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE:
      return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR:
      return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED:
      return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED:
      return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE:
      return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA:
      return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE:
      return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE:
      return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED:
      return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED:
      return "CUFFT_NOT_SUPPORTED";
    default:
      return "unknown cufftResult";
  }
}

inline std::string where(const char* call, const char* file, int line) {
  return std::string(call) + " at " + file + ":" + std::to_string(line);
}

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line,
                                    const std::string& context) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  std::string msg = "CUDA error " + std::string(cudaGetErrorName(e)) + " (" +
                    cudaGetErrorString(e) + ") in " + where(call, file, line);
  if (!context.empty()) msg += " while " + context;
  if (e == cudaErrorMemoryAllocation) msg += memory_state() + k_memory_hint;
  throw ctforge::error(msg);
}

[[noreturn]] inline void throw_cufft(cufftResult r, const char* call, const char* file, int line,
                                     const std::string& context) {
  std::string msg = "cuFFT error " + std::string(cufft_error_name(r)) + " (" +
                    std::to_string(static_cast<int>(r)) + ") in " + where(call, file, line);
  if (!context.empty()) msg += " while " + context;
  if (r == CUFFT_ALLOC_FAILED) msg += memory_state() + k_memory_hint;
  throw ctforge::error(msg);
}

inline void check(cudaError_t e, const char* call, const char* file, int line,
                  const std::string& context = {}) {
  if (e != cudaSuccess) throw_cuda(e, call, file, line, context);
}
inline void check(cufftResult r, const char* call, const char* file, int line,
                  const std::string& context = {}) {
  if (r != CUFFT_SUCCESS) throw_cufft(r, call, file, line, context);
}

/// For destructors: reports a failure on stderr instead of throwing.
inline void warn_on_error(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  std::fprintf(stderr, "ctforge: warning: %s failed in a destructor: %s (%s)\n", call,
               cudaGetErrorName(e), cudaGetErrorString(e));
}
inline void warn_on_error(cufftResult r, const char* call) {
  if (r == CUFFT_SUCCESS) return;
  std::fprintf(stderr, "ctforge: warning: %s failed in a destructor: %s\n", call,
               cufft_error_name(r));
}

}  // namespace ctforge::kernels::cuda

/// Throws ctforge::error when a CUDA runtime call fails. Optional second argument: context
/// (anything convertible to std::string, evaluated only on failure).
#define CTFORGE_CUDA_TRY(call, ...)                                                      \
  do {                                                                                   \
    const cudaError_t ctforge_cuda_err_ = (call);                                        \
    if (ctforge_cuda_err_ != cudaSuccess)                                                \
      ::ctforge::kernels::cuda::throw_cuda(ctforge_cuda_err_, #call, __FILE__, __LINE__, \
                                           std::string(__VA_ARGS__));                    \
  } while (0)

/// Throws ctforge::error when a cuFFT call fails. Optional second argument: context.
#define CTFORGE_CUFFT_TRY(call, ...)                                                       \
  do {                                                                                     \
    const cufftResult ctforge_cufft_res_ = (call);                                         \
    if (ctforge_cufft_res_ != CUFFT_SUCCESS)                                               \
      ::ctforge::kernels::cuda::throw_cufft(ctforge_cufft_res_, #call, __FILE__, __LINE__, \
                                            std::string(__VA_ARGS__));                     \
  } while (0)

/// Checks the launch of the kernel just issued (configuration errors, missing kernel image).
/// Errors of the kernel's execution surface at the next synchronising call.
#define CTFORGE_CUDA_CHECK_LAUNCH(context) CTFORGE_CUDA_TRY(cudaGetLastError(), context)
