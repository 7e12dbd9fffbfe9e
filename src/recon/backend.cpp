// Backend names and selection (include/ctforge/backend.hpp).
#include "ctforge/backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include "ctforge/error.hpp"
#include "cuda/cuda_api.hpp"

#if defined(CTFORGE_WITH_CUDA)
#endif

namespace ctforge {

backend parse_backend(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n == "auto" || n == "automatic") return backend::automatic;
  if (n == "cpu") return backend::cpu;
  if (n == "cuda" || n == "gpu") return backend::cuda;
  throw usage_error(
      fmt::format("--backend: unknown backend '{}' (expected auto, cpu or cuda)", name));
}

backend resolve_backend(backend where, std::string* notice, int device) {
  if (notice) notice->clear();
  CTFORGE_EXPECTS(device >= 0,
                  fmt::format("--device: a CUDA device ordinal is >= 0 (got {})", device));
#if defined(CTFORGE_WITH_CUDA)
  // A mistyped ordinal is a usage error, not a reason to fall back to the CPU.
  if (where != backend::cpu) detail::check_cuda_device_ordinal(device);
#endif
  switch (where) {
    case backend::cpu:
      return backend::cpu;
    case backend::cuda: {
#if defined(CTFORGE_WITH_CUDA)
      std::string why;
      CTFORGE_CHECK(detail::cuda_device_available(&why, device),
                    fmt::format("--backend cuda: no usable CUDA device ({})", why));
      return backend::cuda;
#else
      (void)device;
      throw usage_error("--backend cuda: this build has no CUDA backend");
#endif
    }
    case backend::automatic: {
#if defined(CTFORGE_WITH_CUDA)
      std::string why;
      if (detail::cuda_device_available(&why, device)) return backend::cuda;
      if (notice)
        *notice = why.starts_with("no CUDA device found")
                      ? fmt::format("{}; using the CPU", why)
                      : fmt::format("no usable CUDA device ({}); using the CPU", why);
#else
      (void)device;
      if (notice) *notice = "this build has no CUDA backend; using the CPU backend";
#endif
      return backend::cpu;
    }
  }
  return backend::cpu;
}

pinned_host_range::pinned_host_range(const void* data, std::size_t bytes) {
#if defined(CTFORGE_WITH_CUDA)
  if (detail::cuda_pin_host(const_cast<void*>(data), bytes, &why_not_))
    data_ = const_cast<void*>(data);
#else
  (void)data;
  (void)bytes;
  why_not_ = "this build has no CUDA backend";
#endif
}

pinned_host_range::pinned_host_range(pinned_host_range&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), why_not_(std::move(other.why_not_)) {}

pinned_host_range& pinned_host_range::operator=(pinned_host_range&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    why_not_ = std::move(other.why_not_);
  }
  return *this;
}

pinned_host_range::~pinned_host_range() {
  release();
}

void pinned_host_range::release() noexcept {
#if defined(CTFORGE_WITH_CUDA)
  if (data_) detail::cuda_unpin_host(data_);
#endif
  data_ = nullptr;
}

std::string describe_last_gpu_call(gpu_call kind) {
#if defined(CTFORGE_WITH_CUDA)
  if (kind == gpu_call::reconstruction) {
    const detail::cuda_pipeline_stats st = detail::cuda_last_pipeline_stats();
    if (st.batches == 0) return {};
    const std::string layout =
        st.slabs <= 1 ? std::string("the whole volume on the device")
                      : fmt::format("{} slabs (filtered projections kept in {} memory)", st.slabs,
                                    st.device_store ? "device" : "pinned host");
    std::string device_time =
        st.filtered ? fmt::format("filtering {:.0f} ms, ", st.filter_ms) : std::string();
    if (st.slabs > 1) device_time += fmt::format("slab row gathers {:.0f} ms, ", st.gather_ms);
    device_time += fmt::format("back-projection {:.0f} ms", st.backproject_ms);
    return fmt::format(
        "gpu: {} batches of up to {} views{}, {}; device time: {}; set-up {:.0f} ms, volume "
        "download {:.0f} ms",
        st.batches, st.views_per_batch,
        st.input_page_locked ? " uploaded from page-locked input" : "", layout, device_time,
        st.setup_ms, st.download_ms);
  }
  const detail::cuda_forward_stats st = detail::cuda_last_forward_stats();
  if (st.slabs == 0) return {};
  const std::string layout = st.slabs <= 1
                                 ? std::string("the whole volume in one 3D texture")
                                 : fmt::format("{} slabs of {} planes", st.slabs, st.slab_nz);
  return fmt::format("gpu: batches of up to {} views, {}; {:.0f} ms", st.views_per_batch, layout,
                     st.total_ms);
#else
  (void)kind;
  return {};
#endif
}

}  // namespace ctforge
