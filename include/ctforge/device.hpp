// Arrays in CUDA device memory, for callers whose data lives on the GPU already (CuPy or
// PyTorch CUDA tensors through DLPack, other CUDA code). No CUDA type appears here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ctforge {

/// float32 array in the memory of CUDA device `device()`, owned by ctforge (cudaMalloc /
/// cudaFree); C order, `shape()` outermost first. Move-only. Without the CUDA backend compiled
/// in, or without a device, the factory functions throw and a default-constructed array is
/// empty.
class device_array {
 public:
  device_array() = default;
  device_array(device_array&& other) noexcept;
  device_array& operator=(device_array&& other) noexcept;
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array();

  /// Copies `host` (product of `shape` values) into new device memory. Synchronous.
  static device_array upload(std::span<const float> host, std::vector<std::int64_t> shape,
                             int device = 0);
  /// Takes ownership of `count(shape)` floats allocated with cudaMalloc on `device`.
  static device_array adopt(float* data, std::vector<std::int64_t> shape, int device);

  float* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  int device() const { return device_; }
  bool empty() const { return data_ == nullptr; }
  /// The values, copied to host memory. Synchronous.
  std::vector<float> download() const;

 private:
  void release() noexcept;
  float* data_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::int64_t> shape_;
  int device_ = 0;
};

}  // namespace ctforge
