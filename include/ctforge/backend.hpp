// Where a computation runs: the CPU or a CUDA device. Shared by reconstruction and projectors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ctforge {

enum class backend { automatic, cpu, cuda };

backend parse_backend(std::string_view name);  ///< "auto", "cpu", "cuda" (throws usage_error)

/// Which backend `where` resolves to on this machine ("cpu" or "cuda") for CUDA device ordinal
/// `device`, with a one-line reason when automatic selection falls back to the CPU (empty
/// otherwise). backend::cuda without a usable device throws (the reason in the message);
/// without the CUDA backend compiled in it is a usage_error. A negative `device`, or one that
/// is not among the devices present (cuda or automatic), is a usage_error naming --device.
backend resolve_backend(backend where, std::string* notice = nullptr, int device = 0);

/// Page-locks ("pins") a host memory range for the CUDA backend while this object lives.
/// GPU calls whose input lies in page-locked memory upload it straight from there; otherwise
/// they first copy it, batch by batch, into page-locked staging of their own (a host memcpy of
/// the whole input per call). Pinning costs time itself (the OS locks every page: of the order
/// of 0.1 s per GB), so it pays for input reconstructed or projected more than once, or kept
/// pinned for its lifetime as a detector's frame buffers are.
///
/// The range must stay allocated and in place while pinned (do not resize the vector that owns
/// it). Pinning is an optimisation, so it never throws: without the CUDA backend or a usable
/// device, for a range CUDA already knows as page-locked, or when the system refuses (limits
/// on locked memory in containers and sandboxes), nothing is pinned, active() is false and
/// why_not() says why; GPU calls then stage the data as usual. Move-only.
class pinned_host_range {
 public:
  pinned_host_range(const void* data, std::size_t bytes);
  pinned_host_range(pinned_host_range&& other) noexcept;
  pinned_host_range& operator=(pinned_host_range&& other) noexcept;
  pinned_host_range(const pinned_host_range&) = delete;
  pinned_host_range& operator=(const pinned_host_range&) = delete;
  ~pinned_host_range();

  /// True when this object pinned the range (and will unpin it when destroyed).
  bool active() const { return data_ != nullptr; }
  /// Why nothing was pinned (empty when active()).
  const std::string& why_not() const { return why_not_; }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::string why_not_;
};

/// GPU calls whose plan describe_last_gpu_call reports.
enum class gpu_call {
  reconstruction,     ///< FDK / FBP (reconstruct) and back_project on the CUDA backend
  forward_projection  ///< forward_project on the CUDA backend
};

/// One line on how the calling thread's last GPU call of `kind` ran, for logs: how the views
/// were batched, whether the volume was split into slabs (and where the filtered projections
/// were kept), device time per stage. Empty before the first such call on this thread and in
/// builds without the CUDA backend.
std::string describe_last_gpu_call(gpu_call kind);

}  // namespace ctforge
