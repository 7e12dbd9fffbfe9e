// Device discovery for the CUDA backend: ctforge::detail::cuda_device_available.
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "kernels/cuda_error.cuh"
#include "kernels/cuda_raii.cuh"
#include "kernels/cuda_host_api.cuh"
#include "recon/cuda_dispatch.hpp"

namespace ctforge::kernels::cuda {
namespace {

// Empty kernel whose attributes tell whether this binary holds code the device can run
// (the library is compiled for CTFORGE_CUDA_ARCHITECTURES only).
__global__ void probe_kernel() {}

struct probe_result {
  bool ok = false;
  std::string why;
};

probe_result probe() {
  probe_result r;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    r.why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return r;
  }
  if (count < 1) {
    r.why = "no CUDA device found";
    return r;
  }
  cudaFuncAttributes attr{};
  e = cudaFuncGetAttributes(&attr, probe_kernel);
  if (e != cudaSuccess) {
    cudaGetLastError();
    cudaDeviceProp prop{};
    int dev = 0;
    std::string name = "device";
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
      name = std::string(prop.name) + " (compute capability " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor) + ")";
    cudaGetLastError();
    r.why = name + " cannot run this build's kernels (" + cudaGetErrorName(e) +
            "); rebuild with CTFORGE_CUDA_ARCHITECTURES including its architecture";
    return r;
  }
  r.ok = true;
  return r;
}

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

bool cuda_device_available(std::string* why) {
  static std::once_flag once;
  static kernels::cuda::probe_result result;
  try {
    std::call_once(once, [] { result = kernels::cuda::probe(); });
  } catch (...) {
    if (why) *why = "CUDA device probe failed";
    return false;
  }
  if (why) *why = result.ok ? std::string() : result.why;
  return result.ok;
}

cuda_memory_info cuda_device_memory(int device) {
  const kernels::cuda::device_guard guard(device);
  std::size_t free_b = 0, total_b = 0;
  CTFORGE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "querying device memory");
  return {static_cast<std::int64_t>(free_b), static_cast<std::int64_t>(total_b)};
}

std::string cuda_device_description(int device) {
  cudaDeviceProp prop{};
  CTFORGE_CUDA_TRY(cudaGetDeviceProperties(&prop, device), "querying device properties");
  return std::string(prop.name) + ", compute capability " + std::to_string(prop.major) + "." +
         std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs, " +
         kernels::cuda::format_bytes(static_cast<std::int64_t>(prop.totalGlobalMem));
}

}  // namespace ctforge::detail
