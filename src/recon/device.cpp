// ctforge::device_array: ownership and copies; the CUDA calls are in src/cuda/cuda_device.cu.
#include "ctforge/device.hpp"

#include <utility>

#include "ctforge/error.hpp"
#include "cuda/cuda_api.hpp"

namespace ctforge {
namespace {

std::size_t count_of(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) {
    CTFORGE_EXPECTS(d >= 0, "device array: negative extent in its shape");
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

}  // namespace

device_array::device_array(device_array&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      shape_(std::move(other.shape_)),
      device_(other.device_) {}

device_array& device_array::operator=(device_array&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    shape_ = std::move(other.shape_);
    device_ = other.device_;
  }
  return *this;
}

device_array::~device_array() {
  release();
}

void device_array::release() noexcept {
#if defined(CTFORGE_WITH_CUDA)
  detail::cuda_free(data_, device_);
#endif
  data_ = nullptr;
  size_ = 0;
}

device_array device_array::upload(std::span<const float> host, std::vector<std::int64_t> shape,
                                  int device) {
  const std::size_t n = count_of(shape);
  CTFORGE_EXPECTS(n == host.size(), "device array: " + std::to_string(host.size()) +
                                        " values for a shape of " + std::to_string(n));
#if defined(CTFORGE_WITH_CUDA)
  return adopt(detail::cuda_allocate_copy(host.data(), n, device), std::move(shape), device);
#else
  (void)device;
  throw usage_error("device arrays need the CUDA backend, which this build of ctforge lacks");
#endif
}

device_array device_array::adopt(float* data, std::vector<std::int64_t> shape, int device) {
  device_array a;
  a.data_ = data;  // owned from here on, also if count_of throws
  a.device_ = device;
  a.size_ = count_of(shape);
  a.shape_ = std::move(shape);
  a.device_ = device;
  return a;
}

std::vector<float> device_array::download() const {
  std::vector<float> out(size_);
#if defined(CTFORGE_WITH_CUDA)
  detail::cuda_copy_to_host(out.data(), data_, size_, device_);
#endif
  return out;
}

}  // namespace ctforge
