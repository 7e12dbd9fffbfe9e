// Device discovery for the CUDA backend: ctforge::detail::cuda_device_available (per device
// ordinal), device memory and description.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>

#include "cuda/cuda_api.hpp"
#include "cuda/cuda_error.cuh"
#include "cuda/cuda_raii.cuh"

namespace ctforge::kernels::cuda {
namespace {

// Empty kernel whose attributes tell whether this binary holds code the device can run
// (the library is compiled for CTFORGE_CUDA_ARCHITECTURES only).
__global__ void probe_kernel() {}

struct probe_result {
  bool ok = false;
  std::string why;
};

/// Whether `device` exists and can run this binary's kernels. Never throws.
probe_result probe(int device) {
  probe_result r;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    int driver = -1;
    // Without an NVIDIA driver the runtime reports cudaErrorInsufficientDriver ("CUDA driver
    // version is insufficient"), which reads like an upgrade hint: say what it means.
    if (e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver &&
                                   cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)) {
      r.why = e == cudaErrorNoDevice ? "no CUDA device found"
                                     : "no CUDA device found (no NVIDIA driver is installed)";
      return r;
    }
    r.why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return r;
  }
  if (count < 1) {
    r.why = "no CUDA device found";
    return r;
  }
  if (device < 0 || device >= count) {
    r.why = "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
            " found; --device counts from 0)";
    return r;
  }
  int previous = 0;
  e = cudaGetDevice(&previous);
  if (e == cudaSuccess && previous != device) e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    r.why = "selecting CUDA device " + std::to_string(device) + " failed (" + cudaGetErrorName(e) +
            ": " + cudaGetErrorString(e) + ")";
    return r;
  }
  cudaFuncAttributes attr{};
  e = cudaFuncGetAttributes(&attr, probe_kernel);
  if (e != cudaSuccess) {
    cudaGetLastError();
    cudaDeviceProp prop{};
    std::string name = "device " + std::to_string(device);
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
      name = std::string(prop.name) + " (device " + std::to_string(device) +
             ", compute capability " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor) + ")";
    cudaGetLastError();
    r.why = name + " cannot run this build's kernels (" + cudaGetErrorName(e) +
            "); rebuild with CTFORGE_CUDA_ARCHITECTURES including its architecture";
  } else {
    r.ok = true;
  }
  if (previous != device) cudaSetDevice(previous);
  cudaGetLastError();
  return r;
}

}  // namespace
}  // namespace ctforge::kernels::cuda

namespace ctforge::detail {

bool cuda_device_available(std::string* why, int device) {
  // One probe per device ordinal per process (the answer cannot change while it runs).
  static std::mutex m;
  static std::map<int, kernels::cuda::probe_result> results;
  kernels::cuda::probe_result result;
  try {
    const std::lock_guard<std::mutex> lock(m);
    auto it = results.find(device);
    if (it == results.end()) it = results.emplace(device, kernels::cuda::probe(device)).first;
    result = it->second;
  } catch (...) {
    if (why) *why = "CUDA device probe failed";
    return false;
  }
  if (why) *why = result.ok ? std::string() : result.why;
  return result.ok;
}

void check_cuda_device_ordinal(int device) {
  CTFORGE_EXPECTS(device >= 0,
                  "--device: a CUDA device ordinal is >= 0 (got " + std::to_string(device) + ")");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  cudaGetLastError();
  if (count > 0)
    CTFORGE_EXPECTS(device < count, "--device: CUDA device " + std::to_string(device) +
                                        " does not exist (" + std::to_string(count) +
                                        " found; ordinals count from 0)");
}

void require_cuda_device(int device) {
  check_cuda_device_ordinal(device);
  std::string why;
  CTFORGE_CHECK(cuda_device_available(&why, device),
                "CUDA backend: no usable device (" + why + ")");
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

bool cuda_pin_host(void* data, std::size_t bytes, std::string* why) {
  const auto refuse = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (data == nullptr || bytes == 0) return refuse("empty range");
  std::string probe_why;
  if (!cuda_device_available(&probe_why, 0)) return refuse(probe_why);
  if (kernels::cuda::host_range_page_locked(data, bytes))
    return refuse("the range is page-locked already");
  const cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    // Locked-memory limits (ulimit -l, containers, sandboxes) refuse large registrations: the
    // caller's data then simply takes the staging path.
    return refuse(std::string("cudaHostRegister of ") +
                  kernels::cuda::format_bytes(static_cast<std::int64_t>(bytes)) + " failed (" +
                  cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")");
  }
  if (why) why->clear();
  return true;
}

void cuda_unpin_host(void* data) noexcept {
  if (data) kernels::cuda::warn_on_error(cudaHostUnregister(data), "cudaHostUnregister");
}

float* cuda_allocate_copy(const float* host, std::size_t count, int device) {
  require_cuda_device(device);
  const kernels::cuda::device_guard guard(device);
  if (count == 0) return nullptr;
  kernels::cuda::device_buffer<float> p(count, "a device array");  // freed if the copy fails
  const cudaError_t e = cudaMemcpy(p.data(), host, count * sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess)
    kernels::cuda::throw_cuda(e, "cudaMemcpy(cudaMemcpyHostToDevice)", __FILE__, __LINE__,
                              "copying a device array from the host");
  return p.release_ownership();  // the device_array frees it (cuda_free)
}

void cuda_copy_to_host(float* host, const float* device_data, std::size_t count, int device) {
  if (count == 0) return;
  const kernels::cuda::device_guard guard(device);
  CTFORGE_CUDA_TRY(cudaMemcpy(host, device_data, count * sizeof(float), cudaMemcpyDeviceToHost),
                   "copying a device array to the host");
}

void cuda_free(float* device_data, int device) noexcept {
  if (!device_data) return;
  int previous = 0;
  const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != device;
  if (switch_device) cudaSetDevice(device);
  kernels::cuda::warn_on_error(cudaFree(device_data), "cudaFree");
  if (switch_device) cudaSetDevice(previous);
}

bool cuda_pointer_on_device(const void* p, int device, const char* what) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;  // not memory CUDA knows: host memory
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return false;
  CTFORGE_EXPECTS(a.device == device, std::string(what) + " lie in the memory of CUDA device " +
                                          std::to_string(a.device) + ", not of --device " +
                                          std::to_string(device));
  return true;
}

}  // namespace ctforge::detail
